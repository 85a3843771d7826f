"""The harness on a prepared ImageNet: labels by WordNet id, the folder views of each role, the
blacklist left out of the score, a fixture-size eval set (unofficial), the prepared manifest and
record checked before a run, and `harness verify` recomputing all of it.

The data is a hand-made prepared tree (what `dawnbench data prepare imagenet` writes; its own tests
start from the official tars). The reference memorises: its "model" maps each training image's
sha256 to its class, and the val images that are copies of training images are the ones it gets
right; the others it gets wrong. So every accuracy here is known exactly in advance.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from harness import data_views, datasets, eval_labels, registry, runner, verify_run
from harness.sandbox import modes, uid_mode

WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331"]   # sorted

MEMORISE = '''
import hashlib
import json
from pathlib import Path

import numpy as np

from harness.reference import Reference


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Memorise(Reference):
    def setup(self, ctx):
        self.ctx, self.table = ctx, {}
        root = Path(ctx.data_root) / "imagenet"
        if ctx.trains:
            self.wnids = sorted(p.name for p in (root / "train").iterdir())
        else:
            self.files = sorted((root / "val").iterdir())

    def train_epoch(self, epoch):
        root = Path(self.ctx.data_root) / "imagenet" / "train"
        for index, wnid in enumerate(self.wnids):
            for f in sorted((root / wnid).iterdir()):
                self.table[digest(f)] = index
        return {"loss": 1.0 / epoch, "samples": len(self.table)}

    def save(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "table.json").write_text(json.dumps(self.table))

    def load(self, path):
        self.table = json.loads((Path(path) / "table.json").read_text())

    def scores(self, f):
        row = np.zeros(1000, np.float32)
        known = self.table.get(digest(f))
        if known is None:
            row[995:] = 1.0        # an unknown image: top five 995..999, wrong for every image here
        else:
            row[known] = 1.0
        return row

    def predict(self):
        return np.stack([self.scores(f) for f in self.files])

    def eval_inputs(self):
        return self.files

    def infer(self, f):
        return self.scores(f)
'''

TOML = '''task = "imagenet"
framework = "numpy"
model = "a lookup table of training images"
entry = "memorise:Memorise"
description = "memorises the training images by content"

[hyperparameters]
unused = 0

[budget]
max_epochs = 2
'''


def jpeg_bytes(seed: int) -> bytes:
    # Content only matters for its hash here: the reference never decodes an image.
    return b"\xff\xd8\xff\xe0" + hashlib.sha256(str(seed).encode()).digest() * 8 + b"\xff\xd9"


def prepare_tree(root, *, blacklist: list[int] | None = None, official: bool = False, packed=()):
    """A prepared ImageNet under root/imagenet: 6 classes x 3 training images; 10 val images, the
    first 7 copies of training images (val i is training image i of class i % 6), the last 3 unseen.
    `packed`: formats given a fake <format>/train/ and <format>/val/ (what `data prepare --format`
    adds; the harness never reads inside them). Returns (data root, val labels as class indices)."""
    d = root / "imagenet"
    for fmt in packed:
        for split in ("train", "val"):
            (d / fmt / split).mkdir(parents=True)
            (d / fmt / split / f"{split}.rec").write_bytes(f"{fmt} {split} records".encode())
    labels = []
    for c, wnid in enumerate(WNIDS):
        (d / "train" / wnid).mkdir(parents=True)
        for i in range(3):
            (d / "train" / wnid / f"{wnid}_{i}.JPEG").write_bytes(jpeg_bytes(100 * c + i))
    (d / "val").mkdir()
    for i in range(10):
        c = i % len(WNIDS)
        body = jpeg_bytes(100 * c + i // len(WNIDS)) if i < 7 else jpeg_bytes(10_000 + i)
        (d / "val" / f"ILSVRC2012_val_{i + 1:08d}.JPEG").write_bytes(body)
        labels.append(c)
    (d / "val_labels.txt").write_text("".join(f"{WNIDS[c]}\n" for c in labels))
    (d / "synsets.txt").write_text("".join(f"{w}\n" for w in WNIDS))
    if blacklist:
        (d / "blacklist.txt").write_text("".join(f"{i}\n" for i in blacklist))
    (d / "dawnbench-prepared.json").write_text(json.dumps(
        {"format": "dawnbench-imagenet-1", "official": official,
         "unofficial_reasons": [] if official else ["a hand-made test tree"],
         "packed": {fmt: {"files": {"val": ["val/..."]}} for fmt in packed}}))
    datasets.write_prepared_manifest(d)
    return root, np.array(labels)


def fixture_manifest(tmp_path, root, blacklist_count: int = 3):
    """The [imagenet] entry with this tree's label-file checksums and blacklist size."""
    entry = datasets.manifest("imagenet")
    d = root / "imagenet"
    lines = [f'[imagenet]\ndir = "imagenet"\nformat = "imagenet-folders"\nfetch_command = "{entry["fetch_command"]}"',
             'eval_labels = "val_labels.txt"\nclasses = "synsets.txt"\nrecord = "dawnbench-prepared.json"',
             '[imagenet.splits]\ntrain = { dir = "train" }\ntest = { dir = "val" }',
             f'[imagenet.blacklist]\nfile = "blacklist.txt"\ncount = {blacklist_count}',
             '[imagenet.files]']
    lines += [f'"{f}" = {{ sha256 = "{datasets.sha256_file(d / f)}" }}' for f in ("val_labels.txt", "synsets.txt")]
    path = tmp_path / "datasets-imagenet.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def tree(tmp_path, monkeypatch):
    def make(**kwargs):
        root, labels = prepare_tree(tmp_path / "data", **kwargs)
        monkeypatch.setenv(datasets.MANIFEST_ENV, str(fixture_manifest(tmp_path, root)))
        return root, labels
    return make


