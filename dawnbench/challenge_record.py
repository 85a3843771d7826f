"""A challenge folder's figures, computed from its run folders alone: what `dawnbench challenge` writes as
challenge.json and what `dawnbench verify CHALLENGE_DIR` recomputes and compares (docs/RULES.md, "Challenges").

    <challenge>/challenge.json                                 figures(...) of the runs below
    <challenge>/runs/<side>/<reference>/<side>-pair<k>-seed<s>/  each a normal run folder (side: candidate, incumbent)
    <challenge>/runs/<side>/<side>-pair<k>-seed<s>.log          a native run's whole output (not checked)

The statistics: pair k's two runs share seed k's and the machine's state, so the candidate's speed is read
pair by pair: d_k = ln(incumbent's time) - ln(candidate's time). The ratio is exp(mean d), the geometric
mean of the pairs' incumbent/candidate time ratios (above 1: the candidate is faster); its 95% interval is
Student's t on the d_k, exponentiated; and the one-sided p that the candidate is faster is the paired t-test
of H0 mean d <= 0 against mean d > 0 (scipy.stats.t, n - 1 degrees of freedom). `candidate_faster` holds when
that p is below 0.025, which is the 95% interval lying wholly above 1 (the two readings never disagree), and
the candidate's own acceptance verdict under its task's rule is `accepted`. A pair with a run that did not
converge measures no time ratio: it is left out of the ratio and counted in `pairs_timed`.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from dawnbench import evidence, interleave
from harness import safe_read, verify_run
from harness.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from harness.tasks import TASKS

CHALLENGE = "challenge.json"
SIDES = ("candidate", "incumbent")        # the interleave's A and B: the candidate runs first in even pairs
CONFIDENCE = 0.95
ALPHA = (1 - CONFIDENCE) / 2              # one-sided, so that p < ALPHA is the interval's low end above 1
RATIO_IS = "incumbent time / candidate time (the candidate's speedup; above 1: the candidate is faster)"
RUN_ID = re.compile(r"^(candidate|incumbent)-pair(\d+)-seed(\d+)$")
# Figures the command and verify both compute with this code from the same numbers; a verifier's scipy may
# round the last digits of p differently, nothing more.
REL_TOL = 1e-9


def run_id(side: str, pair: int, seed: int) -> str:
    return f"{side}-pair{pair}-seed{seed}"


def run_path(side: str, reference: str, pair: int, seed: int) -> str:
    """A run folder's place in the challenge folder, relative to it."""
    return f"runs/{side}/{reference}/{run_id(side, pair, seed)}"


# ---------------------------------------------------------------- statistics

def paired(candidate: list[float], incumbent: list[float]) -> dict:
    """The paired comparison of positive times, pair k = (candidate[k], incumbent[k]): the ratio incumbent /
    candidate (geometric mean), its 95% t interval and the one-sided p that the candidate is faster. Under
    two pairs no interval and no p; pairs that all give one ratio have no spread: the interval is that ratio
    and p is 0 when the candidate is faster, else 1 (Student's t is undefined there)."""
    d = [math.log(i) - math.log(c) for c, i in zip(candidate, incumbent, strict=True)]
    n = len(d)
    if not n:
        return {"n": 0, "ratio": None, "ratio_ci95": None, "p_value": None}
    mean = statistics.fmean(d)
    if n < 2:
        return {"n": 1, "ratio": math.exp(mean), "ratio_ci95": None, "p_value": None}
    stdev = statistics.stdev(d)
    if stdev == 0:
        return {"n": n, "ratio": math.exp(mean), "ratio_ci95": [math.exp(mean)] * 2,
                "p_value": 0.0 if mean > 0 else 1.0}
    from scipy.stats import t
    se = stdev / math.sqrt(n)
    half = float(t.ppf((1 + CONFIDENCE) / 2, n - 1)) * se
    return {"n": n, "ratio": math.exp(mean), "ratio_ci95": [math.exp(mean - half), math.exp(mean + half)],
            "p_value": float(t.sf(mean / se, n - 1))}


