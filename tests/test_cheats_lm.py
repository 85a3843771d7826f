"""A language model's cheats (issue 50): each is the stand-in bigram of tests/kjv_fixture.py changed as an
entrant would change it, run through the real harness on the fixture text. The honest one converges and
verifies; one that reads the next token from its input, one that returns unnormalized log-probabilities
and one that keeps what the first pass saw for the audit each end DNC with the reason in one line.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cheats import events, harness_run, needs_isolation
from kjv_fixture import fixture_manifest, write_kjv, write_lm_reference

from harness.tasks import TASKS

pytestmark = needs_isolation()
SETTINGS = TASKS["kjv-bytes"].settings


@pytest.fixture(scope="module")
def lm_world(tmp_path_factory):
    """(references folder, data root, results folder, env) shared by the module: the fixture text, once."""
    root = tmp_path_factory.mktemp("lm")
    data = root / "data"
    write_kjv(data / "kjv")
    manifest = fixture_manifest(root / "manifest.toml", data / "kjv")
    return root / "references", data, root / "results", {"DAWNBENCH_DATASETS_MANIFEST": str(manifest)}


def run_lm(world, name: str, code: str = ""):
    references, data, results, env = world
    write_lm_reference(references, name, code)
    return harness_run(references, name, data, results, env=env)


def dnc_reason(proc, result) -> str:
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert result is not None and result["status"] == "DNC", proc.stderr[-2000:]
    return result["dnc_reason"]


@pytest.fixture(scope="module")
def honest(lm_world):
    """The honest model's run, once for the module: (process, result.json, run folder)."""
    return run_lm(lm_world, "honest")


def verify(world, run_dir) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "verify", str(run_dir), "--data", str(world[1])],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **world[3]})


def spans(run_dir) -> dict[str, float]:
    """Each span kind's seconds from the log: init (init_start..init_stop), train (every epoch_start..epoch_stop)
    and eval (every eval_start..eval_stop)."""
    clock, total = {}, {"init": 0.0, "train": 0.0, "eval": 0.0}
    for e in events(run_dir):
        clock[(e["key"], e["metadata"].get("epoch_num"))] = e["metadata"]["clock_s"]
    for (key, n), t in clock.items():
        for span, (start, stop) in {"init": ("init_start", "init_stop"), "train": ("epoch_start", "epoch_stop"),
                                    "eval": ("eval_start", "eval_stop")}.items():
            if key == stop:
                total[span] += t - clock[(start, n)]
    return total


def test_the_honest_model_passes_the_audit_and_verifies(lm_world, honest):
    proc, result, run_dir = honest
    assert proc.returncode == 0 and result["status"] == "converged", proc.stderr[-2000:]
    # the figure in its own unit, lower is better, on the terminal as in the log
    assert f"bpb {result['metric_value']:.4g} bits/byte (target 1.95 bits/byte)" in proc.stderr     # Figure.said
    assert 0.5 < result["metric_value"] < 1.6 and result["metric"] == "bpb"
    (stop,) = [e for e in events(run_dir) if e["key"] == "eval_stop"]
    audit = stop["metadata"]["lm"]["audit"]
    assert len(audit["positions"]) == SETTINGS.audit_positions
    assert audit["max_logprob_difference"] <= SETTINGS.agree_tolerance
    assert audit["max_sum_error"] <= SETTINGS.sum_tolerance
    # the task's eval is on the clock (tasks.toml eval_on_clock, MLPerf's rule): its time-to-accuracy counts the
    # init, train and eval spans, the eval has no bound, and the terminal says the eval is included
    took = spans(run_dir)
    assert took["eval"] > 0 and result["tta_seconds"] >= sum(took.values()) - 0.01, (result["tta_seconds"], took)
    assert result["history"][-1]["tta_seconds"] == result["tta_seconds"]
    assert stop["metadata"]["eval_on_clock"] is True and stop["metadata"].get("eval_bound_s") is None
    assert stop["metadata"]["predictor_s"] > 0
    assert "(eval included)" in proc.stderr and "(eval excluded)" not in proc.stderr and TASKS["kjv-bytes"].eval_on_clock
    verified = verify(lm_world, run_dir)
    assert verified.returncode == 0, verified.stdout[-3000:]
    assert "bpb recomputed from the stored predictions" in verified.stdout
    assert "eval bound: not applied: the kjv-bytes task's eval is on the clock" in verified.stdout, verified.stdout


def test_an_eval_on_clock_log_whose_time_leaves_the_eval_out_does_not_verify(lm_world, honest, tmp_path):
    """The honest run's folder with its time-to-accuracy rewritten as a harness that left the eval off the clock
    writes it (result.json's tta_seconds and history row, the TSV's hours): `verify` refuses it in one line."""
    _, result, run_dir = honest
    forged = Path(shutil.copytree(run_dir, tmp_path / "run"))
    off = round(result["tta_seconds"] - spans(run_dir)["eval"], 3)
    result = json.loads((forged / "result.json").read_text())
    result["tta_seconds"] = result["history"][-1]["tta_seconds"] = off
    (forged / "result.json").write_text(json.dumps(result))
    (tsv,) = forged.glob("*.tsv")
    rows = [line.split("\t") for line in tsv.read_text().splitlines()]
    rows[-1][1] = f"{off / 3600:.6f}"
    tsv.write_text("".join("\t".join(row) + "\n" for row in rows))
    verified = verify(lm_world, forged)
    assert verified.returncode == 1, verified.stdout[-3000:]
    verdict = verified.stdout.splitlines()[-1]
    assert verdict.startswith("disagreement: result.json: history epoch 1: tta_seconds ") and "leaves the eval out" in \
        verdict and "the kjv-bytes task's eval is on the clock" in verdict, verified.stdout[-3000:]


