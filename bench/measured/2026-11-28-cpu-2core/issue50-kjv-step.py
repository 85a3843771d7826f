"""Issue 50, kjv-bytegpt-pytorch: the CPU time of one training step (forward, loss, backward, AdamW) of
its ByteGPT on random bytes, float32 against bf16 autocast, at the sizes tried in tuning.

    PYTHONPATH=. .venv/test/bin/python bench/measured/2026-11-28-cpu-2core/issue50-kjv-step.py THREADS

CPU time is the process's (time.process_time): on a shared machine it stays near what an idle one
would take with one thread, where wall time does not.
"""
from __future__ import annotations

import importlib.util
import sys
import time

import torch
import torch.nn.functional as F

# (n_layer, n_head, n_embd, block, batch)
SIZES = [(4, 4, 128, 64, 12), (4, 4, 128, 64, 32), (4, 4, 128, 128, 16), (2, 4, 128, 64, 32), (4, 4, 96, 64, 32),
         (6, 4, 128, 64, 16), (4, 2, 64, 64, 32)]


def step(net, opt, x, y, bf16: bool) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = net(x)
    loss = F.cross_entropy(logits.float().view(-1, 256), y.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()


def main(threads: int) -> None:
    torch.set_num_threads(threads)
    spec = importlib.util.spec_from_file_location("kjv_train", "references/kjv-bytegpt-pytorch/train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    for layers, heads, width, block, batch in SIZES:
        for bf16 in (False, True):
            net = train.ByteGPT(layers, heads, width, block)
            opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
            x, y = torch.randint(0, 256, (batch, block)), torch.randint(0, 256, (batch, block))

            for _ in range(3):
                step(net, opt, x, y, bf16)
            cpu, wall, n = time.process_time(), time.perf_counter(), 10
            for _ in range(n):
                step(net, opt, x, y, bf16)
            cpu, wall = (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n
            print(layers, heads, width, block, batch, "bf16" if bf16 else "fp32",
                  f"cpu {cpu * 1000:.1f} ms/step wall {wall * 1000:.1f}, {batch * block / cpu / 1000:.1f} kbyte/cpu-s, "
                  f"params {sum(p.numel() for p in net.parameters())}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