@pytest.fixture
def spec(tmp_path, monkeypatch):
    ref = tmp_path / "references" / "imagenet-memorise"
    ref.mkdir(parents=True)
    (ref / "memorise.py").write_text(MEMORISE)
    (ref / "reference.toml").write_text(TOML)
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(ref.parent))
    return registry.load_spec("imagenet-memorise")


def test_labels_are_indices_in_sorted_wnid_order(tree):
    root, labels = tree()
    assert eval_labels.load_eval_labels("imagenet", root).tolist() == labels.tolist()


def test_the_label_files_are_checked_against_the_manifest(tree):
    root, _ = tree()
    (root / "imagenet" / "val_labels.txt").write_text(f"{WNIDS[0]}\n" * 10)     # every image class 0
    with pytest.raises(datasets.DatasetError, match="checksum mismatch"):
        eval_labels.load_eval_labels("imagenet", root)


def test_the_official_entry_names_tfds_label_lists():
    entry = datasets.manifest("imagenet")
    assert entry["files"]["val_labels.txt"]["sha256"].startswith("313fc3f2")
    assert entry["files"]["synsets.txt"]["sha256"].startswith("70002b0f")
    assert entry["blacklist"]["count"] == 1762


def test_each_role_sees_one_folder_and_no_label(tree, tmp_path):
    root, _ = tree()
    train = data_views.view_files("imagenet", root, data_views.TRAIN, tmp_path / "derived")
    predict = data_views.view_files("imagenet", root, data_views.PREDICT, tmp_path / "derived")
    assert [(str(s.relative_to(root)), r) for s, r in train] == [("imagenet/train", "imagenet/train")]
    assert [(str(s.relative_to(root)), r) for s, r in predict] == [("imagenet/val", "imagenet/val")]
    assert [(role, r) for role, _, r in data_views.folder_views("imagenet", root)] == [
        ("train", "imagenet/train"), ("predict", "imagenet/val")]
    assert data_views.folder_views("fashion-mnist", root) == []


