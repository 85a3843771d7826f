"""Learning-rate schedules as plain functions of the step, in NumPy: PyTorch and TensorFlow
references read the same numbers from them."""
from __future__ import annotations

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
