"""The eval labels a run is scored against, and the blacklist of eval examples a task lets an entry
drop: read by the harness alone, each only after its checksum matched.

A reference never sees what this module returns (docs/RULES.md): the harness process keeps it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from harness import metrics
from harness.datasets import DatasetError, dataset_dir, manifest, not_regular, record_verified, sha256_file, verify_file
from harness.official_readers import read_cifar_batch, read_idx, read_npy

__all__ = ["load_eval_labels", "load_blacklist"]


def load_eval_labels(name: str, data_root: str | os.PathLike | None = None):
    """The official eval labels, read only after their checksum matched: int64 class indices, or
    SQuAD's answers (harness.metrics.SquadLabels: one example per question)."""
    entry = manifest(name)
    path = verify_file(name, data_root, entry["eval_labels"])
    file_format = entry.get("format", "idx")
    if file_format == "cifar-pickle":
        return read_cifar_batch(path)[1]
    if file_format == "imagenet-folders":
        return _class_indices(name, path, verify_file(name, data_root, entry["classes"]))
    if file_format == "squad-json":
        try:
            return metrics.SquadLabels(metrics.load_squad_dataset(path)["data"])
        except metrics.MetricInputError as exc:
            raise DatasetError(f"{exc}; re-fetch it with: {entry['fetch_command']}") from None
    if file_format == "utf8-text":      # issue 50 (i50-lm): the stream whose next tokens are scored (a format class's)
        from harness.lm_eval import TokenStream
        return TokenStream.of_text_file(path)
    if file_format == "npy":
        labels = read_npy(path, name)
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise DatasetError(f"malformed labels {path}: expected 1-D integers, got {labels.dtype} {labels.shape}; "
                               f"re-fetch it with: {entry['fetch_command']}")
        return labels.astype(np.int64)
    if file_format != "idx":
        raise DatasetError(f"datasets.toml entry [{name}] has unknown format {file_format!r}; "
                           "known: idx, cifar-pickle, imagenet-folders, squad-json, npy, utf8-text")
    labels = read_idx(path)
    if labels.ndim != 1:
        raise DatasetError(f"malformed IDX file {path}: eval labels must be 1-D, got shape {labels.shape}")
    return labels.astype(np.int64)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from exc


def _class_indices(name: str, labels_path: Path, classes_path: Path) -> np.ndarray:
    """The eval labels as class indices: each line of `labels_path` names a class (a WordNet id), and
    a class's index is its line in `classes_path` (sorted: torchvision's and TFDS's convention)."""
    classes = _lines(classes_path)
    if not classes or classes != sorted(set(classes)):
        raise DatasetError(f"malformed {classes_path}: the class names must be sorted and distinct, one per line; "
                           f"re-run: {manifest(name)['fetch_command']}")
    index = {c: i for i, c in enumerate(classes)}
    names = _lines(labels_path)
    unknown = [n for n in names if n not in index]
    if unknown or not names:
        raise DatasetError(f"malformed {labels_path}: {len(unknown)} labels name no class of {classes_path.name} "
                           f"(first: {unknown[0] if unknown else 'the file is empty'!r}); "
                           f"re-run: {manifest(name)['fetch_command']}")
    return np.array([index[n] for n in names], dtype=np.int64)


def load_blacklist(name: str, data_root: str | os.PathLike | None = None) -> np.ndarray | None:
    """The sorted zero-based indices of the eval examples the task lets an entry drop when scoring
    (ImageNet's 1,762), when the dataset holds its blacklist file; None when it does not. The file
    holds one-based indices, one per line; its sha256 is checked where datasets.toml gives one, its
    count always."""
    entry = manifest(name)
    spec = entry.get("blacklist")
    if not spec:
        return None
    path = dataset_dir(name, data_root) / spec["file"]
    fix = f"re-run {entry['fetch_command']} --blacklist FILE with the official file, or delete {path}"
    kind = not_regular(path)
    if kind:
        raise DatasetError(f"blacklist {path} is {kind}, not a regular file: {fix}")
    if not path.is_file():
        return None
    digest = sha256_file(path)
    if "sha256" in spec and digest != spec["sha256"]:
        raise DatasetError(f"blacklist {path} has sha256 {digest}, expected {spec['sha256']}: not the official one; {fix}")
    try:
        one_based = [int(line) for line in _lines(path) if line.strip()]
    except ValueError as exc:
        raise DatasetError(f"malformed blacklist {path}: {exc}; {fix}") from exc
    indices = np.unique(np.array(one_based, dtype=np.int64)) - 1
    if len(indices) != len(one_based) or len(indices) != spec["count"] or (len(indices) and indices[0] < 0):
        raise DatasetError(f"malformed blacklist {path}: expected {spec['count']} distinct one-based indices, "
                           f"got {len(one_based)} lines ({len(indices)} distinct); {fix}")
    record_verified(name, spec["file"], {"sha256": digest, "size": path.stat().st_size})
    return indices
