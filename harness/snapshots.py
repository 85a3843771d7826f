"""The snapshot a predictor scores: taken out of the trainer's reach, capped, hashed.

After each epoch the frozen trainer's snapshot is copied into a folder the trainer cannot see or
write, file by file, hashing as it goes; the predictor loads that copy, and the run keeps it. So the
model a run publishes is byte for byte the one whose predictions were scored, and the log holds its
hash. A snapshot is a model, not a channel: only regular files and folders, and no more bytes than
the cap (docs/RULES.md, "The eval span").
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from harness.errors import DawnbenchError

CHUNK = 1 << 20


class SnapshotRefused(DawnbenchError):
    """The trainer's snapshot is not a plain model folder, or is over the cap: the run is DNC."""


@dataclass(frozen=True)
class Taken:
    sha256: str     # tree_sha256 of the copy
    bytes: int


def _files(root: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of every file under `root`, sorted; refuses what is not a plain file or folder."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            mode = os.lstat(path).st_mode
            rel = path.relative_to(root).as_posix()
            if stat.S_ISREG(mode):
                found.append((rel, path))
            elif not stat.S_ISDIR(mode):
                raise SnapshotRefused(f"the snapshot holds {rel}, which is not a regular file or folder "
                                      f"(a link or a device); a snapshot is the model's files only")
    return sorted(found)


def _manifest_line(rel: str, size: int, digest: str) -> bytes:
    return f"{rel}\0{size}\0{digest}\n".encode()


def manifest_sha256(files: dict[str, tuple[int, str]]) -> str:
    """tree_sha256 of a folder from its manifest ({relative posix path: (size, sha256)}), without the files:
    what a record of the files a process loaded (inference.json's model_source) says the folder hashed to."""
    tree = hashlib.sha256()
    for rel in sorted(files):
        tree.update(_manifest_line(rel, *files[rel]))
    return tree.hexdigest()


def tree_sha256(root: Path) -> str:
    """One sha256 for a folder: over the sorted lines `path NUL size NUL sha256-of-file`."""
    tree = hashlib.sha256()
    for rel, path in _files(root):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                digest.update(chunk)
        tree.update(_manifest_line(rel, path.stat().st_size, digest.hexdigest()))
    return tree.hexdigest()


def take(source: Path, target: Path, cap_bytes: int) -> Taken:
    """Copy the snapshot `source` to `target` (which must not exist), hashing as it copies; refuse
    links, devices and more than `cap_bytes`. The copy is readable by all and writable by none but
    the harness."""
    if not source.is_dir():
        raise SnapshotRefused(f"the trainer wrote no snapshot folder at the end of the epoch ({source.name}); "
                              f"save(path) must create the folder `path`")
    tree, total = hashlib.sha256(), 0
    target.mkdir(mode=0o755)
    try:
        for rel, path in _files(source):
            out = target / rel
            out.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            digest = hashlib.sha256()
            with open(path, "rb") as src, open(out, "wb") as dst:
                for chunk in iter(lambda: src.read(CHUNK), b""):
                    total += len(chunk)
                    if total > cap_bytes:
                        raise SnapshotRefused(
                            f"the snapshot is over its task's cap of {cap_bytes / 2**20:g} MiB; a snapshot is the "
                            f"model, not data or caches (the cap is harness/data/tasks.toml's max_snapshot_mib: "
                            f"docs/RULES.md, \"Snapshots and the model that is scored\")")
                    digest.update(chunk)
                    dst.write(chunk)
            os.chmod(out, 0o644)
            tree.update(_manifest_line(rel, out.stat().st_size, digest.hexdigest()))
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return Taken(tree.hexdigest(), total)