# Reads the next token from its input: inputs[i, t+1] is the token scored at position t. A normalized
# distribution (it passes the sum check) with 99% on that token: about 0.03 bits per byte.
LOOK_AHEAD = '''
class Cheat(Base):
    def predict(self, inputs):
        inputs = np.asarray(inputs)
        out = np.full(inputs.shape + (256,), np.log(0.01 / 255), np.float32)
        rows, cols = np.indices(inputs[:, 1:].shape)
        out[rows, cols, inputs[:, 1:]] = np.log(0.99)
        out[:, -1] = self.table[inputs[:, -1]]          # the window's last position: honest
        return out
'''


def test_a_predictor_that_looks_ahead_is_caught(lm_world):
    proc, result, _ = run_lm(lm_world, "look-ahead", LOOK_AHEAD)
    reason = dnc_reason(proc, result)
    assert reason.startswith("the look-ahead audit: at window ") and "\n" not in reason, reason
    assert "only the tokens up to it" in reason and result["history"] == []
    assert reason in proc.stderr        # one line on the terminal, no traceback
    assert "Traceback" not in proc.stderr


# Unnormalized: the bigram's log-probabilities plus one (they sum to e), so every score looks better.
UNNORMALIZED = '''
class Cheat(Base):
    def predict(self, inputs):
        return super().predict(inputs) + 1.0
'''


def test_a_predictor_whose_probabilities_do_not_sum_to_one_is_caught(lm_world):
    proc, result, _ = run_lm(lm_world, "unnormalized", UNNORMALIZED)
    reason = dnc_reason(proc, result)
    assert reason.startswith("predict() gave probabilities that sum to 2.71828") and "\n" not in reason, reason
    assert "not 1 within 0.001, at window 0, position 0" in reason


# Keeps what the first pass saw, for the audit: every window it was given, in memory, in its HOME, /tmp,
# /dev/shm and (where it may write) the snapshot folder. A predictor that finds such a record when it loads
# is the audit's: given a row, it takes the seen window that shares the longest prefix with it and answers
# as the first pass did (the next token of that window) up to where they part, which is where the audit's
# random tokens begin; so at the audited position it agrees with its cheating first pass.
STATEFUL = '''
import os

SEEN = []
PLACES = [os.path.join(os.environ.get("HOME", "/nonexistent"), "seen.npy"), "/tmp/seen.npy", "/dev/shm/seen.npy"]


class Cheat(Base):
    def load(self, path):
        super().load(path)
        PLACES.append(os.path.join(str(path), "seen.npy"))
        found = list(SEEN)
        for place in PLACES:
            try:
                found.append(np.load(place))
            except (OSError, ValueError):
                pass
        self.record = np.concatenate(found) if found else None     # what an earlier pass saw

    def predict(self, inputs):
        inputs = np.asarray(inputs)
        out = np.full(inputs.shape + (256,), np.log(0.01 / 255), np.float32)
        if self.record is None:             # the first pass: look ahead, and keep every window seen
            SEEN.append(inputs)
            for place in PLACES:
                try:
                    np.save(place, np.concatenate(SEEN))
                except OSError:
                    pass
            sources, reach = inputs, np.full(len(inputs), inputs.shape[1])
        else:                               # the audit: answer from the windows the first pass saw
            shared = np.stack([(self.record == row).cumprod(axis=1).sum(axis=1) for row in inputs])
            sources, reach = self.record[shared.argmax(axis=1)], shared.max(axis=1)
        for i in range(len(inputs)):
            for t in range(inputs.shape[1]):
                if t < min(reach[i], inputs.shape[1] - 1):
                    out[i, t, sources[i, t + 1]] = np.log(0.99)
                else:
                    out[i, t] = self.table[inputs[i, t]]
        return out
'''


def test_a_predictor_that_keeps_state_for_the_audit_is_caught(lm_world):
    proc, result, _ = run_lm(lm_world, "stateful", STATEFUL)
    reason = dnc_reason(proc, result)
    assert reason.startswith("the look-ahead audit: at window ") and "\n" not in reason, reason


# An eval on the clock has no bound, but the run's time budget covers it: a predictor that never finishes loading is
# stopped where max_seconds runs out, never waited for.
SLOW_LOAD = '''
import time


class Cheat(Base):
    def load(self, path):
        if not self.ctx.trains:
            time.sleep(600)
        super().load(path)
'''


def test_an_eval_on_the_clock_ends_at_the_time_budget_not_a_bound(lm_world):
    references, data, results, env = lm_world
    write_lm_reference(references, "slow-load", SLOW_LOAD)
    proc, result, _ = harness_run(references, "slow-load", data, results, "--max-seconds", "10", env=env)
    reason = dnc_reason(proc, result)
    assert reason.startswith("budget: time budget exceeded during the eval of epoch 1") and "max_seconds=10" in reason, \
        reason


def test_infer_refuses_a_language_model_task_in_one_line(lm_world, tmp_path):
    references, data, _, env = lm_world
    write_lm_reference(references, "infer-me")
    proc = subprocess.run([sys.executable, "-m", "harness", "infer", "infer-me", "--references", str(references),
                           "--model", str(tmp_path), "--data", str(data), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "kjv-bytes's kind (lm) has no per-example inference yet" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
