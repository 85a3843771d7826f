"""What a reference's worker sees of a dataset: the files of its role, never an eval label.

A trainer sees the training files only (not even the eval images); a predictor sees the eval inputs
only. Eval files that hold their labels (CIFAR-10's `test_batch`) are never shown: the harness
derives a label-free copy (`test_batch.images.npy`: the images only) for the predictor.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from harness import datasets

TRAIN, PREDICT = "train", "predict"
ROLES = (TRAIN, PREDICT)
DERIVED_SUFFIX = ".images.npy"      # a label-free copy of an eval file that holds labels
# The packed formats of `dawnbench data prepare imagenet --format` (dawnbench.prepare_imagenet.PACKERS),
# each <format>/train/ and <format>/val/ beside the folders. Only these names: anything else in the
# dataset folder (the label files, the record) stays with the harness.
PACKED_FORMATS = ("recordio", "tfrecord")


def _flatten(split) -> list[str]:
    if isinstance(split, dict):
        return [v for v in split.values() if isinstance(v, str)]
    return list(split)


def view_files(name: str, data_root: str | os.PathLike | None, role: str, derived_dir: Path) -> list[tuple[Path, str]]:
    """(source file or folder, path relative to the view's data root) of each file a worker in `role` sees.
    Derived label-free files are written under `derived_dir` (the run's scratch)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    entry = datasets.manifest(name)
    source_dir = datasets.files_dir(name, data_root)
    relative = Path(entry["dir"]) / entry.get("subdir", "")
    if entry.get("format") == "imagenet-folders":
        # Folders, not files: the trainer sees train/ (class folders), the predictor the flat val/;
        # the label files and the record stay with the harness. A packed copy (`data prepare
        # --format recordio|tfrecord`) is split the same way: <format>/train/ (records with their
        # class) to the trainer, <format>/val/ (records without a label) to the predictor.
        folder = entry["splits"]["train" if role == TRAIN else "test"]["dir"]
        folders = [folder] + [f"{packed}/{folder}" for packed in PACKED_FORMATS
                              if (source_dir / packed / folder).is_dir()]
        return [(source_dir / f, str(relative / f)) for f in folders]
    test_split = entry.get("splits", {}).get("test", [])      # a manifest may name no splits: then no eval inputs
    test = set(_flatten(test_split)) | {entry["eval_labels"]}
    if role == TRAIN:
        return [(source_dir / f, str(relative / f)) for f in entry["files"] if f not in test]
    file_format = entry.get("format", "idx")
    if file_format == "idx":
        images = test_split.get("images") if isinstance(test_split, dict) else None
        return [(source_dir / images, str(relative / images))] if images else []
    if file_format == "cifar-pickle":
        derived_dir.mkdir(parents=True, exist_ok=True)
        out = []
        for f in _flatten(entry["splits"]["test"]):
            target = derived_dir / (f + DERIVED_SUFFIX)
            images, _ = datasets.read_cifar_batch(datasets.verify_file(name, data_root, f))
            np.save(target, images, allow_pickle=False)
            out.append((target, str(relative / (f + DERIVED_SUFFIX))))
        return out
    raise datasets.DatasetError(f"datasets.toml entry [{name}] has unknown format {file_format!r}")


def system_copies() -> list[str]:
    """Folders outside the data root that hold a dataset with its labels (Debian's packages): a view
    shows them empty."""
    return sorted({datasets.manifest(n)["debian_dir"] for n in datasets.dataset_names()
                   if "debian_dir" in datasets.manifest(n)})


def folder_views(name: str, data_root: str | os.PathLike | None) -> list[tuple[str, Path, str]]:
    """(role, source folder, path relative to the view's data root) of every folder a role sees whole:
    what a container launcher mounts at harness.sandbox.ROLE_MOUNTS/<role>/<relative path>."""
    if datasets.manifest(name).get("format") != "imagenet-folders":
        return []
    return [(role, src, rel) for role in ROLES for src, rel in view_files(name, data_root, role, Path("/nonexistent"))]
