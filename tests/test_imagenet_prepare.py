"""`dawnbench data prepare imagenet`: the official tars into the prepared dataset, on a tiny fixture
in the official formats (tests/imagenet_fixture.py), and the label files byte for byte against
tensorflow-datasets' for the real devkit's content."""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import random
import tarfile
from pathlib import Path

import pytest
from conftest import REPO
from imagenet_fixture import (
    DEVKIT,
    NON_LEAVES,
    TRAIN_TAR,
    VAL_TAR,
    devkit_bytes,
    fixture_manifest,
    jpeg,
    tar_bytes,
    write_imagenet_fixture,
)
from PIL import Image

from dawnbench import prepare_imagenet
from dawnbench.cli import main
from harness import cli as harness_cli
from harness import datasets
from harness.datasets import DatasetError, verify_prepared

OFFICIAL_SHA256 = {"val_labels.txt": "313fc3f23c864dde9183c9a368809065765dd1b657a6904fded44e3e46d34604",
                   "synsets.txt": "70002b0ff5de60a3a17a82dbfcff291931f96225ddf941ad2e182fc39e183d15"}


@pytest.fixture
def fixture(tmp_path):
    return write_imagenet_fixture(tmp_path / "files")


def run_prepare(capsys, fixture, root, *extra) -> tuple[int, str]:
    code = main(["data", "prepare", "imagenet", "--from", str(fixture.folder), "--data", str(root), *extra])
    return code, capsys.readouterr().err


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("dawnbench: error:")]
    assert len(lines) == 1, err
    return lines[0]


def override(tmp_path, monkeypatch, fixture=None, **kwargs) -> None:
    path = fixture_manifest(tmp_path / "override.toml", fixture, **kwargs)
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(path))


def all_sources(fixture) -> dict:
    return {name: {"md5": md5, "size": (fixture.folder / name).stat().st_size} for name, md5 in fixture.md5s.items()}


def files_under(directory: Path) -> dict[str, int]:
    """{relative path: mtime_ns} of every file."""
    return {p.relative_to(directory).as_posix(): p.stat().st_mtime_ns for p in sorted(directory.rglob("*"))
            if p.is_file()}


# --- the result ------------------------------------------------------------------------------------

def test_prepare_end_to_end_through_the_cli(capsys, fixture, tmp_path):
    root = tmp_path / "data"
    code, err = run_prepare(capsys, fixture, root, "--allow-unverified")
    assert code == 0, err
    target = root / "imagenet"
    verified = verify_prepared(target, name="imagenet")
    # 14 train + 12 val images, the two label files and the record: the manifest lists them all
    assert verified["count"] == fixture.train_count + len(fixture.val) + 3

    assert sorted(p.name for p in target.iterdir()) == sorted(
        ["train", "val", "val_labels.txt", "synsets.txt", "dawnbench-prepared.json", "dawnbench-manifest.json"])
    assert sorted(os.listdir(target / "val")) == sorted(fixture.val)                 # flat: no class folders
    assert all((target / "val" / name).is_file() for name in fixture.val)
    assert sorted(os.listdir(target / "train")) == fixture.wnids
    for wnid, files in fixture.train.items():
        assert sorted(os.listdir(target / "train" / wnid)) == sorted(files)

    assert (target / "synsets.txt").read_bytes() == fixture.labels_bytes()["synsets.txt"]
    assert (target / "val_labels.txt").read_bytes() == fixture.labels_bytes()["val_labels.txt"]

    record = json.loads((target / "dawnbench-prepared.json").read_text())
    assert record["format"] == "dawnbench-imagenet-1" and record["official"] is False
    assert len(record["unofficial_reasons"]) == 3 and all("not the official file" in r
                                                           for r in record["unofficial_reasons"])
    assert record["counts"] == {"classes": 4, "train": fixture.train_count, "val": 12}
    assert record["converted"] == {"cmyk": fixture.cmyk, "png": fixture.png}
    assert record["blacklist"] is None
    assert {name: s["md5"] for name, s in record["sources"].items()} == fixture.md5s
    assert not any(s["official"] for s in record["sources"].values())


