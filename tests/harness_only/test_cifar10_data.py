"""CIFAR-10 data: the manifest, the restricted pickle reader, the tarball fetch and the loaders.

Everything runs on the tiny fixture of tests/cifar10_fixture.py, in the official format;
downloads are served from 127.0.0.1 and its checksums registered through
$DAWNBENCH_DATASETS_MANIFEST, so no test needs the network.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import pickletools
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from cifar10_fixture import (
    LABEL_NAMES,
    MEMBER_DIR,
    TARBALL_NAME,
    Py2Pickler,
    fixture_manifest,
    md5_file,
    py2_pickle,
    write_cifar10_batches,
    write_cifar10_tarball,
)
from conftest import REPO

import common.loaders as cds
import dawnbench.fetch as fetcher
from dawnbench import cli
from harness import datasets as hds
from harness.datasets import DatasetError
from harness.eval_labels import load_eval_labels

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too

NAME = "cifar10"
FETCH_COMMAND = "dawnbench data fetch cifar10"
README = (REPO / "README.md").read_text()
FILES = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch", "batches.meta"]


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch):
    for var in ("DAWNBENCH_DATA", "DAWNBENCH_CIFAR10_URL", hds.MANIFEST_ENV):
        monkeypatch.delenv(var, raising=False)


def batches_dir(root: Path) -> Path:
    return root / "cifar10" / MEMBER_DIR


def raw_batch(path: Path) -> dict:
    """A batch as the official loading snippet reads it (plain pickle: fixture files only)."""
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


def all_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def use_manifest(monkeypatch, path: Path, **kw) -> Path:
    fixture_manifest(path, **kw)
    monkeypatch.setenv(hds.MANIFEST_ENV, str(path))
    return path


# --- the manifest -------------------------------------------------------------

def test_manifest_has_the_official_checksums():
    entry = hds.manifest(NAME)
    assert entry["dir"] == "cifar10" and entry["subdir"] == MEMBER_DIR
    assert entry["fetch_command"] == FETCH_COMMAND
    assert entry["eval_labels"] == "test_batch" and entry["format"] == "cifar-pickle"
    assert entry["archive"] == {
        "name": TARBALL_NAME,
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "md5": "c58f30108f718f92721af3b95e74349a",
        "extras": ["readme.html"],
    }
    assert {f: spec["md5"] for f, spec in entry["files"].items()} == {
        "data_batch_1": "c99cafc152244af753f735de768cd75f",
        "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
        "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
        "data_batch_4": "634d18415352ddfa80567beed471001a",
        "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
        "test_batch": "40351d587109b95175f43aff81a1287e",
        "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
    }
    assert entry["splits"] == {"train": FILES[:5], "test": ["test_batch"]}
    assert set(hds.dataset_names()) >= {"cifar10", "fashion-mnist"}


def test_override_manifest_is_read_at_call_time(tmp_path, monkeypatch):
    official = hds.manifest(NAME)["files"]["test_batch"]["md5"]
    first = use_manifest(monkeypatch, tmp_path / "a.toml", md5s={"test_batch": "1" * 32})
    assert hds.manifest(NAME)["files"]["test_batch"] == {"md5": "1" * 32}
    assert hds.manifest("fashion-mnist") == hds._builtin_manifests()["fashion-mnist"]  # others untouched

    use_manifest(monkeypatch, tmp_path / "b.toml", md5s={"test_batch": "2" * 32})
    assert hds.manifest(NAME)["files"]["test_batch"] == {"md5": "2" * 32}

    fixture_manifest(first, md5s={"test_batch": "3" * 32, "data_batch_1": "4" * 32})  # same path, new content
    monkeypatch.setenv(hds.MANIFEST_ENV, str(first))
    assert hds.manifest(NAME)["files"]["test_batch"] == {"md5": "3" * 32}

    monkeypatch.delenv(hds.MANIFEST_ENV)
    assert hds.manifest(NAME)["files"]["test_batch"]["md5"] == official


def test_override_manifest_errors_name_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(hds.MANIFEST_ENV, str(tmp_path / "absent.toml"))
    with pytest.raises(DatasetError, match=hds.MANIFEST_ENV):
        hds.manifest(NAME)
    (tmp_path / "bad.toml").write_text("[cifar10\n")
    monkeypatch.setenv(hds.MANIFEST_ENV, str(tmp_path / "bad.toml"))
    with pytest.raises(DatasetError, match=hds.MANIFEST_ENV):
        hds.manifest(NAME)
    (tmp_path / "unchecked.toml").write_text(
        '[cifar10]\ndir = "c"\neval_labels = "t"\nfetch_command = "x"\nfiles = { t = { size = 3 } }\n'
    )
    monkeypatch.setenv(hds.MANIFEST_ENV, str(tmp_path / "unchecked.toml"))
    with pytest.raises(DatasetError, match="no checksum"):
        hds.manifest(NAME)


def test_every_checksum_given_is_checked(cifar10_root, tmp_path, monkeypatch):
    path = batches_dir(cifar10_root) / "test_batch"
    md5 = md5_file(path)
    sha256 = hds.sha256_file(path)
    for spec, ok in [({"md5": md5}, True), ({"sha256": sha256}, True), ({"md5": md5, "sha256": sha256}, True),
                     ({"md5": md5, "sha256": "0" * 64}, False), ({"md5": "0" * 32, "sha256": sha256}, False)]:
        assert (hds.file_matches(path, spec) is None) == ok, spec
    assert hds.md5_file(path) == md5


# --- the fixture ----------------------------------------------------------------

def test_fixture_is_in_the_official_format(cifar10_root):
    directory = batches_dir(cifar10_root)
    assert sorted(p.name for p in directory.iterdir()) == sorted(FILES + ["readme.html"])
    for i, filename in enumerate(FILES[:6]):
        raw = (directory / filename).read_bytes()
        # Python 2 cPickle, protocol 2: only the numpy globals, strings as BINSTRING, no _codecs.
        ops = list(pickletools.genops(raw))
        assert ops[0][0].name == "PROTO" and ops[0][1] == 2
        globals_ = {arg for op, arg, _ in ops if op.name == "GLOBAL"}
        assert globals_ == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}
        batch = raw_batch(directory / filename)
        assert set(batch) == {b"batch_label", b"labels", b"data", b"filenames"}
        n = 50 if filename == "test_batch" else 20
        assert batch[b"batch_label"] == (b"testing batch 1 of 1" if i == 5 else f"training batch {i + 1} of 5".encode())
        assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape == (n, 3072)
        assert sorted(set(batch[b"labels"])) == list(range(10))
        assert len(batch[b"filenames"]) == n and all(isinstance(f, bytes) for f in batch[b"filenames"])
    meta = raw_batch(directory / "batches.meta")
    assert meta == {b"num_cases_per_batch": 20, b"label_names": LABEL_NAMES, b"num_vis": 3072}
    hds.verify_dataset(NAME, cifar10_root)


def test_fixture_is_deterministic(tmp_path):
    write_cifar10_batches(tmp_path / "a")
    write_cifar10_batches(tmp_path / "b")
    write_cifar10_batches(tmp_path / "c", seed=1)
    assert (tmp_path / "a" / "test_batch").read_bytes() == (tmp_path / "b" / "test_batch").read_bytes()
    assert (tmp_path / "a" / "test_batch").read_bytes() != (tmp_path / "c" / "test_batch").read_bytes()


# --- reading --------------------------------------------------------------------

def test_load_eval_labels_and_loaders(cifar10_root):
    directory = batches_dir(cifar10_root)
    test_raw = raw_batch(directory / "test_batch")

    labels = load_eval_labels(NAME, cifar10_root)
    assert labels.dtype == np.int64 and labels.shape == (50,)
    np.testing.assert_array_equal(labels, test_raw[b"labels"])

    images, test_labels = cds.load_cifar10(cifar10_root, "test")
    assert images.dtype == np.uint8 and images.shape == (50, 32, 32, 3) and images.flags.c_contiguous
    np.testing.assert_array_equal(test_labels, labels)
    np.testing.assert_array_equal(cds.load_cifar10_images(cifar10_root, "test"), images)
    # HWC: pixel (row y, column x), channel c is byte c*1024 + y*32 + x of the channel-major row.
    raw = test_raw[b"data"]
    for i, y, x, c in [(0, 0, 0, 0), (3, 5, 17, 1), (49, 31, 2, 2), (7, 2, 31, 0)]:
        assert images[i, y, x, c] == raw[i, c * 1024 + y * 32 + x]

    train_images, train_labels = cds.load_cifar10(cifar10_root, "train")
    assert train_images.shape == (100, 32, 32, 3) and train_labels.dtype == np.int64
    expected = np.concatenate([raw_batch(directory / f)[b"labels"] for f in FILES[:5]])
    np.testing.assert_array_equal(train_labels, expected)  # the five batches, in order
    first = raw_batch(directory / "data_batch_1")[b"data"].reshape(20, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(train_images[:20], first)
    assert np.bincount(train_labels).tolist() == [10] * 10

    with pytest.raises(DatasetError, match="validation"):
        cds.load_cifar10(cifar10_root, "validation")


def test_fixture_images_carry_class_signal(cifar10_root):
    """A nearest-class-mean colour classifier fitted on train must beat chance by far on test."""
    train, train_labels = cds.load_cifar10(cifar10_root, "train")
    test, test_labels = cds.load_cifar10(cifar10_root, "test")
    means = np.stack([train[train_labels == k].mean(axis=(0, 1, 2)) for k in range(10)])
    colours = test.mean(axis=(1, 2))
    predicted = np.argmin(((colours[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (predicted == test_labels).mean() > 0.8


def test_corrupted_file_is_named(cifar10_root, capsys):
    path = batches_dir(cifar10_root) / "data_batch_3"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    for check in (lambda: hds.verify_dataset(NAME, cifar10_root), lambda: cds.load_cifar10(cifar10_root, "train")):
        with pytest.raises(DatasetError, match="checksum mismatch") as err:
            check()
        message = str(err.value)
        assert str(path) in message and "md5" in message and FETCH_COMMAND in message and "\n" not in message
    assert cli.main(["data", "verify", NAME, "--data", str(cifar10_root)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == ["ok data_batch_1", "ok data_batch_2"] and str(path) in err
    assert load_eval_labels(NAME, cifar10_root).shape == (50,)  # test_batch itself is intact


def test_missing_dataset_says_how_to_fetch(tmp_path):
    for check in (
        lambda: hds.verify_dataset(NAME, tmp_path),
        lambda: load_eval_labels(NAME, tmp_path),
        lambda: cds.load_cifar10_images(tmp_path, "test"),
        lambda: cds.load_cifar10(tmp_path, "train"),
    ):
        with pytest.raises(DatasetError) as err:
            check()
        message = str(err.value)
        assert str(batches_dir(tmp_path)) in message and "not found" in message
        assert f"run: {FETCH_COMMAND} (or" in message and "file://" in message and "\n" not in message


def test_missing_file_is_named(cifar10_root):
    (batches_dir(cifar10_root) / "test_batch").unlink()
    with pytest.raises(DatasetError, match="test_batch of dataset 'cifar10' not found") as err:
        load_eval_labels(NAME, cifar10_root)
    assert FETCH_COMMAND in str(err.value)


def replace_batch(root: Path, filename: str, content: bytes, monkeypatch) -> Path:
    """Put ``content`` in place of a batch and register its md5, as if it were official."""
    path = batches_dir(root) / filename
    path.write_bytes(content)
    use_manifest(monkeypatch, root.parent / "replaced.toml", batches_dir=batches_dir(root))
    return path


class RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class CallsEval:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize("payload", [RunsCode, CallsEval])
@pytest.mark.parametrize("where", ["data", "top"])
def test_pickle_with_foreign_global_is_refused_and_not_run(cifar10_root, tmp_path, monkeypatch, payload, where):
    marker = tmp_path / "pwned"
    batch = raw_batch(batches_dir(cifar10_root) / "test_batch")
    if where == "data":
        batch[b"data"] = payload(marker)
    else:
        batch = payload(marker)
    path = replace_batch(cifar10_root, "test_batch", py2_pickle(batch), monkeypatch)
    hds.verify_file(NAME, cifar10_root, "test_batch")  # the checksum matches: only the reader stands in the way

    loads = (lambda: load_eval_labels(NAME, cifar10_root), lambda: cds.load_cifar10_images(cifar10_root, "test"))
    for load in loads:
        with pytest.raises(DatasetError, match="refusing to load") as err:
            load()
        message = str(err.value)
        assert str(path) in message and ("system" in message or "eval" in message) and "\n" not in message
    assert not marker.exists()


def test_object_arrays_are_refused(cifar10_root, monkeypatch):
    batch = raw_batch(batches_dir(cifar10_root) / "test_batch")
    batch[b"data"] = np.array([b"x", 1], dtype=object)
    path = replace_batch(cifar10_root, "test_batch", py2_pickle(batch), monkeypatch)
    with pytest.raises(DatasetError, match="object") as err:
        load_eval_labels(NAME, cifar10_root)
    assert str(path) in str(err.value)


def reshaped(batch: dict, key: bytes, value) -> dict:
    return {**batch, key: value}


@pytest.mark.parametrize("change,problem", [
    (lambda b: reshaped(b, b"data", b[b"data"][:, :3000]), r"uint8 \(N, 3072\)"),
    (lambda b: reshaped(b, b"data", b[b"data"].astype(np.int16)), r"uint8 \(N, 3072\)"),
    (lambda b: reshaped(b, b"labels", b[b"labels"][:-1]), "50 integer labels"),
    (lambda b: reshaped(b, b"labels", [10] + b[b"labels"][1:]), r"0\.\.9, found 10"),
    (lambda b: reshaped(b, b"labels", [-1] + b[b"labels"][1:]), r"0\.\.9, found -1"),
    (lambda b: {k: v for k, v in b.items() if k != b"labels"}, "no labels"),
    (lambda b: [b], "expected a dict"),
], ids=["short-rows", "int16", "few-labels", "label-10", "label-negative", "no-labels", "not-a-dict"])
def test_malformed_batches_are_named(cifar10_root, monkeypatch, change, problem):
    batch = raw_batch(batches_dir(cifar10_root) / "test_batch")
    path = replace_batch(cifar10_root, "test_batch", py2_pickle(change(batch)), monkeypatch)
    with pytest.raises(DatasetError, match=problem) as err:
        load_eval_labels(NAME, cifar10_root)
    assert str(path) in str(err.value)


def test_truncated_pickle_is_named(cifar10_root, monkeypatch):
    content = (batches_dir(cifar10_root) / "test_batch").read_bytes()
    path = replace_batch(cifar10_root, "test_batch", content[: len(content) // 2], monkeypatch)
    with pytest.raises(DatasetError, match="malformed CIFAR file") as err:
        load_eval_labels(NAME, cifar10_root)
    assert str(path) in str(err.value)


# --- fetching from a local server -------------------------------------------------

@pytest.fixture
def tarball(tmp_path, monkeypatch) -> Path:
    """The fixture tarball, its checksums registered."""
    path = tmp_path / "served" / TARBALL_NAME
    path.parent.mkdir()
    write_cifar10_tarball(path)
    use_manifest(monkeypatch, tmp_path / "manifest.toml", tarball=path)
    return path


@pytest.fixture
def data_root(tmp_path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


def test_fetch_verify_load(http_server, tarball, data_root, capsys):
    url, requests = http_server({TARBALL_NAME: tarball.read_bytes()})
    directory = fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME)
    assert requests == [TARBALL_NAME]
    assert directory == batches_dir(data_root)
    assert all_files(data_root) == ["cifar10", f"cifar10/{MEMBER_DIR}"] + sorted(
        f"cifar10/{MEMBER_DIR}/{f}" for f in FILES + ["readme.html"])  # no tarball, no temp dir
    err = capsys.readouterr().err
    assert f"source: download {url}{TARBALL_NAME}" in err and "ready in" in err

    assert cli.main(["data", "verify", NAME, "--data", str(data_root)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"ok {f}" for f in FILES]
    assert hds.verify_dataset(NAME, data_root) == [directory / f for f in FILES]

    with tarfile.open(tarball) as tar:
        test_raw = pickle.load(tar.extractfile(f"{MEMBER_DIR}/test_batch"), encoding="bytes")
    images, labels = cds.load_cifar10(data_root, "test")
    assert images.shape == (50, 32, 32, 3) and images.dtype == np.uint8 and labels.dtype == np.int64
    assert images[4, 9, 21, 2] == test_raw[b"data"][4, 2 * 1024 + 9 * 32 + 21]
    np.testing.assert_array_equal(load_eval_labels(NAME, data_root), test_raw[b"labels"])
    assert cds.load_cifar10(data_root, "train")[0].shape == (100, 32, 32, 3)

    # Already there and valid: nothing is downloaded.
    fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME)
    assert requests == [TARBALL_NAME]
    assert "nothing to do" in capsys.readouterr().err


def test_missing_dataset_names_the_file_url_form_and_it_works(tarball, data_root, monkeypatch, capsys):
    """The missing-data line gives the README's file:// form for a tarball at hand; done as the
    line says, with the tarball's real folder for /path/to, it fetches the dataset."""
    with pytest.raises(DatasetError) as err:
        hds.check_all(NAME, data_root)
    message = str(err.value)
    match = re.search(r"(\w+)=file:///path/to/(\S+) (dawnbench data fetch \w+)\)$", message)
    assert match, message
    variable, name, command = match.groups()
    assert f"`{variable}`" in README and f"file:///path/to/{name}" in README and command == FETCH_COMMAND
    monkeypatch.setenv(variable, f"file://{tarball.parent}/{name}")
    assert cli.main(["data", "fetch", NAME, "--data", str(data_root)]) == 0
    assert f"source: download file://{tarball}" in capsys.readouterr().err
    assert hds.check_all(NAME, data_root)[0].keys() == set(FILES)