def acceptance(results: list[dict], task) -> dict:
    """A side's acceptance verdict under its task's rule (dawnbench.evidence), from its runs' result.json."""
    return evidence.acceptance(results, task)


# ---------------------------------------------------------------- the figures of a challenge

@dataclass
class Runs:
    """The run folders of a challenge, read: result.json by (pair, side), and what does not fit."""
    results: dict[tuple[int, str], dict] = field(default_factory=dict)
    folders: dict[tuple[int, str], Path] = field(default_factory=dict)


def identity(results: list[dict]) -> dict:
    """What a side is, from its runs: the reference, its folder's tree hash, the hyperparameters, the task and
    the threshold; a field the runs disagree on reads as the list of their values (verify says so)."""
    def one(values):
        distinct = [v for i, v in enumerate(values) if v not in values[:i]]
        return distinct[0] if len(distinct) == 1 else distinct
    return {"reference": one([r.get("reference") for r in results]),
            "reference_tree_sha256": one([(r.get("provenance") or {}).get("reference_tree_sha256")
                                          if isinstance(r.get("provenance"), dict) else None for r in results]),
            "hyperparameters": one([r.get("hyperparameters") for r in results]),
            "task": one([r.get("task") for r in results]), "threshold": one([r.get("threshold") for r in results])}


def _time(result: dict | None) -> float | None:
    t = result.get("tta_seconds") if isinstance(result, dict) and result.get("status") == "converged" else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0 else None


def figures(runs: dict[tuple[int, str], dict], pairs: int, interrupted: dict | None = None) -> dict:
    """challenge.json's figures from the runs' result.json contents, by (pair, side): the sides, the order,
    the paired statistics, each side's acceptance and the verdict with its line. A challenge stopped by a signal
    (`interrupted`: the signal, the pairs asked for, the runs of the pair cut short) has the figures of its
    finished pairs and no verdict: a challenge is every pair, so `candidate_faster` is false and its line says so."""
    sides = {side: identity([runs[k, side] for k in range(pairs) if (k, side) in runs]) for side in SIDES}
    order = [{"pair": k, "side": side, "seed": (runs.get((k, side)) or {}).get("seed"),
              "run": run_path(side, str(sides[side]["reference"]), k, (runs.get((k, side)) or {}).get("seed"))}
             for k, side in interleave.order(list(SIDES), pairs)]
    times = [{"pair": k, "candidate": _time(runs.get((k, "candidate"))), "incumbent": _time(runs.get((k, "incumbent")))}
             for k in range(pairs)]
    timed = [p for p in times if p["candidate"] is not None and p["incumbent"] is not None]
    for p in times:
        p["ratio"] = p["incumbent"] / p["candidate"] if p in timed else None
    stats = paired([p["candidate"] for p in timed], [p["incumbent"] for p in timed])
    task = TASKS.get(sides["candidate"]["task"]) if isinstance(sides["candidate"]["task"], str) else None
    verdicts = {side: acceptance([runs[k, side] for k in range(pairs) if (k, side) in runs], task)
                for side in SIDES} if task is not None else {side: None for side in SIDES}
    p = stats["p_value"]
    accepted = (verdicts["candidate"] or {}).get("verdict") == "accepted"
    faster = p is not None and p < ALPHA
    line = verdict_line(sides, stats, verdicts, faster, accepted, pairs, len(timed))
    record = {"candidate": sides["candidate"]["reference"], "incumbent": sides["incumbent"]["reference"],
              "pairs": pairs, "pairs_timed": len(timed), "order": order,
              "ratio": stats["ratio"], "ratio_ci95": stats["ratio_ci95"], "ratio_is": RATIO_IS,
              "p_value": p, "alpha": ALPHA, "confidence": CONFIDENCE,
              "candidate_faster": bool(faster and accepted and interrupted is None), "verdicts": verdicts,
              "sides": sides, "pair_times": times, "line": line}
    if interrupted is not None:
        record["interrupted"] = interrupted
        record["line"] = (f"interrupted ({interrupted.get('signal')}) after {pairs} of "
                          f"{interrupted.get('pairs_requested')} pairs: no verdict (a challenge is every pair); "
                          f"so far: {line}")
    return record


