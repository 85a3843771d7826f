"""Checksummed datasets: where they live, whether they are intact, how to read them.

The harness scores every run against eval labels it loads itself, so it must be
able to prove those labels are the official ones: every file is checked against
the sha256 recorded in ``data/datasets.toml`` before it is read. Fetching lives
in ``common.datasets``; the harness only verifies and reads.

numpy and the standard library only: this module is installed into every
reference's environment, whatever its framework.
"""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import importlib.resources
import os
import struct
from pathlib import Path

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 has no tomllib; tomli is the same parser.
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "DatasetError",
    "default_data_root",
    "manifest",
    "dataset_names",
    "dataset_dir",
    "sha256_file",
    "verify_file",
    "verify_dataset",
    "read_idx",
    "load_eval_labels",
]

CHUNK_SIZE = 1 << 20

# IDX type code -> big-endian numpy dtype, as in LeCun's MNIST file format.
IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"


class DatasetError(Exception):
    """A dataset is missing, corrupt or malformed.

    The message is one line that says what is wrong and how to fix it, because
    it is what a user sees at the end of a failed run.
    """

    def __init__(self, message: str):
        # One line even when an OS or parser message carries newlines.
        super().__init__(" ".join(str(message).split()))


def default_data_root() -> Path:
    """``$DAWNBENCH_DATA`` if set, else ``<repo>/data``."""
    env = os.environ.get("DAWNBENCH_DATA")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parent.parent / "data"


@functools.lru_cache(maxsize=1)
def _load_manifests() -> dict:
    text = importlib.resources.files("harness").joinpath("data", "datasets.toml").read_text("utf-8")
    return tomllib.loads(text)


def dataset_names() -> list[str]:
    return sorted(_load_manifests())


def manifest(name: str) -> dict:
    """The ``[name]`` table of datasets.toml (a copy: callers may not alter the cached one)."""
    manifests = _load_manifests()
    if name not in manifests:
        known = ", ".join(sorted(manifests)) or "none"
        raise DatasetError(f"unknown dataset {name!r}; known datasets: {known}")
    entry = manifests[name]
    missing = [key for key in ("dir", "files", "eval_labels", "fetch_command") if key not in entry]
    if missing:
        raise DatasetError(f"datasets.toml entry [{name}] lacks {', '.join(missing)}; fix harness/data/datasets.toml")
    return copy.deepcopy(entry)


def dataset_dir(name: str, data_root: str | os.PathLike | None = None) -> Path:
    root = default_data_root() if data_root is None else Path(data_root)
    return root / manifest(name)["dir"]


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def verify_file(name: str, data_root: str | os.PathLike | None, filename: str) -> Path:
    """Path of one file of the dataset, after checking its size and sha256."""
    entry = manifest(name)
    fix = f"run: {entry['fetch_command']}"
    if filename not in entry["files"]:
        raise DatasetError(
            f"{filename!r} is not a file of dataset {name!r}; its files are: {', '.join(entry['files'])}"
        )
    expected = entry["files"][filename]
    directory = dataset_dir(name, data_root)
    if not directory.is_dir():
        raise DatasetError(f"dataset {name!r} not found in {directory}; {fix}")
    path = directory / filename
    if not path.is_file():
        raise DatasetError(f"{filename} of dataset {name!r} not found in {directory}; {fix}")
    actual = sha256_file(path)
    if actual != expected["sha256"]:
        size = path.stat().st_size
        raise DatasetError(
            f"checksum mismatch for {path}: expected sha256 {expected['sha256']}, got {actual} "
            f"(size {size}, expected {expected['size']}); the file is corrupt or not the official one, "
            f"re-fetch it with: {entry['fetch_command']}"
        )
    return path


def verify_dataset(name: str, data_root: str | os.PathLike | None = None) -> list[Path]:
    """Paths of every file of the dataset; raises DatasetError on the first bad one."""
    return [verify_file(name, data_root, filename) for filename in manifest(name)["files"]]


def _read_source(source) -> tuple[bytes | bytearray, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source) if isinstance(source, memoryview) else source, "<bytes>"
    path = Path(source)
    try:
        with open(path, "rb") as f:
            # readinto a bytearray, so the array numpy wraps around it is writable
            # without a second copy of a 47 MB file.
            data = bytearray(path.stat().st_size)
            n = f.readinto(data)
            del data[n:]
    except OSError as exc:
        raise DatasetError(f"cannot read IDX file {path}: {exc.strerror or exc}") from exc
    return data, str(path)


def read_idx(source: str | os.PathLike | bytes | bytearray | memoryview, *, name: str | None = None) -> np.ndarray:
    """Parse an IDX file (the MNIST / Fashion-MNIST format) into a native-endian array.

    ``source`` is a path or the file's bytes; gzip-compressed input is accepted,
    so the files as shipped can be read directly. ``name`` labels bytes input in
    error messages.
    """
    data, label = _read_source(source)
    label = name or label

    def malformed(problem: str) -> DatasetError:
        return DatasetError(f"malformed IDX file {label}: {problem}")

    if data[:2] == _GZIP_MAGIC:
        try:
            data = bytearray(gzip.decompress(data))
        except (OSError, EOFError) as exc:
            raise malformed(f"gzip data is corrupt ({exc})") from exc

    if len(data) < 4:
        raise malformed(f"{len(data)} bytes, shorter than the 4-byte magic number")
    zero0, zero1, type_code, ndim = data[0], data[1], data[2], data[3]
    if zero0 != 0 or zero1 != 0:
        raise malformed(f"bad magic number 0x{bytes(data[:4]).hex()} (must start with two zero bytes)")
    if type_code not in IDX_DTYPES:
        known = ", ".join(f"0x{code:02X}" for code in IDX_DTYPES)
        raise malformed(f"unknown data type code 0x{type_code:02X} (known: {known})")
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise malformed(f"header truncated: {ndim} dimensions need {header_size} bytes, file has {len(data)}")
    shape = struct.unpack_from(f">{ndim}i", data, 4)
    if any(d < 0 for d in shape):
        raise malformed(f"negative dimension in shape {shape}")

    dtype = IDX_DTYPES[type_code]
    count = 1
    for d in shape:
        count *= d
    expected_payload = count * dtype.itemsize
    payload = len(data) - header_size
    if payload != expected_payload:
        raise malformed(
            f"payload is {payload} bytes, but shape {tuple(shape)} of {dtype.name} needs {expected_payload}"
            + (" (truncated)" if payload < expected_payload else " (trailing bytes)")
        )

    array = np.frombuffer(data, dtype=dtype, count=count, offset=header_size).reshape(shape)
    if not dtype.isnative:
        array = array.astype(dtype.newbyteorder("="))
    elif not array.flags.writeable:
        array = array.copy()  # bytes input: callers expect an array they own
    return array


def load_eval_labels(name: str, data_root: str | os.PathLike | None = None) -> np.ndarray:
    """The official eval labels as int64, read only after their checksum matched."""
    entry = manifest(name)
    path = verify_file(name, data_root, entry["eval_labels"])
    labels = read_idx(path)
    if labels.ndim != 1:
        raise DatasetError(f"malformed IDX file {path}: eval labels must be 1-D, got shape {labels.shape}")
    return labels.astype(np.int64)
