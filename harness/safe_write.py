"""The run folder and its files, written so that a failure is one line and never a file that looks complete.

- `new_run_dir`: results/<REF>[/<series id>]/<run id>, every part a plain folder name
  (harness.paths.check_name), checked to resolve under the results root; creating it is the check
  that the results folder is writable, before the run starts.
- `RunFolder`: that folder as it was made; before every write the run's files check that their path
  still leads to it (not removed, not swapped for a link to somewhere outside --results), and that a
  file kept open is still in it. Otherwise the run stops, DNC, in one line: `rm -rf results` mid-run
  had the lines written into deleted files and the folder made again, whole-looking but for its
  log; a run folder replaced by a link had the files written where the link led (issue 47).
- `LineFile`: the TSV and events.jsonl, one write call per line (a crash loses at most the line
  being written); a failed write is cut back to the last whole line.
- `write_json`: result.json, env.json, summary.json: temp file, fsync, rename; whole or absent.
- `copy_tree`: the model folder, copied under a temporary name and renamed when whole.

Each OSError (a full disk, a read-only file system, no permission) becomes a WriteError naming the
file and what the error means; the run stops and writes no result.json.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import time
from pathlib import Path

from harness import paths
from harness.errors import EXIT_FAILED, DawnbenchError, UsageError

_HINTS = {
    errno.ENOSPC: "the disk is full: free space there, or give {option} DIR on another disk",
    errno.EDQUOT: "the disk quota is used up: free space there, or give {option} DIR on another disk",
    errno.EROFS: "the file system is read-only: give a writable {option} DIR",
    errno.EACCES: "no permission: give a {option} DIR this user can write",
    errno.EPERM: "no permission: give a {option} DIR this user can write",
}
WRITE_SIDE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)     # errors only a write gives, whatever file names them


def _errno_of(exc: OSError) -> int | None:
    if exc.errno is not None:
        return exc.errno
    # shutil.copytree gathers its failures into one shutil.Error: [(src, dst, "[Errno 28] ..."), ...]
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        found = re.search(r"\[Errno (\d+)\]", str(exc.args[0][0][-1]))
        return int(found.group(1)) if found else None
    return None


def write_problem(path: str | os.PathLike, exc: OSError, option: str = "--results") -> str:
    """One line: `path` could not be written, what the error means, and the fix, which names the
    command's output option."""
    code = _errno_of(exc)
    meaning = os.strerror(code) if code is not None else " ".join(str(exc).split())
    name = f" ({errno.errorcode[code]})" if code in errno.errorcode else ""
    hint = _HINTS.get(code, "check the {option} folder").format(option=option)
    return f"cannot write {path}: {meaning}{name}; {hint}"


class WriteError(DawnbenchError):
    """A file of an output folder could not be written: one line with the file, the error's meaning and the fix."""

    def __init__(self, path: str | os.PathLike, exc: OSError, option: str = "--results"):
        super().__init__(write_problem(path, exc, option))
        self.path, self.errno = Path(path), _errno_of(exc)


class RunFolderChanged(WriteError):
    """The run folder is no longer the one the run made: removed, or replaced (by a link). The run ends DNC,
    and nothing more is written anywhere."""

    exit_code = EXIT_FAILED

    def __init__(self, path: Path, what: str):
        DawnbenchError.__init__(self, f"the run folder {path} {what} during the run: the run ends DNC and writes "
                                      f"nothing more (keep the results folder in place until the run ends)")
        self.path, self.errno = Path(path), None


