"""Issue 37 §2 and §3: the reference chooses which epochs are evaluated (reference.toml's
`[budget] eval_from_epoch`), time-to-accuracy is the end of the first evaluated epoch at the
threshold, the log and `verify` say which epochs were evaluated, and result.json carries the train
time (the train spans only, through the converging epoch) beside it; the TSV stays DAWNBench v1's."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from conftest import PYTHON, REPO, SCRIPTED, SCRIPTED_TOML, cli_env

from harness import datasets, eval_labels, registry, stop_rules, verify_run
from harness.errors import UsageError
from harness.events import PREFIX, read_events

SCHEMA = json.loads((REPO / "harness/data/result.schema.json").read_text())
NAME = "scripted-last"
# Epoch 2 would reach the threshold (0.95 >= 0.92) if it were evaluated: only epoch 3 is.
ARGS = ("--set", "accuracies=0.5,0.95,0.96", "--set", "train_sleep=0.1", "--set", "eval_sleep=0.2")


def write_scripted(root: Path, name: str, budget: str) -> Path:
    """references/<name>/: the scripted reference with `budget` for its [budget] table's lines."""
    ref = root / name
    ref.mkdir(parents=True)
    np.save(ref / "labels.npy", eval_labels.load_eval_labels("fashion-mnist", datasets.default_data_root()))
    (ref / "scripted.py").write_text(SCRIPTED)
    (ref / "reference.toml").write_text(SCRIPTED_TOML.replace("max_epochs = 5\n", budget))
    return ref


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "harness", *args], capture_output=True, text=True, timeout=300,
                          env=cli_env(), cwd=cwd)


def run(references: Path, results: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, Path | None]:
    proc = harness("run", name, "--references", str(references), "--results", str(results), "--no-progress",
                   *args, cwd=results.parent)
    runs = sorted((results / name).glob("*/")) if (results / name).is_dir() else []
    return proc, (runs[-1] if runs else None)


@pytest.fixture(scope="module")
def last_only(tmp_path_factory, fashion_root) -> Path:
    """A run of a reference that evaluates only its last epoch (max_epochs 3, eval_from_epoch 3)."""
    tmp = tmp_path_factory.mktemp("last-only")
    write_scripted(tmp / "references", NAME, "max_epochs = 3\neval_from_epoch = 3\n")
    proc, run_dir = run(tmp / "references", tmp / "results", NAME, *ARGS)
    assert proc.returncode == 0, proc.stderr
    return run_dir


def result_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def checked_run(run_dir: Path) -> verify_run.Verification:
    return verify_run.verify(run_dir, datasets.default_data_root())


def clock(events: list[dict], key: str, epoch: int) -> float:
    (t,) = [e["metadata"]["clock_s"] for e in events if e["key"] == key and e["metadata"].get("epoch_num") == epoch]
    return t


def test_only_the_last_epoch_is_evaluated_and_time_to_accuracy_is_its_end(last_only):
    result, events = result_of(last_only), read_events(last_only / "events.jsonl")
    jsonschema.validate(result, SCHEMA)
    assert result["status"] == "converged" and result["epochs"] == 3 and result["eval_from_epoch"] == 3
    assert result["metric_value"] == pytest.approx(0.96)      # epoch 2's 0.95 was never scored
    # the log: three epochs trained, one evaluated, and the schedule it followed
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_stop"] == [1, 2, 3]
    for key in ("eval_start", "eval_accuracy", "eval_stop"):
        assert [e["metadata"]["epoch_num"] for e in events if e["key"] == key] == [3]
    (schedule,) = [e for e in events if e["key"] == "dawnbench_eval_from_epoch"]
    assert schedule["value"] == 3 and schedule["metadata"]["max_epochs"] == 3
    # no eval span before epoch 3's end: time-to-accuracy is the clock at its epoch_stop
    assert result["tta_seconds"] == pytest.approx(clock(events, "epoch_stop", 3), abs=1e-3)
    assert [row["epoch"] for row in result["history"]] == [3]
    # one snapshot, the scored one: model/ is epoch 3's
    assert (last_only / "model" / "model.txt").read_text() == "3"
    assert sorted(p.name for p in (last_only / "predictions").iterdir()) == ["epoch-003.npz"]