def test_url_sources_in_order(http_server, tarball, data_root, monkeypatch):
    url, requests = http_server({TARBALL_NAME: tarball.read_bytes(), f"mirror/{TARBALL_NAME}": tarball.read_bytes()})
    monkeypatch.setenv("DAWNBENCH_CIFAR10_URL", url + "mirror/")  # a base: the tarball name is appended
    fetcher.fetch(NAME, data_root / "a", progress=False)
    fetcher.fetch(NAME, data_root / "b", url_base=url, progress=False)  # the argument beats the variable
    monkeypatch.setenv("DAWNBENCH_CIFAR10_URL", url + TARBALL_NAME)
    fetcher.fetch(NAME, data_root / "c", progress=False)
    assert requests == [f"mirror/{TARBALL_NAME}", TARBALL_NAME, TARBALL_NAME]


def test_corrupted_tarball_leaves_nothing(http_server, tarball, data_root):
    content = bytearray(tarball.read_bytes())
    content[len(content) // 2] ^= 0xFF
    url, _ = http_server({TARBALL_NAME: bytes(content)})
    with pytest.raises(DatasetError, match="checksum mismatch") as err:
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)
    message = str(err.value)
    assert TARBALL_NAME in message and md5_file(tarball) in message and FETCH_COMMAND in message
    assert "\n" not in message
    assert all_files(data_root) == []


