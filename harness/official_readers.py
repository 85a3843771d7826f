"""The official files' formats, read: IDX (MNIST / Fashion-MNIST), the CIFAR Python pickles, .npy
(harness.data_formats puts them to use).

Each reader parses, it does not authenticate: the caller verifies a file's checksum first
(``harness.datasets``). The CIFAR pickles are read through an unpickler that resolves only the
numpy globals those files need, never through plain ``pickle.load``.

numpy and the standard library only: this module is installed into every reference's
environment, whatever its framework.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import os
import pickle
import struct
from pathlib import Path

import numpy as np

from harness.datasets import DatasetError, manifest

__all__ = ["read_idx", "read_cifar_pickle", "read_cifar_batch", "read_npy"]

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


# --- CIFAR pickles ------------------------------------------------------------
#
# The official CIFAR-10 batches are Python 2 pickles. Unpickling runs whatever
# callables the file names, so a plain pickle.load of a file from the network is
# arbitrary code execution. The unpickler below resolves only the globals a numpy
# array needs; anything else is refused before it can be called.

def _numpy_reconstruct():
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2 / numpy 1
        with contextlib.suppress(ImportError, AttributeError):
            return importlib.import_module(module)._reconstruct
    raise DatasetError("this numpy has no multiarray._reconstruct; it cannot read CIFAR pickles")


def _plain_dtype(*args):
    """``numpy.dtype`` as a pickle may call it, minus object dtypes (which would
    let the pickle smuggle arbitrary objects into an array)."""
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise pickle.UnpicklingError(f"object dtype {dtype} is not allowed")
    return dtype


class _CifarUnpickler(pickle.Unpickler):
    """Resolves exactly the globals of the official CIFAR pickles; refuses the rest."""

    def __init__(self, file, label: str):
        super().__init__(file, encoding="bytes")
        self.label = label

    def find_class(self, module: str, name: str):
        if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name == "_reconstruct":
            return _numpy_reconstruct()
        if module == "numpy" and name == "ndarray":
            return np.ndarray
        if module == "numpy" and name == "dtype":
            return _plain_dtype
        raise DatasetError(
            f"refusing to load {self.label}: the pickle names {module}.{name}, which no CIFAR file holds; "
            "the file is not an official CIFAR batch (and may be malicious), delete it"
        )

    def persistent_load(self, pid):
        raise DatasetError(f"refusing to load {self.label}: it uses persistent ids, which no CIFAR file holds")


def read_cifar_pickle(path: str | os.PathLike) -> dict:
    """Unpickle a CIFAR file (a dict with byte-string keys) through the restricted
    unpickler. Verify its checksum first: this parses, it does not authenticate."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, str(path)).load()
    except DatasetError:
        raise
    except OSError as exc:
        raise DatasetError(f"cannot read CIFAR file {path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # a corrupt pickle raises almost anything: EOFError, ValueError, UnpicklingError...
        raise DatasetError(f"malformed CIFAR file {path}: not a readable pickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(obj, dict):
        raise DatasetError(f"malformed CIFAR file {path}: expected a dict, got {type(obj).__name__}")
    return obj


def read_cifar_batch(path: str | os.PathLike, num_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(data uint8 (N, 3072) channel-major, labels int64 (N,))`` of one CIFAR-10
    batch file, its shapes and label range checked."""
    batch = read_cifar_pickle(path)

    def malformed(problem: str) -> DatasetError:
        return DatasetError(f"malformed CIFAR batch {path}: {problem}")

    missing = [key.decode() for key in (b"data", b"labels") if key not in batch]
    if missing:
        raise malformed(f"no {' or '.join(missing)} key (keys: {sorted(map(repr, batch))})")
    data = batch[b"data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        shape = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise malformed(f"data must be uint8 (N, 3072), got {shape}")
    try:
        labels = np.asarray(batch[b"labels"])
    except (TypeError, ValueError) as exc:
        raise malformed(f"labels are not a list of integers ({exc})") from exc
    if labels.ndim != 1 or len(labels) != len(data) or (len(labels) and labels.dtype.kind not in "iu"):
        raise malformed(f"expected {len(data)} integer labels, got {labels.dtype} {labels.shape}")
    labels = labels.astype(np.int64)
    bad = labels[(labels < 0) | (labels >= num_classes)]
    if len(bad):
        raise malformed(f"labels must be 0..{num_classes - 1}, found {int(bad[0])}")
    return data, labels


def read_npy(path: Path, name: str) -> np.ndarray:
    """A checksummed .npy file (CIFAR-10.1's), never unpickled."""
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path} is not a readable .npy array ({exc}); re-fetch it with: "
                           f"{manifest(name)['fetch_command']}") from None
