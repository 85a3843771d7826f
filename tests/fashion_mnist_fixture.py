"""A small Fashion-MNIST in the exact official on-disk format, for tests.

The official set is four IDX files (LeCun's MNIST format), stored decompressed under
``<data root>/fashion-mnist/`` (harness/data/datasets.toml's checksums are of the decompressed
files): ``train-images-idx3-ubyte`` (60000, 28, 28), ``train-labels-idx1-ubyte`` (60000,) and the
``t10k-`` pair (10000). An IDX file is a big-endian header, two zero bytes, the type code (0x08:
unsigned bytes) and the number of dimensions, one big-endian int32 per dimension, then the values
in C order. Only the sizes, the pixels and the labels differ from the official files.

Images are learnable: each class is a fixed pattern (smooth, random, the same in every split),
mirror-symmetric so that the references' horizontal flips keep the class, plus noise.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
from cifar10_fixture import _toml_value, builtin_entry

TRAIN_IMAGES, TRAIN_LABELS = "train-images-idx3-ubyte", "train-labels-idx1-ubyte"
TEST_IMAGES, TEST_LABELS = "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"
UBYTE = 0x08


def idx_bytes(array: np.ndarray) -> bytes:
    """An unsigned-byte array as an IDX file."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">BBBB", 0, 0, UBYTE, array.ndim) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.tobytes()


def class_patterns(seed: int = 1234) -> np.ndarray:
    """float (10, 28, 28): one pattern per class, values about -1 to 1. Drawn from a fixed seed, not
    the split's, so that train and test share them: a 7x7 grid of random values, mirrored left to
    right and averaged (so a flipped image is the same class), blown up to 28x28."""
    grid = np.random.default_rng(seed).normal(size=(10, 7, 7))
    grid = (grid + grid[:, :, ::-1]) / 2
    patterns = np.kron(grid, np.ones((4, 4)))
    return patterns / np.abs(patterns).max(axis=(1, 2), keepdims=True)


def make_images(labels: np.ndarray, rng: np.random.Generator, contrast: float = 60.0, noise: float = 50.0) -> np.ndarray:
    """uint8 (n, 28, 28): mid-grey plus `contrast` times the class's pattern plus Gaussian noise."""
    images = 128 + contrast * class_patterns()[labels] + rng.normal(0, noise, size=(len(labels), 28, 28))
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def write_fashion_mnist(directory: Path, n_train: int = 640, n_test: int = 500, seed: int = 0,
                        contrast: float = 60.0, noise: float = 50.0) -> dict[str, np.ndarray]:
    """Write the four IDX files into `directory` (a data root's fashion-mnist/); every class has
    the same share of each split, in random order. Returns {file name: the array written}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays = {}
    for images, labels, n in ((TRAIN_IMAGES, TRAIN_LABELS, n_train), (TEST_IMAGES, TEST_LABELS, n_test)):
        y = rng.permutation(np.arange(n) % 10).astype(np.uint8)
        arrays[images], arrays[labels] = make_images(y, rng, contrast, noise), y
    for name, array in arrays.items():
        (directory / name).write_bytes(idx_bytes(array))
    return arrays


def fixture_manifest(path: Path, directory: Path) -> Path:
    """A $DAWNBENCH_DATASETS_MANIFEST file: the built-in [fashion-mnist] entry with the sha256 and
    size of the files in `directory`."""
    entry = builtin_entry("fashion-mnist")
    for name in entry["files"]:
        data = (Path(directory) / name).read_bytes()
        entry["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    lines = ["# Test override of harness/data/datasets.toml, written by tests/fashion_mnist_fixture.py",
             "[fashion-mnist]"]
    lines += [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in entry.items()]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)


def write_real_subset(source: Path, directory: Path, n_train: int, n_test: int) -> None:
    """The first `n_train` training and `n_test` test examples of the real Fashion-MNIST in `source` (a
    data root's fashion-mnist/), as the four IDX files in `directory`: real images, a fraction of the
    compute, for the tests that need a run's plumbing and not its figure."""
    from harness.official_readers import read_idx
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, n in ((TRAIN_IMAGES, n_train), (TRAIN_LABELS, n_train), (TEST_IMAGES, n_test), (TEST_LABELS, n_test)):
        (directory / name).write_bytes(idx_bytes(read_idx(Path(source) / name)[:n]))
