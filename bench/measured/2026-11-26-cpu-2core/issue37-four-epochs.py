"""Issue 37 §5: the default's top-1 after each epoch of a schedule, per seed, to see its margin over 92%.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/test/bin/python \
        bench/measured/2026-11-26-cpu-2core/issue37-four-epochs.py SEED [KEY=VALUE ...]

An in-process loop over the reference's own setup, train_epoch and predict (as bench/overhead.py's
bare loop), a predictor that loads the trainer's weights after each epoch, scored against the test
labels here, outside any run: a tuning tool, not a result. One JSON line: the seed, the overrides,
the top-1 after each epoch, the wall seconds at each epoch's end and the process's CPU seconds.
"""
import json
import sys
import time

import numpy as np

from harness import datasets, eval_labels, registry
from harness.reference import Context

NAME = "fashion-mnist-cnn-pytorch"
seed, sets = int(sys.argv[1]), sys.argv[2:]
spec = registry.load_spec(NAME)
cfg = registry.resolve_hyperparameters(spec, sets)
root = datasets.default_data_root()
labels = eval_labels.load_eval_labels(spec.task.dataset, root)
t0, c0 = time.perf_counter(), time.process_time()
trainer, predictor = spec.load_entry_class()(), spec.load_entry_class()()
trainer.setup(Context(config=cfg, data_root=root, seed=seed, task=spec.task, show_progress=False))
predictor.setup(Context(config=cfg, data_root=root, seed=seed, task=spec.task, show_progress=False, role="predict"))
accs, times = [], []
for epoch in range(1, int(np.ceil(cfg["epochs"])) + 1):
    trainer.train_epoch(epoch)
    times.append(round(time.perf_counter() - t0, 1))
    predictor.net.load_state_dict(trainer.net.state_dict())
    accs.append(float((predictor.predict().argmax(1) == labels).mean()))
print(json.dumps({"seed": seed, "sets": sets, "acc": accs, "t": times, "cpu": round(time.process_time() - c0, 1)}))