def test_cmyk_and_png_become_rgb_jpegs_and_the_rest_is_byte_identical(capsys, fixture, tmp_path):
    assert run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")[0] == 0
    target = tmp_path / "data" / "imagenet"
    converted = set(fixture.cmyk + fixture.png)
    for relative in converted:
        with Image.open(target / relative) as image:
            assert (image.format, image.mode) == ("JPEG", "RGB")
    for wnid, files in fixture.train.items():
        for name, data in files.items():
            if f"train/{wnid}/{name}" not in converted:
                assert (target / "train" / wnid / name).read_bytes() == data
    for name, data in fixture.val.items():
        assert (target / "val" / name).read_bytes() == data
    with Image.open(io.BytesIO(fixture.train["n04596742"]["n04596742_4225.JPEG"])) as original:
        assert original.mode == "CMYK"      # the fixture really holds what the real set holds


def test_imagenet_root_verifies_with_the_harness(imagenet_root, capsys):
    """The conftest fixture other tests use: the harness accepts its label files under the override."""
    assert harness_cli.main(["data", "verify", "imagenet", "--data", str(imagenet_root)]) == 0
    assert "ok val_labels.txt" in capsys.readouterr().out
    labels = datasets.verify_file("imagenet", imagenet_root, "val_labels.txt").read_text().split()
    assert len(labels) == 12 and set(labels) <= set(datasets.verify_file(
        "imagenet", imagenet_root, "synsets.txt").read_text().split())


def test_official_sources_give_an_official_record(capsys, fixture, tmp_path, monkeypatch):
    override(tmp_path, monkeypatch, fixture, sources=all_sources(fixture))
    code, err = run_prepare(capsys, fixture, tmp_path / "data")
    assert code == 0, err
    record = json.loads((tmp_path / "data" / "imagenet" / "dawnbench-prepared.json").read_text())
    assert record["official"] is True and record["unofficial_reasons"] == []
    assert all(s["official"] for s in record["sources"].values())


# --- refusals ---------------------------------------------------------------------------------------

def test_an_unofficial_file_is_refused_in_one_line(capsys, fixture, tmp_path):
    code, err = run_prepare(capsys, fixture, tmp_path / "data")
    assert code == 2
    line = error_line(err)
    assert DEVKIT in line and fixture.md5s[DEVKIT] in line and "fa75699e90414af021442c21a62c3abf" in line
    assert "re-download it, or pass --allow-unverified for fixtures or subsets" in line
    assert not (tmp_path / "data" / "imagenet").exists()


def test_a_tar_whose_md5_fails_after_extraction_leaves_no_usable_dataset(capsys, fixture, tmp_path, monkeypatch):
    sources = all_sources(fixture)
    sources[VAL_TAR]["md5"] = "0" * 32          # same size, other bytes: found only once it is read
    override(tmp_path, monkeypatch, fixture, sources=sources)
    code, err = run_prepare(capsys, fixture, tmp_path / "data")
    assert code == 2
    line = error_line(err)
    assert VAL_TAR in line and fixture.md5s[VAL_TAR] in line and "0" * 32 in line
    target = tmp_path / "data" / "imagenet"
    assert not (target / "dawnbench-manifest.json").exists() and not (target / "dawnbench-prepared.json").exists()
    with pytest.raises(DatasetError):
        verify_prepared(target)

    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 0, err
    record = json.loads((target / "dawnbench-prepared.json").read_text())
    assert record["official"] is False and len(record["unofficial_reasons"]) == 1
    assert VAL_TAR in record["unofficial_reasons"][0]
    assert {name: s["official"] for name, s in record["sources"].items()} == {DEVKIT: True, VAL_TAR: False,
                                                                              TRAIN_TAR: True}


def test_a_tar_of_the_wrong_size_is_refused_before_it_is_read(capsys, fixture, tmp_path, monkeypatch):
    sources = all_sources(fixture)
    sources[TRAIN_TAR]["size"] += 512
    override(tmp_path, monkeypatch, fixture, sources=sources)
    code, err = run_prepare(capsys, fixture, tmp_path / "data")
    assert code == 2
    line = error_line(err)
    assert TRAIN_TAR in line and f"expected {sources[TRAIN_TAR]['size']}" in line and "--allow-unverified" in line
    assert not (tmp_path / "data" / "imagenet").exists()


