"""The evidence of a series: its acceptance verdict under its task's rule, and the figures with their
intervals (docs/RULES.md, "Acceptance rules").

    acceptance(results, task)   the dict summary.json carries as "acceptance" (and an entry of a
                                series as runs.acceptance), from the runs' result.json contents
    interval(values)            a mean's 95% interval (Student's t), with the median

Every figure here is recomputed from the runs' own result.json, never read from a summary or an
entry (dawnbench.series writes it, `verify`, `validate` and `submit` recompute it). The statistics
are scipy's (the host tools' environment; the harness stays numpy-only): a one-sided one-sample
t-test of the runs' final metric against the threshold, in the direction the task's kind says is
better (harness.task_kinds.TaskKind.margin), and a t interval of the mean time.
"""
from __future__ import annotations

import math
import statistics

from harness.errors import DawnbenchError

CONFIDENCE = 0.95
CI_METHOD = "t"               # the times' interval: Student's t on the runs' times (said in the output)
SINGLE, MEAN = "single", "mean"
ACCEPTED, REFUSED = "accepted", "refused"
CONVERGED = "converged"       # harness.runner.CONVERGED, as result.json writes it


class EvidenceError(DawnbenchError):
    """The runs cannot be judged together (another reference or threshold): one line."""


def _number(value: object) -> float | None:
    """A finite number of a result.json (which an entrant can edit), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def interval(values, confidence: float = CONFIDENCE) -> dict:
    """{"mean", "median", "lo", "hi", "method"}: the mean of `values` with its two-sided Student-t
    interval at `confidence` (lo = hi = the mean when every value is the same; None under two
    values, which measure no spread)."""
    values = [float(v) for v in values]
    n = len(values)
    mean = statistics.fmean(values) if n else None
    lo = hi = None
    if n >= 2:
        stdev = statistics.stdev(values)
        half = 0.0
        if stdev > 0:
            from scipy.stats import t
            half = float(t.ppf((1 + confidence) / 2, n - 1)) * stdev / math.sqrt(n)
        lo, hi = mean - half, mean + half
    return {"mean": mean, "median": statistics.median(values) if n else None, "lo": lo, "hi": hi,
            "method": CI_METHOD}


def p_value(margins: list[float]) -> float | None:
    """The one-sided p that the mean margin is not past 0 (H0: mean <= 0; H1: mean > 0), Student's t
    with n - 1 degrees of freedom; None under two runs. Runs that all end at one value have no spread:
    p is 0 when it is past the threshold, 1 otherwise (scipy's t is undefined there)."""
    if len(margins) < 2:
        return None
    if statistics.stdev(margins) == 0:
        return 0.0 if margins[0] > 0 else 1.0
    from scipy.stats import ttest_1samp
    return float(ttest_1samp(margins, 0.0, alternative="greater").pvalue)


def final_seconds(result: dict) -> float | None:
    """A run's time on the clock at its last evaluated epoch (its time-to-accuracy when it converged):
    the time of the fixed schedule the mean rule ranks. None for a run that evaluated no epoch."""
    history = result.get("history")
    last = history[-1] if isinstance(history, list) and history and isinstance(history[-1], dict) else {}
    if result.get("status") == CONVERGED and _number(result.get("tta_seconds")) is not None:
        return _number(result.get("tta_seconds"))
    return _number(last.get("tta_seconds"))


def _threshold(results: list[dict], task) -> float:
    seen = {_number(r.get("threshold")) for r in results} - {None}
    if len(seen) > 1:
        raise EvidenceError(f"the runs differ in threshold ({', '.join(f'{t:g}' for t in sorted(seen))}); "
                            f"a series is judged at one threshold")
    return seen.pop() if seen else task.threshold


def _label(result: dict, k: int) -> str:
    name = result.get("run_dir", result.get("run_id"))
    return str(name) if isinstance(name, str) and name else f"run {k + 1}"


def acceptance(results: list[dict], task, rule: str | None = None) -> dict:
    """The acceptance of runs of one reference (their result.json contents) under `rule` (default: the
    task's, tasks.toml): the interface's dict (docs/RULES.md, "Acceptance rules"), plus `by_rule`, each
    rule's verdict, reason and times, so a board can show the mean rule's table for a task ranked by single."""
    rules = task.acceptance
    rule = rule or rules.rule
    if rule not in (SINGLE, MEAN):
        raise EvidenceError(f"rule {rule!r} is not one of {SINGLE}, {MEAN}")
    threshold = _threshold(results, task)
    metrics = [_number(r.get("metric_value")) for r in results]
    known = [m for m in metrics if m is not None]
    margins = [task.margin(m, threshold) for m in known]
    converged = [t for r in results if r.get("status") == CONVERGED
                 and (t := _number(r.get("tta_seconds"))) is not None]
    times = {SINGLE: converged, MEAN: [t for r in results if (t := final_seconds(r)) is not None]}
    verdicts = {SINGLE: _single(results, converged),
                MEAN: _mean(results, task, threshold, metrics, margins, rules.n_min, rules.alpha)}
    verdict, reason = verdicts[rule]
    return {
        "rule": rule, "n": len(results),
        "n_min": rules.n_min if rule == MEAN else None, "alpha": rules.alpha if rule == MEAN else None,
        "threshold": threshold,
        "metric_mean": statistics.fmean(known) if known else None,
        "metric_stdev": statistics.stdev(known) if len(known) >= 2 else None,
        "p_value": p_value(margins) if len(known) == len(results) else None,
        **_times(times[rule]),
        "ci_method": CI_METHOD, "verdict": verdict, "reason": reason,
        # each rule's verdict with the times it ranks, so that a board ranks the mean rule's table by the
        # mean rule's times (every run's) beside a task ranked by single (the converged runs')
        "by_rule": {name: {"verdict": v, "reason": why, **_times(times[name]),
                           **({"n_min": rules.n_min, "alpha": rules.alpha} if name == MEAN else {})}
                    for name, (v, why) in verdicts.items()},
    }


def _times(values: list[float]) -> dict:
    """The times' figures of the acceptance dict: their mean, median and the mean's 95% interval."""
    spread = interval(values)
    return {"tta_mean_seconds": spread["mean"], "tta_median_seconds": spread["median"],
            "tta_ci95_seconds": None if spread["lo"] is None else [spread["lo"], spread["hi"]]}


def _single(results: list[dict], converged: list[float]) -> tuple[str, str]:
    n = len(results)
    if not converged:
        return REFUSED, f"none of the {n} runs reached the threshold: the single rule accepts a converged run"
    return ACCEPTED, (f"{len(converged)} of {n} runs reached the threshold; the single rule ranks one run, the "
                      f"series' median converged run, its time beside the converged runs' interval")


def _mean(results: list[dict], task, threshold: float, metrics: list[float | None], margins: list[float],
          n_min: int, alpha: float) -> tuple[str, str]:
    """The mean rule's verdict: every run counted, at least n_min of them, one fixed schedule, the mean
    past the threshold at p < alpha."""
    n, figure = len(results), task.figure
    if n < n_min:
        return REFUSED, f"{n} runs; the mean rule needs at least {n_min} (run the series with --runs {n_min})"
    missing = [_label(r, k) for k, (r, m) in enumerate(zip(results, metrics)) if m is None]
    if missing:
        return REFUSED, (f"{missing[0]} has no final {figure.label} (it ended before an evaluated epoch): the mean "
                         f"rule counts every run of the series")
    epochs = sorted({e for r in results if isinstance(e := r.get("epochs"), int)})
    if len(epochs) > 1:
        return REFUSED, (f"the runs ended at different epochs ({', '.join(map(str, epochs))}): the mean rule "
                         f"needs one fixed schedule, every run trained and scored at its last epoch")
    mean = statistics.fmean(m for m in metrics if m is not None)
    p = p_value(margins)
    shown = figure.shown(figure.entry_value(mean))
    target = figure.shown(figure.entry_value(threshold))
    if p is None or not p < alpha:
        return REFUSED, (f"mean {figure.label} {shown} over {n} runs is not past {target} at p < {alpha:g} "
                         f"(one-sided t-test, p = {p:.3g}): more runs, or a recipe further past the threshold")
    return ACCEPTED, (f"mean {figure.label} {shown} over {n} runs is past {target} at p = {p:.3g} < {alpha:g} "
                      f"(one-sided t-test)")
