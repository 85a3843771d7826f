"""The prepared ImageNet as a reference's worker sees it: lists of files, nothing decoded.

`dawnbench data prepare imagenet` lays the dataset out as `harness/data/datasets.toml` says, and the
harness hands each role only its own folder:

- the trainer's data root holds `imagenet/train/<wnid>/*.JPEG`: a class's index is the position of
  its WNID in the sorted list of the train folder's sub-folders (with all 1,000 classes, the line of
  `synsets.txt` the harness scores against);
- the predictor's data root holds `imagenet/val/ILSVRC2012_val_<8 digits>.JPEG`, flat and without
  labels; the canonical order of the eval set is the sorted order of those file names.

Standard library and numpy only, so that every ImageNet reference (PyTorch, TensorFlow, MXNet) can
list its files the same way; decoding and augmentation are each reference's own.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from harness.datasets import DatasetError, manifest
from harness.errors import command

DATASET = "imagenet"
IMAGE_SUFFIXES = (".jpeg", ".jpg")          # prepare writes .JPEG; compared lower-case
PREPARE_HINT = f"prepare it with `{command('data prepare imagenet --from DIR')}`"


def split_dir(data_root: str | os.PathLike, split: str) -> Path:
    """The folder of a split ("train" or "test") under the data root, as datasets.toml names it."""
    entry = manifest(DATASET)
    splits = entry.get("splits", {})
    if split not in splits:
        raise DatasetError(f"unknown {DATASET} split {split!r}; splits are: {', '.join(splits)}")
    return Path(data_root) / entry["dir"] / splits[split]["dir"]


def _images_in(folder: Path) -> list[str]:
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries
                      if e.name.lower().endswith(IMAGE_SUFFIXES) and e.is_file())


def train_samples(data_root: str | os.PathLike) -> tuple[list[str], np.ndarray, list[str]]:
    """(paths, labels int64, wnids) of every training image: sorted by class, then by file name;
    a label is the index of the image's folder among the sorted class folders."""
    root = split_dir(data_root, "train")
    if not root.is_dir():
        raise DatasetError(f"ImageNet training images not found in {root}: {PREPARE_HINT}")
    with os.scandir(root) as entries:
        wnids = sorted(e.name for e in entries if e.is_dir())
    if not wnids:
        raise DatasetError(f"ImageNet training images not found in {root}: it holds no class folders; {PREPARE_HINT}")
    paths: list[str] = []
    counts = []
    for wnid in wnids:
        names = _images_in(root / wnid)
        if not names:
            raise DatasetError(f"ImageNet class folder {root / wnid} holds no .JPEG images; {PREPARE_HINT}")
        paths += [str(root / wnid / name) for name in names]
        counts.append(len(names))
    labels = np.repeat(np.arange(len(wnids), dtype=np.int64), counts)
    return paths, labels, wnids


def val_files(data_root: str | os.PathLike) -> list[str]:
    """Paths of the validation images in canonical order (sorted file names); never a label."""
    root = split_dir(data_root, "test")
    if not root.is_dir():
        raise DatasetError(f"ImageNet validation images not found in {root}: {PREPARE_HINT}")
    names = _images_in(root)
    if not names:
        raise DatasetError(f"ImageNet validation images not found in {root}: it holds no .JPEG files; {PREPARE_HINT}")
    return [str(root / name) for name in names]