def test_a_missing_input_names_the_file(capsys, fixture, tmp_path):
    (fixture.folder / TRAIN_TAR).unlink()
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2
    line = error_line(err)
    assert f"lacks {TRAIN_TAR}" in line and VAL_TAR in line and DEVKIT in line and "must hold" in line


def test_free_space_is_checked_up_front(capsys, fixture, tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_imagenet.shutil, "disk_usage", lambda path: type("U", (), {"free": 1000})())
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2
    line = error_line(err)
    needed = (fixture.folder / TRAIN_TAR).stat().st_size + (fixture.folder / VAL_TAR).stat().st_size
    assert "not enough free space" in line and f"(1000 and {int(1.02 * needed)} bytes;" in line
    assert not (tmp_path / "data" / "imagenet").exists()


def bad_val_tar(folder: Path, kind: str) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        good = tarfile.TarInfo("ILSVRC2012_val_00000001.JPEG")
        data = jpeg(1)
        good.size = len(data)
        tar.addfile(good, io.BytesIO(data))
        info = tarfile.TarInfo({"absolute": "/etc/ILSVRC2012_val_00000002.JPEG",
                                "dotdot": "../ILSVRC2012_val_00000002.JPEG"}.get(kind, "ILSVRC2012_val_00000002.JPEG"))
        if kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif kind == "hardlink":
            info.type, info.linkname = tarfile.LNKTYPE, "ILSVRC2012_val_00000001.JPEG"
        elif kind == "fifo":
            info.type = tarfile.FIFOTYPE
        else:
            info.size = len(data)
        tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    (folder / VAL_TAR).write_bytes(out.getvalue())


@pytest.mark.parametrize("kind, why", [("absolute", "absolute path"), ("dotdot", "outside the archive"),
                                       ("symlink", "is a link"), ("hardlink", "is a link"),
                                       ("fifo", "not a regular file")])
def test_unsafe_members_are_refused(capsys, fixture, tmp_path, kind, why):
    bad_val_tar(fixture.folder, kind)
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2
    line = error_line(err)
    assert f"refusing {VAL_TAR}" in line and why in line
    assert not (tmp_path / "etc").exists() and not (tmp_path / "data" / "ILSVRC2012_val_00000002.JPEG").exists()


def test_an_unsafe_member_of_a_class_tar_is_refused(capsys, fixture, tmp_path):
    inner = tar_bytes([("../../escape.JPEG", jpeg(1))])
    (fixture.folder / TRAIN_TAR).write_bytes(tar_bytes([("n01440764.tar", inner)]))
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2
    assert "n01440764.tar" in error_line(err) and "outside the archive" in error_line(err)
    assert not list(tmp_path.rglob("escape.JPEG"))


def test_a_class_not_in_the_devkit_is_refused(capsys, fixture, tmp_path):
    (fixture.folder / TRAIN_TAR).write_bytes(tar_bytes([("n99999999.tar", tar_bytes([("n99999999_1.JPEG", jpeg(1))]))]))
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2
    assert "n99999999.tar" in error_line(err) and "of one of the devkit's 4 classes" in error_line(err)


def test_val_images_and_ground_truth_must_agree(capsys, fixture, tmp_path):
    leaves = {"n01440764": 3, "n02105855": 1, "n04596742": 4, "n07583066": 2}
    (fixture.folder / DEVKIT).write_bytes(devkit_bytes(leaves, [1] * 11))        # 11 lines for 12 images
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2
    assert "holds 12 images but the devkit's ground truth has 11 lines" in error_line(err)
    assert not (tmp_path / "data" / "imagenet" / "train").exists()           # refused before the train tar

    (fixture.folder / DEVKIT).write_bytes(devkit_bytes(leaves, [1] * 11 + [9]))   # 9: no such class
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2 and "line 12" in error_line(err) and "class ID 9" in error_line(err)


# --- resuming, re-running ---------------------------------------------------------------------------