@pytest.mark.parametrize("mode", ["truncate", "overclaim"])
def test_interrupted_download_leaves_nothing(http_server, tarball, data_root, mode):
    url, _ = http_server({TARBALL_NAME: tarball.read_bytes()}, **{TARBALL_NAME: mode})
    with pytest.raises(DatasetError, match="interrupted") as err:
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=True)
    assert TARBALL_NAME in str(err.value) and FETCH_COMMAND in str(err.value)
    assert all_files(data_root) == []


def test_unreachable_and_missing_urls(http_server, tarball, data_root):
    url, _ = http_server({})
    with pytest.raises(DatasetError, match="HTTP 404"):
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)
    with pytest.raises(DatasetError, match="DAWNBENCH_CIFAR10_URL"):
        fetcher.fetch(NAME, data_root, url="http://127.0.0.1:9/" + TARBALL_NAME, progress=False)
    assert all_files(data_root) == []


def test_interrupted_extraction_leaves_nothing(http_server, tarball, data_root, monkeypatch):
    url, _ = http_server({TARBALL_NAME: tarball.read_bytes()})

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(fetcher, "file_matches", interrupted)  # after the members are written, before the move
    with pytest.raises(KeyboardInterrupt):
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)
    assert all_files(data_root) == []


def evil_tarball(path: Path, add) -> None:
    """A tarball with the fixture's files plus whatever ``add(tar)`` puts in."""
    with tarfile.open(path, "w:gz") as tar:
        good = path.parent / "good"
        write_cifar10_batches(good / MEMBER_DIR)
        tar.add(good / MEMBER_DIR, arcname=MEMBER_DIR)
        add(tar)


