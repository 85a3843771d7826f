"""common/schedules.py: the one-cycle learning rate that fashion-mnist-cnn-pytorch,
fashion-mnist-cnn-tensorflow and cifar10-fast-pytorch read, pinned to the numbers each of them
computed for itself before it was shared."""
from __future__ import annotations

import math

import numpy as np
import pytest

from common.schedules import one_cycle
from harness import registry
from harness.reference import Context


def formula(config: dict, total: int, steps):
    """The schedule as the three references wrote it out themselves."""
    warm = max(1, int(config["warmup_fraction"] * total))
    return config["lr"] * np.interp(steps, [0, warm, total],
                                    [config["lr_start_fraction"], 1.0, config["lr_end_fraction"]])


def schedule(config: dict, total: int, steps):
    return one_cycle(steps, total, config["lr"], config["warmup_fraction"], config["lr_start_fraction"],
                     config["lr_end_fraction"])


FASHION = {"lr": 0.2, "warmup_fraction": 0.25, "lr_start_fraction": 0.04, "lr_end_fraction": 0.005}


def test_landmarks():
    total = 100
    lrs = [schedule(FASHION, total, s) for s in (0, 25, 100, 150)]
    assert lrs == pytest.approx([0.2 * 0.04, 0.2, 0.2 * 0.005, 0.2 * 0.005], rel=1e-12)
    assert schedule(FASHION, total, 10) == pytest.approx(0.2 * (0.04 + (1 - 0.04) * 10 / 25), rel=1e-12)
    assert schedule(FASHION, total, 50) == pytest.approx(0.2 * (1 + (0.005 - 1) * 25 / 75), rel=1e-12)
    # A schedule shorter than its warm-up still warms up over one step.
    assert schedule(FASHION, 2, 1) == pytest.approx(0.2)


@pytest.mark.parametrize("config, total", [
    (FASHION, 5 * 234),                                                                    # fashion, PyTorch
    (FASHION, 6 * 234),                                                                    # fashion, TensorFlow
    ({"lr": 0.4, "warmup_fraction": 0.2, "lr_start_fraction": 0.1, "lr_end_fraction": 0.01}, 10 * 97),  # fast
])
def test_equals_the_references_own_formula_bit_for_bit(config, total):
    steps = np.arange(total + 20)
    table = schedule(config, total, steps)
    assert isinstance(table, np.ndarray) and np.array_equal(table, formula(config, total, steps))
    # One step at a time (PyTorch) gives the same floats as the table (TensorFlow).
    scalars = [schedule(config, total, int(s)) for s in steps]
    assert all(type(v) is float for v in scalars)
    assert scalars == [float(formula(config, total, int(s))) for s in steps]
    assert np.array_equal(np.array(scalars), table)


@pytest.mark.parametrize("name", ["fashion-mnist-cnn-pytorch", "fashion-mnist-cnn-tensorflow", "cifar10-fast-pytorch"])
def test_the_references_use_it(name, fashion_root, cifar10_root, tmp_path):
    """Each reference's learning rate before every step of its planned run, and after it."""
    spec = registry.load_spec(name)
    config = dict(spec.hyperparameters)
    if name == "cifar10-fast-pytorch":
        config.update(batch_size=20, widths=[16, 32, 32])
    ref = spec.load_entry_class()()
    ref.setup(Context(config=config, data_root=cifar10_root if "cifar10" in name else fashion_root, seed=0,
                      task=spec.task, work_dir=tmp_path, show_progress=False))
    total = math.ceil(config["epochs"] * ref.steps_per_epoch)      # cifar10-fast: 9.9 epochs, the last one partial
    if name == "cifar10-fast-pytorch":     # its lr is airbench's, per 1024 examples: SGD's peak is base_lr
        config["lr"] = ref.base_lr
    expected = formula(config, total, np.arange(total + 1))
    if spec.framework == "tensorflow":
        assert np.array_equal(ref.lr_table, expected)      # indexed by the optimizer's step counter
    else:
        assert [ref.lr_at(s) for s in range(total + 1)] == expected.tolist()