def test_a_killed_prepare_resumes_without_rewriting_finished_images(capsys, fixture, tmp_path, monkeypatch):
    store = prepare_imagenet._Writer.store
    calls = []

    def killed_at_the_eighth(self, target, data):
        calls.append(target)
        if len(calls) == 8:                     # a half-written temp file, then the process dies
            prepare_imagenet._temp(target).write_bytes(data[:10])
            raise KeyboardInterrupt
        return store(self, target, data)

    monkeypatch.setattr(prepare_imagenet._Writer, "store", killed_at_the_eighth)
    # the Ctrl-C is one line and the status of a process killed by SIGINT (harness.errors), not a traceback
    assert main(["data", "prepare", "imagenet", "--from", str(fixture.folder), "--data", str(tmp_path / "data"),
                 "--allow-unverified"]) == 130
    monkeypatch.setattr(prepare_imagenet._Writer, "store", store)
    target = tmp_path / "data" / "imagenet"
    assert not (target / "dawnbench-manifest.json").exists()
    before = files_under(target)
    assert len(before) == 8 and any(name.endswith(".part") for name in before)   # 7 images and the temp

    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 0, err
    after = files_under(target)
    finished = {name: mtime for name, mtime in before.items() if not name.endswith(".part")}
    assert {name: after[name] for name in finished} == finished          # not rewritten
    assert not any(name.endswith(".part") for name in after)            # the temp never counts
    assert "7 already in place" in err
    verify_prepared(target, name="imagenet")


def test_a_stale_or_damaged_image_is_rewritten_and_strays_removed(capsys, fixture, tmp_path):
    assert run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")[0] == 0
    target = tmp_path / "data" / "imagenet"
    (target / "dawnbench-manifest.json").unlink()            # as after a kill in the last steps
    damaged = target / "val" / "ILSVRC2012_val_00000003.JPEG"
    damaged.write_bytes(b"\0" * damaged.stat().st_size)       # same size, other bytes
    (target / "train" / "n01440764" / "n01440764_9999.JPEG").write_bytes(b"from another source")
    assert run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")[0] == 0
    assert damaged.read_bytes() == fixture.val["ILSVRC2012_val_00000003.JPEG"]
    assert not (target / "train" / "n01440764" / "n01440764_9999.JPEG").exists()
    verify_prepared(target, name="imagenet")


def test_a_second_run_says_already_prepared(capsys, fixture, tmp_path):
    assert run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")[0] == 0
    before = files_under(tmp_path / "data" / "imagenet")
    for name in (TRAIN_TAR, VAL_TAR):
        (fixture.folder / name).unlink()     # nothing is read again: the tars may be gone by now
    code, err = run_prepare(capsys, fixture, tmp_path / "data")
    assert code == 0 and "already prepared" in err and "files verified" in err
    assert files_under(tmp_path / "data" / "imagenet") == before


# --- the blacklist ----------------------------------------------------------------------------------

def test_the_blacklist_is_checked_and_copied(capsys, fixture, tmp_path, monkeypatch):
    override(tmp_path, monkeypatch, fixture, blacklist_count=3)
    blacklist = tmp_path / "ILSVRC2014_clsloc_validation_blacklist.txt"
    blacklist.write_bytes(b"2\n5\n11\n")
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified", "--blacklist", str(blacklist))
    assert code == 0, err
    target = tmp_path / "data" / "imagenet"
    assert (target / "blacklist.txt").read_bytes() == b"2\n5\n11\n"
    record = json.loads((target / "dawnbench-prepared.json").read_text())
    assert record["blacklist"] == {"sha256": hashlib.sha256(b"2\n5\n11\n").hexdigest(), "count": 3}
    assert not any("blacklist" in reason for reason in record["unofficial_reasons"])
    assert "blacklist.txt" in {row[0] for row in json.loads((target / "dawnbench-manifest.json").read_text())["files"]}


