"""A series' figures recomputed from its run folders, never read from what was written about them.

`dawnbench run REF --runs N` writes summary.json beside its run folders, and `dawnbench submit`
copies the runs beside the entry (<stem>.series/<run>/) with the entry's `runs` block. Both are
files an entrant can edit, so every tool that reads a series recomputes its figures here from the
runs' own result.json: `verify` of a series folder, `validate` of an entry with `runs`, `submit`
(which writes the block recomputed, not copied) and `reproduce` of a series entry.

    read_runs(folder)              the runs' result.json contents, checked to be one series
    entry_runs(results, seed)      an entry's `runs` block (with the series' acceptance)
    difference(written, computed)  the first field where a written summary or block is not the runs'
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from dawnbench import series
from harness import safe_read
from harness.errors import DawnbenchError, shown

RUN_NAME = re.compile(r"seed(\d+)")
# summary.json's fields that say how the series went, not what its runs are: nothing to recompute
PROGRESS = ("requested_runs", "interrupted", "in_progress")


class SeriesError(DawnbenchError):
    """A folder that is not a readable series: one line."""


def read_runs(folder: Path, root: Path | None = None) -> list[dict]:
    """Every run of the series folder (each seed<k>/ holding a result.json), seed by seed, each with its
    `run_dir`. A series runs consecutive seeds, each in seed<k>/ with that seed in its result.json: a
    folder that is not (a run taken out of the middle, renamed, or another series' run) is refused in one
    line. Read as untrusted files (harness.safe_read, nothing outside `root`, default the folder)."""
    folder = Path(folder)
    root = folder if root is None else root
    try:
        names = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                       and (p / "result.json").exists())
    except OSError as e:
        raise SeriesError(f"{folder}: cannot be read ({e.strerror or type(e).__name__})") from None
    runs = []
    for name in names:
        try:
            result = safe_read.read_json(folder / name / "result.json", root)
        except safe_read.Refused as e:
            raise SeriesError(f"{folder / name / 'result.json'}: {e.reason}") from None
        found = RUN_NAME.fullmatch(name)
        seed = result.get("seed") if isinstance(result, dict) else None
        if not found or not isinstance(seed, int) or isinstance(seed, bool) or int(found.group(1)) != seed:
            raise SeriesError(f"{folder / name}: not a run of this series (its folder is seed<k>, k its result.json's "
                              f"seed; this one's seed is {seed!r})")
        runs.append({**result, "run_dir": name})
    if not runs:
        raise SeriesError(f"{folder}: no run folder (seed<k>/ with result.json): give a series folder of "
                          f"`dawnbench run REF --runs N`")
    runs.sort(key=lambda r: r["seed"])
    seeds = [r["seed"] for r in runs]
    gaps = sorted(set(range(seeds[0], seeds[-1] + 1)) - set(seeds))
    if gaps:
        raise SeriesError(f"{folder}: seed{gaps[0]}/ is missing between seed{seeds[0]} and seed{seeds[-1]}: a series "
                          f"runs consecutive seeds, and every run counts (run the series again)")
    return runs


def summary(results: list[dict]) -> dict:
    """summary.json's figures of these runs, as the series wrote them (dawnbench.series.summarize); one
    line for runs that cannot be summarized together."""
    try:
        return series.summarize(results)
    except ValueError as e:
        raise SeriesError(str(e)) from None


def entry_runs(results: list[dict], submitted_seed: object) -> dict:
    """An entry's `runs` block: the series' statistics and its acceptance (dawnbench.evidence), every
    run's seed, status and time, and which seed the entry is."""
    s = summary(results)
    tta = s["tta_seconds"]
    return {
        "n": s["n"], "converged": s["converged"], "fraction_converged": s["fraction_converged"],
        "median_tta_seconds": tta["median"], "min_tta_seconds": tta["min"], "max_tta_seconds": tta["max"],
        "mean_tta_seconds": tta["mean"], "stdev_tta_seconds": tta["stdev"], "cv": tta["cv"],
        "olympic_mean_tta_seconds": tta["olympic_mean"], "submitted_seed": submitted_seed,
        "per_run": [{"seed": r["seed"], "status": r["status"], "tta_seconds": r["tta_seconds"]} for r in s["runs"]],
        "acceptance": s["acceptance"],
    }


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return type(a) is type(b) and a == b


def difference(written: object, computed: object, path: str = "") -> tuple[str, object, object] | None:
    """(field, written value, recomputed value) of the first field where `written` is not `computed`
    (numbers within rounding), or None. A field `computed` lacks is a difference too: nothing unchecked."""
    if isinstance(computed, dict) and isinstance(written, dict):
        for key in [*computed, *(k for k in written if k not in computed)]:
            found = difference(written.get(key), computed.get(key), f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(computed, list) and isinstance(written, list) and len(computed) == len(written):
        for k, (w, c) in enumerate(zip(written, computed)):
            found = difference(w, c, f"{path}[{k}]")
            if found:
                return found
        return None
    return None if _same(written, computed) else (path or "(the whole)", written, computed)


def summary_problem(folder: Path, written: object, results: list[dict]) -> str | None:
    """The one line saying where summary.json is not its runs' (None when it is theirs)."""
    if not isinstance(written, dict):
        return "summary.json is not a JSON object (run the series again)"
    found = difference({k: v for k, v in written.items() if k not in PROGRESS}, summary(results))
    if found is None:
        return None
    field, was, is_ = found
    return (f"summary.json's {field} is {shown(was)}, its runs give {shown(is_)} (recomputed from "
            f"{', '.join(r['run_dir'] for r in results)}): a summary is its runs', never edited (run the series again)")


def verify(folder: Path, data_root: Path | None = None, emit=print, emit_error=None) -> int:
    """`dawnbench verify SERIES`: every run verified as `verify RUN_DIR` does (its log, stored predictions,
    result.json and TSV agree), then summary.json recomputed from those runs (harness.verify_run's exit
    codes: 0 verified, 1 a disagreement, 2 no eval labels here). A folder that is not a series is one line."""
    from harness import verify_run
    from harness.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
    folder = Path(folder)
    results = read_runs(folder)
    failures, missing_labels = [], None
    for r in results:
        report = verify_run.verify(folder / r["run_dir"], data_root)
        emit(f"{'ok  ' if report.verified else 'FAIL' if report.first_failure else 'skip'} {r['run_dir']}: "
             f"{report.verdict()}")
        if report.first_failure is not None:
            failures.append(f"{r['run_dir']}: {report.status}")
        elif report.labels_problem is not None:
            missing_labels = report.labels_problem
    try:
        written = safe_read.read_json(folder / series.SUMMARY, folder)
    except safe_read.Refused as e:
        raise SeriesError(f"{folder / series.SUMMARY}: {e.reason} (a series folder holds the summary.json "
                          f"of `dawnbench run --runs N`)") from None
    problem = summary_problem(folder, written, results)
    if problem:
        failures.append(problem)
        emit(f"FAIL summary: {problem}")
    else:
        a = written.get("acceptance") or {}
        emit(f"ok   summary: recomputed from its {len(results)} runs; {a.get('rule')} rule: {a.get('verdict')} "
             f"(one-sided p {a.get('p_value')}, time interval {a.get('tta_ci95_seconds')} s, {a.get('ci_method')})")
    if failures:
        emit(f"disagreement: {failures[0]}")
        return EXIT_FAILED
    if missing_labels is not None:
        (emit_error or emit)(f"not verified: {missing_labels}")
        return EXIT_USAGE
    emit(f"verified: a series of {len(results)} runs and its summary ({verify_run.CONSISTENCY})")
    return EXIT_OK