def test_packed_folders_go_to_their_role_and_nothing_else_does(tree, tmp_path):
    root, _ = tree(packed=("recordio", "tfrecord"))
    d = root / "imagenet"
    (d / "other" / "val").mkdir(parents=True)          # not a packed format: never shown
    train = data_views.view_files("imagenet", root, data_views.TRAIN, tmp_path / "derived")
    predict = data_views.view_files("imagenet", root, data_views.PREDICT, tmp_path / "derived")
    assert [r for _, r in train] == ["imagenet/train", "imagenet/recordio/train", "imagenet/tfrecord/train"]
    assert [r for _, r in predict] == ["imagenet/val", "imagenet/recordio/val", "imagenet/tfrecord/val"]
    assert all(s == root / r for s, r in train + predict)
    # The predictor never sees a train record, and neither role the label files or the record.
    assert not any("train" in r for _, r in predict) and not any(r.endswith("val") for _, r in train)
    assert {r for _, _, r in data_views.folder_views("imagenet", root)} == {r for _, r in train + predict}
    assert [(role, r) for role, _, r in data_views.folder_views("imagenet", root) if "recordio" in r] == [
        ("train", "imagenet/recordio/train"), ("predict", "imagenet/recordio/val")]


def test_a_packed_format_without_its_val_folder_shows_only_its_train(tree, tmp_path):
    root, _ = tree(packed=("recordio",))
    shutil.rmtree(root / "imagenet" / "recordio" / "val")
    assert [r for _, r in data_views.view_files("imagenet", root, data_views.PREDICT, tmp_path)] == ["imagenet/val"]
    assert [r for _, r in data_views.view_files("imagenet", root, data_views.TRAIN, tmp_path)] == [
        "imagenet/train", "imagenet/recordio/train"]


def test_a_run_on_a_packed_tree_checks_the_packed_files_too(spec, tree, tmp_path):
    root, _ = tree(packed=("recordio",))
    assert run(spec, root, tmp_path)["history"]      # the workers start with the packed folders bound
    (root / "imagenet" / "recordio" / "val" / "val.rec").write_bytes(b"changed")
    with pytest.raises(datasets.DatasetError, match="does not match its manifest"):
        datasets.check_prepared("imagenet", root)


def test_a_changed_image_fails_the_prepared_manifest(tree):
    root, _ = tree()
    (root / "imagenet" / "val" / "ILSVRC2012_val_00000003.JPEG").write_bytes(b"x")
    with pytest.raises(datasets.DatasetError, match="does not match its manifest.*of another size"):
        datasets.check_prepared("imagenet", root)


def test_an_unprepared_folder_names_the_prepare_command(tree):
    root, _ = tree()
    (root / "imagenet" / datasets.PREPARED_MANIFEST).unlink()
    with pytest.raises(datasets.DatasetError, match="not prepared.*dawnbench data prepare imagenet"):
        datasets.check_prepared("imagenet", root)


def test_a_blacklist_of_the_wrong_size_is_refused(tree):
    root, _ = tree(blacklist=[1, 2])
    with pytest.raises(datasets.DatasetError, match="expected 3 distinct"):
        eval_labels.load_blacklist("imagenet", root)


def run(spec, root, tmp_path):
    return runner.run(spec, dict(spec.hyperparameters), runner.RunOptions(
        threshold=0.9, results_root=tmp_path / "results", data_root=root, progress=False))


DECODED_AHEAD = '''

class DecodedAhead(Memorise):
    """Decodes every image in eval_inputs(), before the clock, and hands each timed request the result, as
    the PyTorch and TensorFlow ImageNet references did: their latency left the JPEG decode out. Its "decode"
    is the file's digest; infer() knows an image only from the file's own bytes."""

    def setup(self, ctx):
        if ctx.serves:          # the timed server: the model only, no task file
            self.ctx, self.table = ctx, {}
        else:
            super().setup(ctx)

    def eval_inputs(self):
        return [np.frombuffer(hashlib.sha256(Path(f).read_bytes()).digest(), np.uint8) for f in self.files]

    def infer(self, example):
        row = np.zeros(1000, np.float32)
        known = self.table.get(hashlib.sha256(example).hexdigest()) if isinstance(example, bytes) else None
        if known is None:
            row[995:] = 1.0
        else:
            row[known] = 1.0
        return row
'''