@pytest.mark.parametrize("content, allowed, why", [
    (b"2\n5\n", False, "has 2 indices, the official one 3"),
    (b"2\n5\n13\n", True, "index 13 on line 3 is outside 1..12"),
    (b"2\n5\n0\n", True, "index 0 on line 3 is outside 1..12"),
    (b"2\n5\n5\n", True, "index 5 appears twice"),
    (b"2\n5\nseven\n", True, "line 3 is 'seven'"),
])
def test_a_wrong_blacklist_is_refused(capsys, fixture, tmp_path, monkeypatch, content, allowed, why):
    override(tmp_path, monkeypatch, fixture, blacklist_count=3)
    blacklist = tmp_path / "blacklist.txt"
    blacklist.write_bytes(content)
    extra = ["--allow-unverified"] if allowed else []
    if not allowed:   # a wrong count alone is unofficial, not impossible: the sources are official here
        override(tmp_path, monkeypatch, fixture, blacklist_count=3, sources=all_sources(fixture))
    code, err = run_prepare(capsys, fixture, tmp_path / "data", *extra, "--blacklist", str(blacklist))
    assert code == 2 and why in error_line(err)
    assert not (tmp_path / "data" / "imagenet" / "dawnbench-manifest.json").exists()


def test_a_blacklist_of_another_count_is_unofficial_with_allow_unverified(capsys, fixture, tmp_path, monkeypatch):
    override(tmp_path, monkeypatch, fixture, blacklist_count=3, sources=all_sources(fixture))
    blacklist = tmp_path / "blacklist.txt"
    blacklist.write_bytes(b"4\n")
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified", "--blacklist", str(blacklist))
    assert code == 0, err
    record = json.loads((tmp_path / "data" / "imagenet" / "dawnbench-prepared.json").read_text())
    assert record["official"] is False and record["unofficial_reasons"] == [
        "blacklist blacklist.txt has 1 indices, the official one 3"]


# --- the label files against tensorflow-datasets ----------------------------------------------------

def tfds_file(name: str) -> bytes:
    """A data file of the installed tensorflow-datasets, found without importing it (slow)."""
    spec = importlib.util.find_spec("tensorflow_datasets")
    assert spec is not None, "tensorflow-datasets==4.9.10 (requirements/test.txt) is not installed"
    return (Path(spec.submodule_search_locations[0]) / "datasets" / "imagenet2012" / name).read_bytes()


def test_label_files_are_byte_identical_to_tensorflow_datasets(tmp_path):
    """The devkit's content rebuilt from TFDS's lists (the 1,000 WNIDs under shuffled ILSVRC2012_IDs,
    non-leaf synsets beside them, the ground truth as IDs), read back by prepare's own functions."""
    tfds_labels, tfds_val = tfds_file("labels.txt"), tfds_file("validation_labels.txt")
    assert {name: hashlib.sha256(data).hexdigest() for name, data in
            (("synsets.txt", tfds_labels), ("val_labels.txt", tfds_val))} == OFFICIAL_SHA256
    wnids = tfds_labels.decode().split()
    ids = list(range(1, 1001))
    random.Random(7).shuffle(ids)
    leaves = dict(zip(wnids, ids))
    assert [leaves[w] for w in wnids] != sorted(ids)          # IDs really are not in WNID order
    ground_truth = [leaves[w] for w in tfds_val.decode().split()]
    non_leaves = {**NON_LEAVES, "n00002684": ("object", [ids[0], ids[1]])}
    (tmp_path / DEVKIT).write_bytes(devkit_bytes(leaves, ground_truth, non_leaves))

    devkit, md5, size = prepare_imagenet.read_devkit(tmp_path / DEVKIT)
    assert len(devkit.leaves) == 1000 and len(devkit.ground_truth) == 50000
    val_names = [f"ILSVRC2012_val_{i:08d}.JPEG" for i in range(50000, 0, -1)]   # tar order is not name order
    (tmp_path / "out").mkdir()
    written = prepare_imagenet.write_label_files(tmp_path / "out", devkit, val_names)
    assert {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in written.items()} == OFFICIAL_SHA256
    manifest_files = datasets.manifest("imagenet")["files"]
    assert {name: spec["sha256"] for name, spec in manifest_files.items()} == OFFICIAL_SHA256


# --- fetch, the options, the dependencies ------------------------------------------------------------

