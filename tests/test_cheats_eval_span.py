"""Issue 22's routes, each as an adversarial reference run by the real harness: training moved into
the eval span, a snapshot that smuggles data, the scored model swapped after scoring, the network,
a train_epoch that never returns, and a harness killed with -9. Each must end DNC (never converged,
never official) or be caught by `verify`, and leave nothing behind.

.ci/run runs the isolation-dependent ones again as an unprivileged user (bwrap, not bwrap-root).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cheats import SMUGGLE, events, harness_run, needs_isolation, write_reference
from polling import processes, survivors, wait_for

from harness import snapshots, verify_run
from harness.sandbox import scratch

pytestmark = needs_isolation()


@pytest.fixture
def world(tmp_path, fashion_root):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return tmp_path / "references", Path(fashion_root).resolve(), tmp_path / "results", tmp


def run_cheat(world, code: str, *args: str, name: str = "cheat", timeout: float = 300):
    references, data, results, tmp = world
    write_reference(references, name, code)
    return harness_run(references, name, data, results, *args, env={"TMPDIR": str(tmp)}, timeout=timeout)


def assert_verifies(run_dir: Path, data: Path) -> None:
    report = verify_run.verify(run_dir, data)
    assert report.first_failure is None, report.lines()


def eval_stops(run_dir: Path) -> list[dict]:
    return [e for e in events(run_dir) if e["key"] == "eval_stop"]


@pytest.mark.parametrize("where", ["load", "predict"])
def test_training_moved_into_the_eval_span_is_dnc_at_the_bound(world, where):
    started = time.monotonic()
    proc, result, run_dir = run_cheat(world, SMUGGLE.format(n=2000, where=where), "--max-epochs", "2")
    took = time.monotonic() - started
    assert proc.returncode == 1 and result["status"] == "DNC", proc.stderr[-2000:]
    assert result["dnc_reason"].startswith("the eval span of epoch 1 took over"), result["dnc_reason"]
    assert "past its bound of" in result["dnc_reason"] and result.get("official") is not True
    assert took < 45, f"the predictor was waited for ({took:.0f} s) instead of stopped at its bound"
    assert "Traceback" not in proc.stderr and "past its bound" in proc.stderr
    assert_verifies(run_dir, world[1])      # the harness's own DNC folder verifies as what it is


def test_a_snapshot_that_carries_the_training_set_is_refused(world):
    proc, result, run_dir = run_cheat(world, SMUGGLE.format(n=60000, where="load"), "--max-epochs", "2")
    assert proc.returncode == 1 and result["status"] == "DNC", proc.stderr[-2000:]
    assert "the snapshot is over its task's cap of 16 MiB" in result["dnc_reason"], result["dnc_reason"]
    assert [e["key"] for e in events(run_dir)].count("eval_accuracy") == 0


# Issue 33's attack, rebuilt: the trainer says it trained on one example (the old bound's denominator:
# 10000 eval / 1 x the train span, thousands of seconds); each epoch's "model" is a third of the
# training set as raw images (15 MiB, under the 16 MiB cap); the predictor keeps every chunk it loads
# (in memory, HOME and /tmp) and, at the third eval, trains on what it holds, off the clock. On c855ded
# this converges at epoch 3 in a few seconds of time-to-accuracy; now the predictor of each eval is a
# fresh process that holds one chunk, and the bound is the task's: past it, the run is DNC.
KEEPER = '''
import glob
import time
from pathlib import Path

from common.loaders import load_fashion_mnist

KEPT = []       # lives as long as the predictor's process


class Cheat(Base):
    def setup(self, ctx):
        super().setup(ctx)
        if ctx.trains:
            images, _ = load_fashion_mnist(ctx.data_root, "train")
            self.raw = images.reshape(len(images), -1).astype(np.uint8)

    def train_epoch(self, epoch):
        self.epoch = epoch
        return {"loss": 1.0, "samples": 1}           # trains nothing, says it trained on one example

    def save(self, path):
        super().save(path)
        chunk = slice(20000 * (self.epoch - 1), 20000 * self.epoch)
        np.save(Path(path) / "x.npy", self.raw[chunk])  # a third of the training set: 15 MiB
        np.save(Path(path) / "y.npy", self.y[chunk].astype(np.uint8))

    def load(self, path):
        super().load(path)
        x, y = np.load(Path(path) / "x.npy"), np.load(Path(path) / "y.npy")
        KEPT.append((x, y))
        for keep in (os.environ["HOME"], "/tmp"):
            np.save(f"{keep}/chunk-{len(glob.glob(keep + '/chunk-*'))}.npy", x)
        if Path(path).name == "epoch-003":
            self.train_on_what_was_kept()

    def train_on_what_was_kept(self):
        x = np.concatenate([features(c) for c, _ in KEPT])
        y = np.concatenate([t for _, t in KEPT]).astype(np.int64)
        end = time.monotonic() + 20                     # the real recipe, off the clock
        while time.monotonic() < end:
            for i in range(0, len(x), 500):
                z = x[i:i + 500] @ self.w
                p = np.exp(z - z.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
                p[np.arange(len(p)), y[i:i + 500]] -= 1
                self.w -= 0.5 * x[i:i + 500].T @ p / len(p)
'''


def test_issue_33_samples_of_one_and_a_predictor_that_keeps_every_chunk_is_dnc_at_the_tasks_bound(world):
    proc, result, run_dir = run_cheat(world, KEEPER, "--max-epochs", "3",
                                      "--threshold", "0.5")
    assert proc.returncode == 1 and result["status"] == "DNC", proc.stderr[-2000:]
    reason = result["dnc_reason"]
    assert reason.startswith("the eval span of epoch 3 took over"), reason
    assert "= 10000 eval / 60000 training examples x" in reason and "for the predictor's start" in reason, reason
    assert result.get("official") is not True and "Traceback" not in proc.stderr
    for stop in eval_stops(run_dir):        # each bound the task's, whatever the trainer said
        assert stop["metadata"]["eval_bound_s"] < 60 and stop["metadata"]["fresh_predictor"] is True
    assert_verifies(run_dir, world[1])


def test_no_state_of_one_eval_reaches_the_next(world):
    """The predictor of each eval is a new process with a new scratch: what the last one kept in
    memory, in HOME or in /tmp is gone. On c855ded the second eval found all three."""
    code = '''
    import glob

    KEPT = []

    class Cheat(Base):
        def load(self, path):
            super().load(path)
            found = [f"memory:{len(KEPT)}"] if KEPT else []
            found += glob.glob(os.environ["HOME"] + "/kept-*") + glob.glob("https://rp2.alfred511.top/hf/tmp/kept-*")
            if found:
                raise RuntimeError(f"CARRIED {found}")
            KEPT.append(Path(path).name)
            for keep in (os.environ["HOME"], "/tmp"):
                Path(keep, "kept-" + Path(path).name).write_text("state")
    '''
    proc, result, run_dir = run_cheat(world, code, "--max-epochs", "3")
    assert result["dnc_reason"].startswith("budget: max_epochs=3"), result["dnc_reason"]
    assert "CARRIED" not in proc.stderr and len(eval_stops(run_dir)) == 3


def test_a_snapshot_with_a_link_is_refused(world):
    code = '''
    class Cheat(Base):
        def save(self, path):
            super().save(path)
            os.symlink("/dawnbench/data", Path(path) / "data")
    '''
    proc, result, _ = run_cheat(world, code, "--max-epochs", "1")
    assert result["status"] == "DNC" and "not a regular file or folder" in result["dnc_reason"], result


def test_an_honest_eval_stays_within_its_bound_and_logs_its_cost(world):
    proc, result, run_dir = run_cheat(world, "", "--max-epochs", "2")
    assert result["dnc_reason"].startswith("budget"), proc.stderr[-2000:]
    for stop in eval_stops(run_dir):
        cost = stop["metadata"]
        assert 0 < cost["predictor_s"] <= cost["eval_bound_s"], cost
        assert cost["train_s"] > 0 and cost["predictor_cpu_s"] >= 0 and cost["train_cpu_s"] > 0, cost


def test_the_kept_model_is_the_scored_snapshot(world):
    # After the last eval the trainer is thawed (for its versions); it rewrites its snapshot then. The
    # thread waits until the harness has taken the snapshot (and removed the trainer's copy): written
    # earlier, the 7s would be the snapshot scored, which a fresh-clone CI under load once saw.
    code = '''
    import threading, time

    def swap(path):
        deadline = time.monotonic() + 60
        while Path(path).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(100):
            try:
                Path(path).mkdir(parents=True, exist_ok=True)
                np.save(Path(path) / "w.npy", np.full((785, 10), 7.0, np.float32))
            except OSError:
                pass
            time.sleep(0.02)

    class Cheat(Base):
        def save(self, path):
            super().save(path)
            threading.Thread(target=swap, args=(path,), daemon=True).start()
    '''
    proc, result, run_dir = run_cheat(world, code, "--max-epochs", "2")
    assert result["status"] == "DNC" and result["dnc_reason"].startswith("budget"), proc.stderr[-2000:]
    scored = [e for e in events(run_dir) if e["key"] == "eval_accuracy"][-1]["metadata"]["snapshot_sha256"]
    assert snapshots.tree_sha256(run_dir / "model") == scored
    import numpy as np
    assert not (np.load(run_dir / "model" / "w.npy") == 7.0).all()
    assert_verifies(run_dir, world[1])


def test_verify_refuses_a_model_that_is_not_the_scored_one(world, tmp_path):
    proc, result, run_dir = run_cheat(world, "", "--max-epochs", "1")
    import numpy as np
    np.save(run_dir / "model" / "w.npy", np.zeros((785, 10), np.float32))
    failure = verify_run.verify(run_dir, world[1]).first_failure
    assert failure.name == "model" and "is not the snapshot scored at epoch 1" in failure.detail


def test_the_trainer_has_only_a_loopback(world):
    code = '''
    import socket

    class Cheat(Base):
        def setup(self, ctx):
            names = sorted(name for _, name in socket.if_nameindex())
            unix = open("/proc/net/unix").read().count("docker")
            raise RuntimeError(f"interfaces={names} docker_sockets={unix}")
    '''
    proc, result, run_dir = run_cheat(world, code)
    assert "interfaces=['lo'] docker_sockets=0" in result["dnc_reason"], result["dnc_reason"]
    network = json.loads((run_dir / "env.json").read_text())["network"]
    assert network == {"train": "loopback only (its own namespace)", "predict": "loopback only (its own namespace)"}


def test_a_hung_train_epoch_ends_at_the_time_budget(world):
    code = '''
    import time

    class Cheat(Base):
        def train_epoch(self, epoch):
            time.sleep(600)
    '''
    started = time.monotonic()
    proc, result, run_dir = run_cheat(world, code, "--max-seconds", "8", timeout=120)
    took = time.monotonic() - started
    assert result["status"] == "DNC", proc.stderr[-2000:]
    assert result["dnc_reason"].startswith("budget: time budget exceeded during epoch 1"), result["dnc_reason"]
    assert took < 60 and "Traceback" not in proc.stderr
    assert (run_dir / "cheat.tsv").is_file() and [e["key"] for e in events(run_dir)][-1] == "run_stop"
    assert_verifies(run_dir, world[1])


def test_a_harness_killed_with_9_during_eval_leaves_no_process_and_its_scratch_is_swept(world):
    references, data, results, tmp = world
    token = f"DAWNBENCH-CHEAT-{uuid.uuid4().hex}"
    write_reference(references, "cheat", f'''
    import time

    class Cheat(Base):
        def load(self, path):
            super().load(path)
            time.sleep(1)  # {token}
    ''')
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "cheat", "--references", str(references),
                             "--data", str(data), "--results", str(results), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp)})
    # killed while the predictor runs (in load): a process of its scratch folder is there
    assert wait_for(lambda: processes(lambda cmdline: str(tmp).encode() + b"/dawnbench-predict-" in cmdline), 120)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert survivors(lambda cmdline: str(tmp).encode() in cmdline
                     or b"bwrap" in cmdline and str(references).encode() in cmdline) == []
    left = sorted(p.name.split("-")[1] for p in tmp.glob("dawnbench-*-*-*"))
    assert {"run", "train", "predict"} <= set(left), left
    swept = scratch.sweep_stale(tmp)
    assert len(swept) == len(left) and list(tmp.glob("dawnbench-*")) == []