def add_file(name: str, content: bytes = b"evil\n", **attrs):
    def add(tar):
        info = tarfile.TarInfo(name)
        info.size = len(content)
        for key, value in attrs.items():
            setattr(info, key, value)
        tar.addfile(info, io.BytesIO(content))
    return add


def add_link(name: str, target: str, kind: bytes):
    def add(tar):
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = target
        tar.addfile(info)
    return add


@pytest.mark.parametrize("add,problem", [
    (add_file(f"{MEMBER_DIR}/../evil"), r"outside the archive \(\.\.\)"),
    (add_file("../evil"), r"outside the archive \(\.\.\)"),
    (add_file("/tmp/evil-absolute-cifar10-test"), "absolute path"),
    (add_link(f"{MEMBER_DIR}/evil", "/etc/passwd", tarfile.SYMTYPE), "is a link"),
    (add_link(f"{MEMBER_DIR}/evil", f"{MEMBER_DIR}/test_batch", tarfile.LNKTYPE), "is a link"),
    (add_file(f"{MEMBER_DIR}/evil"), "is not a file of cifar10"),
    (add_file(f"{MEMBER_DIR}/test_batch"), "appears twice"),
    (add_file(f"{MEMBER_DIR}/fifo", b"", type=tarfile.FIFOTYPE), "is not a regular file"),
], ids=["dotdot-inside", "dotdot", "absolute", "symlink", "hardlink", "stranger", "duplicate", "fifo"])
def test_unsafe_tarball_is_refused(http_server, tmp_path, data_root, monkeypatch, add, problem):
    path = tmp_path / "served" / TARBALL_NAME
    path.parent.mkdir()
    evil_tarball(path, add)
    use_manifest(monkeypatch, tmp_path / "manifest.toml", tarball=path)  # md5 "official": only the unpacker stands
    url, _ = http_server({TARBALL_NAME: path.read_bytes()})
    with pytest.raises(DatasetError, match=f"refusing to unpack {TARBALL_NAME}: member .*{problem}"):
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)
    assert all_files(data_root) == []
    assert not (tmp_path / "evil").exists() and not (data_root / "evil").exists()
    assert not Path("/tmp/evil-absolute-cifar10-test").exists()


