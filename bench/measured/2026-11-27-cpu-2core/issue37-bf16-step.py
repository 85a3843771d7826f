"""Issue 37 §5: the default's training step in float32 and in bf16 autocast, as seconds per epoch.

    PYTHONPATH=. .venv/test/bin/python bench/measured/2026-11-27-cpu-2core/issue37-bf16-step.py [THREADS]

The reference's own network (build_model) and its optimizer settings on random images at batch 256,
channels last; 5 warm-up steps, then 40 timed steps, scaled to the 234 steps of an epoch. The two
variants alternate, three times, so a change of the machine's load falls on both; the median of each
and their ratio. A tuning tool, not a result: the harness's figure is `python -m bench.tta`.
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, "references/fashion-mnist-cnn-pytorch")
from train import build_model  # noqa: E402

N, BATCH = 60000, 256
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
torch.manual_seed(0)
X = torch.randn(BATCH, 1, 28, 28).contiguous(memory_format=torch.channels_last)
Y = torch.randint(0, 10, (BATCH,))


def epoch_seconds(bf16: bool, steps: int = 40) -> float:
    net = build_model([16, 32, 64]).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(net(X), Y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * (N // BATCH)


times = {"float32": [], "bf16": []}
for _ in range(3):
    for name in times:
        times[name].append(epoch_seconds(name == "bf16"))
for name, values in times.items():
    print(f"{name}: seconds per epoch {' '.join(f'{v:.2f}' for v in values)}, median {statistics.median(values):.2f}")
print(f"bf16 / float32 (medians): {statistics.median(times['bf16']) / statistics.median(times['float32']):.3f}; "
      f"threads {torch.get_num_threads()}")
