"""The training-data loaders references share: checksum-verified arrays of a dataset's splits.

What runs inside images, next to the harness: the files are verified and read by the harness's
own code (``harness.datasets``: checksums; ``harness.official_readers``: IDX and CIFAR); fetching them is a host tool
(``dawnbench data fetch``, ``dawnbench.fetch``). The ``*_images`` loaders are the only ones a
reference may use for the eval split: they never return labels.
"""

from __future__ import annotations

import os

import numpy as np

from harness.data_views import DERIVED_SUFFIX
from harness.datasets import DatasetError, files_dir, manifest, verify_file
from harness.official_readers import read_cifar_batch, read_idx

__all__ = [
    "DatasetError",
    "load_fashion_mnist",
    "load_fashion_mnist_images",
    "load_cifar10",
    "load_cifar10_images",
]


def _split(name: str, split: str):
    splits = manifest(name)["splits"]
    if split not in splits:
        raise DatasetError(f"unknown {name} split {split!r}; splits are: {', '.join(splits)}")
    return splits[split]


def _split_files(split: str) -> dict:
    return _split("fashion-mnist", split)
def load_fashion_mnist_images(data_root: str | os.PathLike | None, split: str) -> np.ndarray:
    """Images of a split, uint8 (N, 28, 28), checksum-verified.

    The only loader a reference may use for the eval split: it never reads labels.
    """
    path = verify_file("fashion-mnist", data_root, _split_files(split)["images"])
    images = read_idx(path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise DatasetError(f"malformed IDX file {path}: expected uint8 (N, 28, 28) images, got {images.dtype} {images.shape}")
    return images


def load_fashion_mnist(data_root: str | os.PathLike | None, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 28, 28), labels int64 (N,)) of a split, checksum-verified."""
    images = load_fashion_mnist_images(data_root, split)
    path = verify_file("fashion-mnist", data_root, _split_files(split)["labels"])
    labels = read_idx(path)
    if labels.ndim != 1 or len(labels) != len(images):
        raise DatasetError(f"malformed IDX file {path}: expected {len(images)} labels, got shape {labels.shape}")
    return images, labels.astype(np.int64)


def _cifar10_split(data_root: str | os.PathLike | None, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3), labels int64 (N,)): the split's batches in order."""
    data, labels = [], []
    for filename in _split("cifar10", split):
        batch_data, batch_labels = read_cifar_batch(verify_file("cifar10", data_root, filename))
        data.append(batch_data)
        labels.append(batch_labels)
    # Rows are channel-major (1024 R, 1024 G, 1024 B, each row by row): CHW -> HWC.
    images = np.concatenate(data).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), np.concatenate(labels)


def load_cifar10_images(data_root: str | os.PathLike | None, split: str) -> np.ndarray:
    """Images of a split, uint8 (N, 32, 32, 3) HWC, checksum-verified.

    The only loader a reference may use for the eval split: it returns no labels. In a predictor's
    view the eval batches are the harness's label-free copies (``test_batch.images.npy``).
    """
    derived = [files_dir("cifar10", data_root) / (f + DERIVED_SUFFIX) for f in _split("cifar10", split)]
    if all(p.is_file() for p in derived):
        data = np.concatenate([np.load(p, allow_pickle=False) for p in derived])
        return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return _cifar10_split(data_root, split)[0]


def load_cifar10(data_root: str | os.PathLike | None, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3) HWC, labels int64 (N,)) of ``"train"`` (the five
    batches concatenated in order) or ``"test"``, checksum-verified."""
    return _cifar10_split(data_root, split)