def test_tarball_missing_a_file_is_refused(http_server, tmp_path, data_root, monkeypatch):
    path = tmp_path / "served" / TARBALL_NAME
    path.parent.mkdir()
    write_cifar10_batches(tmp_path / "src" / MEMBER_DIR)
    with tarfile.open(path, "w:gz") as tar:
        for f in FILES[:-1] + ["readme.html"]:
            tar.add(tmp_path / "src" / MEMBER_DIR / f, arcname=f"{MEMBER_DIR}/{f}")
    use_manifest(monkeypatch, tmp_path / "manifest.toml", tarball=path)
    url, _ = http_server({TARBALL_NAME: path.read_bytes()})
    with pytest.raises(DatasetError, match=f"lacks {MEMBER_DIR}/batches.meta"):
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)
    assert all_files(data_root) == []


def test_member_with_wrong_checksum_is_refused(http_server, tarball, data_root, tmp_path, monkeypatch):
    use_manifest(monkeypatch, tmp_path / "manifest.toml", tarball=tarball, md5s={"data_batch_4": "0" * 32})
    url, _ = http_server({TARBALL_NAME: tarball.read_bytes()})
    with pytest.raises(DatasetError, match=f"checksum mismatch for {MEMBER_DIR}/data_batch_4 in {TARBALL_NAME}"):
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)
    assert all_files(data_root) == []


