"""dawnbench.evidence: the acceptance rules' statistics, checked against scipy.stats directly on
seeded synthetic series (no training)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from dawnbench import evidence
from harness.task_kinds import ImageClassification
from harness.tasks import TASKS, Acceptance

CIFAR = TASKS["cifar10"]
MEAN_TASK = dataclasses.replace(CIFAR, acceptance=Acceptance(rule="mean", n_min=5, alpha=0.01))


class ErrorRate(ImageClassification):
    """A kind where lower is better (an error rate), as tests/test_task_kinds.py's toy task."""
    lower_is_better = True


def series(metrics, *, epochs=8, threshold=0.94, seconds=None, task=CIFAR) -> list[dict]:
    """result.json contents of a fixed-schedule series: each run trained `epochs` and scored its last."""
    seconds = seconds if seconds is not None else [10.0 + k for k in range(len(metrics))]
    return [{"run_dir": f"seed{k}", "seed": k, "metric": "top1", "metric_value": float(m), "threshold": threshold,
             "epochs": epochs, "status": "converged" if task.reaches(float(m), threshold) else "DNC",
             "tta_seconds": s if task.reaches(float(m), threshold) else None,
             "history": [{"epoch": epochs, "tta_seconds": s, "top1": float(m)}]}
            for k, (m, s) in enumerate(zip(metrics, seconds))]


def test_the_mean_rule_accepts_a_series_past_the_threshold_at_p_below_alpha():
    metrics = np.random.default_rng(0).normal(0.9440, 0.0015, 10)
    a = evidence.acceptance(series(metrics), MEAN_TASK)
    expected = stats.ttest_1samp(metrics, 0.94, alternative="greater").pvalue
    assert a["p_value"] == pytest.approx(expected, rel=1e-12) and a["p_value"] < 0.01
    assert a["verdict"] == "accepted" and (a["rule"], a["n"], a["n_min"], a["alpha"]) == ("mean", 10, 5, 0.01)
    assert a["metric_mean"] == pytest.approx(metrics.mean()) and a["metric_stdev"] == pytest.approx(metrics.std(ddof=1))
    assert "p = " in a["reason"] and "< 0.01" in a["reason"]


def test_the_mean_rule_refuses_a_series_past_the_threshold_by_chance():
    # the recipe's true mean is the threshold itself (airbench's 94.01%): this draw's mean is past it,
    # about half of its runs converge, and the test says it is chance
    metrics = np.random.default_rng(2).normal(0.9400, 0.0015, 8)
    assert metrics.mean() > 0.94 and 0 < sum(metrics >= 0.94) < len(metrics)
    a = evidence.acceptance(series(metrics), MEAN_TASK)
    expected = stats.ttest_1samp(metrics, 0.94, alternative="greater").pvalue
    assert a["p_value"] == pytest.approx(expected, rel=1e-12) and 0.01 < a["p_value"] < 0.5
    assert a["verdict"] == "refused" and "not past 94% at p < 0.01" in a["reason"], a["reason"]
    # ... while the single rule, today's, accepts it on its lucky runs
    assert a["by_rule"]["single"]["verdict"] == "accepted"
    assert evidence.acceptance(series(metrics), CIFAR)["verdict"] == "accepted"


def test_the_test_runs_the_way_the_task_s_kind_says_is_better():
    task = dataclasses.replace(MEAN_TASK, kind=ErrorRate(), threshold=0.10)
    errors = np.random.default_rng(1).normal(0.095, 0.002, 6)          # lower is better: past 0.10 below it
    a = evidence.acceptance(series(errors, threshold=0.10, task=task), task)
    assert a["p_value"] == pytest.approx(stats.ttest_1samp(errors, 0.10, alternative="less").pvalue, rel=1e-12)
    assert a["verdict"] == "accepted"
    higher = evidence.acceptance(series(errors + 0.01, threshold=0.10, task=task), task)
    assert higher["verdict"] == "refused" and higher["p_value"] > 0.5


def test_the_times_interval_is_student_t():
    seconds = [12.0, 15.5, 13.25, 14.0, 19.0]
    lo, hi = stats.t.interval(0.95, len(seconds) - 1, loc=np.mean(seconds), scale=stats.sem(seconds))
    got = evidence.interval(seconds)
    assert (got["lo"], got["hi"]) == (pytest.approx(lo), pytest.approx(hi))
    assert (got["mean"], got["median"], got["method"]) == (pytest.approx(14.75), 14.0, "t")
    assert evidence.interval([3.0])["lo"] is None and evidence.interval([2.0, 2.0])["lo"] == 2.0
    a = evidence.acceptance(series([0.95] * 5, seconds=seconds), MEAN_TASK)
    assert a["tta_ci95_seconds"] == [pytest.approx(lo), pytest.approx(hi)] and a["ci_method"] == "t"
    assert (a["tta_mean_seconds"], a["tta_median_seconds"]) == (pytest.approx(14.75), 14.0)
    assert a["p_value"] == 0.0 and a["verdict"] == "accepted"     # no spread, past the threshold


@pytest.mark.parametrize("edit, says", [
    (lambda runs: runs[:3], "3 runs; the mean rule needs at least 5 (run the series with --runs 5)"),
    (lambda runs: [{**runs[0], "epochs": 9}] + runs[1:], "ended at different epochs (8, 9)"),
    (lambda runs: [{**runs[0], "metric_value": None, "history": []}] + runs[1:],
     "seed0 has no final top-1 accuracy"),
])
def test_the_mean_rule_refuses_a_series_it_cannot_judge(edit, says):
    a = evidence.acceptance(edit(series([0.95] * 6)), MEAN_TASK)
    assert a["verdict"] == "refused" and says in a["reason"], a["reason"]


def test_the_single_rule_times_the_converged_runs_and_the_mean_rule_every_run():
    runs = series([0.95, 0.93, 0.96], seconds=[10.0, 20.0, 30.0])
    single = evidence.acceptance(runs, CIFAR)
    assert single["tta_median_seconds"] == 20.0 and single["tta_mean_seconds"] == 20.0      # 10 and 30
    assert (single["n_min"], single["alpha"]) == (None, None) and single["by_rule"]["mean"]["alpha"] == 0.01
    assert evidence.acceptance(runs, CIFAR, rule="mean")["tta_mean_seconds"] == 20.0       # 10, 20 and 30
    # each rule's verdict carries the times that rule ranks, so a board ranks the mean rule's table by them
    times = ("tta_mean_seconds", "tta_median_seconds", "tta_ci95_seconds")
    for rule in ("single", "mean"):
        assert {k: single["by_rule"][rule][k] for k in times} == {
            k: evidence.acceptance(runs, CIFAR, rule=rule)[k] for k in times}, rule
    assert single["by_rule"]["mean"]["tta_ci95_seconds"] != single["tta_ci95_seconds"]
    assert evidence.acceptance(series([0.93, 0.92], seconds=[1.0, 2.0]), CIFAR)["verdict"] == "refused"
    with pytest.raises(evidence.EvidenceError, match="differ in threshold"):
        evidence.acceptance(runs[:1] + series([0.95], threshold=0.5), CIFAR)
