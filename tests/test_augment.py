"""common/torch_augment.py and common/tf_augment.py: the batched crop + flip that the CIFAR-10
references run on the device. Both are the same function of the same draws: the window of each
padded image at rows dy, columns dx, mirrored where flipped."""
from __future__ import annotations

import numpy as np
import tensorflow as tf
import torch

from common import tf_augment, torch_augment


def windows(padded: np.ndarray, dy, dx, flip, size: int) -> np.ndarray:
    """One image at a time, by slicing (N, H, W, C)."""
    out = [padded[i, y:y + size, x:x + size] for i, (y, x) in enumerate(zip(dy, dx))]
    return np.stack([w[:, ::-1] if f else w for w, f in zip(out, flip)])


def test_pytorch_and_tensorflow_crop_the_same_windows():
    rng = np.random.default_rng(0)
    padded = rng.integers(0, 256, (64, 40, 40, 3), dtype=np.uint8)
    dy, dx = rng.integers(0, 9, 64), rng.integers(0, 9, 64)
    flip = rng.random(64) < 0.5
    expected = windows(padded, dy, dx, flip, 32)
    assert not np.array_equal(expected, windows(padded, dx, dy, flip, 32))   # the order of dy, dx matters

    by_torch = torch_augment.crop_flip(torch.from_numpy(padded).permute(0, 3, 1, 2), torch.from_numpy(dy),
                                       torch.from_numpy(dx), torch.from_numpy(flip))
    np.testing.assert_array_equal(by_torch.permute(0, 2, 3, 1).numpy(), expected)
    by_tf = tf_augment.crop_flip(tf.constant(padded), tf.constant(dy), tf.constant(dx), tf.constant(flip))
    np.testing.assert_array_equal(by_tf.numpy(), expected)


def test_other_sizes_and_float_images():
    rng = np.random.default_rng(1)
    padded = rng.normal(size=(5, 12, 12, 2)).astype(np.float32)
    dy, dx, flip = rng.integers(0, 5, 5), rng.integers(0, 5, 5), np.array([True, False, True, False, True])
    expected = windows(padded, dy, dx, flip, 8)
    out = torch_augment.crop_flip(torch.from_numpy(padded).permute(0, 3, 1, 2), torch.from_numpy(dy),
                                  torch.from_numpy(dx), torch.from_numpy(flip), size=8)
    np.testing.assert_array_equal(out.permute(0, 2, 3, 1).numpy(), expected)
    out = tf_augment.crop_flip(tf.constant(padded), tf.constant(dy), tf.constant(dx), tf.constant(flip), size=8)
    np.testing.assert_array_equal(out.numpy(), expected)
