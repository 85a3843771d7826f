"""A small CIFAR-10.1 in the exact published on-disk format, for tests.

The official repository (github.com/modestyachts/CIFAR-10.1, datasets/) publishes the v6 set as two
.npy files (format version 1.0): ``cifar10.1_v6_data.npy``, uint8 (2000, 32, 32, 3) HWC, and
``cifar10.1_v6_labels.npy``, little-endian int32 (2000,). np.save writes the same layout; only the
pixels, labels and count differ. The manifest entry written here is the built-in ``["cifar10.1"]``
with the fixture's sha256s.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from cifar10_fixture import _toml_value, builtin_entry

DATA, LABELS = "cifar10.1_v6_data.npy", "cifar10.1_v6_labels.npy"


def write_cifar10_1(directory: Path, images: np.ndarray, labels: np.ndarray) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3)
    np.save(directory / DATA, np.ascontiguousarray(images), allow_pickle=False)
    np.save(directory / LABELS, np.asarray(labels, dtype="<i4"), allow_pickle=False)


def git_object_id(data: bytes) -> str:
    """What `git hash-object` prints for a file of these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def manifest_lines(directory: Path, git_ids: bool = False) -> list[str]:
    """TOML lines of the ``["cifar10.1"]`` entry with the fixture files' sha256s, or their git
    object ids and sizes (as the built-in entry pins the official data file)."""
    entry = builtin_entry("cifar10.1")
    files = {f: (directory / f).read_bytes() for f in (DATA, LABELS)}
    entry["files"] = {f: ({"git_sha1": git_object_id(b), "size": len(b)} if git_ids else
                          {"sha256": hashlib.sha256(b).hexdigest()}) for f, b in files.items()}
    return ['["cifar10.1"]'] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in entry.items()]