def test_the_train_time_is_the_train_spans_through_the_converging_epoch(last_only):
    result, events = result_of(last_only), read_events(last_only / "events.jsonl")
    spans = sum(clock(events, "epoch_stop", n) - clock(events, "epoch_start", n) for n in (1, 2, 3))
    assert result["train_seconds"] == pytest.approx(spans, abs=1e-3)
    assert result["train_seconds"] == pytest.approx(result["spans_seconds"]["train"], abs=1e-3)
    assert result["train_seconds"] >= 3 * 0.1          # three epochs of train_sleep
    assert result["train_seconds"] <= result["tta_seconds"] - result["spans_seconds"]["init"] + 1e-3
    assert result["history"][-1]["train_seconds"] == result["train_seconds"]
    (stop,) = [e for e in events if e["key"] == "run_stop"]
    assert stop["metadata"]["train_seconds"] == result["train_seconds"]


def test_the_tsv_stays_dawnbench_v1_s(last_only):
    lines = (last_only / f"{NAME}.tsv").read_text().splitlines()
    assert lines[0] == "epoch\thours\ttop1Accuracy"
    (row,) = lines[1:]
    epoch, hours, accuracy = row.split("\t")
    assert epoch == "3" and accuracy == "96.00"
    assert float(hours) * 3600 == pytest.approx(result_of(last_only)["tta_seconds"], abs=0.01)


def test_verify_passes_it_and_says_which_epochs_were_evaluated(last_only):
    report = checked_run(last_only)
    assert report.verified, report.lines()
    checks = {c.name: c.detail for c in report.checks}
    assert "epochs 3 to 3 evaluated" in checks["eval schedule"]
    assert "through epoch 3" in checks["train time"]


