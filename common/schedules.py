"""Schedules as plain functions of the step or epoch, in NumPy: PyTorch and TensorFlow
references read the same numbers from them."""
from __future__ import annotations

import math

import numpy as np


def one_cycle(step, total_steps: int, peak: float, warmup_fraction: float, start_fraction: float,
              end_fraction: float):
    """The learning rate before optimizer step `step` (from 0; an int or an array of them): linear
    warm-up from peak * start_fraction to `peak` over the first warmup_fraction of `total_steps`
    (at least one step), linear decay to peak * end_fraction at `total_steps`, then held there
    (a run may go on past its planned length). A float for an int, an array for an array."""
    warm = max(1, int(warmup_fraction * total_steps))
    lr = peak * np.interp(step, [0, warm, total_steps], [start_fraction, 1.0, end_fraction])
    return float(lr) if np.ndim(lr) == 0 else lr


def image_size(epoch: int, cfg: dict) -> int:
    """Progressive resizing: the training crop size in epoch `epoch` (from 1), image_size_start up to
    resize_start_epoch, image_size_end from resize_end_epoch, linear in between, rounded to a
    multiple of 32 (halves round up)."""
    start, end = cfg["image_size_start"], cfg["image_size_end"]
    if epoch <= cfg["resize_start_epoch"]:
        return start
    if epoch >= cfg["resize_end_epoch"]:
        return end
    size = np.interp(epoch, [cfg["resize_start_epoch"], cfg["resize_end_epoch"]], [start, end])
    return int(np.clip(math.floor(size / 32 + 0.5) * 32, min(start, end), max(start, end)))
