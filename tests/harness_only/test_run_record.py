"""The run record (harness.run_record): what a run leaves behind, driven as the runner drives it,
on a clock the test moves by hand."""
import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from harness import stored_predictions
from harness.clock import Clock
from harness.events import read_events
from harness.run_record import RunRecord
from harness.sandbox.modes import Isolation
from harness.stop_rules import CONVERGED, DNC, Outcome
from harness.tasks import get_task

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too

# Fashion-MNIST's task on a 20-example eval set, so that stored predictions decode at that size
SPEC = SimpleNamespace(name="record-test", author="tests", description="a record",
                       task=dataclasses.replace(get_task("fashion-mnist"), eval_examples=20))
EVAL_SET = SimpleNamespace(scored=20, dropped=0)


class HandClock(Clock):
    """A Clock whose time moves only when the test says so."""

    def __init__(self):
        self.now = 100.0
        super().__init__(now=lambda: self.now, wall=lambda: 1.8e9)

    def advance(self, span: str, seconds: float) -> None:
        self.now += seconds
        self.lap(span)


def scores_for(labels: np.ndarray, right: int) -> np.ndarray:
    """Class scores whose first `right` argmaxes are the labels and the rest are wrong."""
    preds = labels.copy()
    preds[right:] = (preds[right:] + 1) % 10
    return np.eye(10, dtype=np.float32)[preds]


def two_epochs(record: RunRecord, clock: HandClock, labels: np.ndarray, reach_at: int | None) -> dict | None:
    """What the runner does for two epochs: train 10 s, score 5 s (off the clock); the row of the
    epoch that reached the threshold."""
    record.header(hardware="1 x cpu", seed=3, eval_set=EVAL_SET, threshold=0.9, hyperparameters={"lr": 0.1},
                  isolation=Isolation("bwrap"), dataset_files=[{"file": "t10k", "sha256": "0" * 64}])
    clock.advance("init", 2.0)
    record.initialized()
    reached_at = None
    for epoch, right in ((1, 10), (2, 19)):
        record.epoch_started(epoch)
        clock.advance("train", 10.0)
        record.epoch_trained(epoch, {"loss": 1.0 / epoch, "samples": 100.0}, 100.0, world_size=1)
        record.eval_started(epoch)
        predictions = scores_for(labels, right)
        stored = record.store_predictions(epoch, predictions)
        clock.advance("eval", 5.0)
        scores = SPEC.task.score(predictions, labels)
        row = record.epoch_scored(epoch, value=scores["top1"], scores=scores, stored=stored,
                                  on_clock=clock.on_clock(), stats={"loss": 1.0 / epoch}, handover_s=0.001)
        if epoch == reach_at:
            reached_at = row
    return reached_at


def result_of(record: RunRecord, outcome: Outcome, reached_at: dict | None, cost_per_hour=3.6) -> dict:
    return record.result({"reference": SPEC.name}, outcome, reached_at=reached_at, epochs=2, wall=record.clock.elapsed(),
                         threshold=0.9, cost_per_hour=cost_per_hour, eval_examples=20, seed=3, world_size=1,
                         hyperparameters={"lr": 0.1})


