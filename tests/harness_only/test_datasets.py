"""Datasets: the IDX reader, checksums, and every fetch source and failure mode.

The real Fashion-MNIST files come from Debian's dataset-fashion-mnist package;
downloads are served from 127.0.0.1, so no test needs the network.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import missing

import common.loaders as cds
import dawnbench.fetch as fetcher
from harness import datasets as hds
from harness.cli import main as harness_main
from harness.data_formats import count_train_examples
from harness.datasets import DatasetError
from harness.eval_labels import load_eval_labels
from harness.official_readers import read_idx

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too

NAME = "fashion-mnist"
FETCH_COMMAND = "dawnbench data fetch fashion-mnist"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FILES = list(hds.manifest(NAME)["files"])
LABELS = "t10k-labels-idx1-ubyte"  # small, so failure-mode tests stay fast


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch):
    monkeypatch.delenv("DAWNBENCH_DATA", raising=False)
    monkeypatch.delenv("DAWNBENCH_FASHION_MNIST_URL", raising=False)


def idx_bytes(array: np.ndarray, type_code: int, big_endian_dtype: str) -> bytes:
    header = struct.pack(">BBBB", 0, 0, type_code, array.ndim)
    header += struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.astype(big_endian_dtype).tobytes()


# --- read_idx ---------------------------------------------------------------

IDX_CASES = [
    (0x08, ">u1", np.arange(6, dtype=np.uint8).reshape(2, 3) * 40),
    (0x09, ">i1", np.array([-128, -1, 0, 127], dtype=np.int8)),
    (0x0B, ">i2", np.array([-32768, -2, 258, 32767, 1, 0, 7, -7], dtype=np.int16).reshape(2, 2, 2)),
    (0x0C, ">i4", np.array([-(2**31), 16909060, 2**31 - 1], dtype=np.int32)),
    (0x0D, ">f4", np.array([[1.5, -2.25], [3.0e38, np.inf]], dtype=np.float32)),
    (0x0E, ">f8", np.array([[[np.pi]], [[-1e300]]], dtype=np.float64)),
    (0x08, ">u1", np.zeros((0, 28, 28), dtype=np.uint8)),
]


@pytest.mark.parametrize(
    "type_code,big_endian,expected", IDX_CASES, ids=[f"{dt[1:]}-{a.shape}" for _, dt, a in IDX_CASES]
)
def test_read_idx_round_trip(tmp_path, type_code, big_endian, expected):
    data = idx_bytes(expected, type_code, big_endian)
    path = tmp_path / "sample-idx"
    path.write_bytes(data)
    gz_path = tmp_path / "sample-idx.gz"
    gz_path.write_bytes(gzip.compress(data))

    for source in (data, path, str(path), gz_path):
        array = read_idx(source)
        assert array.shape == expected.shape
        assert array.dtype == expected.dtype and array.dtype.isnative
        assert array.flags.writeable
        np.testing.assert_array_equal(array, expected)


def test_read_idx_bad_magic_names_file(tmp_path):
    path = tmp_path / "bad-magic-idx"
    data = bytearray(idx_bytes(np.arange(4, dtype=np.uint8), 0x08, ">u1"))
    data[0] = 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="magic") as err:
        read_idx(path)
    assert str(path) in str(err.value)


def test_read_idx_unknown_type_code(tmp_path):
    path = tmp_path / "bad-type-idx"
    data = bytearray(idx_bytes(np.arange(4, dtype=np.uint8), 0x08, ">u1"))
    data[2] = 0x0A
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="0x0A") as err:
        read_idx(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("cut,problem", [(-1, "truncated"), (+1, "trailing")])
def test_read_idx_payload_size_mismatch_names_file(tmp_path, cut, problem):
    data = idx_bytes(np.arange(12, dtype=np.int32).reshape(3, 4), 0x0C, ">i4")
    data = data[:cut] if cut < 0 else data + b"\x00" * cut
    path = tmp_path / "sized-idx"
    path.write_bytes(data)
    with pytest.raises(DatasetError, match=problem) as err:
        read_idx(path)
    assert str(path) in str(err.value)
    with pytest.raises(DatasetError, match="labelled-bytes"):
        read_idx(data, name="labelled-bytes")


def test_read_idx_truncated_header():
    data = struct.pack(">BBBB", 0, 0, 0x08, 3) + struct.pack(">i", 5)
    with pytest.raises(DatasetError, match="header truncated"):
        read_idx(data)


# --- manifest and data root -------------------------------------------------

def test_manifest_describes_fashion_mnist():
    entry = hds.manifest(NAME)
    assert entry["fetch_command"] == FETCH_COMMAND
    assert entry["eval_labels"] in entry["files"]
    assert entry["debian_package"] == "dataset-fashion-mnist"
    assert entry["url_base"].startswith("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com")
    for split in entry["splits"].values():
        assert set(split.values()) <= set(entry["files"])
    for spec in entry["files"].values():
        assert len(spec["sha256"]) == 64 and spec["size"] > 0


def test_manifest_unknown_dataset_lists_known_names():
    with pytest.raises(DatasetError, match="fashion-mnist") as err:
        hds.manifest("mnist-but-not-fashion")
    assert "mnist-but-not-fashion" in str(err.value)


_BASE = ('[fashion-mnist]\ndir = "fashion-mnist"\nfetch_command = "dawnbench data fetch fashion-mnist"\n'
         'eval_labels = "t10k-labels-idx1-ubyte"\n')


@pytest.mark.parametrize("text, says", [
    (_BASE + 'files = "oops"\n', "[fashion-mnist] files is str 'oops', not a table"),
    ("fashion-mnist = 3\n", "[fashion-mnist] is int 3, not a table"),
    (_BASE + "[fashion-mnist.files]\nt10k-labels-idx1-ubyte = 5\n", "files.t10k-labels-idx1-ubyte is int 5, not a table"),
    (_BASE + "[fashion-mnist.files]\nx = { sha256 = 5 }\n", "files.x.sha256 is int 5, not a hex digest"),
    (_BASE + '[fashion-mnist.files]\nx = { sha256 = "00", size = "big" }\n', "files.x.size is str 'big', not a whole"),
    (_BASE + 'with = "glove"\n', "[fashion-mnist] with is str 'glove', not a list of dataset names"),
    (_BASE.replace('dir = "fashion-mnist"', "dir = 5"), "[fashion-mnist] dir is int 5, not text"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "holds a number too long or arrays nested too deeply"),
    ("x = " + "9" * 5000 + "\n", "holds a number too long or arrays nested too deeply"),
])
def test_a_manifest_of_the_wrong_shape_is_one_line(tmp_path, monkeypatch, capsys, text, says):
    """Issue 47: `files = "oops"` in $DAWNBENCH_DATASETS_MANIFEST was an AttributeError wherever the key
    was read; each key the harness reads has its type checked when the file is loaded, in one line."""
    (tmp_path / "m.toml").write_text(text)
    monkeypatch.setenv(hds.MANIFEST_ENV, str(tmp_path / "m.toml"))
    with pytest.raises(DatasetError, match=None) as refused:
        hds.manifest(NAME)
    assert says in str(refused.value) and hds.MANIFEST_ENV in str(refused.value), str(refused.value)
    assert harness_main(["data", "verify", NAME, "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err, err


def test_default_data_root(monkeypatch, tmp_path):
    """$DAWNBENCH_DATA > ./data > the source checkout's data/ (the tests run from a checkout)."""
    monkeypatch.delenv("DAWNBENCH_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    assert hds.default_data_root() == Path(hds.__file__).resolve().parent.parent / "data"
    (tmp_path / "data").mkdir()
    assert hds.default_data_root() == tmp_path / "data"
    monkeypatch.setenv("DAWNBENCH_DATA", str(tmp_path))
    assert hds.default_data_root() == tmp_path
    assert hds.dataset_dir(NAME) == tmp_path / "fashion-mnist"


def test_sha256_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc" * (1 << 19))  # spans more than one 1 MiB chunk
    assert hds.sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()


# --- the real data, from Debian's package -----------------------------------

@pytest.fixture(scope="session")
def debian_dir():
    if not DEBIAN_DIR.is_dir():
        missing(f"{DEBIAN_DIR} absent: install Debian's dataset-fashion-mnist package",
                "DAWNBENCH_REQUIRE_DEBIAN_DATA")
    return DEBIAN_DIR


@pytest.fixture(scope="session")
def fetched(debian_dir, tmp_path_factory):
    """(data root, fetch's stderr): one Debian fetch shared by the read-only tests."""
    root = tmp_path_factory.mktemp("data")
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        directory = fetcher.fetch(NAME, root, debian_dir=debian_dir, allow_apt=False, progress=False)
    assert directory == root / "fashion-mnist"
    return root, log.getvalue()


@pytest.fixture(scope="session")
def gz_dir(fetched, tmp_path_factory):
    """The official files re-gzipped by us: what matters is the decompressed bytes."""
    root, _ = fetched
    out = tmp_path_factory.mktemp("served")
    for filename in FILES:
        data = (root / "fashion-mnist" / filename).read_bytes()
        (out / f"{filename}.gz").write_bytes(gzip.compress(data, compresslevel=1))
    return out


def copy_dataset(fetched, data_root: Path, only=None) -> Path:
    source = fetched[0] / "fashion-mnist"
    dest = data_root / "fashion-mnist"
    dest.mkdir(parents=True, exist_ok=True)
    for filename in only if only is not None else FILES:
        shutil.copyfile(source / filename, dest / filename)
    return dest


def test_fetch_from_debian_then_verify(fetched, capsys):
    root, log = fetched
    assert "source: Debian package dataset-fashion-mnist" in log
    assert harness_main(["data", "verify", NAME, "--data", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"ok {f}" for f in FILES]
    assert hds.verify_dataset(NAME, root) == [root / "fashion-mnist" / f for f in FILES]


def test_fetch_keeps_valid_files(fetched, capsys):
    root, _ = fetched
    fetcher.fetch(NAME, root, debian_dir="/nonexistent", allow_apt=False, url_base="http://127.0.0.1:9/", progress=False)
    err = capsys.readouterr().err
    assert err.count("already present") == len(FILES)
    assert "download" not in err


def test_load_fashion_mnist(fetched):
    root, _ = fetched
    images, labels = cds.load_fashion_mnist(root, "train")
    assert images.shape == (60000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60000,) and labels.dtype == np.int64
    assert np.bincount(labels).tolist() == [6000] * 10

    test_images, test_labels = cds.load_fashion_mnist(root, "test")
    assert test_images.shape == (10000, 28, 28)
    assert np.bincount(test_labels).tolist() == [1000] * 10

    np.testing.assert_array_equal(cds.load_fashion_mnist_images(root, "test"), test_images)
    eval_labels = load_eval_labels(NAME, root)
    assert eval_labels.dtype == np.int64
    np.testing.assert_array_equal(eval_labels, test_labels)

    with pytest.raises(DatasetError, match="validation"):
        cds.load_fashion_mnist(root, "validation")


def test_corrupted_file_is_named_then_refetched(fetched, debian_dir, tmp_path, capsys):
    dest = copy_dataset(fetched, tmp_path)
    data = bytearray((dest / LABELS).read_bytes())
    data[5000] ^= 0xFF
    (dest / LABELS).write_bytes(bytes(data))

    for check in (lambda: hds.verify_dataset(NAME, tmp_path), lambda: load_eval_labels(NAME, tmp_path)):
        with pytest.raises(DatasetError, match="checksum mismatch") as err:
            check()
        message = str(err.value)
        assert str(dest / LABELS) in message and "\n" not in message
        assert hds.manifest(NAME)["files"][LABELS]["sha256"] in message
        assert FETCH_COMMAND in message

    capsys.readouterr()
    fetcher.fetch(NAME, tmp_path, debian_dir=debian_dir, allow_apt=False, progress=False)
    assert "kept until a checked replacement is in place" in capsys.readouterr().err
    hds.verify_dataset(NAME, tmp_path)
    assert [p.name for p in dest.iterdir() if p.name not in FILES] == []      # no staging folder left behind


def test_a_fetch_that_fails_its_checks_keeps_the_files_it_had(fetched, debian_dir, tmp_path, monkeypatch, capsys):
    """Under a manifest naming other checksums (as `make compare` and the tests use one), fetch unlinked the
    official files first, then failed the source's check and said "nothing was written": a run meant for
    fixture data emptied the real data/fashion-mnist (issue 47). What is on disk stays until its replacement
    is whole and checked."""
    dest = copy_dataset(fetched, tmp_path)
    before = {f: (dest / f).read_bytes() for f in FILES}
    manifest = (Path(hds.__file__).parent / "data" / "datasets.toml").read_text()
    start = manifest.index("[fashion-mnist]")
    entry = manifest[start:manifest.index("\n[", manifest.index("[fashion-mnist.files]"))]
    for f in (LABELS, "train-labels-idx1-ubyte"):       # two files another checksum names: neither source matches
        entry = entry.replace(hds.manifest(NAME)["files"][f]["sha256"], "0" * 64)
    (tmp_path / "other.toml").write_text(entry)
    monkeypatch.setenv(hds.MANIFEST_ENV, str(tmp_path / "other.toml"))
    with pytest.raises(DatasetError, match="checksum mismatch") as err:
        fetcher.fetch(NAME, tmp_path, debian_dir=debian_dir, allow_apt=False, progress=False)
    assert f"nothing was written to {dest}" in str(err.value), err.value
    assert {f: (dest / f).read_bytes() for f in FILES} == before
    assert sorted(p.name for p in dest.iterdir()) == sorted(FILES)


def test_missing_dataset_says_how_to_fetch(tmp_path):
    for check in (
        lambda: hds.verify_dataset(NAME, tmp_path),
        lambda: load_eval_labels(NAME, tmp_path),
        lambda: cds.load_fashion_mnist_images(tmp_path, "test"),
    ):
        with pytest.raises(DatasetError) as err:
            check()
        message = str(err.value)
        assert "not found in" in message and str(tmp_path / "fashion-mnist") in message
        assert message.endswith(f"run: {FETCH_COMMAND}") and "\n" not in message


def test_missing_file_is_named(fetched, tmp_path):
    copy_dataset(fetched, tmp_path, only=[f for f in FILES if f != LABELS])
    with pytest.raises(DatasetError, match=f"{LABELS} of dataset 'fashion-mnist' not found") as err:
        load_eval_labels(NAME, tmp_path)
    assert FETCH_COMMAND in str(err.value)


# --- downloads from a local server ------------------------------------------

def flip_byte(gz_data: bytes) -> bytes:
    """A well-formed gzip whose content is wrong: only the checksum can tell."""
    data = bytearray(gzip.decompress(gz_data))
    data[len(data) // 2] ^= 0xFF
    return gzip.compress(bytes(data), compresslevel=1)


@pytest.fixture
def serve(gz_dir, http_server):
    """Serve gz_dir's files; behaviour per file name (without .gz): "corrupt", "truncate"
    (half the body, then close) or "overclaim" (whole body, larger Content-Length)."""
    def start(**behaviour):
        files, served = {}, {}
        for path in gz_dir.iterdir():
            mode = behaviour.get(path.name.removesuffix(".gz"))
            files[path.name] = flip_byte(path.read_bytes()) if mode == "corrupt" else path.read_bytes()
            if mode in ("truncate", "overclaim"):
                served[path.name] = mode
        return http_server(files, **served)

    return start


@pytest.fixture
def no_apt(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError(f"apt-get must not run here: {args}")

    monkeypatch.setattr(fetcher.subprocess, "run", forbidden)


def test_download_all_files(serve, tmp_path, no_apt, monkeypatch, capsys):
    monkeypatch.setattr(fetcher.os, "geteuid", lambda: 0, raising=False)  # root, but allow_apt=False
    url, requests = serve()
    directory = fetcher.fetch(NAME, tmp_path, debian_dir=tmp_path / "no-debian", allow_apt=False, url_base=url)
    assert sorted(requests) == sorted(f"{f}.gz" for f in FILES)
    assert f"source: download from {url}" in capsys.readouterr().err
    assert sorted(p.name for p in directory.iterdir()) == sorted(FILES)
    hds.verify_dataset(NAME, tmp_path)


def test_download_fetches_only_missing_files_from_env_url(fetched, serve, tmp_path, no_apt, monkeypatch, capsys):
    monkeypatch.setattr(fetcher.os, "geteuid", lambda: 1000, raising=False)  # not root: apt is not an option
    copy_dataset(fetched, tmp_path, only=[f for f in FILES if f != LABELS])
    url, requests = serve()
    monkeypatch.setenv("DAWNBENCH_FASHION_MNIST_URL", url)
    fetcher.fetch(NAME, tmp_path, debian_dir=tmp_path / "no-debian", progress=False)
    assert requests == [f"{LABELS}.gz"]
    assert capsys.readouterr().err.count("already present") == len(FILES) - 1
    hds.verify_dataset(NAME, tmp_path)


def assert_only_good_files(directory: Path, good: list[str]) -> None:
    assert sorted(p.name for p in directory.iterdir()) == sorted(good)  # no .part, no bad file


def test_corrupted_download_writes_nothing(fetched, serve, tmp_path, no_apt):
    """Nothing half-written or unchecked reaches the folder, and what was there stays as it was (a run
    refuses the stale file by its checksum, with the command that fetches it)."""
    good = [f for f in FILES if f != LABELS]
    dest = copy_dataset(fetched, tmp_path, only=good)
    (dest / LABELS).write_bytes(b"stale and wrong")
    url, _ = serve(**{LABELS: "corrupt"})
    with pytest.raises(DatasetError, match="checksum mismatch") as err:
        fetcher.fetch(NAME, tmp_path, debian_dir=tmp_path / "no-debian", allow_apt=False, url_base=url, progress=False)
    message = str(err.value)
    assert LABELS in message and hds.manifest(NAME)["files"][LABELS]["sha256"] in message
    assert "\n" not in message
    assert_only_good_files(dest, [*good, LABELS])
    assert (dest / LABELS).read_bytes() == b"stale and wrong"


@pytest.mark.parametrize("mode", ["truncate", "overclaim"])
def test_interrupted_download_leaves_nothing(fetched, serve, tmp_path, no_apt, mode):
    good = [f for f in FILES if f != LABELS]
    dest = copy_dataset(fetched, tmp_path, only=good)
    url, _ = serve(**{LABELS: mode})
    with pytest.raises(DatasetError, match="interrupted") as err:
        fetcher.fetch(NAME, tmp_path, debian_dir=tmp_path / "no-debian", allow_apt=False, url_base=url, progress=True)
    assert f"{LABELS}.gz" in str(err.value) and FETCH_COMMAND in str(err.value)
    assert_only_good_files(dest, good)


def test_download_http_error(fetched, serve, tmp_path, no_apt):
    good = [f for f in FILES if f != LABELS]
    dest = copy_dataset(fetched, tmp_path, only=good)
    url, _ = serve()
    with pytest.raises(DatasetError, match="HTTP 404"):
        fetcher.fetch(NAME, tmp_path, debian_dir=tmp_path / "no-debian", allow_apt=False,
                  url_base=url + "missing/", progress=False)
    assert_only_good_files(dest, good)


# --- apt-get, faked ---------------------------------------------------------

@pytest.fixture
def fake_apt(monkeypatch):
    """Pretend to be root with apt-get; record commands, answer from a script."""
    monkeypatch.setattr(fetcher.os, "geteuid", lambda: 0, raising=False)
    monkeypatch.setattr(fetcher.shutil, "which", lambda cmd: f"/usr/bin/{cmd}" if cmd == "apt-get" else None)
    calls = []

    def install(answers):
        def run(command, env=None, **kwargs):
            calls.append((command, env.get("DEBIAN_FRONTEND") if env else None))
            return answers[len(calls) - 1](command)

        monkeypatch.setattr(fetcher.subprocess, "run", run)
        return calls

    return install


def completed(command, code, output=""):
    return subprocess.CompletedProcess(command, code, stdout=output)


def test_apt_install_retries_after_update(fetched, gz_dir, tmp_path, fake_apt, capsys):
    debian = tmp_path / "debian"
    dest = copy_dataset(fetched, tmp_path / "data", only=[f for f in FILES if f != LABELS])

    def install_package(command):
        debian.mkdir()
        for filename in FILES:
            (debian / f"{filename}.gz").symlink_to(gz_dir / f"{filename}.gz")
        return completed(command, 0)

    calls = fake_apt([
        lambda c: completed(c, 100, "E: Unable to locate package dataset-fashion-mnist"),
        lambda c: completed(c, 0),
        install_package,
    ])
    fetcher.fetch(NAME, tmp_path / "data", debian_dir=debian, url_base="http://127.0.0.1:9/", progress=False)
    install = ["apt-get", "install", "-y", "dataset-fashion-mnist"]
    assert calls == [(install, "noninteractive"), (["apt-get", "update"], "noninteractive"),
                     (install, "noninteractive")]
    assert f"source: Debian package dataset-fashion-mnist in {debian}" in capsys.readouterr().err
    assert (dest / LABELS).is_file()
    hds.verify_dataset(NAME, tmp_path / "data")


def test_apt_failure_falls_back_to_download(fetched, serve, tmp_path, fake_apt, capsys):
    dest = copy_dataset(fetched, tmp_path, only=[f for f in FILES if f != LABELS])
    calls = fake_apt([lambda c: completed(c, 100, "E: no network")] * 3)
    url, requests = serve()
    fetcher.fetch(NAME, tmp_path, debian_dir=tmp_path / "no-debian", url_base=url, progress=False)
    assert [c for c, _ in calls] == [["apt-get", "install", "-y", "dataset-fashion-mnist"], ["apt-get", "update"],
                                     ["apt-get", "install", "-y", "dataset-fashion-mnist"]]
    assert requests == [f"{LABELS}.gz"]
    err = capsys.readouterr().err
    assert "E: no network" in err and "source: download" in err
    assert (dest / LABELS).is_file()


def test_extending_a_prepared_manifest_hashes_only_new_or_changed_files(tmp_path, monkeypatch):
    """After a pack adds files, the manifest is rewritten without re-reading the verified ones: a file
    with its recorded size and mtime keeps its hash, a new or touched file is read."""
    root = tmp_path / "d"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.bin").write_bytes(b"x" * 10)
    (root / "y.bin").write_bytes(b"y")
    hds.write_prepared_manifest(root)
    (root / "packed").mkdir()
    (root / "packed" / "z.bin").write_bytes(b"z")
    (root / "y.bin").write_bytes(b"Y")                           # same size, new mtime: read again
    stat = (root / "y.bin").stat()                               # (coarse clocks: make the mtime differ)
    os.utime(root / "y.bin", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    read = []
    real = hds.sha256_file
    monkeypatch.setattr(hds, "sha256_file", lambda p: read.append(Path(p).name) or real(p))
    hds.write_prepared_manifest(root, extend=True)
    assert sorted(read) == ["y.bin", "z.bin"]
    monkeypatch.setattr(hds, "sha256_file", real)
    assert hds.verify_prepared(root, full=True)["count"] == 3     # every recorded hash is the file's


# --- count_train_examples: the eval bound's training set on data that are not the official ones ---

def test_the_training_examples_are_counted_from_the_files_on_disk(tmp_path, monkeypatch, fashion_root):
    """Issue 33: the eval bound never takes the trainer's count; on a fixture or a subset (an unofficial
    run) it takes the harness's own count of the training files, format by format."""
    from cifar10_fixture import TRAIN_BATCHES, write_cifar10_batches
    from cifar10_fixture import fixture_manifest as cifar_manifest
    from squad_fixture import fixture_manifest as squad_manifest
    from squad_fixture import write_squad_fixture

    assert count_train_examples("fashion-mnist", fashion_root) == 60_000      # the idx header
    batches = tmp_path / "data" / "cifar10" / "cifar-10-batches-py"
    write_cifar10_batches(batches, per_batch=7, n_test=5)
    monkeypatch.setenv(hds.MANIFEST_ENV, str(cifar_manifest(tmp_path / "cifar.toml", batches_dir=batches)))
    assert count_train_examples("cifar10", tmp_path / "data") == 7 * len(TRAIN_BATCHES)
    fixture = write_squad_fixture(tmp_path / "data" / "squad")
    monkeypatch.setenv(hds.MANIFEST_ENV, str(squad_manifest(tmp_path / "squad.toml", fixture)))
    assert count_train_examples("squad", tmp_path / "data") == fixture["train_questions"]
    (tmp_path / "data" / "squad" / "train-v1.1.json").write_text("{}")
    with pytest.raises(DatasetError, match="squad: its training examples cannot be counted"):
        count_train_examples("squad", tmp_path / "data")


def test_fetch_into_a_data_root_that_is_a_file_is_one_line(tmp_path):
    """Issue 34: `data fetch fashion-mnist --data <a file>` was a 34-line NotADirectoryError; now one
    line before anything is downloaded, and the file is left as it was."""
    import subprocess
    import sys

    from conftest import REPO, cli_env
    target = tmp_path / "a-file"
    target.write_text("mine")
    proc = subprocess.run([sys.executable, "-m", "dawnbench", "data", "fetch", "fashion-mnist", "--data", str(target)],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "is a file, not a folder" in proc.stderr
    assert target.read_text() == "mine"