def verdict_line(sides: dict, stats: dict, verdicts: dict, faster: bool, accepted: bool, pairs: int,
                 timed: int) -> str:
    """The challenge's answer in one line."""
    cand, inc = sides["candidate"]["reference"], sides["incumbent"]["reference"]
    if stats["p_value"] is None:
        return (f"no verdict: {timed} of {pairs} pairs timed (both runs converged); a paired test needs 2 at "
                f"least: run more pairs (--pairs {max(2 * pairs, 3)})")
    lo, hi = stats["ratio_ci95"]
    figures_ = f"{stats['ratio']:.3f}x, 95% interval {lo:.3f}-{hi:.3f}x, p = {stats['p_value']:.3g} ({timed} pairs)"
    if faster and accepted:
        return f"{cand} is faster than {inc} on this machine: {figures_}"
    if faster:
        return (f"{cand} runs faster than {inc} ({figures_}) but is not accepted under its task's rule: "
                f"{(verdicts['candidate'] or {}).get('reason', 'no verdict')}")
    return f"{cand} is not shown faster than {inc}: {figures_}; p must be under {ALPHA:g} (more pairs, or a faster recipe)"


# ---------------------------------------------------------------- verify

@dataclass
class Checked:
    lines: list[str] = field(default_factory=list)
    failure: str | None = None
    unverified: str | None = None        # the eval labels are not here: the runs' metrics cannot be recomputed
    figures: dict | None = None          # what the runs give, once every check passed (the board shows it)

    def ok(self, name: str, detail: str) -> None:
        self.lines.append(f"ok   {name}: {detail}")

    def fail(self, name: str, detail: str) -> None:
        self.lines.append(f"FAIL {name}: {detail}")
        self.failure = self.failure or f"{name}: {detail}"


def is_challenge(folder: Path) -> bool:
    return (Path(folder) / CHALLENGE).is_file()


def _read_runs(folder: Path, checked: Checked) -> dict[tuple[int, str], Path]:
    """The run folders on disk, by (pair, side), each where the challenge's layout puts it; a folder that does
    not fit (another side's name, a stray folder) fails."""
    found: dict[tuple[int, str], Path] = {}
    runs = folder / "runs"
    for side_dir in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not side_dir.is_dir():
            continue
        if side_dir.name not in SIDES:
            checked.fail("runs", f"runs/{side_dir.name}/ is no side of a challenge (candidate, incumbent)")
            continue
        for run_dir in sorted(d for ref in side_dir.iterdir() if ref.is_dir() for d in ref.iterdir() if d.is_dir()):
            relative = run_dir.relative_to(folder).as_posix()
            match = RUN_ID.match(run_dir.name)
            if not match or match[1] != side_dir.name:
                checked.fail("runs", f"{relative} is not a {side_dir.name} run of this challenge "
                                     f"({side_dir.name}-pair<k>-seed<s>): swapped between sides, or added")
                continue
            found[int(match[2]), side_dir.name] = run_dir
    return found


