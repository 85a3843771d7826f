"""The runner's loop, stop rules and DNC paths, driven by a scripted reference on real labels."""
import json

import jsonschema
import pytest
from conftest import REPO

from dawnbench.cli import main
from harness.events import read_events

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too

SCHEMA = json.loads((REPO / "harness/data/result.schema.json").read_text())


def run(tmp_path, *args):
    code = main(["run", "scripted-test", "--results", str(tmp_path / "results"), "--no-progress", *args])
    runs = sorted((tmp_path / "results" / "scripted-test").iterdir())
    assert len(runs) == 1
    result = json.loads((runs[0] / "result.json").read_text())
    jsonschema.validate(result, SCHEMA)
    return code, runs[0], result


@pytest.fixture(autouse=True)
def _refs(references_root, fashion_root):
    pass


def test_stops_at_first_epoch_over_threshold(tmp_path):
    code, run_dir, result = run(tmp_path, "--set", "accuracies=0.5,0.93,0.99", "--set", "train_sleep=0.05")
    assert code == 0
    assert result["status"] == "converged" and result["dnc_reason"] is None
    assert result["epochs"] == 2
    assert result["metric_value"] == pytest.approx(0.93)
    assert result["official_threshold"] is True and result["threshold"] == 0.92
    rows = (run_dir / "scripted-test.tsv").read_text().splitlines()
    assert rows[0] == "epoch\thours\ttop1Accuracy"
    assert [r.split("\t")[2] for r in rows[1:]] == ["50.00", "93.00"]
    keys = [e["key"] for e in read_events(run_dir / "events.jsonl")]
    assert keys.count("eval_accuracy") == 2 and keys[-1] == "run_stop"
    assert (run_dir / "model" / "model.txt").read_text() == "2"


def test_eval_is_off_the_clock_init_and_snapshots_are_on_it(tmp_path):
    # The snapshot each epoch (the reference's save) is its own code: it is on the clock, in the
    # train span, so no work done there escapes it. Eval (the predictor) is off.
    code, run_dir, result = run(tmp_path, "--set", "accuracies=0.5,0.95", "--set", "setup_sleep=0.3",
                                "--set", "train_sleep=0.2", "--set", "eval_sleep=0.4",
                                "--set", "save_sleep=0.3")
    assert code == 0
    spans = result["spans_seconds"]
    assert spans["init"] >= 0.3 and spans["train"] >= 2 * (0.2 + 0.3)
    assert spans["eval"] >= 0.8 and "checkpoint" not in spans
    # DAWNBench time = everything up to the converging epoch's training, minus eval
    assert result["tta_seconds"] == pytest.approx(spans["init"] + spans["train"] + spans.get("harness", 0), abs=0.02)
    assert 1.3 <= result["tta_seconds"] < 1.3 + 5.0
    assert result["wall_seconds"] == pytest.approx(sum(spans.values()), abs=0.01)
    assert result["wall_seconds"] >= result["tta_seconds"] + 0.8
    # the TSV hours column carries the same DAWNBench time
    hours = float((run_dir / "scripted-test.tsv").read_text().splitlines()[-1].split("\t")[1])
    assert hours * 3600 == pytest.approx(result["tta_seconds"], abs=0.01)
    # and every span can be recomputed from the event log
    events = read_events(run_dir / "events.jsonl")
    evals = [e for e in events if e["key"] in ("eval_start", "eval_stop")]
    eval_time = sum(b["metadata"]["clock_s"] - a["metadata"]["clock_s"] for a, b in zip(evals[::2], evals[1::2]))
    assert eval_time == pytest.approx(spans["eval"], abs=0.02)


def test_nan_loss_ends_as_dnc_with_logs_intact(tmp_path):
    code, run_dir, result = run(tmp_path, "--set", "nan_at=2")
    assert code == 1
    assert result["status"] == "DNC" and result["dnc_reason"].startswith("diverged")
    assert result["tta_seconds"] is None and result["epochs"] == 2
    events = read_events(run_dir / "events.jsonl")
    assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "aborted"
    assert not (run_dir / "model").exists()


