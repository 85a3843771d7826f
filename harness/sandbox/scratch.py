"""The harness's private folders: one per worker (its HOME, TMPDIR, work folder and data copies) and
one per run, named for the harness process that made them, and swept once that process is gone."""
from __future__ import annotations

import fcntl
import functools
import os
import shutil
import tempfile
from pathlib import Path

LOCK_PREFIX = "dawnbench-harness-"
_held: list[int] = []


@functools.lru_cache(maxsize=1)
def _session() -> str:
    """This harness process's id in its scratch folders' names, held by a lock on a file in TMPDIR
    for as long as the process lives. A harness killed with -9 cannot clean up, so the next one
    to start sweeps every folder whose lock nobody holds (sweep_stale)."""
    sweep_stale()
    fd, path = tempfile.mkstemp(prefix=".dawnbench-new-")
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held.append(fd)                     # open, and locked, until the process ends
    session = Path(path).name.rsplit("-", 1)[1]
    os.rename(path, Path(path).with_name(f"{LOCK_PREFIX}{session}.lock"))   # visible only once locked
    return session


def sweep_stale(tmp: Path | None = None) -> list[Path]:
    """Remove the scratch folders of harness processes that are gone; returns what was removed."""
    tmp, removed = Path(tmp or tempfile.gettempdir()), []
    for lock in tmp.glob(f"{LOCK_PREFIX}*.lock"):
        session = lock.name[len(LOCK_PREFIX):-len(".lock")]
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue                     # its harness is alive
        for folder in tmp.glob(f"dawnbench-*-{session}-*"):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        lock.unlink(missing_ok=True)
        os.close(fd)
    return removed


def private_dir(kind: str) -> Path:
    """A folder in TMPDIR named for this harness process (`dawnbench-KIND-SESSION-xxxx`), 0700."""
    return Path(tempfile.mkdtemp(prefix=f"dawnbench-{kind}-{_session()}-"))


def make_scratch(role: str, uid: int | None) -> Path:
    """A private folder for one worker: its HOME, TMPDIR and work folder, wiped when it ends."""
    scratch = private_dir(role)
    for sub in ("home", "tmp", "work", "data"):
        (scratch / sub).mkdir()
    if uid is not None:
        for path in [scratch, *scratch.iterdir()]:
            os.chown(path, uid, uid)
    return scratch


def chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), uid, uid)
