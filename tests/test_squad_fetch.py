"""`dawnbench data fetch squad` and `dawnbench data fetch glove`, served from 127.0.0.1.

The files are tests/squad_fixture.py's (official formats, tiny); their checksums, sizes and line
counts are registered through $DAWNBENCH_DATASETS_MANIFEST. The server is conftest's http_server.
"""
from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest

import dawnbench.fetch as fetcher
from dawnbench import cli
from harness import datasets as hds
from harness.datasets import DatasetError
from tests.cifar10_fixture import _toml_value
from tests.squad_fixture import fixture_manifest, glove_text, glove_zip, write_squad_fixture

SQUAD_FILES = ["train-v1.1.json", "dev-v1.1.json"]
ZIP_6B = "glove.6B.zip"
ZIP_840B = "glove.840B.300d.zip"
TXT_6B = "glove.6B.100d.txt"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(root: Path) -> list[str]:
    """Every path under `root` (temp files and directories included), relative, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@pytest.fixture
def fixture(tmp_path) -> dict:
    return write_squad_fixture(tmp_path / "served")


@pytest.fixture
def data_root(tmp_path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


def use_manifest(monkeypatch, tmp_path: Path, fixture: dict, **archives) -> None:
    """Register the fixture's checksums; `archives` replace glove archives: {name: (zip bytes,
    {vectors: lines}, dim)}, the size being that of the bytes given."""
    path = fixture_manifest(tmp_path / "datasets-squad-fixture.toml", fixture)
    if archives:
        entries = tomllib.loads(path.read_text(encoding="utf-8"))
        for key, (data, vectors, dim) in archives.items():
            spec = entries["glove"]["archives"][key]
            spec["size"] = len(data)
            spec["vectors"] = {name: {"lines": lines, "dim": dim} for name, lines in vectors.items()}
        text = "".join(f"[{name}]\n" + "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in entry.items())
                       for name, entry in entries.items())
        path.write_text(text, encoding="utf-8")
    monkeypatch.setenv(hds.MANIFEST_ENV, str(path))


@pytest.fixture
def registered(fixture, tmp_path, monkeypatch) -> dict:
    use_manifest(monkeypatch, tmp_path, fixture)
    return fixture


# --- squad --------------------------------------------------------------------------------------

def test_squad_fetch_keep_and_repair(http_server, registered, data_root, capsys):
    files = registered["files"]
    url, requests = http_server(files)
    directory = fetcher.fetch("squad", data_root, url_base=url, progress=False)
    assert directory == data_root / "squad"
    assert tree(data_root) == ["squad"] + [f"squad/{f}" for f in sorted(SQUAD_FILES)]   # no temp file
    for name in SQUAD_FILES:
        assert (directory / name).read_bytes() == files[name]
    assert sorted(requests) == sorted(SQUAD_FILES)      # served as they are: no .gz
    assert [p.name for p in hds.verify_dataset("squad", data_root)] == SQUAD_FILES
    err = capsys.readouterr().err
    assert f"source: download from {url}" in err and "dawnbench data fetch glove" in err

    # Present and matching: kept, nothing downloaded.
    fetcher.fetch("squad", data_root, url_base=url, progress=False)
    assert len(requests) == 2
    assert "all files present and verified" in capsys.readouterr().err

    # A damaged file is removed and fetched again; the good one is kept.
    (directory / "dev-v1.1.json").write_bytes(b'{"data": []}')
    fetcher.fetch("squad", data_root, url_base=url, progress=False)
    assert requests[2:] == ["dev-v1.1.json"]
    assert (directory / "dev-v1.1.json").read_bytes() == files["dev-v1.1.json"]
    err = capsys.readouterr().err
    assert "ok train-v1.1.json (already present" in err and "dev-v1.1.json is present but its checksum" in err


def test_missing_squad_and_glove_are_named_at_once(http_server, fixture, tmp_path, data_root, monkeypatch):
    """With nothing there, one line names SQuAD's two files and GloVe's vectors (the 822 MB
    archive they come in), each with its fetch: a user who fetches SQuAD is not stopped next by
    GloVe. With SQuAD fetched, the line names GloVe alone."""
    monkeypatch.delenv(hds.MANIFEST_ENV, raising=False)
    with pytest.raises(DatasetError) as err:
        hds.check_all("squad", data_root)
    message = str(err.value)
    assert "\n" not in message
    assert (f"dataset 'squad' not found in {data_root / 'squad'} (train-v1.1.json, dev-v1.1.json); "
            f"run: dawnbench data fetch squad; and ") in message
    assert message.endswith(f"dataset 'glove' not found in {data_root / 'glove'} ({TXT_6B} from {ZIP_6B}, 822 MB); "
                            f"run: dawnbench data fetch glove")
    use_manifest(monkeypatch, tmp_path, fixture)
    url, _ = http_server(fixture["files"])
    fetcher.fetch("squad", data_root, url_base=url, progress=False)
    with pytest.raises(DatasetError) as err:
        hds.check_all("squad", data_root)
    assert str(err.value).startswith(f"dataset 'glove' not found in {data_root / 'glove'} ({TXT_6B} from {ZIP_6B}, ")
    assert "squad" not in str(err.value).replace(str(data_root), "")
    # Vectors copied in by hand, without fetch's manifest: the line says that, not that they are absent.
    (data_root / "glove").mkdir()
    (data_root / "glove" / TXT_6B).write_bytes(fixture["glove_vectors"])
    with pytest.raises(DatasetError, match=f"dataset 'glove' is not prepared in .* \\(no {hds.PREPARED_MANIFEST}\\); "
                                           f"run: dawnbench data fetch glove$"):
        hds.check_all("squad", data_root)


def test_squad_url_from_environment(http_server, registered, data_root, monkeypatch):
    url, requests = http_server({f"mirror/{k}": v for k, v in registered["files"].items()})
    monkeypatch.setenv("DAWNBENCH_SQUAD_URL", url + "mirror")   # a base, with or without its /
    fetcher.fetch("squad", data_root, progress=False)
    assert sorted(requests) == sorted(f"mirror/{f}" for f in SQUAD_FILES)


def test_squad_wrong_file_is_refused(http_server, registered, data_root):
    files = dict(registered["files"])
    files["dev-v1.1.json"] = files["dev-v1.1.json"].replace(b"Warsaw", b"Krakow")   # same size, other bytes
    url, _ = http_server(files)
    with pytest.raises(DatasetError, match="checksum mismatch for dev-v1.1.json") as err:
        fetcher.fetch("squad", data_root, url_base=url, progress=False)
    message = str(err.value)
    assert "\n" not in message and sha256(registered["files"]["dev-v1.1.json"]) in message
    assert sha256(files["dev-v1.1.json"]) in message and "nothing was written" in message
    assert "dawnbench data fetch squad" in message
    # The good file may stay; the bad one is nowhere, under its name or as a temp file.
    assert tree(data_root) == ["squad", "squad/train-v1.1.json"]


@pytest.mark.parametrize("mode", ["truncate", "overclaim"])
def test_squad_short_body_leaves_nothing(http_server, registered, data_root, mode):
    url, _ = http_server(registered["files"], **{"train-v1.1.json": mode})
    with pytest.raises(DatasetError, match="interrupted") as err:
        fetcher.fetch("squad", data_root, url_base=url, progress=False)
    assert "train-v1.1.json" in str(err.value) and "dawnbench data fetch squad" in str(err.value)
    assert "train-v1.1.json" not in tree(data_root / "squad")
    assert not [p for p in tree(data_root) if ".part" in p]


# --- glove --------------------------------------------------------------------------------------

def test_glove_fetch_record_manifest_and_second_fetch(http_server, registered, data_root, capsys):
    archive, vectors = registered["glove_zip"], registered["glove_vectors"]
    url, requests = http_server({ZIP_6B: archive})
    source = url + ZIP_6B
    directory = fetcher.fetch("glove", data_root, url=source, progress=False)
    assert directory == data_root / "glove"
    assert tree(data_root) == ["glove", "glove/dawnbench-manifest.json", "glove/dawnbench-prepared.json",
                               f"glove/{TXT_6B}"]                     # no archive, no temp directory
    assert (directory / TXT_6B).read_bytes() == vectors
    record = json.loads((directory / "dawnbench-prepared.json").read_text(encoding="utf-8"))
    assert record == {"format": "dawnbench-glove-1", "official": True, "unofficial_reasons": [], "vectors": {
        "glove.6B.100d": {"file": TXT_6B, "lines": len(registered["glove_words"]), "dim": 100,
                          "sha256": sha256(vectors),
                          "archive": {"name": ZIP_6B, "url": source, "size": len(archive),
                                      "sha256": sha256(archive)}}}}
    checked, reasons = hds.check_prepared("glove", data_root)
    assert reasons == [] and checked["count"] == 2
    assert checked["bytes"] == len(vectors) + (directory / "dawnbench-prepared.json").stat().st_size
    assert "wrote glove.6B.100d.txt" in capsys.readouterr().err

    fetcher.fetch("glove", data_root, url=source, progress=False)
    assert requests == [ZIP_6B]
    assert "already present and verified" in capsys.readouterr().err

    # A damaged file fails the manifest: fetched again.
    with open(directory / TXT_6B, "ab") as f:
        f.write(b"x")
    fetcher.fetch("glove", data_root, url=source, progress=False)
    assert requests == [ZIP_6B, ZIP_6B] and (directory / TXT_6B).read_bytes() == vectors
    hds.check_prepared("glove", data_root)


def test_glove_url_from_environment(http_server, registered, data_root, monkeypatch):
    url, requests = http_server({f"glove/{ZIP_6B}": registered["glove_zip"]})
    monkeypatch.setenv("DAWNBENCH_GLOVE_URL", url + "glove/")     # a base: the archive's name is appended
    fetcher.fetch("glove", data_root, progress=False)
    assert requests == [f"glove/{ZIP_6B}"]
    record = json.loads((data_root / "glove" / "dawnbench-prepared.json").read_text(encoding="utf-8"))
    assert record["vectors"]["glove.6B.100d"]["archive"]["url"] == f"{url}glove/{ZIP_6B}"


def test_glove_wrong_archive_size_is_refused(http_server, registered, data_root):
    served = registered["glove_zip"] + b"\0" * 10
    url, _ = http_server({ZIP_6B: served})
    with pytest.raises(DatasetError) as err:
        fetcher.fetch("glove", data_root, url=url + ZIP_6B, progress=False)
    message = str(err.value)
    assert f"has {len(served):,} bytes, expected {len(registered['glove_zip']):,}" in message
    assert "\n" not in message and "dawnbench data fetch glove" in message
    assert tree(data_root) == []                  # not even the glove directory


def bad_vectors(words: list[str], how: str) -> tuple[bytes, int]:
    """A glove.6B.100d.txt broken at line 3 (1-based), or one line short ("count"); (its bytes, the
    line count the manifest expects)."""
    rows = glove_text(words, 100).decode().splitlines()
    if how == "short":
        rows[2] = rows[2].rsplit(" ", 1)[0]
    elif how == "word":
        fields = rows[2].split(" ")
        fields[50] = "0.1x"
        rows[2] = " ".join(fields)
    elif how == "double space":
        rows[2] = rows[2].replace(" ", "  ", 1).rsplit(" ", 1)[0]
    elif how == "nan":
        fields = rows[2].split(" ")
        fields[7] = "nan"
        rows[2] = " ".join(fields)
    lines = len(rows) + 1 if how == "count" else len(rows)
    return ("\n".join(rows) + "\n").encode(), lines


@pytest.mark.parametrize("how, expected", [
    ("short", "line 3 of glove.6B.100d.txt (token '{token}') has 99 numbers after its token, expected 100"),
    ("word", "line 3 of glove.6B.100d.txt (token '{token}') number 50 ('0.1x') is not a finite number"),
    ("double space", "line 3 of glove.6B.100d.txt (token '{token}') number 1 is empty"),
    ("nan", "line 3 of glove.6B.100d.txt (token '{token}') number 7 ('nan') is not a finite number"),
    ("count", "glove.6B.100d.txt has {lines:,} lines, expected {expected:,}"),
])
def test_glove_bad_vector_file_is_refused(http_server, fixture, data_root, tmp_path, monkeypatch, how, expected):
    words = fixture["glove_words"]
    text, lines = bad_vectors(words, how)
    archive = glove_zip({TXT_6B: text})
    use_manifest(monkeypatch, tmp_path, fixture, **{ZIP_6B: (archive, {"glove.6B.100d": lines}, 100)})
    # An earlier fetch's folder: it must come out of a failed one as it was.
    (data_root / "glove").mkdir()
    (data_root / "glove" / "notes.txt").write_text("mine")
    url, _ = http_server({ZIP_6B: archive})
    with pytest.raises(DatasetError) as err:
        fetcher.fetch("glove", data_root, url=url + ZIP_6B, progress=False)
    message = str(err.value)
    assert expected.format(token=words[2], lines=lines - 1, expected=lines) in message
    assert "\n" not in message and "nothing was written" in message and "dawnbench data fetch glove" in message
    assert tree(data_root) == ["glove", "glove/notes.txt"]


def test_glove_archive_without_the_vectors_is_refused(http_server, fixture, data_root, tmp_path, monkeypatch):
    archive = glove_zip({"glove.6B.50d.txt": glove_text(fixture["glove_words"], 50)})
    use_manifest(monkeypatch, tmp_path, fixture, **{ZIP_6B: (archive, {"glove.6B.100d": 3}, 100)})
    url, _ = http_server({ZIP_6B: archive})
    with pytest.raises(DatasetError, match=r"glove.6B.zip holds no glove.6B.100d.txt \(it holds: glove.6B.50d.txt\)"):
        fetcher.fetch("glove", data_root, url=url + ZIP_6B, progress=False)
    assert tree(data_root) == []


def test_glove_840b_tokens_with_spaces_and_the_6b_entry_kept(http_server, fixture, data_root, tmp_path, monkeypatch):
    words = ["the", ". . .", "at name@domain.com", "AT&T corp", "1 1/2", "Zürich"]
    text = glove_text(words, 300, seed=1)
    archive_840 = glove_zip({"glove.840B.300d.txt": text})
    use_manifest(monkeypatch, tmp_path, fixture, **{ZIP_840B: (archive_840, {"glove.840B.300d": len(words)}, 300)})
    url, requests = http_server({ZIP_6B: fixture["glove_zip"], ZIP_840B: archive_840})
    monkeypatch.setenv("DAWNBENCH_GLOVE_URL", url)
    fetcher.fetch("glove", data_root, progress=False)
    directory = fetcher.fetch("glove", data_root, vectors="glove.840B.300d", progress=False)
    assert requests == [ZIP_6B, ZIP_840B]
    assert (directory / "glove.840B.300d.txt").read_bytes() == text
    assert (directory / TXT_6B).read_bytes() == fixture["glove_vectors"]
    record = json.loads((directory / "dawnbench-prepared.json").read_text(encoding="utf-8"))
    assert sorted(record["vectors"]) == ["glove.6B.100d", "glove.840B.300d"] and record["official"] is True
    assert record["vectors"]["glove.6B.100d"]["sha256"] == sha256(fixture["glove_vectors"])
    assert record["vectors"]["glove.840B.300d"] == {
        "file": "glove.840B.300d.txt", "lines": len(words), "dim": 300, "sha256": sha256(text),
        "archive": {"name": ZIP_840B, "url": url + ZIP_840B, "size": len(archive_840), "sha256": sha256(archive_840)}}
    assert hds.check_prepared("glove", data_root)[0]["count"] == 3
    # Both are there and verified: neither is fetched again.
    fetcher.fetch("glove", data_root, progress=False)
    fetcher.fetch("glove", data_root, vectors="glove.840B.300d", progress=False)
    assert len(requests) == 2


def test_glove_unknown_vectors(registered, data_root):
    with pytest.raises(DatasetError) as err:
        fetcher.fetch("glove", data_root, vectors="glove.42B.300d")
    assert "unknown vectors 'glove.42B.300d'; known: glove.6B.100d, glove.840B.300d" in str(err.value)
    with pytest.raises(DatasetError, match="no choice of vectors"):
        fetcher.fetch("squad", data_root, vectors="glove.6B.100d")
    assert tree(data_root) == []


# --- the command line and the progress bar ------------------------------------------------------

def test_cli_fetch_and_verify(http_server, registered, data_root, monkeypatch, capsys):
    url, requests = http_server({**registered["files"], ZIP_6B: registered["glove_zip"]})
    monkeypatch.setenv("DAWNBENCH_SQUAD_URL", url)
    monkeypatch.setenv("DAWNBENCH_GLOVE_URL", url)
    assert cli.main(["data", "fetch", "squad", "--data", str(data_root)]) == 0
    assert cli.main(["data", "verify", "squad", "--data", str(data_root)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"ok {f}" for f in SQUAD_FILES]

    assert cli.main(["data", "verify", "glove", "--data", str(data_root)]) == 2
    assert "dawnbench data fetch glove" in capsys.readouterr().err
    assert cli.main(["data", "fetch", "glove", "--vectors", "glove.6B.100d", "--data", str(data_root)]) == 0
    assert cli.main(["data", "verify", "glove", "--data", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok 2 files (") and "match dawnbench-manifest.json" in out and "unofficial" not in out

    for argv in (["data", "fetch", "glove", "--vectors", "glove.7B.1d"], ["data", "fetch", "squad", "--vectors",
                 "glove.6B.100d"], ["data", "verify", "glove", "--vectors", "glove.6B.100d"]):
        assert cli.main([*argv, "--data", str(data_root)]) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("dawnbench: error: ") and "Traceback" not in captured.err
    assert requests.count(ZIP_6B) == 1


def test_progress_goes_to_stderr(http_server, registered, data_root, capsys):
    url, _ = http_server({**registered["files"], ZIP_6B: registered["glove_zip"]})
    fetcher.fetch("squad", data_root, url_base=url, progress=True)
    fetcher.fetch("glove", data_root, url=url + ZIP_6B, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    for label in ("train-v1.1.json", "dev-v1.1.json", ZIP_6B, f"checking {TXT_6B}"):
        assert f"{label}:" in captured.err      # tqdm's "<desc>: <percent>|<bar>|"


def test_fetch_for_a_reference_gets_its_companions_too(http_server, registered, data_root, monkeypatch):
    url, _ = http_server({**registered["files"], ZIP_6B: registered["glove_zip"]})
    monkeypatch.setenv("DAWNBENCH_SQUAD_URL", url)
    monkeypatch.setenv("DAWNBENCH_GLOVE_URL", url)
    # what `make data REF=squad-bidaf-pytorch` runs
    assert cli.main(["data", "fetch", "--reference", "squad-bidaf-pytorch", "--data", str(data_root)]) == 0
    assert (data_root / "glove" / TXT_6B).read_bytes() == registered["glove_vectors"]
    assert hds.check_companions("squad", data_root) == []       # fetched, so official


def test_a_killed_fetch_leaves_no_trace_in_the_next_manifest(http_server, registered, data_root):
    url, _ = http_server({ZIP_6B: registered["glove_zip"]})
    stale = data_root / "glove" / ".fetch-killed"
    stale.mkdir(parents=True)
    (stale / ZIP_6B).write_bytes(b"half an archive")
    fetcher.fetch("glove", data_root, url=url + ZIP_6B, progress=False)
    assert not stale.exists()
    listed = [row[0] for row in json.loads((data_root / "glove" / "dawnbench-manifest.json").read_text())["files"]]
    assert listed == ["dawnbench-prepared.json", TXT_6B]