def test_not_a_tarball_is_refused(http_server, tmp_path, data_root, monkeypatch):
    path = tmp_path / TARBALL_NAME
    path.write_bytes(gzip.compress(b"not a tar archive" * 100))
    use_manifest(monkeypatch, tmp_path / "manifest.toml", archive_md5=md5_file(path))
    url, _ = http_server({TARBALL_NAME: path.read_bytes()})
    with pytest.raises(DatasetError, match=f"cannot unpack {TARBALL_NAME}"):
        fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)
    assert all_files(data_root) == []


def test_damaged_dataset_is_replaced_whole(http_server, tarball, tmp_path, monkeypatch, capsys):
    # A dataset whose test_batch is damaged: fetch notices and swaps the whole directory.
    root = tmp_path / "data"
    write_cifar10_batches(batches_dir(root))
    (batches_dir(root) / "test_batch").write_bytes(b"damaged")
    (batches_dir(root) / "stray").write_bytes(b"left over")
    url, requests = http_server({TARBALL_NAME: tarball.read_bytes()})
    fetcher.fetch(NAME, root, url=url + TARBALL_NAME, progress=False)
    assert "present but not intact" in capsys.readouterr().err
    assert requests == [TARBALL_NAME]
    hds.verify_dataset(NAME, root)
    assert sorted(p.name for p in batches_dir(root).iterdir()) == sorted(FILES + ["readme.html"])
    assert sorted(p.name for p in (root / "cifar10").iterdir()) == [MEMBER_DIR]


