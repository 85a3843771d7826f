"""The eval labels a run is scored against, and the blacklist of eval examples a task lets an entry
drop: read by the harness alone, each only after its checksum matched.

A reference never sees what this module returns (docs/RULES.md): the harness process keeps it.
"""

from __future__ import annotations

import os

import numpy as np

from harness import data_formats
from harness.datasets import DatasetError, dataset_dir, manifest, not_regular, record_verified, sha256_file

__all__ = ["load_eval_labels", "load_task_labels", "load_blacklist"]


def load_eval_labels(name: str, data_root: str | os.PathLike | None = None):
    """The official eval labels, read by the dataset's format (harness.data_formats) only after their
    checksum matched: int64 class indices, SQuAD's answers (harness.metrics.SquadLabels), a stream's
    tokens, or what a format of a new task reads."""
    return data_formats.eval_labels(name, data_root)


def load_task_labels(task, data_root: str | os.PathLike | None = None):
    """The eval labels `task` scores: its dataset's, as its kind cuts them (a language model's first
    scored_tokens of the stream; every other kind's whole)."""
    return task.kind.scored_labels(task, load_eval_labels(task.dataset, data_root))


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
        one_based = [int(line) for line in data_formats.read_lines(path) if line.strip()]
    except ValueError as exc:
        raise DatasetError(f"malformed blacklist {path}: {exc}; {fix}") from exc
    indices = np.unique(np.array(one_based, dtype=np.int64)) - 1
    if len(indices) != len(one_based) or len(indices) != spec["count"] or (len(indices) and indices[0] < 0):
        raise DatasetError(f"malformed blacklist {path}: expected {spec['count']} distinct one-based indices, "
                           f"got {len(one_based)} lines ({len(indices)} distinct); {fix}")
    record_verified(name, spec["file"], {"sha256": digest, "size": path.stat().st_size})
    return indices