def verify(folder: Path, data_root: Path | None = None) -> Checked:
    """Every check of a challenge folder, recomputed from its run folders (never from challenge.json, which is
    compared with what they give)."""
    folder = Path(folder)
    checked = Checked()
    try:
        claimed = safe_read.read_json(folder / CHALLENGE, folder)
    except safe_read.Refused as e:
        checked.fail(CHALLENGE, e.reason)
        return checked
    pairs = claimed.get("pairs") if isinstance(claimed, dict) else None
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
        checked.fail(CHALLENGE, f"pairs is {pairs!r}, not a number of pairs (a challenge.json of `dawnbench challenge`?)")
        return checked
    found = _read_runs(folder, checked)
    interrupted = _interrupted(claimed, pairs, found, folder, checked)
    expected = interleave.order(list(SIDES), pairs)
    missing = [f"the {side}'s run of pair {k}" for k, side in expected if (k, side) not in found]
    extra = [found[key].relative_to(folder).as_posix() for key in found if key not in expected
             and not (interrupted is not None and key[0] == pairs)]       # the pair cut short: kept, never counted
    found = {key: run for key, run in found.items() if key in expected}
    if missing or extra:
        checked.fail("runs", "; ".join([*(f"{m} is missing" for m in missing),
                                        *(f"{e} is beyond the challenge's {pairs} pairs" for e in extra)]))
    elif checked.failure is None:
        cut = len((interrupted or {}).get("cut_short", []))
        checked.ok("runs", f"{len(found)} run folders, {pairs} pairs, one a side each" + (
            f"; interrupted: {cut} run{'s' * (cut != 1)} of pair {pairs} cut short, kept and not counted"
            if interrupted is not None else ""))
    results: dict[tuple[int, str], dict] = {}
    for key, run_dir in sorted(found.items()):
        relative = run_dir.relative_to(folder).as_posix()
        try:
            report = verify_run.verify(run_dir, data_root)
        except verify_run.VerifyError as e:
            checked.fail("run", f"{relative}: {e}")
            continue
        if report.first_failure is not None:
            checked.fail("run", f"{relative} does not verify: {report.status}")
        elif report.labels_problem is not None:
            checked.unverified = report.labels_problem
        result = safe_read.read_json(run_dir / "result.json", run_dir)
        if not isinstance(result, dict):
            checked.fail("run", f"{relative}/result.json is not an object")
            continue
        if result.get("run_id") != run_dir.name or result.get("seed") != int(RUN_ID.match(run_dir.name)[3]):
            checked.fail("run", f"{relative}: its result.json is of run {result.get('run_id')!r} (seed "
                                f"{result.get('seed')!r}), not of this folder: moved between sides or pairs")
        results[key] = result
    if checked.failure is None:
        checked.ok("run folders", f"each of the {len(results)} verifies (log, stored predictions, result.json, TSV)")
        _order_check(folder, found, expected, checked)
        _machine_check(found, results, checked)
        _sides_check(results, pairs, checked)
    if checked.failure is None:
        recomputed = figures(results, pairs, interrupted)
        recomputed["load"] = interleave.machine_load([interleave.env_load(found[key]) for key in expected])
        _figures_check(claimed, recomputed, checked)
    return checked


def _interrupted(claimed: dict, pairs: int, found: dict, folder: Path, checked: Checked) -> dict | None:
    """A challenge stopped by a signal (challenge.json's `interrupted`): its record recomputed from the folder, the
    runs of the pair after its finished ones (cut short: kept, never counted) as found there; None for a whole one."""
    said = claimed.get("interrupted")
    if said is None:
        return None
    asked = said.get("pairs_requested") if isinstance(said, dict) else None
    if (not isinstance(said, dict) or said.get("signal") not in ("SIGINT", "SIGTERM") or isinstance(asked, bool)
            or not isinstance(asked, int) or asked <= pairs):
        checked.fail(CHALLENGE, f"interrupted is {_short(said)}: not what `dawnbench challenge` writes when stopped "
                                f"(the signal, SIGINT or SIGTERM, and more pairs asked for than the {pairs} finished)")
        return None
    cut = sorted(run.relative_to(folder).as_posix() for (k, _), run in found.items() if k == pairs)
    return {"signal": said["signal"], "pairs_requested": asked, "cut_short": cut}


def _span(run_dir: Path) -> tuple[int, int]:
    times = [e["time_ms"] for e in verify_run.read_events(run_dir)]
    return min(times), max(times)


