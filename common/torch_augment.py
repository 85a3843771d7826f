"""Batched image augmentation on the device, for PyTorch references that keep their training set
there: one gather per batch, no per-image loader."""
from __future__ import annotations

import torch


def crop_flip(padded: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, flip: torch.Tensor,
              size: int = 32) -> torch.Tensor:
    """Per image i of `padded` (B, C, H, W): the size x size window whose top-left corner is
    (dy[i], dx[i]), rows then columns, mirrored left-right where flip[i]. Any dtype."""
    r = torch.arange(size, device=padded.device)
    rows = (dy[:, None] + r)[:, None, :, None]                           # B, 1, size, 1
    cols = dx[:, None] + torch.where(flip[:, None], size - 1 - r, r)     # mirrored: read right to left
    batch = torch.arange(len(padded), device=padded.device)[:, None, None, None]
    channel = torch.arange(padded.shape[1], device=padded.device)[None, :, None, None]
    return padded[batch, channel, rows, cols[:, None, None, :]]