def test_failed_refetch_keeps_the_previous_directory(http_server, tarball, tmp_path):
    root = tmp_path / "data"
    write_cifar10_batches(batches_dir(root))
    (batches_dir(root) / "test_batch").write_bytes(b"damaged")
    before = {p.name: p.read_bytes() for p in batches_dir(root).iterdir()}
    url, _ = http_server({TARBALL_NAME: tarball.read_bytes()}, **{TARBALL_NAME: "truncate"})
    with pytest.raises(DatasetError, match="interrupted"):
        fetcher.fetch(NAME, root, url=url + TARBALL_NAME, progress=False)
    assert {p.name: p.read_bytes() for p in batches_dir(root).iterdir()} == before
    assert sorted(p.name for p in (root / "cifar10").iterdir()) == [MEMBER_DIR]  # no temp dir left


def test_pickle_in_tarball_that_runs_code_is_fetched_but_never_run(http_server, tmp_path, data_root, monkeypatch):
    marker = tmp_path / "pwned"
    src = tmp_path / "src" / MEMBER_DIR
    write_cifar10_batches(src)
    (src / "test_batch").write_bytes(py2_pickle(RunsCode(marker)))
    path = tmp_path / TARBALL_NAME
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname=MEMBER_DIR)
    use_manifest(monkeypatch, tmp_path / "manifest.toml", tarball=path)
    url, _ = http_server({TARBALL_NAME: path.read_bytes()})
    fetcher.fetch(NAME, data_root, url=url + TARBALL_NAME, progress=False)  # checksums match: fetching never unpickles
    with pytest.raises(DatasetError, match="refusing to load .*test_batch"):
        load_eval_labels(NAME, data_root)
    assert not marker.exists()


# --- the command line ---------------------------------------------------------------

def test_cli_fetch_and_verify(http_server, tarball, data_root, monkeypatch, capsys):
    url, requests = http_server({TARBALL_NAME: tarball.read_bytes()})
    monkeypatch.setenv("DAWNBENCH_CIFAR10_URL", url + TARBALL_NAME)
    assert cli.main(["data", "fetch", "cifar10", "--data", str(data_root)]) == 0
    assert requests == [TARBALL_NAME]
    assert cli.main(["data", "verify", "cifar10", "--data", str(data_root)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"ok {f}" for f in FILES]

    (batches_dir(data_root) / "batches.meta").write_bytes(b"x")
    assert cli.main(["data", "verify", "cifar10", "--data", str(data_root)]) == 2
    err = capsys.readouterr().err
    assert "checksum mismatch" in err and "batches.meta" in err and FETCH_COMMAND in err

    assert cli.main(["data", "verify", "cifar10", "--data", str(data_root / "elsewhere")]) == 2
    assert FETCH_COMMAND in capsys.readouterr().err


def test_py2_pickler_round_trip():
    value = {b"k": [b"a" * 300, "latin", 7], b"arr": np.arange(6, dtype=np.uint8).reshape(2, 3)}
    loaded = pickle.loads(py2_pickle(value), encoding="bytes")
    assert loaded[b"k"] == [b"a" * 300, b"latin", 7]
    np.testing.assert_array_equal(loaded[b"arr"], value[b"arr"])
    assert Py2Pickler.dispatch is not pickle._Pickler.dispatch
