"""What an environment's installed files hold: each distribution's files hashed and checked against its
RECORD, and the files its site-packages hold that no RECORD names (harness.worker_env's record).

A record of names and versions says nothing of an edited `torch/nn/functional.py`; this does. For each
distribution, every file its RECORD names inside a site-packages folder is read and hashed: the
distribution's `files_sha256` is the sha256 over (path relative to site-packages, content sha256), and
`not_as_recorded` names each file whose content is not the sha256 its RECORD gives (or that is gone).
`unrecorded` counts, names and hashes the files of site-packages that no RECORD names (a module dropped
in beside the packages). Left out, so that the same wheels hash the same on every machine: `__pycache__`
(compiled caches, which hold the install time), RECORD itself (it holds the scripts' hashes, which name
the environment's path), the files RECORD places outside site-packages (bin/ scripts, whose first line is
the environment's interpreter), and the content of this project's own editable install's path files.

Hashing a 3 GB environment takes seconds, so the digests are cached per file, keyed by device, inode,
size, modification and change time (a change time cannot be set back: an edited file is read again),
in the harness's own cache folder ($XDG_CACHE_HOME/dawnbench, else ~/.cache/dawnbench), which no
sandboxed worker can write. Standard library only: the image's harness runs it too.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path

CACHE_ENV = "XDG_CACHE_HOME"
SKIPPED = "__pycache__"
NAMED = 20                      # the files named in a record; the rest are counted and hashed
# This project's editable install names the checkout's path in these files: their content is not
# the environment's (worker_env.EXPECTED_PTH is its .pth).
EDITABLE = ("dawnbench", ("__editable__", "direct_url.json"))


def _cache_file(prefix: str) -> Path:
    base = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache") / "dawnbench"
    return base / f"installed-files-{hashlib.sha256(os.path.realpath(prefix).encode()).hexdigest()[:16]}.json"


def _key(st: os.stat_result) -> list:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class Digests:
    """sha256 of files by path, read once per (device, inode, size, mtime, ctime) and cached on disk."""

    def __init__(self, prefix: str, root: str = ""):
        self.path = _cache_file(root and f"{prefix}@{root}" or prefix)
        self.root = root        # where the files are read from: a container's root seen from the host
        try:
            loaded = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = {}
        self.old = loaded if isinstance(loaded, dict) else {}
        self.new: dict[str, list] = {}
        self.read_again = 0         # files hashed (not found in the cache): the cache is written only then

    def __call__(self, named: str) -> str | None:
        """The file's content sha256, or None where it is not a readable regular file."""
        path = self.root + named
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        if os.path.islink(path):
            return "link:" + hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
        key = _key(st)
        cached = self.old.get(named)
        if isinstance(cached, list) and len(cached) == 2 and cached[0] == key:
            self.new[named] = cached
            return cached[1]
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
        except OSError:
            return None
        self.new[named] = [key, digest.hexdigest()]
        self.read_again += 1
        return self.new[named][1]

    def save(self) -> None:
        """Write the cache where a file was read (atomically; a cache that cannot be written is only
        slower next time)."""
        if not self.read_again and len(self.new) == len(self.old):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.path.parent, delete=False, encoding="utf-8") as f:
                f.write(json.dumps(self.new))
            os.replace(f.name, self.path)
        except OSError:
            pass


def _recorded_hex(value: str | None) -> str | None:
    """RECORD's `sha256=<urlsafe base64>` as hex; None for another algorithm or none."""
    if not isinstance(value, str) or not value.startswith("sha256="):
        return None
    text = value[len("sha256="):]
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).hex()
    except ValueError:
        return None


def _editable_file(dist: str, rel: str) -> bool:
    name, prefixes = EDITABLE
    return dist.lower() == name and os.path.basename(rel).startswith(prefixes)


def read(record: dict, root: str = "") -> None:
    """Hash the files of the probe's `record` (worker_env.PROBE: each distribution's `files` as
    [site-packages folder, relative path, RECORD's hash]) in place: each distribution gets `files`
    (a count), `files_sha256` and `not_as_recorded`; the record gets `unrecorded`. `root`: where the
    record's paths are read from (a worker container's /proc/PID/root: harness.sandbox.container_mode)."""
    digests = Digests(str(record.get("prefix", "")), root)
    owned: set[str] = set()
    for dist in record.get("distributions", []):
        lines, off = [], []
        for folder, rel, recorded in dist.pop("files", []):
            path = os.path.join(folder, rel)
            owned.add(path)
            if os.path.basename(rel) == "RECORD" and rel.endswith(".dist-info/RECORD"):
                continue
            found = digests(path)
            expected = _recorded_hex(recorded)
            if expected is not None and found != expected:
                off.append(rel)
            content = "expected" if _editable_file(dist["name"], rel) else (found or "absent")
            lines.append(f"{rel}\0{content}\n")
        dist["files"] = len(lines)
        dist["files_sha256"] = hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()
        dist["not_as_recorded"] = sorted(off)
    stray = []
    for folder in record.get("site_packages", []):
        for top, dirs, files in os.walk(root + folder):
            dirs[:] = sorted(d for d in dirs if d != SKIPPED)
            # a link to a folder is not walked into (os.walk): it is recorded as the link it is
            linked = [d for d in dirs if os.path.islink(os.path.join(top, d))]
            top = top[len(root):]
            for name in sorted(files) + linked:
                path = os.path.join(top, name)
                if path not in owned:
                    stray.append((os.path.relpath(path, folder), digests(path) or "absent"))
    digests.save()
    stray.sort()
    record["unrecorded"] = {"count": len(stray), "files": [rel for rel, _ in stray[:NAMED]],
                            "sha256": hashlib.sha256("".join(f"{r}\0{d}\n" for r, d in stray).encode()).hexdigest()}