class RunFolder:
    """The run folder as `new_run_dir` made it (its device and inode): `check()` before every write."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        made = os.stat(self.path, follow_symlinks=False)
        self.identity = (made.st_dev, made.st_ino)

    def check(self) -> None:
        """RunFolderChanged unless the folder's path still leads to the folder the run made."""
        try:
            now = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            raise RunFolderChanged(self.path, "was removed") from None
        except OSError as exc:
            raise WriteError(self.path, exc) from None
        if stat.S_ISLNK(now.st_mode):
            raise RunFolderChanged(self.path, f"was replaced by a link (to {os.readlink(self.path)})")
        if (now.st_dev, now.st_ino) != self.identity:
            raise RunFolderChanged(self.path, "was replaced by another folder")

    def check_file(self, fd: int, path: Path) -> None:
        """`check()`, and that the file open as `fd` is still the one at `path`."""
        self.check()
        open_file = os.fstat(fd)
        try:
            named = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            raise RunFolderChanged(self.path, f"lost its file {path.name}") from None
        if open_file.st_nlink == 0 or (named.st_dev, named.st_ino) != (open_file.st_dev, open_file.st_ino):
            raise RunFolderChanged(self.path, f"had its file {path.name} removed or replaced")


class RunDirExists(UsageError):
    """The run id names a folder that is there already."""


def new_run_dir(results_root: str | os.PathLike, reference: str, seed: int, run_id: str | None = None,
                series_id: str | None = None) -> Path:
    """Create and return a new run folder; never an existing one, so no result is overwritten."""
    for value, what in ((reference, "reference name"), (series_id, "--series-id"), (run_id, "--run-id")):
        if value is not None:
            paths.check_name(value, what)
    root = Path(results_root)
    base = root / reference / (series_id or "")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(base, exc) from None
    stem = run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-seed{seed}"
    for n in range(1, 1000):
        candidate = base / (stem if n == 1 else f"{stem}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            if run_id:
                raise RunDirExists(f"run folder {candidate} already exists; choose another --run-id") from None
            continue
        except OSError as exc:
            raise WriteError(candidate, exc) from None
        if not paths.inside(candidate, root):
            # The names are plain, so only a link inside the results folder leads here.
            candidate.rmdir()
            raise UsageError(f"run folder {candidate} resolves to {candidate.resolve()}, outside the results folder "
                             f"{root.resolve()}; remove the link or give another --results DIR")
        return candidate
    raise UsageError(f"could not create a run folder under {base}: 999 folders named {stem}* exist; give --run-id")


class LineFile:
    """A text file written a line at a time, each line one write to the OS (nothing waits in a buffer).
    In a run folder (`folder`), each line first checks the folder and the file are still the run's."""

    def __init__(self, path: str | os.PathLike, append: bool = False, folder: RunFolder | None = None):
        self.path, self.folder = Path(path), folder
        if folder is not None:
            folder.check()
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
        try:
            self._fd: int | None = os.open(self.path, flags, 0o644)
            self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise WriteError(self.path, exc) from None

    def write(self, text: str) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        if self.folder is not None:
            try:
                self.folder.check_file(self._fd, self.path)
            except WriteError:
                self.close()
                raise
        encoded = text.encode("utf-8")
        data = memoryview(encoded)
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as exc:
            # No half line stays behind to be read as a whole one.
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            self.close()
            raise WriteError(self.path, exc) from None
        self._size += len(encoded)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd is None


def write_json(path: str | os.PathLike, obj, option: str = "--results", folder: RunFolder | None = None) -> None:
    """Write `obj` as JSON to `path` atomically: a reader finds the whole file or none. In a run folder
    (`folder`), checked to be the run's before the file is made and before it takes its name."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        if folder is not None:
            folder.check()
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if folder is not None:
            folder.check()
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteError(path, exc, option) from None


def copy_tree(source: str | os.PathLike, target: str | os.PathLike, folder: RunFolder | None = None) -> None:
    """Copy the folder `source` to `target` (which must not exist) so that `target` is whole or absent; in a
    run folder (`folder`), checked to be the run's before the copy and before it takes its name."""
    target = Path(target)
    partial = target.with_name(target.name + ".partial")
    try:
        if folder is not None:
            folder.check()
        shutil.copytree(source, partial, symlinks=True)
        if folder is not None:
            folder.check()
        os.rename(partial, target)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise WriteError(target, exc) from None
