"""A run's stored model scored by the harness on its task's eval set and on a FRESH test set (one
drawn later the same way: CIFAR-10.1 for CIFAR-10, ImageNetV2 for ImageNet), for `dawnbench analyze
generalization`.

Each set is scored as a run's eval is: a sandboxed predictor of the run's reference (its recorded
hyperparameters), shown only the set's label-free view, loads the run's model/ and predicts every
example; the harness checks the count and scores the predictions against the labels it read from
the checksummed files. The fresh set's view is the original's, at the original's paths, holding the
fresh images (CIFAR-10.1's as CIFAR-10's label-free `test_batch.images.npy`; ImageNetV2's flat val/
and its packed val/ folders as ImageNet's), so the reference's unchanged loader reads it. Its labels
never leave this process.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from harness import data_formats, data_views, datasets, eval_labels, inference, official_readers
from harness.errors import UsageError
from harness.registry import ReferenceSpec
from harness.roles import start_worker
from harness.sandbox import bubblewrap, handle, kernel, modes, scratch, uid_mode


class FreshSetError(datasets.DatasetError):
    """A fresh set that cannot be shown to the predictor; the message says why."""


def fresh_set_of(task_dataset: str) -> str | None:
    """The manifest's fresh test set for models of `task_dataset` (its `fresh_for`), or None."""
    for name in datasets.dataset_names():
        try:
            if datasets.manifest(name).get("fresh_for") == task_dataset:
                return name
        except datasets.DatasetError:
            continue
    return None


