"""The DAWNBench v1 archive: which entries without a run folder the leaderboard ranks.

An entry with no run folder (no `<stem>.run/` beside it) has nothing behind its figures: no log of the
harness's, no stored predictions, nothing to reproduce. The published DAWNBench v1 entries are such
entries, and keep their ranks, in archive tables of their own (dawnbench.ranking); any other (one
typed by hand, for any task) ranks nowhere. An entry is the archive's when its files are, byte for
byte: the sha256 of its JSON (and, for training, its TSV) listed under its path in the archive list,
`dawnbench/data/v1-archive.sha256` (`sha256  <Task>/<kind>/<file>`, as sha256sum writes it), or the
list `dawnbench leaderboard --archive FILE` names.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from dawnbench import entries
from dawnbench.entries import Entry
from harness import safe_read
from harness.errors import UsageError

ARCHIVE_FILE = Path(__file__).parent / "data" / "v1-archive.sha256"
_LINE = re.compile(r"([0-9a-f]{64})  ([^\n]+)")
MAX_BYTES = 4 << 20         # a list of thousands of entries; never a file to read whole unbounded


def load(path: Path | None = None) -> frozenset[tuple[str, str]]:
    """{(sha256, path in the tree)} of the archive list (default the published v1 entries'); a list
    that cannot be read, or a line that is not `sha256  path`, is one line (UsageError)."""
    path = Path(path) if path is not None else ARCHIVE_FILE
    try:
        text = safe_read.read_bytes(path, path.parent, MAX_BYTES, "folder", "the archive list").decode("utf-8")
    except (safe_read.Refused, UnicodeDecodeError) as e:
        reason = e.reason if isinstance(e, safe_read.Refused) else "not UTF-8 text"
        raise UsageError(f"--archive {path}: {reason}; give a list of `sha256  <Task>/<kind>/<file>` lines, "
                         f"as sha256sum writes them") from None
    listed = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise UsageError(f"--archive {path}:{number}: not `sha256  <Task>/<kind>/<file>` (two spaces between, "
                             f"as sha256sum writes it)")
        listed.add((match[1], match[2]))
    return frozenset(listed)


def archived(entry: Entry, listed: frozenset[tuple[str, str]]) -> bool:
    """Whether the entry's files are the archive's: its JSON and, for training, its TSV, each listed
    with its sha256 under its path in the tree."""
    root = entries.tree_root(entry.path)
    files = [entry.path] + ([entries.tsv_path(entry.path, entry.fields)] if entry.kind == "train" else [])
    for file in files:
        try:
            data = safe_read.read_bytes(file, root, safe_read.MAX_TSV_BYTES)
            where = file.relative_to(root).as_posix()
        except (safe_read.Refused, ValueError):
            return False
        if (hashlib.sha256(data).hexdigest(), where) not in listed:
            return False
    return True