def test_a_converged_run_leaves_its_log_tsv_predictions_model_and_result(tmp_path):
    labels = np.arange(20) % 10
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "weights.bin").write_bytes(b"scored")
    clock = HandClock()
    clock.start()
    record = RunRecord(run_dir, SPEC, clock)
    reached_at = two_epochs(record, clock, labels, reach_at=2)
    record.keep_model(snapshot)
    clock.advance("checkpoint", 1.0)
    record.close(Outcome(CONVERGED), clock.elapsed())
    result = result_of(record, Outcome(CONVERGED), reached_at)
    record.write(result, {"cpu": "test"})

    # the log: MLPerf's order, each key where the runner said it happened, times from the clock
    events = read_events(run_dir / "events.jsonl")
    keys = [e["key"] for e in events]
    assert keys[:2] == ["submission_benchmark", "submission_org"] and keys[-1] == "run_stop"
    assert keys[keys.index("init_start"):] == [
        "init_start", "init_stop", "run_start",
        "epoch_start", "train_samples", "epoch_stop", "eval_start", "eval_accuracy", "eval_stop",
        "epoch_start", "epoch_stop", "eval_start", "eval_accuracy", "eval_stop", "checkpoint", "run_stop"]
    at = {(e["key"], e["metadata"].get("epoch_num")): e for e in events}
    assert at[("init_stop", None)]["metadata"]["clock_s"] == 2.0
    assert at[("epoch_stop", 2)]["metadata"]["clock_s"] == 27.0 and at[("eval_stop", 2)]["metadata"]["clock_s"] == 32.0
    assert at[("run_stop", None)]["value"] is None and at[("run_stop", None)]["metadata"]["status"] == "success"
    assert at[("eval_accuracy", 1)]["value"] == 0.5 and at[("eval_accuracy", 2)]["value"] == 0.95
    # the stored predictions are the ones scored, and the log holds their hash
    for epoch, accuracy in ((1, 0.5), (2, 0.95)):
        event = at[("eval_accuracy", epoch)]["metadata"]
        data = stored_predictions.read_file(run_dir, event["predictions_file"])
        assert stored_predictions.sha256_bytes(data) == event["predictions_sha256"]
        ids = stored_predictions.decode(SPEC.task, data)
        assert float((ids[:, 0] == labels).mean()) == accuracy
    # the TSV: a row per scored epoch, hours on the clock (eval excluded: 12 s, then 22 s)
    assert (run_dir / "record-test.tsv").read_text().splitlines() == [
        "epoch\thours\ttop1Accuracy", f"1\t{12 / 3600:.6f}\t50.00", f"2\t{22 / 3600:.6f}\t95.00"]
    # the model is the snapshot that was scored
    assert (run_dir / "model" / "weights.bin").read_bytes() == b"scored"
    # the result: the epoch that converged, its time on the clock and its cost
    written = json.loads((run_dir / "result.json").read_text())
    assert written == result and json.loads((run_dir / "env.json").read_text()) == {"cpu": "test"}
    assert result["reference"] == SPEC.name and result["status"] == CONVERGED and result["dnc_reason"] is None
    assert result["tta_seconds"] == 22.0 and result["metric_value"] == 0.95 and result["epochs"] == 2
    assert result["cost_usd"] == pytest.approx(3.6 * 22.0 / 3600.0) and result["wall_seconds"] == 33.0
    assert [row["epoch"] for row in result["history"]] == [1, 2] and result["run_id"] == "run"
    assert result["spans_seconds"] == {"init": 2.0, "train": 20.0, "eval": 10.0, "checkpoint": 1.0}
    assert result["logFilename"] == "record-test.tsv" and result["official_threshold"] is False


def test_a_dnc_has_no_time_to_accuracy_and_no_cost(tmp_path):
    labels = np.arange(20) % 10
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    clock = HandClock()
    clock.start()
    record = RunRecord(run_dir, SPEC, clock)
    two_epochs(record, clock, labels, reach_at=None)
    outcome = Outcome(DNC, "budget: max_epochs=2 reached without top1 >= 0.9")
    record.close(outcome, clock.elapsed())
    result = result_of(record, outcome, None)
    assert result["status"] == DNC and result["dnc_reason"] == outcome.reason
    assert result["tta_seconds"] is None and result["cost_usd"] is None
    assert result["metric_value"] == 0.95        # the last scored epoch's
    stop = read_events(run_dir / "events.jsonl")[-1]
    assert stop["key"] == "run_stop" and stop["metadata"]["status"] == "aborted"
    assert stop["metadata"]["dawnbench_status"] == DNC and stop["metadata"]["reason"] == outcome.reason


def test_an_error_goes_into_the_log_with_its_trace(tmp_path):
    clock = HandClock()
    clock.start()
    record = RunRecord(tmp_path, SPEC, clock)
    clock.now += 4.0       # read, not lapped: the error's time is when it happened
    record.error("Traceback (most recent call last):\nRuntimeError: boom")
    record.close(Outcome(DNC, "error: boom"), clock.elapsed())
    (error,) = [e for e in read_events(tmp_path / "events.jsonl") if e["key"] == "dawnbench_error"]
    assert "RuntimeError: boom" in error["value"] and error["metadata"]["clock_s"] == 4.0


def test_without_a_folder_it_writes_nothing_and_still_keeps_the_history(tmp_path, monkeypatch):
    """Ranks other than 0: no folder, no file, the same history and result."""
    monkeypatch.chdir(tmp_path)
    labels = np.arange(20) % 10
    clock = HandClock()
    clock.start()
    record = RunRecord(None, SPEC, clock)
    reached_at = two_epochs(record, clock, labels, reach_at=2)
    record.keep_model(tmp_path / "no-snapshot")
    record.close(Outcome(CONVERGED), clock.elapsed())
    result = result_of(record, Outcome(CONVERGED), reached_at)
    record.write(result, {})
    assert list(tmp_path.iterdir()) == []
    assert result["run_id"] is None and result["tta_seconds"] == 22.0 and len(result["history"]) == 2