def test_the_official_mlperf_checker_accepts_the_log(last_only):
    proc = subprocess.run([PYTHON, "-m", "dawnbench", "compliance", str(last_only)], capture_output=True, text=True,
                          env=cli_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- tampering

def rewrite_events(run_dir: Path, edit) -> None:
    path = run_dir / "events.jsonl"
    records = [json.loads(line[len(PREFIX):]) for line in path.read_text().splitlines()]
    path.write_text("".join(PREFIX + json.dumps(r) + "\n" for r in edit(records)))


def claim_a_skipped_eval(records: list[dict]) -> list[dict]:
    """Epoch 3's eval, copied in after epoch 2's epoch_stop as if epoch 2 had been evaluated (an eval
    span of no length, so no time moves)."""
    out = []
    evals = [r for r in records if r["key"] in ("eval_start", "eval_accuracy", "eval_stop")]
    for r in records:
        out.append(r)
        if r["key"] == "epoch_stop" and r["metadata"]["epoch_num"] == 2:
            for e in evals:
                copy = json.loads(json.dumps(e))
                copy["metadata"].update(epoch_num=2, clock_s=r["metadata"]["clock_s"])
                copy["time_ms"] = r["time_ms"]
                out.append(copy)
    return out


def set_schedule(first: int):
    def edit(records):
        for r in records:
            if r["key"] == "dawnbench_eval_from_epoch":
                r["value"] = first
        return records
    return edit


def set_run_stop(**changes):
    def edit(records):
        records[-1]["metadata"].update(changes)
        return records
    return edit


def set_result(**changes):
    def edit(run_dir: Path) -> None:
        result = result_of(run_dir)
        result.update(changes)
        (run_dir / "result.json").write_text(json.dumps(result))
    return edit


@pytest.mark.parametrize("case, says", [
    ("an eval claimed for a skipped epoch", "epoch 2 is before the first evaluated epoch (3"),
    ("an evaluated epoch hidden (the schedule moved earlier)", "epoch 2 has no eval_accuracy"),
    ("a schedule that never evaluates the last epoch", "eval_from_epoch 4 is after max_epochs 3"),
    ("result.json's eval_from_epoch", "eval schedule: result.json's eval_from_epoch 1 is not the log's 3"),
    ("result.json's tta_seconds", "tta_seconds"),
    ("result.json's train_seconds", "train time: train_seconds"),
    ("run_stop's train_seconds", "train time: run_stop's train_seconds"),
])
def test_verify_catches_a_tampered_schedule_or_figure(last_only, tmp_path, case, says):
    run_dir = tmp_path / "run"
    shutil.copytree(last_only, run_dir)
    result = result_of(run_dir)
    {
        "an eval claimed for a skipped epoch": lambda: rewrite_events(run_dir, claim_a_skipped_eval),
        "an evaluated epoch hidden (the schedule moved earlier)": lambda: rewrite_events(run_dir, set_schedule(2)),
        "a schedule that never evaluates the last epoch": lambda: rewrite_events(run_dir, set_schedule(4)),
        "result.json's eval_from_epoch": lambda: set_result(eval_from_epoch=1)(run_dir),
        "result.json's tta_seconds": lambda: set_result(tta_seconds=result["tta_seconds"] - 0.5)(run_dir),
        "result.json's train_seconds": lambda: set_result(train_seconds=result["train_seconds"] - 0.05)(run_dir),
        "run_stop's train_seconds": lambda: rewrite_events(run_dir, set_run_stop(train_seconds=0.01)),
    }[case]()
    report = checked_run(run_dir)
    assert not report.verified
    assert says in report.verdict(), report.lines()


# ---------------------------------------------------------------- refused before anything runs

@pytest.mark.parametrize("budget, says", [
    ("max_epochs = 3\neval_from_epoch = 4\n",
     "field 'budget.eval_from_epoch' = 4 is after budget.max_epochs = 3: the run would never evaluate its last "
     "epoch; write eval_from_epoch = 3 to evaluate only the last one"),
    ("max_epochs = 3\neval_from_epoch = 0\n", "field 'budget.eval_from_epoch' = 0 must be a whole number"),
    ("max_epochs = 3\neval_from_epoch = \"last\"\n", "field 'budget.eval_from_epoch' = 'last' must be a whole number"),
    ("max_epochs = 3\neval_from_epoch = 2.0\n", "field 'budget.eval_from_epoch' = 2.0 must be a whole number"),
    ("max_epochs = 3\neval_from_epoch = true\n", "field 'budget.eval_from_epoch' = True must be a whole number"),
])
def test_a_schedule_without_the_last_epoch_or_of_another_type_is_refused_in_the_spec(tmp_path, fashion_root,
                                                                                       budget, says):
    write_scripted(tmp_path, "bad-schedule", budget)
    with pytest.raises(UsageError) as refused:
        registry.load_spec("bad-schedule", tmp_path)
    assert says in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("budget, args, says", [
    ("max_epochs = 3\neval_from_epoch = 4\n", (), "the run would never evaluate its last epoch"),
    ("max_epochs = 5\neval_from_epoch = 4\n", ("--max-epochs", "3"),
     "--max-epochs 3 is before bad-schedule's first evaluated epoch (budget.eval_from_epoch = 4 in its "
     "reference.toml): the run would never evaluate its last epoch; give --max-epochs 4 or more"),
])
def test_a_run_that_would_evaluate_no_epoch_at_its_last_is_refused_in_one_line(tmp_path, fashion_root, budget,
                                                                                args, says):
    write_scripted(tmp_path / "references", "bad-schedule", budget)
    (tmp_path / "results").mkdir()
    proc, run_dir = run(tmp_path / "references", tmp_path / "results", "bad-schedule", *args)
    assert proc.returncode == 2
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and run_dir is None


def test_set_cannot_change_the_schedule(tmp_path, fashion_root):
    write_scripted(tmp_path / "references", NAME, "max_epochs = 3\neval_from_epoch = 3\n")
    (tmp_path / "results").mkdir()
    proc, run_dir = run(tmp_path / "references", tmp_path / "results", NAME, "--set", "eval_from_epoch=1")
    assert proc.returncode == 2 and "eval_from_epoch" in proc.stderr and run_dir is None


# ---------------------------------------------------------------- the rules and a DNC

def test_the_stop_rules_evaluate_from_the_first_scheduled_epoch():
    budget = stop_rules.Budget(max_epochs=5, max_seconds=60.0, threshold=0.9, metric="top1", eval_from_epoch=4)
    assert [stop_rules.evaluated(budget, e) for e in range(1, 6)] == [False, False, False, True, True]
    default = stop_rules.Budget(max_epochs=5, max_seconds=60.0, threshold=0.9, metric="top1")
    assert all(stop_rules.evaluated(default, e) for e in range(1, 6))
    # an unscored epoch reaches nothing: the run goes on, unless its time budget is spent
    assert stop_rules.decide(budget, 2, 0.5, 10.0, False) is None
    assert stop_rules.decide(budget, 2, 0.5, 60.0, False).status == stop_rules.DNC


def test_a_dnc_in_an_unevaluated_epoch_verifies_with_no_train_time(tmp_path, fashion_root):
    write_scripted(tmp_path / "references", NAME, "max_epochs = 3\neval_from_epoch = 3\n")
    (tmp_path / "results").mkdir()
    proc, run_dir = run(tmp_path / "references", tmp_path / "results", NAME, "--set", "nan_at=2")
    assert proc.returncode == 1, proc.stderr
    result = result_of(run_dir)
    jsonschema.validate(result, SCHEMA)
    assert result["status"] == "DNC" and result["dnc_reason"].startswith("diverged")
    assert result["train_seconds"] is None and result["tta_seconds"] is None and result["history"] == []
    assert not [e for e in read_events(run_dir / "events.jsonl") if e["key"] in ("eval_start", "eval_accuracy", "eval_stop")]
    report = checked_run(run_dir)
    assert report.verified, report.lines()


def test_an_unevaluated_epoch_is_not_frozen_and_an_evaluated_one_is(tmp_path, fashion_root, monkeypatch):
    """Issue 37: the freeze keeps the trainer still through an eval span, off the clock. An epoch before
    eval_from_epoch has none, so it is not frozen and thawed (about 2 ms on the clock for nothing);
    the evaluated epoch still is, before its snapshot is taken, and its CPU count is read frozen."""
    from dawnbench.cli import main
    from harness.sandbox import handle
    handovers, freeze, thaw = [], handle.Worker.freeze, handle.Worker.thaw

    def recorded(action, original):
        def wrapper(self, *args, **kwargs):
            handovers.append((self.role, action))
            return original(self, *args, **kwargs)
        return wrapper
    monkeypatch.setattr(handle.Worker, "freeze", recorded("freeze", freeze))
    monkeypatch.setattr(handle.Worker, "thaw", recorded("thaw", thaw))
    write_scripted(tmp_path / "references", NAME, "max_epochs = 3\neval_from_epoch = 3\n")
    code = main(["run", NAME, "--references", str(tmp_path / "references"), "--results", str(tmp_path / "results"),
                 "--no-progress", *ARGS])
    assert code == 0
    (run_dir,) = (tmp_path / "results" / NAME).iterdir()
    result, events = result_of(run_dir), read_events(run_dir / "events.jsonl")
    assert result["status"] == "converged" and result["epochs"] == 3
    # epochs 1 and 2: no freeze, no thaw; epoch 3: frozen for its eval (the predictor is frozen at its
    # eval's end), then thawed, as the freeze's own tests require
    trainer = [action for role, action in handovers if role == "train"]
    assert trainer == ["freeze", "thaw"], handovers
    (row,) = result["history"]
    assert row["epoch"] == 3 and row["handover_ms"] > 0
    (stop,) = [e for e in events if e["key"] == "eval_stop"]
    assert stop["metadata"]["train_cpu_s"] >= 0 and stop["metadata"]["epoch_num"] == 3
    assert checked_run(run_dir).verified
