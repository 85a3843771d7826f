"""Dataset tooling: fetch, verify, and the training-data loaders references share.

Checksums, the on-disk layout and the IDX reader belong to the harness
(``harness.datasets``), which must be able to load eval labels on its own; this
module only gets the files there and hands training data to references.

Sources for Fashion-MNIST, first usable wins:
1. Debian's ``dataset-fashion-mnist`` package directory, when installed;
2. installing that package with apt-get, when running as root (containers);
3. the upstream URLs (or a mirror: ``DAWNBENCH_FASHION_MNIST_URL``).
Whatever the source, a file reaches its final name only after its sha256
matched, so an interrupted or corrupted fetch never leaves a bad file in place.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import numpy as np

from harness.datasets import (
    CHUNK_SIZE,
    DatasetError,
    dataset_dir,
    manifest,
    read_idx,
    sha256_file,
    verify_file,
)

__all__ = [
    "DatasetError",
    "fetch",
    "verify",
    "load_fashion_mnist",
    "load_fashion_mnist_images",
]

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


def _install(name: str, stream, target: Path, expected: dict, source: str) -> None:
    """Decompress the gzip ``stream`` into ``target``: through a temp file in the
    same directory, checked, then renamed, so ``target`` is whole or absent."""
    entry = manifest(name)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out, gzip.GzipFile(fileobj=stream, mode="rb") as gz:
            while chunk := gz.read(CHUNK_SIZE):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != expected["sha256"]:
            raise DatasetError(
                f"checksum mismatch for {target.name} from {source}: expected sha256 {expected['sha256']}, "
                f"got {actual} (size {size}, expected {expected['size']}); nothing was written to "
                f"{target.parent}; the source is corrupt, re-fetch with: {entry['fetch_command']}"
            )
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _files_to_fetch(name: str, directory: Path) -> list[str]:
    """Files absent or invalid; valid ones are kept, invalid ones removed so that
    a failed re-fetch cannot leave a bad file under an official name."""
    entry = manifest(name)
    needed = []
    for filename, expected in entry["files"].items():
        path = directory / filename
        if not path.exists():
            needed.append(filename)
        elif sha256_file(path) == expected["sha256"]:
            _say(name, f"ok {filename} (already present, checksum matches; kept)")
        else:
            _say(name, f"{filename} is present but its checksum does not match; removing it and fetching again")
            path.unlink()
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


def _download(name: str, url: str, target: Path, expected: dict, progress: bool) -> None:
    entry = manifest(name)
    retry = f"nothing was written; re-run: {entry['fetch_command']}"
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=total, unit="B", unit_scale=True, desc=target.name, file=sys.stderr, leave=False)
            try:
                _install(name, _CountingReader(response, total, bar), target, expected, url)
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
    progress: bool = True,
) -> Path:
    """Make ``<data_root>/<dataset dir>`` hold every file of the dataset, verified.

    ``debian_dir`` defaults to the manifest's; ``url_base`` to ``$<url_env>`` or
    the manifest's upstream base. Returns the dataset directory.
    """
    entry = manifest(name)
    if entry.get("compression") != "gzip" or not (entry.get("debian_dir") or entry.get("url_base")):
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
        _say(name, f"source: download from {base}")
        for filename in needed:
            _download(name, f"{base}{filename}.gz", directory / filename, entry["files"][filename], progress)
            _say(name, f"wrote {filename}")

    _say(name, f"ready in {directory}")
    return directory


def verify(name: str, data_root: str | os.PathLike | None = None) -> list[Path]:
    """Print ``ok <file>`` per verified file; raise DatasetError on the first bad one."""
    paths = []
    for filename in manifest(name)["files"]:
        paths.append(verify_file(name, data_root, filename))
        print(f"ok {filename}", flush=True)
    return paths


def _split_files(split: str) -> dict:
    splits = manifest("fashion-mnist")["splits"]
    if split not in splits:
        raise DatasetError(f"unknown Fashion-MNIST split {split!r}; splits are: {', '.join(splits)}")
    return splits[split]


def load_fashion_mnist_images(data_root: str | os.PathLike | None, split: str) -> np.ndarray:
    """Images of a split, uint8 (N, 28, 28), checksum-verified.

    The only loader a reference may use for the eval split: it never reads labels.
    """
    path = verify_file("fashion-mnist", data_root, _split_files(split)["images"])
    images = read_idx(path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise DatasetError(f"malformed IDX file {path}: expected uint8 (N, 28, 28) images, got {images.dtype} {images.shape}")
    return images


def load_fashion_mnist(data_root: str | os.PathLike | None, split: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 28, 28), labels int64 (N,)) of a split, checksum-verified."""
    images = load_fashion_mnist_images(data_root, split)
    path = verify_file("fashion-mnist", data_root, _split_files(split)["labels"])
    labels = read_idx(path)
    if labels.ndim != 1 or len(labels) != len(images):
        raise DatasetError(f"malformed IDX file {path}: expected {len(images)} labels, got shape {labels.shape}")
    return images, labels.astype(np.int64)