def test_fetch_imagenet_never_downloads(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("urllib.request.urlopen", lambda *a, **k: pytest.fail("fetch tried to download"))
    assert main(["data", "fetch", "imagenet", "--data", str(tmp_path / "data")]) == 2
    line = error_line(capsys.readouterr().err)
    assert "ImageNet cannot be downloaded by a program" in line
    assert "dawnbench data prepare imagenet --from DIR" in line and TRAIN_TAR in line
    reference = tmp_path / "references" / "imagenet-test-numpy"
    reference.mkdir(parents=True)
    (reference / "reference.toml").write_text('task = "imagenet"\nframework = "numpy"\nmodel = "none"\n'
                                              'entry = "none:None"\nauthor = "tests"\n')
    assert main(["data", "fetch", "--reference", "imagenet-test-numpy", "--references", str(reference.parent),
                 "--data", str(tmp_path / "data")]) == 2
    assert "cannot be downloaded" in error_line(capsys.readouterr().err)


def test_fetch_imagenet_accepts_a_prepared_copy(capsys, imagenet_root):
    assert main(["data", "fetch", "imagenet", "--data", str(imagenet_root)]) == 0
    assert "verified against its manifest" in capsys.readouterr().err
    (imagenet_root / "imagenet" / "val" / "ILSVRC2012_val_00000001.JPEG").unlink()
    assert main(["data", "fetch", "imagenet", "--data", str(imagenet_root)]) == 2
    line = error_line(capsys.readouterr().err)
    assert "not prepared or not whole" in line and "1 missing" in line


USAGE = ("dawnbench data prepare imagenet --from DIR [--data ROOT] [--format folders|recordio|tfrecord] "
         "[--python PATH] [--blacklist FILE] [--allow-unverified]")


@pytest.mark.parametrize("argv, expected", [
    (["data", "fetch", "cifar10", "--from", "x"], f"--from only go with data prepare: {USAGE}"),
    (["data", "verify", "imagenet", "--allow-unverified"], f"--allow-unverified only go with data prepare: {USAGE}"),
    (["data", "prepare", "cifar10", "--from", "x"], "only imagenet is prepared from files you bring; cifar10 is "
                                                    "fetched: dawnbench data fetch cifar10"),
    (["data", "prepare", "imagenet"], f"needs --from DIR, the folder with the official files: {USAGE}"),
    (["data", "verify", "imagenet", "--format", "recordio"], f"--format only go with data prepare: {USAGE}"),
    (["data", "fetch", "imagenet", "--python", "python3"], f"--python only go with data prepare: {USAGE}"),
    (["data", "prepare", "imagenet", "--from", "x", "--format", "lmdb"],
     f"--format 'lmdb' is not one of folders, recordio, tfrecord: {USAGE}"),
    (["data", "prepare", "imagenet", "--from", "x", "--python", "python3"],
     f"--python is the interpreter that packs: it goes with --format recordio|tfrecord: {USAGE}"),
    (["data", "prepare", "imagenet", "--from", "x", "--format", "recordio", "--python", "/no/such/python"],
     "--python /no/such/python: no such executable; give the Python of an environment with mxnet, "
     "e.g. .venv/imagenet-resnet152-mxnet/bin/python"),
])
def test_prepare_options_in_one_usage_line(capsys, argv, expected):
    assert main(argv) == 2
    assert error_line(capsys.readouterr().err).endswith(expected)


def test_missing_dependencies_are_named_in_one_line(capsys, fixture, tmp_path, monkeypatch):
    real = importlib.import_module

    def without_scipy(name, *args):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(prepare_imagenet.importlib, "import_module", without_scipy)
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified")
    assert code == 2
    line = error_line(err)
    assert "needs scipy" in line and "make tools" in line and "scipy==1.17.1 pillow==13.0.0" in line


def test_the_pins_named_are_the_pins_in_requirements():
    pins = (REPO / "requirements" / "tools.txt").read_text().splitlines()
    assert set(prepare_imagenet.PINS.values()) <= set(pins)
    for pin in prepare_imagenet.PINS.values():
        name, version = pin.split("==")
        assert importlib.metadata.version(name) == version


@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
@pytest.mark.parametrize("options", [{}, {"progressive": True}, {"exif": b"Exif\0\0" + b"\0" * 64,
                                                                 "icc_profile": b"\0" * 300}])
def test_cmyk_is_found_from_the_jpeg_header_as_pillow_finds_it(mode, options):
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg(3, mode))).save(out, "JPEG", **options)
    with Image.open(io.BytesIO(out.getvalue())) as image:
        assert image.mode == mode
    assert prepare_imagenet._kind(out.getvalue()) == ("cmyk" if mode == "CMYK" else None)