def _fresh_images(name: str, data_root: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 32, 32, 3), labels int64 (N,)) of a fresh set in .npy files, checksummed."""
    entry = datasets.manifest(name)
    datasets.check_present(name, data_root)
    test = entry["splits"]["test"]
    images = official_readers.read_npy(datasets.verify_file(name, data_root, test["images"]), name)
    labels = eval_labels.load_eval_labels(name, data_root)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (32, 32, 3) or len(images) != len(labels):
        raise FreshSetError(f"{name}: expected uint8 (N, 32, 32, 3) images and N labels, got {images.dtype} "
                            f"{images.shape} and {len(labels)}; re-fetch it with: {entry['fetch_command']}")
    return images, labels


def _fresh_folders(name: str, original: str, data_root: Path) -> tuple[list[tuple[Path, str]], np.ndarray]:
    """(the fresh set's flat eval folder and its packed ones, each at the original's path; the labels as
    class indices of the original's classes): a fresh set laid out as ImageNet's val."""
    entry, paired = datasets.manifest(name), datasets.manifest(original)
    classes = paired["classes"]
    if entry.get("classes") != classes or entry["files"].get(classes) != paired["files"].get(classes):
        raise FreshSetError(f"{name}: its {entry.get('classes')} is not pinned to {original}'s {classes}, so its "
                            f"labels are not {original}'s class indices; fix harness/data/datasets.toml")
    datasets.check_present(name, data_root)
    datasets.check_prepared(name, data_root)       # every file's name and size against its manifest
    labels = eval_labels.load_eval_labels(name, data_root)     # val_labels.txt and synsets.txt, checksummed
    source_dir, shown_dir = datasets.files_dir(name, data_root), Path(paired["dir"]) / paired.get("subdir", "")
    folder = paired["splits"]["test"]["dir"]
    own = entry["splits"]["test"]["dir"]
    count = sum(1 for p in (source_dir / own).iterdir() if p.is_file())
    if count != len(labels):
        raise FreshSetError(f"{name}: {source_dir / own} holds {count} files for {len(labels)} labels; re-fetch it "
                            f"with: {entry['fetch_command']}")
    files = [(source_dir / own, str(shown_dir / folder))]
    # Read as the original is read: a reference that reads packed records would otherwise read the
    # fresh set another way (TensorFlow's "auto") or not at all (MXNet).
    for packed in data_formats.PACKED_FORMATS:
        if (datasets.files_dir(original, data_root) / packed / folder).is_dir():
            if not (source_dir / packed / own).is_dir():
                raise FreshSetError(f"{name} is not packed as {packed}, which {original}'s eval set is (its references "
                                    f"may read that): run {entry['fetch_command']} --format {packed}")
            files.append((source_dir / packed / own, str(shown_dir / packed / folder)))
    for _, shown in files:
        if (uid_mode.ROLE_MOUNTS / data_views.PREDICT / shown).is_dir():
            raise FreshSetError(f"{name}: a predictor here is shown the mounted {shown} of {original}, not the fresh "
                                f"set; run `dawnbench analyze generalization` on the host")
    return files, labels


def fresh_view(name: str, original: str, data_root: Path, derived: Path) -> tuple[list[tuple[Path, str]], np.ndarray]:
    """(the predictor's data files, the labels): the fresh set's images where the original's
    label-free eval inputs are, as the original's format lays them out (FRESH_VIEWS)."""
    fmt, _ = data_formats.of(original, data_root)
    show = FRESH_VIEWS.get(type(fmt))
    if show is None:
        raise FreshSetError(f"{name}: showing it in place of {original}'s eval set is not written yet for the "
                            f"{fmt.name} format (only {', '.join(f.name for f in FRESH_VIEWS)} are)")
    return show(name, original, data_root, derived)


def _fresh_batch(name: str, original: str, data_root: Path, derived: Path) -> tuple[list[tuple[Path, str]], np.ndarray]:
    """A fresh set of .npy images shown as the original's label-free CIFAR batch copy."""
    images, labels = _fresh_images(name, data_root)
    entry = datasets.manifest(original)
    (test_file,) = data_formats.Dataset(original, entry, data_root).names("test")
    derived.mkdir(parents=True, exist_ok=True)
    target = derived / (test_file + data_formats.DERIVED_SUFFIX)
    # CIFAR-10's rows: channel-major (1024 R, 1024 G, 1024 B), as the label-free copy of test_batch holds them
    np.save(target, np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(len(images), 3072), allow_pickle=False)
    os.chmod(target, 0o644)
    os.chmod(derived, 0o755)
    relative = Path(entry["dir"]) / entry.get("subdir", "") / target.name
    return [(target, str(relative))], labels


def _predict(spec: ReferenceSpec, hyperparameters: dict, data_root: Path, work: Path, isolation, seed: int,
             model_dir: Path, data_files, examples: int, role_dir: str):
    """The predictions of the run's model on one view, checked for count."""
    worker = None
    try:
        worker, seen = start_worker("predict", spec, isolation, data_root=data_root, derived=work / role_dir,
                                    snapshots=work / "models", data_files=data_files)
        worker.call("init", name=spec.name, config=dict(hyperparameters), seed=seed, task=spec.task.name, rank=0,
                    world_size=1, local_rank=0, show_progress=False, role="predict", eval_examples=examples,
                    data_root=seen["data_root"], work_dir=seen["work_dir"], references=seen["references"])
        inference._load(worker, seen, spec, model_dir)
        answer, array = worker.call("predict")
    finally:
        if worker is not None:
            worker.kill()
    predictions = answer["answers"] if "answers" in answer else array
    count = spec.task.count(predictions) if predictions is not None else 0
    if count != examples:
        raise UsageError(f"{spec.name}'s predict() returned {count} predictions for a set of {examples} examples")
    return predictions


def _check_workers_can_read(files: list[tuple[Path, str]], isolation) -> None:
    """The fresh set's folders readable by the sandbox's user, as views.check_workers_can_read checks the
    original's; one line with the fix otherwise."""
    uid = modes.worker_reads_as(isolation)
    for source, _ in files:
        if uid is not None and not bubblewrap.readable_by(source.absolute(), uid, uid):
            raise datasets.DatasetError(f"{source} cannot be read by the sandbox's user (uid {uid}, which the "
                                        f"reference's code runs as under {isolation.mode}); fix with: "
                                        f"chmod -R a+rX {source.parent.absolute()}")


def score(spec: ReferenceSpec, hyperparameters: dict, model_dir: Path, data_root: Path, fresh: str,
          seed: int = 0) -> dict:
    """{"original": {scores, "examples"}, "fresh": {scores, "examples"}}, each scored by the harness."""
    task = spec.task
    original = task.dataset
    datasets.check_present(original, data_root)
    labels = eval_labels.load_eval_labels(original, data_root)
    dropped = eval_labels.load_blacklist(original, data_root)
    isolation = modes.probe()
    data_views.check_workers_can_read(original, data_root, isolation)
    kernel.protect_harness()
    work = scratch.private_dir("fresh")
    os.chmod(work, 0o755)
    try:
        shutil.copytree(model_dir, work / "models" / "model", symlinks=True)
        files, fresh_labels = fresh_view(fresh, original, data_root, work / "derived-fresh")
        _check_workers_can_read(files, isolation)
        out = {}
        for key, view, truth, drop in (("original", None, labels, dropped), ("fresh", files, fresh_labels, None)):
            predictions = _predict(spec, hyperparameters, data_root, work, isolation, seed, model_dir, view,
                                   len(truth), f"derived-{key}")
            scores = task.score(predictions, truth, drop)
            out[key] = {**scores, "examples": int(len(truth) - (0 if drop is None else len(drop))),
                        "dataset": original if key == "original" else fresh}
        return out
    except (handle.WorkerError, handle.WorkerDied) as e:
        raise UsageError(f"the predictor of {spec.name} failed: {inference._one_line(str(e), 'failed')}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


# The formats whose eval inputs a fresh set can stand in for, and how it is laid out as them
FRESH_VIEWS = {data_formats.ImagenetFolders: lambda name, original, data_root, derived: _fresh_folders(name, original, data_root),
               data_formats.CifarPickle: _fresh_batch}
