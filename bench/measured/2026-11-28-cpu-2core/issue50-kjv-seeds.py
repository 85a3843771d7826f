"""Issue 50, the CPU tier's reference measured without the harness: kjv-bytegpt-pytorch's own setup,
train_epoch and predict in one process, bits per byte on ALL of kjv-val.txt after every epoch, against
the seconds spent in setup + train_epoch (the clock a run keeps) and the steps taken.

    PYTHONPATH=. .venv/test/bin/python bench/measured/2026-11-28-cpu-2core/issue50-kjv-seeds.py SEED [KEY=VALUE ...]

The validation text is cut as the harness cuts it for the kjv-bytes task (harness/lm_eval.py, Windows):
row i holds bytes i*T .. i*T + T - 1 and is scored on the next byte at each position, T = 256 (tasks.toml's
[tasks.kjv-bytes.lm] window), so every byte but the first is scored once, from the bytes before it in its
row (the first position of a row from one byte). Off the clock, as a run's eval.
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from harness.reference import Context

REF = Path("references/kjv-bytegpt-pytorch")
WINDOW = 256       # the task's T: tasks.toml [tasks.kjv-bytes.lm] window


def reference_class():
    spec = importlib.util.spec_from_file_location("kjv_bytegpt_train", REF / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KJVByteGPT


def bits_per_byte(ref, text: bytes, row: int = WINDOW) -> float:
    """Mean -log2 p(byte | the bytes before it in its row), over every byte but the first."""
    data = np.frombuffer(text, dtype=np.uint8)
    rows = (len(data) - 1) // row
    x = data[:rows * row].reshape(rows, row)
    y = data[1:rows * row + 1].reshape(rows, row)
    lp = ref.predict(x)
    nll = -np.take_along_axis(lp, y[..., None].astype(np.int64), axis=-1).sum()
    tail = data[rows * row:]                     # the last bytes, as one shorter row
    if len(tail) > 1:
        lp = ref.predict(tail[None, :-1])
        nll -= np.take_along_axis(lp[0], tail[1:, None].astype(np.int64), axis=-1).sum()
    return float(nll / (len(data) - 1) / math.log(2))


def main(argv: list[str]) -> None:
    seed = int(argv[0])
    print(f"torch threads {__import__('torch').get_num_threads()}, {len(os.sched_getaffinity(0))} cores, "
          f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    config = tomllib.loads((REF / "reference.toml").read_text())["hyperparameters"]
    for kv in argv[1:]:
        key, value = kv.split("=", 1)
        config[key] = type(config[key])(tomllib.loads(f"v = {value}")["v"])
    task = SimpleNamespace(name="kjv-bytes", dataset="kjv")
    cls = reference_class()
    val = Path("data/kjv/kjv-val.txt").read_bytes()
    if os.environ.get("VAL_BYTES"):         # tuning only: the first VAL_BYTES of the validation text
        val = val[:int(os.environ["VAL_BYTES"])]
    t0, c0 = time.perf_counter(), time.process_time()
    trainer = cls()
    trainer.setup(Context(config=config, data_root=Path("data"), seed=seed, task=task, show_progress=False))
    clock, cpu = time.perf_counter() - t0, time.process_time() - c0
    predictor = cls()
    predictor.setup(Context(config=config, data_root=Path("/nonexistent"), seed=seed, task=task, role="predict",
                            show_progress=False))
    print(f"seed {seed} config {config}", flush=True)
    for epoch in range(1, config["epochs"] + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        stats = trainer.train_epoch(epoch)
        clock, cpu = clock + time.perf_counter() - t0, cpu + time.process_time() - c0
        predictor.net.load_state_dict(trainer.net.state_dict())
        t0 = time.perf_counter()
        bpb = bits_per_byte(predictor, val)
        print(f"seed {seed} epoch {epoch:2d} steps {trainer.step:5d} loss {stats['loss']:.4f} "
              f"val_bpb {bpb:.4f} clock {clock:7.1f} s cpu {cpu:7.1f} s (eval {time.perf_counter() - t0:.1f} s off the clock)",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
