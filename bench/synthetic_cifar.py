"""A synthetic CIFAR-10 with an accuracy that is neither chance nor 100%, in memory or written in the
official on-disk format, for the GPU benchmarks that train cifar10-fast whole schedules.

Each class is a blocky colour template (a 4x4 grid of random colours, each cell 8x8 pixels) added at
a low amplitude to Gaussian noise. The templates are fixed (one seed for every split); the noise and
the labels come from the split's seed. At TEMPLATE_AMPLITUDE 5 over noise of 64 a matched filter
that knows the templates classifies about 99% of images (measured in numpy on 4,000), so a network
that learns well lands below that and differences in how well it learns show.

`write_cifar10(root, ...)` writes `<root>/cifar10/cifar-10-batches-py/` as the official pickles
(tests/cifar10_fixture.py's writer) and a datasets manifest carrying their checksums, so the
harness verifies and reads them as it would the real files.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench.gpu_common import REPO

TEMPLATE_AMPLITUDE = 5.0        # pixel units, against noise of NOISE_STD
NOISE_STD = 64.0
CLASSES = 10
TEMPLATE_SEED = 1234


def template_images(n: int, seed: int, amplitude: float = TEMPLATE_AMPLITUDE) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 (n, 32, 32, 3) HWC images, int64 labels): class template x amplitude + noise about 128."""
    cells = np.random.default_rng(TEMPLATE_SEED).normal(0, 1, (CLASSES, 4, 4, 3))
    templates = np.kron(cells, np.ones((1, 8, 8, 1))).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n).astype(np.int64)
    images = np.empty((n, 32, 32, 3), np.uint8)
    for start in range(0, n, 5000):         # a slice at a time: float32 noise for 50,000 images is 600 MB
        part = labels[start:start + 5000]
        noise = rng.normal(128, NOISE_STD, (len(part), 32, 32, 3)).astype(np.float32)
        images[start:start + 5000] = np.clip(np.rint(noise + amplitude * templates[part]), 0, 255)
    return images, labels


def write_cifar10(root: Path, n_train: int, n_test: int = 10_000, seed: int = 0) -> Path:
    """The synthetic set in the official format under `root`/cifar10/cifar-10-batches-py (five
    training batches of n_train / 5, the test batch), and the manifest with their md5s; the manifest's path."""
    sys.path.insert(0, str(REPO / "tests"))         # the official-format writer the tests use
    try:
        from cifar10_fixture import LABEL_NAMES, TRAIN_BATCHES, fixture_manifest, py2_pickle
    finally:
        sys.path.remove(str(REPO / "tests"))
    batches = Path(root) / "cifar10" / "cifar-10-batches-py"
    batches.mkdir(parents=True, exist_ok=True)
    per_batch = n_train // len(TRAIN_BATCHES)
    splits = [(name, f"training batch {i} of 5", per_batch, seed * 10 + i) for i, name in enumerate(TRAIN_BATCHES, 1)]
    splits.append(("test_batch", "testing batch 1 of 1", n_test, seed * 10 + 9))
    for filename, label, n, split_seed in splits:
        images, labels = template_images(n, split_seed)
        batch = {b"batch_label": label.encode(), b"labels": [int(k) for k in labels],
                 b"data": np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(n, 3072),
                 b"filenames": [f"{filename}_{i:05d}.png".encode() for i in range(n)]}
        (batches / filename).write_bytes(py2_pickle(batch))
    meta = {b"num_cases_per_batch": per_batch, b"label_names": list(LABEL_NAMES), b"num_vis": 3072}
    (batches / "batches.meta").write_bytes(py2_pickle(meta))
    (batches / "readme.html").write_bytes(b"synthetic CIFAR-10 (bench/synthetic_cifar.py)\n")
    return fixture_manifest(Path(root) / "datasets-synthetic-cifar10.toml", batches_dir=batches)
