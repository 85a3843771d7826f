"""What a reference's worker sees of a dataset: the files of its role, never an eval label.

A trainer sees the training files only (not even the eval images); a predictor sees the eval inputs
only; the server of `dawnbench infer`'s timed requests sees none of the task's files (each example
comes with its request, so nothing it computes before a request can hold that example's answer).
Eval files that hold their labels are never shown: the harness derives a label-free copy for the
predictor (CIFAR-10's `test_batch.images.npy`: the images only; SQuAD's `dev-v1.1.questions.json`:
contexts, questions and ids, no answers). Companion datasets (SQuAD's GloVe vectors) are shown to
every role.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from harness import data_formats, datasets

TRAIN, PREDICT, SERVE = "train", "predict", "serve"
ROLES = (TRAIN, PREDICT)            # the roles that see files of the task (SERVE sees the companions only)
# Kept here for the readers of a view (common.loaders), where harness.data_formats writes them
DERIVED_SUFFIX, QUESTIONS_SUFFIX = data_formats.DERIVED_SUFFIX, data_formats.QUESTIONS_SUFFIX
PACKED_FORMATS = data_formats.PACKED_FORMATS
answer_free = data_formats.answer_free


def companion_files(name: str, data_root: str | os.PathLike | None) -> list[tuple[Path, str]]:
    """The files of the datasets `name` names under `with` (SQuAD's GloVe): every role sees them.
    Only the vector files their record lists, never the record or the manifest."""
    out = []
    for companion in datasets.manifest(name).get("with", []):
        entry = datasets.manifest(companion)
        directory = datasets.dataset_dir(companion, data_root)
        try:
            record = json.loads((directory / entry["record"]).read_text(encoding="utf-8"))
            files = sorted(v["file"] for v in record["vectors"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            files = []    # not fetched: the run's dataset check has said so with the fetch command
        out += [(directory / f, str(Path(entry["dir"]) / f)) for f in files if (directory / f).is_file()]
    return out


def worker_sources(name: str, data_root: str | os.PathLike | None) -> list[Path]:
    """The host's files and folders of dataset `name` that a view shows a worker as they are (not the
    label-free copies the harness derives and owns), for either role."""
    fmt, _ = data_formats.of(name, data_root)
    nowhere = Path("/nonexistent")      # only the derived files are written there; these formats derive none
    shown = _own_files(name, data_root, TRAIN, nowhere)
    if not fmt.derives_view:
        shown += _own_files(name, data_root, PREDICT, nowhere)
    return sorted({src for src, _ in shown + companion_files(name, data_root)})


def check_workers_can_read(name: str, data_root: str | os.PathLike | None, isolation) -> None:
    """Before a run or an inference starts: every data file a worker will be shown is readable by the
    uid it runs as (harness.sandbox.modes.worker_reads_as), or one DatasetError naming the host's path and
    the fix; otherwise the harness (root) reads the data, starts, and the run dies in the reference's
    init with the sandbox's path in its reason."""
    from harness.sandbox import bubblewrap, modes
    uid = modes.worker_reads_as(isolation)
    if uid is None:
        return
    for source in worker_sources(name, data_root):
        source = source.absolute()
        if not bubblewrap.readable_by(source, uid, uid):
            home = datasets.dataset_dir(name, data_root).absolute()
            folder = (home if home in source.parents else source.parent).absolute()
            raise datasets.DatasetError(
                f"{source} cannot be read by the sandbox's user (uid {uid}, which the reference's code runs as under "
                f"{isolation.mode}); fix with: chmod -R a+rX {folder}")


def view_files(name: str, data_root: str | os.PathLike | None, role: str, derived_dir: Path) -> list[tuple[Path, str]]:
    """(source file or folder, path relative to the view's data root) of each file a worker in `role` sees.
    Derived label-free files are written under `derived_dir` (the run's scratch)."""
    if role == SERVE:
        return companion_files(name, data_root)
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    return _own_files(name, data_root, role, derived_dir) + companion_files(name, data_root)


def _own_files(name: str, data_root, role: str, derived_dir: Path) -> list[tuple[Path, str]]:
    fmt, ds = data_formats.of(name, data_root)
    return fmt.train_view(ds) if role == TRAIN else fmt.predict_view(ds, derived_dir)


def system_copies() -> list[str]:
    """Folders outside the data root that hold a dataset with its labels (Debian's packages): a view
    shows them empty."""
    return sorted({datasets.manifest(n)["debian_dir"] for n in datasets.dataset_names()
                   if "debian_dir" in datasets.manifest(n)})


def label_folders(name: str, data_root: str | os.PathLike | None) -> list[Path]:
    """The host's folders that hold the dataset together with its eval labels: its folder under the
    data root and Debian's system copy, where they exist. In uid mode nothing hides them from the
    workers but their permissions."""
    entry = datasets.manifest(name)
    root = Path(data_root) if data_root is not None else datasets.default_data_root()
    found = [root / entry["dir"]] + ([Path(entry["debian_dir"])] if "debian_dir" in entry else [])
    return [folder for folder in found if folder.is_dir()]


def folder_views(name: str, data_root: str | os.PathLike | None) -> list[tuple[str, Path, str]]:
    """(role, source folder, path relative to the view's data root) of every folder a role sees whole:
    what a container launcher mounts at harness.sandbox.uid_mode.ROLE_MOUNTS/<role>/<relative path>."""
    if not data_formats.of(name, data_root)[0].folders:
        return []
    return [(role, src, rel) for role in ROLES for src, rel in view_files(name, data_root, role, Path("/nonexistent"))]


def derived_files(derived_dir: Path) -> list[dict]:
    """{"file", "sha256", "size"} of each label-free copy the harness wrote into `derived_dir`."""
    if not derived_dir.is_dir():
        return []
    return [{"file": p.name, "sha256": datasets.sha256_file(p), "size": p.stat().st_size}
            for p in sorted(derived_dir.iterdir()) if p.is_file()]