# --- --format recordio|tfrecord: the packer in the framework's own environment ------------------------

MXNET_PYTHON = REPO / ".venv" / "imagenet-resnet152-mxnet" / "bin" / "python"

# A stand-in for a framework's Python: `-m dawnbench.pack_recordio DIR` -> what a packer does (a
# progress line, recordio/train and recordio/val, the JSON summary last), or its one-line error when
# $FAKE_PACKER_FAILS is set. It checks the PYTHONPATH it gets holds the dawnbench package only.
FAKE_PYTHON = """#!/bin/sh
[ "$1" = -m ] && [ "$2" = dawnbench.pack_recordio ] || { echo "unexpected arguments: $*" >&2; exit 3; }
[ -f "$PYTHONPATH/dawnbench/pack_recordio.py" ] && [ "$(ls "$PYTHONPATH" | tr '\n' ' ')" = "dawnbench harness " ] || exit 4
if [ -n "$FAKE_PACKER_FAILS" ]; then echo "recordio: starting" >&2; echo "dawnbench: error: the fake packer fails" >&2; exit 2; fi
echo "recordio: train 1/1" >&2
mkdir -p "$3/.recordio.partial/train" "$3/.recordio.partial/val"
echo records > "$3/.recordio.partial/train/train.rec"; echo records > "$3/.recordio.partial/val/val.rec"
mv "$3/.recordio.partial" "$3/recordio"
echo '{"format": "recordio", "shuffle_seed": 0, "counts": {"train": 14, "val": 12}}'
"""


@pytest.fixture
def fake_python(tmp_path):
    path = tmp_path / "fake-python"
    path.write_text(FAKE_PYTHON)
    path.chmod(0o755)
    return path


def test_prepare_packs_with_the_given_python_and_records_it(capsys, fixture, tmp_path, fake_python):
    root = tmp_path / "data"
    code, err = run_prepare(capsys, fixture, root, "--allow-unverified", "--format", "recordio",
                            "--python", str(fake_python))
    assert code == 0, err
    target = root / "imagenet"
    assert "recordio: train 1/1" in err and "packed as recordio" in err      # the packer's progress passes through
    record = json.loads((target / "dawnbench-prepared.json").read_text())
    assert record["packed"] == {"recordio": {"format": "recordio", "shuffle_seed": 0,
                                             "counts": {"train": 14, "val": 12}}}
    # The manifest, rewritten last, lists the packed files: a change to them fails every check.
    listed = [row[0] for row in json.loads((target / "dawnbench-manifest.json").read_text())["files"]]
    assert {"recordio/train/train.rec", "recordio/val/val.rec"} <= set(listed)
    assert verify_prepared(target)["count"] == fixture.train_count + len(fixture.val) + 3 + 2
    # Run again: already prepared and packed, nothing rewritten (the fake would fail if it ran).
    before = files_under(target)
    (fixture.folder / "unused").mkdir()
    fake_python.write_text("#!/bin/sh\nexit 9\n")
    code, err = run_prepare(capsys, fixture, root, "--allow-unverified", "--format", "recordio",
                            "--python", str(fake_python))
    assert code == 0 and "already packed as recordio" in err, err
    assert files_under(target) == before


def test_a_packer_error_is_one_line_and_the_folders_stay_verified(capsys, fixture, tmp_path, fake_python,
                                                                  monkeypatch):
    root = tmp_path / "data"
    assert run_prepare(capsys, fixture, root, "--allow-unverified")[0] == 0
    monkeypatch.setenv("FAKE_PACKER_FAILS", "1")
    code, err = run_prepare(capsys, fixture, root, "--allow-unverified", "--format", "recordio",
                            "--python", str(fake_python))
    assert code == 2 and error_line(err) == "dawnbench: error: the fake packer fails"
    assert "recordio: starting" in err and "already prepared" in err
    assert "packed" not in json.loads((root / "imagenet" / "dawnbench-prepared.json").read_text())
    verify_prepared(root / "imagenet")          # the folders are still whole: a fixed pack needs no tars


