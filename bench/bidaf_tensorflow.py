"""squad-bidaf-tensorflow's training step, timed on a synthetic SQuAD-shaped batch: what `make
bench-gpu` (bench/gpu.py) calls where TensorFlow is importable.

    step_seconds(batch, config, steps, warmup) -> mean seconds per training step

The reference's own model and step (references/squad-bidaf-tensorflow/train.py: BiDAF, Adam, the
EMA update), on the default device (the first GPU where there is one), with a frozen word table of
`config.get("vocab", 90000)` random rows and a character list of `config.get("chars", 100)`
characters. `batch` is common.squad.synthetic_batch's dict of numpy arrays (cw, cc, qw, qc, y1,
y2); its ids must lie below those sizes (+ 2 for the characters' padding and unknown rows).
"""
from __future__ import annotations

import importlib.util
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "references" / "squad-bidaf-tensorflow"


def reference_module():
    """train.py of the reference, imported from its path (its directory name is no module name)."""
    name = "squad_bidaf_tensorflow_train"
    if name not in sys.modules:
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))        # train.py imports common and harness
        spec = importlib.util.spec_from_file_location(name, REFERENCE / "train.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def defaults() -> dict:
    with open(REFERENCE / "reference.toml", "rb") as f:
        return tomllib.load(f)["hyperparameters"]


def step_seconds(batch: dict, config: dict, steps: int, warmup: int) -> float:
    import keras
    import tensorflow as tf

    train = reference_module()
    cfg = {**defaults(), **config}
    vocab, chars = int(cfg.get("vocab", 90000)), int(cfg.get("chars", 100))
    rng = np.random.default_rng(0)
    words = rng.normal(0, 0.5, (vocab, cfg["word_dim"])).astype(np.float32)
    model = train.build_model(cfg, words, chars + 2)
    opt = keras.optimizers.Adam(learning_rate=cfg["lr"])
    opt.build(model.trainable_variables)
    ema = [tf.Variable(v.value, trainable=False) for v in model.trainable_variables]
    step = train.make_train_step(model, opt, ema, cfg["ema_decay"])
    inputs = train.tensors(batch, ("cw", "cc", "qw", "qc", "y1", "y2"))
    gpu = bool(tf.config.list_logical_devices("GPU"))

    def sync(loss):
        float(loss)                      # the step's result on the host: its work is done
        if gpu:
            tf.test.experimental.sync_devices()

    loss = None
    for _ in range(max(warmup, 1)):      # at least one: the trace is not a step
        loss = step(*inputs)
    sync(loss)
    start = time.perf_counter()
    for _ in range(steps):
        loss = step(*inputs)
    sync(loss)
    return (time.perf_counter() - start) / max(steps, 1)
