"""What the leaderboard shows of challenges: beside an entry, each verified challenge it won ("1.07x faster than
#1 on the same machine, p = 0.003"), from the challenge folders of the entries' tree.

A challenge folder (`dawnbench challenge --out`) goes into the tree anywhere under a task's folder (e.g.
entries/<Task>/challenges/<name>/). Only one that verifies here counts (dawnbench.challenge_record: every run
re-verified against the eval labels, every figure recomputed from them); its candidate is tied to an entry by
what the runs ran, never by a name: the entry's run is of the same reference folder (its tree sha256) with the
same hyperparameters. A challenge whose candidate is not shown faster gives no line.
"""
from __future__ import annotations

from pathlib import Path

from dawnbench import challenge_record, entries
from harness import safe_read

MAX_DEPTH = 4       # <tree>/<Task>/challenges/<name>/challenge.json: no walk through a whole tree's run folders


def find(tree: Path) -> list[Path]:
    """The challenge folders under `tree`, at most MAX_DEPTH folders down."""
    found = []
    for depth in range(1, MAX_DEPTH + 1):
        found += [p.parent for p in sorted(Path(tree).glob("/".join(["*"] * depth) + "/" + challenge_record.CHALLENGE))]
    return found


def verified(tree: Path, data_root: Path | None = None) -> list[dict]:
    """The challenge.json of every challenge folder under `tree` that verifies here (labels at hand included)."""
    records = []
    for folder in find(tree):
        checked = challenge_record.verify(folder, data_root)
        if checked.failure is None and checked.unverified is None:
            records.append(checked.figures)
    return records


def won_by(result: dict, records: list[dict]) -> list[dict]:
    """The verified challenges an entry's run (its result.json) won as the candidate: same reference folder
    and hyperparameters as the candidate's runs, and `candidate_faster`."""
    tree = (result.get("provenance") or {}).get("reference_tree_sha256") if isinstance(result.get("provenance"),
                                                                                       dict) else None
    return [r for r in records if r.get("candidate_faster") is True
            and r["sides"]["candidate"].get("reference_tree_sha256") == tree and tree is not None
            and r["sides"]["candidate"].get("hyperparameters") == result.get("hyperparameters")]


def lines(loaded: list, statuses: dict[str, str], tree: Path | None, data_root: Path | None) -> dict[str, list[str]]:
    """For each training entry whose run verifies (its path), the lines of the verified challenges it won."""
    records = verified(tree, data_root) if tree is not None else []
    won = {}
    for entry in loaded if records else []:
        run = entries.run_folder(entry.path)
        if entry.kind != "train" or statuses.get(str(entry.path)) != "verified":
            continue
        try:
            result = safe_read.read_json(run / "result.json", run)
        except (safe_read.Refused, OSError):
            continue
        if isinstance(result, dict) and won_by(result, records):
            won[str(entry.path)] = [line(r) for r in won_by(result, records)]
    return won


def line(record: dict, incumbent_rank: int | None = None) -> str:
    """One challenge as the board says it: "1.07x faster than #1 (REF) on the same machine, p = 0.003"."""
    against = f"#{incumbent_rank} ({record['incumbent']})" if incumbent_rank else record["incumbent"]
    lo, hi = record["ratio_ci95"]
    return (f"{record['ratio']:.2f}x faster than {against} on the same machine, p = {record['p_value']:.2g} "
            f"(95% interval {lo:.2f}-{hi:.2f}x, {record['pairs_timed']} interleaved pairs)")
