"""A tiny CIFAR-10 in the exact official on-disk format, for tests.

The official ``cifar-10-python.tar.gz`` holds ``cifar-10-batches-py/`` with five
training batches, ``test_batch``, ``batches.meta`` and ``readme.html``. Each batch
is a dict pickled by Python 2's cPickle (protocol 2): byte-string keys ``b"data"``
(uint8 (n, 3072), each row channel-major: 1024 red, 1024 green, 1024 blue values,
rows of 32), ``b"labels"`` (list of int), ``b"batch_label"`` and ``b"filenames"``.

Python 3's pickler writes ``bytes`` at protocol 2 through ``_codecs.encode``, a
global the official files never name (and our loader refuses), so the pickler
here writes strings as Python 2 did: as ``BINSTRING`` opcodes, which load as
bytes under ``encoding="bytes"``. It also names ``numpy.core.multiarray`` for
``_reconstruct``, as the official files do. The result is byte-for-byte the
official structure; only the pixels, labels and sizes differ.

Images are learnable: each class has its own mean colour and a brightness ramp
in one direction (horizontal for even classes, vertical for odd ones), plus
noise, so a small model beats chance within a few steps.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import io
import json
import pickle
import struct
import tarfile
import tempfile
import tomllib
from pathlib import Path

import numpy as np

LABEL_NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
MEMBER_DIR = "cifar-10-batches-py"
TARBALL_NAME = "cifar-10-python.tar.gz"
TRAIN_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]
README = b"<meta HTTP-EQUIV=\"REFRESH\" content=\"0; url=http://www.cs.toronto.edu/~kriz/cifar.html\">\n"

# One mean colour per class, far apart in RGB.
CLASS_COLOURS = np.array(
    [[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40], [200, 40, 200],
     [40, 200, 200], [120, 120, 120], [230, 140, 60], [60, 140, 230], [140, 60, 230]],
    dtype=np.float32,
)

_numpy_core = getattr(np, "_core", None) or np.core
_RECONSTRUCT = _numpy_core.multiarray._reconstruct


class Py2Pickler(pickle._Pickler):
    """Protocol 2, with str and bytes written as Python 2 ``str`` (``BINSTRING``)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def __init__(self, file):
        super().__init__(file, protocol=2)

    def save_py2_string(self, obj):
        data = obj.encode("latin-1") if isinstance(obj, str) else bytes(obj)
        if len(data) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[bytes] = save_py2_string
    dispatch[str] = save_py2_string

    def save_global(self, obj, name=None):
        if obj is _RECONSTRUCT:  # the module name numpy 1.x, and so the official files, carry
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)


def py2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    Py2Pickler(buffer).dump(obj)
    return buffer.getvalue()


def make_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 (n, 32, 32, 3) HWC images whose colour and ramp depend on the class."""
    n = len(labels)
    ramp = np.linspace(-40, 40, 32, dtype=np.float32)
    horizontal = np.broadcast_to(ramp[None, :, None], (32, 32, 1))
    vertical = np.broadcast_to(ramp[:, None, None], (32, 32, 1))
    images = CLASS_COLOURS[labels][:, None, None, :] + rng.normal(0, 25, size=(n, 32, 32, 3)).astype(np.float32)
    images += np.where((labels % 2 == 0)[:, None, None, None], horizontal, vertical)
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def make_batch(batch_label: bytes, n: int, rng: np.random.Generator, prefix: str) -> dict:
    labels = rng.permutation(np.arange(n) % 10)  # every class present when n >= 10
    images = make_images(labels, rng)
    data = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(n, 3072)  # channel-major rows
    return {
        b"batch_label": batch_label,
        b"labels": [int(label) for label in labels],
        b"data": data,
        b"filenames": [f"{prefix}_{i:05d}_{LABEL_NAMES[k].decode()}.png".encode() for i, k in enumerate(labels)],
    }


def write_cifar10_batches(directory: Path, per_batch: int = 20, n_test: int = 50, seed: int = 0) -> dict[str, dict]:
    """Write the eight files of ``cifar-10-batches-py`` into ``directory``.

    Returns ``{file name: the dict pickled into it}`` for the six batches.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    batches = {}
    for i, filename in enumerate(TRAIN_BATCHES, start=1):
        batches[filename] = make_batch(f"training batch {i} of 5".encode(), per_batch, rng, f"train{i}")
    batches["test_batch"] = make_batch(b"testing batch 1 of 1", n_test, rng, "test")
    for filename, batch in batches.items():
        (directory / filename).write_bytes(py2_pickle(batch))
    meta = {b"num_cases_per_batch": per_batch, b"label_names": list(LABEL_NAMES), b"num_vis": 3072}
    (directory / "batches.meta").write_bytes(py2_pickle(meta))
    (directory / "readme.html").write_bytes(README)
    return batches


def write_cifar10_tarball(path: Path, **kw) -> str:
    """Write ``cifar-10-python.tar.gz`` (the official layout) at ``path``; its md5.

    Keyword arguments go to :func:`write_cifar10_batches`.
    """
    path = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        members = Path(tmp) / MEMBER_DIR
        write_cifar10_batches(members, **kw)
        with tarfile.open(path, "w:gz") as tar:
            tar.add(members, arcname=MEMBER_DIR, recursive=False)
            for filename in sorted(p.name for p in members.iterdir()):
                tar.add(members / filename, arcname=f"{MEMBER_DIR}/{filename}")
    return md5_file(path)


def md5_file(path: Path) -> str:
    return hashlib.md5(Path(path).read_bytes(), usedforsecurity=False).hexdigest()


def builtin_entry(name: str = "cifar10") -> dict:
    text = importlib.resources.files("harness").joinpath("data", "datasets.toml").read_text("utf-8")
    return tomllib.loads(text)[name]


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def fixture_manifest(
    path: Path,
    *,
    batches_dir: Path | None = None,
    tarball: Path | None = None,
    md5s: dict[str, str] | None = None,
    archive_md5: str | None = None,
) -> Path:
    """Write a ``DAWNBENCH_DATASETS_MANIFEST`` file: the built-in ``[cifar10]`` entry
    with the fixture's checksums.

    File md5s come from ``batches_dir`` (the unpacked files), or from the regular
    members of ``tarball`` (whose own md5 replaces the archive's), then ``md5s``
    (explicit overrides); ``archive_md5`` sets the tarball's. What is not given
    keeps its official checksum.
    """
    entry = builtin_entry()
    found: dict[str, str] = {}
    if batches_dir is not None:
        for filename in entry["files"]:
            if (Path(batches_dir) / filename).is_file():
                found[filename] = md5_file(Path(batches_dir) / filename)
    if tarball is not None:
        entry["archive"]["md5"] = md5_file(tarball)
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar.getmembers():
                filename = member.name.rpartition("/")[2]
                if member.isfile() and filename in entry["files"]:
                    found[filename] = hashlib.md5(tar.extractfile(member).read(), usedforsecurity=False).hexdigest()
    if archive_md5 is not None:
        entry["archive"]["md5"] = archive_md5
    found.update(md5s or {})
    for filename, digest in found.items():
        entry["files"][filename] = {"md5": digest}
    lines = ["# Test override of harness/data/datasets.toml, written by tests/cifar10_fixture.py", "[cifar10]"]
    lines += [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in entry.items()]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)