def _order_check(folder: Path, found: dict, expected: list, checked: Checked) -> None:
    """The runs ran one after the other in the challenge's order (A B, B A, ...), by their logs' clocks."""
    previous = None
    for k, side in expected:
        start, end = _span(found[k, side])
        if previous is not None and start < previous[1]:
            checked.fail("order", f"{found[k, side].relative_to(folder).as_posix()} started before "
                                  f"{previous[0]} ended: not the challenge's order (A B, B A, ...) of runs one at a time")
            return
        previous = (found[k, side].relative_to(folder).as_posix(), end)
    checked.ok("order", f"the {len(expected)} runs ran one at a time, candidate and incumbent alternating first")


def _machine_check(found: dict, results: dict, checked: Checked) -> None:
    """Every run on one machine: one hardware (result.json) and one machine in env.json's words."""
    hosts = {(results[key].get("hardware"), _machine(found[key])) for key in results}
    if len(hosts) != 1:
        checked.fail("machine", f"the runs ran on {len(hosts)} machines ({'; '.join(sorted(map(str, hosts)))}): "
                                f"a challenge times both sides on one")
        return
    checked.ok("machine", f"every run on one machine ({next(iter(hosts))[0]})")


def _machine(run_dir: Path) -> str:
    """The machine a run ran on, as env.json describes it: its CPU, its GPUs and, natively, its hostname (a
    container's is its own, a new one each run)."""
    try:
        env = safe_read.read_json(run_dir / "env.json", run_dir)
    except (safe_read.Refused, OSError):
        env = None
    env = env if isinstance(env, dict) else {}
    host = "a container" if env.get("container") else env.get("hostname")
    return f"{host}, {env.get('cpu')}, GPUs {env.get('gpus') or 'none'}"


def _sides_check(results: dict, pairs: int, checked: Checked) -> None:
    """Each side's runs are of one code: one reference, tree hash, hyperparameters and threshold."""
    for side in SIDES:
        who = identity([results[k, side] for k in range(pairs)])
        split = [name for name, value in who.items() if isinstance(value, list)]     # identity's disagreement
        if split:
            checked.fail("sides", f"the {side}'s runs differ in {', '.join(split)}: a side is one entry's code, "
                                  f"run {pairs} times (swapped between sides?)")
            return
    thresholds = {results[key].get("threshold") for key in results}
    if len(thresholds) != 1:
        checked.fail("sides", f"the sides ran at different thresholds ({', '.join(map(str, thresholds))})")
        return
    checked.ok("sides", "each side's runs are of one reference, tree hash and hyperparameters, at one threshold")


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _figures_check(claimed: dict, recomputed: dict, checked: Checked) -> None:
    """challenge.json against the figures its runs give, key by key (`line` included: it is what is shown)."""
    differing = [key for key in recomputed if not _same(claimed.get(key), recomputed[key])]
    if differing:
        shown = "; ".join(f"{key}: {_short(claimed.get(key))} written, {_short(recomputed[key])} from the runs"
                          for key in differing[:3])
        checked.fail(CHALLENGE, f"{shown}{' ...' if len(differing) > 3 else ''} (edited, or not this folder's)")
        return
    checked.ok(CHALLENGE, f"every figure is what the runs give: {recomputed['line']}")
    checked.figures = recomputed


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def main(folder: Path, data_root: Path | None, emit, emit_error) -> int:
    """`verify CHALLENGE_DIR`: a line per check and a verdict; 0 verified, 1 a disagreement, 2 no eval labels."""
    checked = verify(folder, data_root)
    for line in checked.lines:
        emit(line)
    if checked.failure is not None:
        emit(f"disagreement: {checked.failure}")
        return EXIT_FAILED
    if checked.unverified is not None:
        emit_error(f"not verified: {checked.unverified}")
        return EXIT_USAGE
    emit(f"verified: challenge of {folder.name}: its runs give every figure of {CHALLENGE} (consistency, not "
         f"authenticity: the runs are the challenger's machine's)")
    return EXIT_OK