def test_an_imagenet_latency_is_timed_from_the_image_file(tree, tmp_path, monkeypatch):
    """DAWNBench's inference latency is per image from its file. The timed request carried whatever the
    predictor's eval_inputs() prepared before the clock (a decoded crop), so the decode was never timed.
    Now the harness reads each val file itself and the request carries its bytes: a reference that
    decoded ahead gets the file, and its server (which holds no task file) decodes inside the clock."""
    from harness import inference
    root, labels = tree()
    ref = tmp_path / "references" / "imagenet-decoded-ahead"
    ref.mkdir(parents=True)
    (ref / "memorise.py").write_text(MEMORISE + DECODED_AHEAD)
    (ref / "reference.toml").write_text(TOML.replace("memorise:Memorise", "memorise:DecodedAhead"))
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(ref.parent))
    model = tmp_path / "model"
    model.mkdir()
    train = root / "imagenet" / "train"
    (model / "table.json").write_text(json.dumps({hashlib.sha256(f.read_bytes()).hexdigest(): c
                                                  for c, wnid in enumerate(WNIDS) for f in (train / wnid).iterdir()}))
    report = inference.infer(registry.load_spec("imagenet-decoded-ahead"), model, {"unused": 0}, data_root=root,
                             warmup=1, out_dir=tmp_path / "infer", progress=False, threshold=0.01)
    assert report["items"] == 10
    assert report["top1"] == pytest.approx(0.7)      # the 7 val images that are training images, known by their bytes
    assert report.get("example") == inference.EXAMPLE_FILE
    assert json.loads((tmp_path / "infer" / "inference.json").read_text())["example"] == inference.EXAMPLE_FILE


def test_a_run_scores_every_val_image_and_is_unofficial_at_fixture_size(spec, tree, tmp_path):
    root, _ = tree()
    result = run(spec, root, tmp_path)
    # 7 of 10 val images were seen in training: top-1 = top-5 = 0.7 < 0.9, so the run goes on to its budget.
    assert result["status"] == "DNC" and [h["top5"] for h in result["history"]] == [0.7, 0.7]
    assert result["eval_examples"] == 10 and result["usedBlacklist"] is False
    assert not result["official"]
    assert any("10 examples, not the 50000" in r for r in result["unofficial_reasons"])
    assert any("prepared from unverified files (a hand-made test tree)" in r for r in result["unofficial_reasons"])
    assert verify_run.verify(root.parent / "results" / "imagenet-memorise" / result["run_id"], root).verified


def test_the_blacklist_is_left_out_of_the_score_and_verified(spec, tree, tmp_path):
    root, _ = tree(blacklist=[8, 9, 10])        # the three val images no training image matches
    result = run(spec, root, tmp_path)
    assert result["status"] == "converged" and result["history"][0]["top5"] == 1.0
    assert result["eval_examples"] == 7 and result["usedBlacklist"] is True
    # No official sha256 of the blacklist is known: any 1,762 indices would pass the count, so not official.
    assert any("blacklist cannot be proven official" in r for r in result["unofficial_reasons"])
    assert result["provenance"]["datasets"]["imagenet"]["blacklist.txt"]["sha256"] == datasets.sha256_file(
        root / "imagenet" / "blacklist.txt")
    run_dir = tmp_path / "results" / "imagenet-memorise" / result["run_id"]
    events = [json.loads(line.split(" ", 1)[1]) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [(e["value"], e["metadata"]["dropped"]) for e in events if e["key"] == "eval_samples"] == [(7, 3)]
    assert verify_run.verify(run_dir, root).verified
    # Verified on a machine without the blacklist, the score cannot be recomputed: not verified, and it says why.
    (root / "imagenet" / "blacklist.txt").unlink()
    report = verify_run.verify(run_dir, root)
    assert not report.verified and "without the imagenet blacklist" in report.labels_problem


# ---- in a container (uid mode): the launcher's per-role mounts, never a copy of 140 GB -------------

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="uid mode gives folders to other uids: it needs root")


@pytest.fixture(params=[(), ("recordio",)], ids=["folders", "packed"])
def role_mounts(tree, monkeypatch, request):
    """What `dawnbench.containers.run` and the reference's Dockerfile make: each role's folders mounted
    under ROLE_MOUNTS/<role>/, a folder that only that role's uid may enter (here copies stand in
    for Docker's read-only binds)."""
    root, _ = tree(packed=request.param)
    mounts = Path(tempfile.mkdtemp(prefix="dawnbench-views-"))
    os.chmod(mounts, 0o755)
    for role, source, relative in data_views.folder_views("imagenet", root):
        shutil.copytree(source, mounts / role / relative)
        group = uid_mode.role_groups()[role]      # as the Dockerfile: the role's group may enter
        os.chown(mounts / role, group, group)
        os.chmod(mounts / role, 0o750)
    monkeypatch.setattr(uid_mode, "ROLE_MOUNTS", mounts)
    yield root, mounts
    shutil.rmtree(mounts, ignore_errors=True)


