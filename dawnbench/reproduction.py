"""reproduction.json: what `dawnbench reproduce` found, and the leaderboard's words for it.

`dawnbench reproduce` writes the record into the run folder it ran again (for an entry, the entry's
`<stem>.run/`, where `dawnbench submit` put its run): the claimed figures and the reproduced ones
side by side, the environment of each, the tolerances and the verdict. The leaderboard reads it
back, as untrusted input (harness.safe_read), and shows one of

    reproduced                                    (the same curve, and the time within the tolerance)
    accuracy reproduced, time not compared (other hardware)    (not counted as reproduced: is_reproduced)
    not reproduced: <the first difference, with both figures>
    not tried                                     (no record, or a record of another log)
    not tried: needs N processes, ...             (the machine that tried lacked the run's ranks)

The record names the sha256 of the run's DAWNBench log, so a record left behind by an earlier
version of the entry is not shown as this version's.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from dawnbench import entries, verification
from harness import safe_read

RECORD = "reproduction.json"
REPRODUCED = "reproduced"
ACCURACY_ONLY = "accuracy reproduced, time not compared (other hardware)"
OLD_ACCURACY_ONLY = "reproduced: accuracy only"     # the same verdict, as records written before said it
NOT_REPRODUCED = "not reproduced"
NOT_TRIED = "not tried"
VERDICTS = (REPRODUCED, ACCURACY_ONLY, OLD_ACCURACY_ONLY, NOT_REPRODUCED, NOT_TRIED)


def is_reproduced(words: str | None) -> bool:
    """Whether the leaderboard's words for a reproduction count as reproduced, where anything sorts or
    filters on it: only `reproduced` (time compared too). "accuracy reproduced, time not compared" is
    not: the claimed time was never run again."""
    return words == REPRODUCED


def log_sha256(run_dir: Path, result: dict) -> str | None:
    """The sha256 of the run's DAWNBench TSV (the log an entry is ranked by), or None when absent."""
    name = result.get("logFilename")
    if not isinstance(name, str) or Path(name).name != name:
        return None
    try:
        return hashlib.sha256(safe_read.read_bytes(run_dir / name, run_dir, safe_read.MAX_TSV_BYTES)).hexdigest()
    except safe_read.Refused:
        return None


def status(run_dir: Path, root: Path) -> str:
    """The leaderboard's words for the reproduction of the run in `run_dir` (inside `root`)."""
    path = Path(run_dir) / RECORD
    if not (path.exists() or path.is_symlink()):
        return NOT_TRIED
    try:
        record = safe_read.read_json(path, root)
        result = safe_read.read_json(Path(run_dir) / "result.json", root)
    except safe_read.Refused as e:
        return f"{NOT_TRIED}: {RECORD} cannot be read ({e.reason})"
    if not isinstance(record, dict) or not isinstance(result, dict) or record.get("verdict") not in VERDICTS:
        return f"{NOT_TRIED}: {RECORD} holds no verdict of `dawnbench reproduce`"
    if record.get("log_sha256") != log_sha256(Path(run_dir), result):
        return f"{NOT_TRIED}: {RECORD} is of another log than this entry's (reproduce it again)"
    if record["verdict"] == NOT_REPRODUCED:
        first = record.get("differences")
        first = first[0] if isinstance(first, list) and first and isinstance(first[0], str) else "differs"
        return f"{NOT_REPRODUCED}: {_line(first)}"
    if record["verdict"] == NOT_TRIED:      # e.g. a run of more processes than the machine that tried had
        reason = record.get("reason")
        return f"{NOT_TRIED}: {_line(reason)}" if isinstance(reason, str) and reason else NOT_TRIED
    if record["verdict"] == OLD_ACCURACY_ONLY:
        return ACCURACY_ONLY
    return record["verdict"]


def _line(text: str, limit: int = 300) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


def statuses(loaded: list, root: Path | None = None) -> dict[str, str]:
    """{entry JSON path: the reproduction's words} of every training entry, from its `<stem>.run/`."""
    found = {}
    for entry in loaded:
        if entry.kind != "train":
            continue
        run = verification.run_folder(entry.path)
        tree = entries.tree_root(entry.path) if root is None else Path(root)
        inside = run.is_dir() and not run.is_symlink() and safe_read.inside(run, tree)
        found[str(entry.path)] = status(run, tree) if inside else NOT_TRIED
    return found