def test_exception_ends_as_dnc_with_traceback_in_log(tmp_path, capsys):
    code, run_dir, result = run(tmp_path, "--set", "raise_at=2")
    assert code == 1
    assert result["status"] == "DNC" and "scripted failure" in result["dnc_reason"]
    errors = [e for e in read_events(run_dir / "events.jsonl") if e["key"] == "dawnbench_error"]
    assert len(errors) == 1 and "Traceback" in errors[0]["value"] and "RuntimeError" in errors[0]["value"]
    assert "scripted failure" in capsys.readouterr().err
    # epoch 1 was logged before the failure and is still there
    assert len((run_dir / "scripted-test.tsv").read_text().splitlines()) == 2


def test_epoch_budget_ends_as_dnc(tmp_path):
    code, _, result = run(tmp_path, "--set", "accuracies=0.5,0.6", "--max-epochs", "3")
    assert code == 1
    assert result["status"] == "DNC" and "max_epochs=3" in result["dnc_reason"]
    assert result["epochs"] == 3 and result["metric_value"] == pytest.approx(0.6)


def test_time_budget_ends_as_dnc(tmp_path):
    # The first epoch's training alone (5 s) spends the 3 s budget. The budget is seconds, not tenths:
    # it bounds the trainer's start too, and a fresh-clone CI under load once spent 0.3 s there.
    code, _, result = run(tmp_path, "--set", "accuracies=0.5", "--set", "train_sleep=5", "--max-seconds", "3")
    assert code == 1
    assert result["status"] == "DNC" and "max_seconds" in result["dnc_reason"]
    assert result["epochs"] == 1


def test_prediction_count_mismatch_is_dnc_with_clear_reason(tmp_path):
    code, _, result = run(tmp_path, "--set", "short=true")
    assert code == 1
    assert "9999 predictions" in result["dnc_reason"] and "10000" in result["dnc_reason"]


def test_lowered_threshold_is_recorded_as_unofficial(tmp_path):
    code, _, result = run(tmp_path, "--threshold", "0.5")
    assert code == 0 and result["epochs"] == 1
    assert result["threshold"] == 0.5 and result["official_threshold"] is False


def test_cost_is_hours_times_price(tmp_path):
    code, _, result = run(tmp_path, "--cost-per-hour", "3.06", "--set", "train_sleep=0.1")
    assert code == 0
    assert result["costPerHour"] == 3.06
    assert result["cost_usd"] == pytest.approx(3.06 * result["tta_seconds"] / 3600)


def test_every_event_line_is_mllog(tmp_path):
    _, run_dir, _ = run(tmp_path)
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines)
    events = read_events(run_dir / "events.jsonl")
    for e in events:
        assert set(e) == {"namespace", "time_ms", "event_type", "key", "value", "metadata"}
        assert e["event_type"] in ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END")
    times = [e["time_ms"] for e in events]
    assert times == sorted(times)
    keys = [e["key"] for e in events]
    for key in ("run_start", "init_start", "init_stop", "epoch_start", "epoch_stop", "eval_start",
                "eval_stop", "eval_accuracy", "train_samples", "eval_samples", "seed", "run_stop"):
        assert key in keys, key
    # MLPerf's order and counts (tests/test_mlperf_compliance.py runs the official checker)
    assert keys.index("init_start") < keys.index("init_stop") < keys.index("run_start") < keys.index("epoch_start")
    assert keys.count("train_samples") == 1 and keys.count("cache_clear") == 1


def test_runs_never_overwrite_each_other(tmp_path):
    for _ in range(2):
        assert main(["run", "scripted-test", "--results", str(tmp_path), "--no-progress", "--run-id", "x"]) in (0, 2)
    assert [p.name for p in (tmp_path / "scripted-test").iterdir()] == ["x"]
