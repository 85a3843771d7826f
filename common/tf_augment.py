"""Batched image augmentation on the device, for TensorFlow references that keep their training
set there: gathers inside the compiled training step, no tf.data and no per-image Python."""
from __future__ import annotations

import tensorflow as tf


def crop_flip(padded: tf.Tensor, dy: tf.Tensor, dx: tf.Tensor, flip: tf.Tensor, size: int = 32) -> tf.Tensor:
    """Per image i of `padded` (B, H, W, C): the size x size window whose top-left corner is
    (dy[i], dx[i]), rows then columns, mirrored left-right where flip[i]. Two batched gathers."""
    r = tf.range(size, dtype=dx.dtype)
    rows = dy[:, None] + r                                                    # (B, size)
    cols = dx[:, None] + tf.where(flip[:, None], (size - 1) - r, r)
    x = tf.gather(padded, rows, axis=1, batch_dims=1)                         # (B, size, W, C)
    return tf.gather(x, cols, axis=2, batch_dims=1)                           # (B, size, size, C)