def test_a_killed_pack_leaves_nothing_that_counts(capsys, fixture, tmp_path, fake_python):
    root = tmp_path / "data"
    assert run_prepare(capsys, fixture, root, "--allow-unverified")[0] == 0
    target = root / "imagenet"
    (target / ".recordio.partial" / "train").mkdir(parents=True)     # killed while writing
    (target / "recordio" / "val").mkdir(parents=True)                # killed after its rename, before the record
    code, err = run_prepare(capsys, fixture, root, "--allow-unverified", "--format", "recordio",
                            "--python", str(fake_python))
    assert code == 0, err
    assert "already prepared" in err and "left by an interrupted pack" in err    # no second read of the tars
    assert not (target / ".recordio.partial").exists() and verify_prepared(target)


def test_without_the_framework_prepare_names_make_setup(capsys, fixture, tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_imagenet, "REPO_ROOT", tmp_path / "no-repo")
    real = importlib.util.find_spec
    monkeypatch.setattr(prepare_imagenet.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mxnet" else real(name, *a))
    code, err = run_prepare(capsys, fixture, tmp_path / "data", "--allow-unverified", "--format", "recordio")
    assert code == 2
    assert error_line(err) == ("dawnbench: error: --format recordio packs with MXNet, which this environment lacks: "
                               "run `make setup REF=imagenet-resnet152-mxnet` and prepare again, or pass --python PATH")
    assert not (tmp_path / "data").exists()          # said before any image was written


def test_the_reference_environment_is_found_without_python(monkeypatch, tmp_path):
    venv = tmp_path / ".venv" / "imagenet-resnet152-mxnet" / "bin" / "python"
    venv.parent.mkdir(parents=True)
    venv.write_text("")
    monkeypatch.setattr(prepare_imagenet, "REPO_ROOT", tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(prepare_imagenet.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mxnet" else real(name, *a))
    assert prepare_imagenet.packer_python("recordio") == str(venv)
    # The harness shows each role the packed folders of these formats (it cannot import dawnbench).
    from harness import data_views
    assert set(data_views.PACKED_FORMATS) == set(prepare_imagenet.PACKERS)
    assert prepare_imagenet.PACKERS["tfrecord"] == prepare_imagenet.Packer(
        "dawnbench.pack_tfrecord", "tensorflow", "imagenet-resnet50-tensorflow")


@pytest.mark.second_env
@pytest.mark.skipif(not MXNET_PYTHON.is_file(), reason="no MXNet environment: `make test-mxnet` makes "
                                                       ".venv/imagenet-resnet152-mxnet (and tests the packing there)")
def test_prepare_recordio_end_to_end_in_the_mxnet_environment(capsys, fixture, tmp_path):
    root = tmp_path / "data"
    code, err = run_prepare(capsys, fixture, root, "--allow-unverified", "--format", "recordio",
                            "--python", str(MXNET_PYTHON))
    assert code == 0, err
    target = root / "imagenet"
    assert sorted(os.listdir(target / "recordio" / "train")) == ["names.txt", "train.idx", "train.rec"]
    assert sorted(os.listdir(target / "recordio" / "val")) == ["names.txt", "val.idx", "val.rec"]
    summary = json.loads((target / "dawnbench-prepared.json").read_text())["packed"]["recordio"]
    assert summary["counts"] == {"train": fixture.train_count, "val": len(fixture.val)}
    val_names = (target / "recordio" / "val" / "names.txt").read_text().splitlines()
    train_names = (target / "recordio" / "train" / "names.txt").read_text().splitlines()
    assert val_names == [f"val/{name}" for name in sorted(fixture.val)]
    assert sorted(train_names) == sorted(f"train/{w}/{n}" for w, files in fixture.train.items() for n in files)
    assert verify_prepared(target, full=True)["count"] == fixture.train_count + len(fixture.val) + 3 + 6
