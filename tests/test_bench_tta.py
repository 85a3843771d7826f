"""`make bench`'s time-to-accuracy part (bench.tta) splits each run's time-to-accuracy into the
spans its own records hold (init, train, handover, harness), and says each figure against its goal
(issue 37 §5)."""
import json

import pytest

from bench import tta
from dawnbench.cli import main


@pytest.fixture
def converged_run(tmp_path, references_root) -> dict:
    """A real harnessed run of the scripted reference, converging at epoch 3 of 5."""
    code = main(["run", "scripted-test", "--results", str(tmp_path / "results"), "--no-progress",
                 "--set", "accuracies=0.5,0.8,0.95", "--set", "setup_sleep=0.2", "--set", "train_sleep=0.1",
                 "--set", "eval_sleep=0.1"])
    assert code == 0
    (run_dir,) = (tmp_path / "results" / "scripted-test").iterdir()
    return json.loads((run_dir / "result.json").read_text())


def test_the_spans_come_from_the_run_s_records_and_add_up_to_its_time_to_accuracy(converged_run):
    r = converged_run
    s = tta.spans_of(r)
    assert s["tta"] == r["tta_seconds"] and s["init"] == r["spans_seconds"]["init"] >= 0.2
    assert s["harness"] == r["spans_seconds"]["harness"] and s["eval"] == r["spans_seconds"]["eval"] >= 3 * 0.1
    assert len(r["history"]) == 3
    assert s["handover"] == pytest.approx(sum(row["handover_ms"] for row in r["history"]) / 1000) and s["handover"] > 0
    # the train spans hold the three 0.1 s sleeps and the freezes; `train` is less the handovers, whose
    # thaws lie outside the train spans, so it may fall under 0.3 s by the thaws (23 ms on a loaded CI)
    assert s["train"] == pytest.approx(r["spans_seconds"]["train"] - s["handover"])
    assert r["spans_seconds"]["train"] >= 3 * 0.1 and s["train"] >= 3 * 0.1 - s["handover"]
    # within one thaw (the converging epoch's, after the clock stopped) and result.json's rounding
    last_thaw = r["history"][-1]["handover_ms"] / 1000
    assert sum(s[k] for k in tta.SPANS) == pytest.approx(s["tta"], abs=last_thaw + 1e-3)
    lines = tta.run_lines(0, r)
    assert lines[0].startswith("run_0_status=converged run_0_epochs=3 run_0_top1=0.9500")
    assert lines[1] == " ".join(f"run_0_{k}_seconds={s[k]:.3f}" for k in ("init", "train", "handover", "harness", "eval"))


def fake(tta_s: float, handovers_ms=(2.0, 3.0), status="converged") -> dict:
    """A result.json with only what bench.tta reads: init 3 s, harness 0.01 s, the rest trains."""
    return {"status": status, "epochs": len(handovers_ms), "metric": "top1", "metric_value": 0.925,
            "tta_seconds": tta_s if status == "converged" else None, "wall_seconds": tta_s + 4,
            "spans_seconds": {"init": 3.0, "train": tta_s - 3.01, "harness": 0.01, "eval": 4.0},
            "history": [{"epoch": i + 1, "handover_ms": h} for i, h in enumerate(handovers_ms)]}


def test_the_summary_gives_the_median_spans_and_each_goal():
    lines = tta.summary_lines([fake(24.0), fake(26.0, (1.0, 1.5)), fake(20.0)])
    assert lines[0] == "converged_runs=3/3"
    assert lines[1] == "tta_seconds=24.00 tta_min=20.00 tta_max=26.00"
    assert lines[2] == ("median_init_seconds=3.000 median_train_seconds=20.985 median_handover_seconds=0.005 "
                        "median_harness_seconds=0.010 median_eval_seconds=4.000")
    assert lines[3] == ("spans of the time-to-accuracy, medians: init 3.000 s (12.50%), train 20.985 s (87.44%), "
                        "handover 0.005 s (0.02%), harness 0.010 s (0.04%); eval 4.00 s, off the clock")
    assert lines[4] == "time-to-accuracy: median 24.00 s over 3 converged runs (goal <= 25 s): met"
    assert lines[5] == "converged: 3 of 3 runs (goal every run): met"
    assert lines[6] == "handover: median 2.00 ms, p99 3.00 ms over 6 (goal <= 2 / <= 10 ms): met"


def test_a_slow_median_or_a_run_that_did_not_converge_misses_its_goal():
    lines = tta.summary_lines([fake(26.0), fake(30.0, status="DNC"), None])
    assert "time-to-accuracy: median 26.00 s over 1 converged runs (goal <= 25 s): not met" in lines
    assert "converged: 1 of 3 runs (goal every run): not met" in lines
    assert tta.run_lines(2, None) == ["run_2_status=error"]
    assert len(tta.run_lines(1, fake(30.0, status="DNC"))) == 1      # no time-to-accuracy, no spans