def as_uid(uid: int, group: int, *command: str) -> subprocess.CompletedProcess:
    """`command` as a worker of uid mode runs: its uid, and its role's group beside its own."""
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={group}", *command],
                          capture_output=True, text=True)


@root_only
def test_each_role_uid_enters_its_own_mount_only(role_mounts):
    _, mounts = role_mounts
    uids, groups = uid_mode.uid_mode_uids(), uid_mode.role_groups()
    train, predict = (uids["train"], groups["train"]), (uids["predict"], groups["predict"])
    assert as_uid(*train, "ls", str(mounts / "train/imagenet/train")).stdout.split() == WNIDS
    assert as_uid(*predict, "ls", str(mounts / "predict/imagenet/val")).returncode == 0
    assert "Permission denied" in as_uid(*predict, "ls", str(mounts / "train/imagenet/train")).stderr
    assert "Permission denied" in as_uid(*train, "ls", str(mounts / "predict/imagenet/val")).stderr
    # another slot's trainer (another rank, another run) enters through the group as well
    assert as_uid(groups["train"] + 2 * uid_mode.UID_SLOTS, groups["train"], "ls",
                  str(mounts / "train/imagenet/train")).stdout.split() == WNIDS


@pytest.fixture
def no_interpreter(monkeypatch):
    """What a worker sees is laid out before its process starts; the process itself is not needed
    here (and its uid may not reach this interpreter before .ci/run opens the way for it)."""
    monkeypatch.setattr(sys, "executable", shutil.which("true"))


@root_only
def test_a_uid_mode_worker_sees_the_mount_not_a_copy(spec, role_mounts, tmp_path, no_interpreter):
    root, mounts = role_mounts
    packed = (root / "imagenet" / "recordio").is_dir()
    for role, split in (("train", "train"), ("predict", "val")):
        worker, seen = runner.start_worker(role, spec, modes.Isolation("uid"), data_root=root,
                                           derived=tmp_path / "derived", snapshots=None)
        try:
            relatives = [f"imagenet/{split}"] + ([f"imagenet/recordio/{split}"] if packed else [])
            for relative in relatives:
                link = Path(seen["data_root"]) / relative
                assert link.is_symlink() and os.readlink(link) == str(mounts / role / relative)
            assert sorted(os.listdir(Path(seen["data_root"]) / "imagenet")) == sorted(["recordio"] * packed + [split])
            if packed:
                assert os.listdir(Path(seen["data_root"]) / "imagenet" / "recordio") == [split]
        finally:
            worker.kill()


@root_only
def test_without_a_mount_a_uid_mode_worker_gets_a_copy(spec, tree, tmp_path, no_interpreter):
    root, _ = tree()
    worker, seen = runner.start_worker("predict", spec, modes.Isolation("uid"), data_root=root,
                                       derived=tmp_path / "derived", snapshots=None)
    try:
        val = Path(seen["data_root"]) / "imagenet" / "val"
        assert not val.is_symlink() and sorted(os.listdir(val)) == sorted(os.listdir(root / "imagenet" / "val"))
        assert val.stat().st_uid == uid_mode.uid_mode_uids()["predict"]
    finally:
        worker.kill()


def test_the_dockerfiles_make_the_role_mounts_for_the_sandbox_groups():
    """Every image that makes the role folders makes them alike: each given to its role's base uid
    and group, entered by that group (every slot's worker of the role: harness.sandbox)."""
    files = [f for f in (Path(__file__).parent.parent / "references").glob("*/Dockerfile*")
             if str(uid_mode.ROLE_MOUNTS) in f.read_text()]
    assert len(files) >= 6, files
    for file in files:
        text = file.read_text()
        for role, uid in uid_mode.IMAGE_UIDS.items():
            assert f"chown {uid}:{uid} {uid_mode.ROLE_MOUNTS}/{role}" in text, file
        assert f"chmod 0750 {uid_mode.ROLE_MOUNTS}/*" in text, file
