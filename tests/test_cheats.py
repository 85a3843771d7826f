"""A test per cheat: each adversarial reference runs through the real harness and must end DNC or
refused, never converged, never official. Issue 10's table, then cheats of our own.

These run as whatever user runs the suite; .ci/run runs this file again as an unprivileged user,
so both the root (bwrap-root) and the unprivileged (bwrap) sandboxes are exercised.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from cheats import events, harness_run, needs_isolation, write_reference
from polling import survivors, wait_for

from harness import datasets

pytestmark = needs_isolation()


@pytest.fixture
def world(tmp_path, fashion_root):
    """(references folder, data root, results folder) for one cheat."""
    return tmp_path / "references", Path(fashion_root).resolve(), tmp_path / "results"


def run_cheat(world, code: str, *args: str, env: dict | None = None, name: str = "cheat"):
    references, data, results = world
    write_reference(references, name, code)
    return harness_run(references, name, data, results, *args, env=env)


def assert_not_converged(proc, result):
    assert proc.returncode != 0, proc.stderr[-2000:]
    if result is not None:
        assert result["status"] == "DNC", result
        assert result.get("official") is not True


def test_honest_base_runs_isolated_and_does_not_reach_92(world):
    proc, result, run_dir = run_cheat(world, "")
    assert result["status"] == "DNC" and result["dnc_reason"].startswith("budget"), proc.stderr[-2000:]
    assert result["isolation"]["mode"] in ("bwrap", "bwrap-root", "uid")
    assert 0.7 < result["history"][-1]["top1"] < 0.92


def test_reading_the_label_files_fails(world):
    data = world[1]
    code = f'''
    class Cheat(Base):
        def predict(self):
            import gzip
            for path in ["{data}/fashion-mnist/t10k-labels-idx1-ubyte",
                         os.path.join(str(self.ctx.data_root), "fashion-mnist", "t10k-labels-idx1-ubyte"),
                         "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"]:
                try:
                    raw = open(path, "rb").read()
                except OSError:
                    continue
                raw = gzip.decompress(raw) if path.endswith(".gz") else raw
                return np.eye(10)[np.frombuffer(raw[8:], np.uint8)]
            raise RuntimeError("CHEAT-BLOCKED: no label file in view")
    '''
    proc, result, _ = run_cheat(world, code)
    assert_not_converged(proc, result)
    assert "CHEAT-BLOCKED" in result["dnc_reason"]


def test_calling_the_harness_label_loader_fails(world):
    data = world[1]
    code = f'''
    class Cheat(Base):
        def predict(self):
            from harness.eval_labels import load_eval_labels
            for root in ["{data}", str(self.ctx.data_root), None]:
                try:
                    return np.eye(10)[load_eval_labels("fashion-mnist", root)]
                except Exception:
                    continue
            raise RuntimeError("CHEAT-BLOCKED: the loader found no labels")
    '''
    proc, result, _ = run_cheat(world, code)
    assert_not_converged(proc, result)
    assert "CHEAT-BLOCKED" in result["dnc_reason"]


def test_patching_the_clock_and_the_metric_changes_nothing(world):
    code = '''
    import harness.clock, harness.metrics, harness.tasks, time
    harness.clock.Clock.on_clock = lambda self: 0.001
    harness.clock.Clock.lap = lambda self, span: 0.0
    harness.metrics.topk_accuracy = lambda *a, **k: 1.0
    harness.tasks.Task.score = lambda self, p, l: {"top1": 1.0}
    time.perf_counter = lambda: 0.0

    class Cheat(Base):
        def train_epoch(self, epoch):
            time.sleep(0.3)     # a measurable epoch, whatever the patched clock says
            return super().train_epoch(epoch)
    '''
    proc, result, _ = run_cheat(world, code)
    assert_not_converged(proc, result)
    assert result["history"][0]["top1"] < 0.92
    assert result["history"][0]["tta_seconds"] > 0.3


def test_training_inside_predict_has_no_training_data(world):
    code = '''
    class Cheat(Base):
        def predict(self):
            from common.loaders import load_fashion_mnist
            try:
                images, y = load_fashion_mnist(self.ctx.data_root, "train")
            except Exception as e:
                raise RuntimeError(f"CHEAT-BLOCKED: {e}")
            return super().predict()
    '''
    proc, result, _ = run_cheat(world, code)
    assert_not_converged(proc, result)
    assert "CHEAT-BLOCKED" in result["dnc_reason"]


def test_a_background_thread_cannot_train_while_the_harness_evaluates(world):
    # The thread ticks every millisecond; if the trainer were not frozen during the eval span, the
    # ticks between one epoch's end and the next epoch's start would cover the whole gap.
    code = '''
    import threading, time

    class Cheat(Base):
        def setup(self, ctx):
            super().setup(ctx)
            self.ticks = 0
            threading.Thread(target=self.spin, daemon=True).start()
            self.ended = None

        def spin(self):
            while True:
                self.ticks += 1
                time.sleep(0.001)

        def train_epoch(self, epoch):
            stats = {}
            if self.ended is not None:
                stats = {"gap_s": time.monotonic() - self.ended[0], "gap_ticks": self.ticks - self.ended[1]}
            stats.update(super().train_epoch(epoch))
            self.ended = (time.monotonic(), self.ticks)
            return stats
    '''
    proc, result, run_dir = run_cheat(world, code, "--max-epochs", "2")
    assert_not_converged(proc, result)
    stop = [e for e in events(run_dir) if e["key"] == "epoch_stop" and e["metadata"]["epoch_num"] == 2][0]
    gap_s, ticks = stop["metadata"]["gap_s"], stop["metadata"]["gap_ticks"]
    clock = {(e["key"], e["metadata"].get("epoch_num")): e["metadata"]["clock_s"] for e in events(run_dir)}
    evaluated = clock[("eval_stop", 1)] - clock[("eval_start", 1)]      # epoch 1's eval: inside the gap
    assert gap_s >= evaluated * 0.9                      # the gap spanned the eval
    assert ticks * 0.001 < 0.25 * gap_s, (ticks, gap_s)  # but the thread did not run through it


def test_all_max_and_synchronize_hooks_are_not_trusted(world):
    code = '''
    class Cheat(Base):
        def all_max(self, values):
            return [0.0 for _ in values]

        def synchronize(self):
            return None  # queued device work is still waited for: the worker calls the device's own sync
    '''
    proc, result, _ = run_cheat(world, code)
    assert_not_converged(proc, result)
    assert result["dnc_reason"].startswith("budget")
    assert all(row["tta_seconds"] > 0 for row in result["history"])


def test_rewriting_the_run_folder_at_exit_fails(world):
    results = world[2]
    code = f'''
    import atexit, glob, json

    def forge():
        for path in glob.glob("{results}/**/result.json", recursive=True):
            open(path, "w").write(json.dumps({{"status": "converged"}}))
        for path in glob.glob("{results}/**/*.tsv", recursive=True) + glob.glob("{results}/**/events.jsonl", recursive=True):
            open(path, "a").write("forged")
    atexit.register(forge)

    class Cheat(Base):
        def train_epoch(self, epoch):
            forge()
            return super().train_epoch(epoch)
    '''
    proc, result, run_dir = run_cheat(world, code)
    assert_not_converged(proc, result)
    assert result["status"] == "DNC"
    assert "forged" not in (run_dir / "events.jsonl").read_text()
    assert "forged" not in (run_dir / "cheat.tsv").read_text()


@pytest.mark.parametrize("how, reason", [
    ("raise SystemExit(0)", "ended during train"),
    ("os._exit(0)", "ended during train"),
    ("import ctypes; ctypes.string_at(0)", "SIGSEGV"),
    ("os.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"),  # what the OOM killer sends
])
def test_a_worker_that_dies_is_dnc_with_its_logs(world, how, reason):
    code = f'''
    import signal

    class Cheat(Base):
        def train_epoch(self, epoch):
            if epoch == 2:
                {how}
            return super().train_epoch(epoch)
    '''
    proc, result, run_dir = run_cheat(world, code)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert result["status"] == "DNC" and reason in result["dnc_reason"], result["dnc_reason"]
    keys = [e["key"] for e in events(run_dir)]
    assert keys.count("eval_accuracy") == 1 and keys[-1] == "run_stop"


def test_the_harness_process_is_out_of_reach(world):
    # ptrace, /proc/<pid>/mem and fd of the harness, signals: the harness is not even visible.
    code = '''
    import ctypes, signal

    class Cheat(Base):
        def train_epoch(self, epoch):
            found = 0
            for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
                try:
                    cmd = open(f"/proc/{pid}/cmdline", "rb").read()
                except OSError:
                    continue
                if b"harness" in cmd and b"run" in cmd and b"worker" not in cmd:
                    found += 1
                    for what in ("mem", "fd", "environ"):
                        try:
                            os.listdir(f"/proc/{pid}/{what}") if what == "fd" else open(f"/proc/{pid}/{what}", "rb").read(1)
                            found += 100
                        except OSError:
                            pass
            libc = ctypes.CDLL(None, use_errno=True)
            attached = 0
            for pid in range(1, 400):     # PTRACE_ATTACH to anything that is not of this sandbox
                try:
                    mine = b"harness.worker" in open(f"/proc/{pid}/cmdline", "rb").read() or pid == 1
                except OSError:
                    mine = False
                if not mine and libc.ptrace(16, pid, 0, 0) == 0:
                    attached += 1
            stats = super().train_epoch(epoch)
            stats.update({"harness_seen": found, "attached": attached, "ppid": os.getppid(), "uid": os.getuid()})
            return stats
    '''
    proc, result, run_dir = run_cheat(world, code, "--max-epochs", "1")
    assert_not_converged(proc, result)
    stop = [e for e in events(run_dir) if e["key"] == "epoch_stop"][0]["metadata"]
    assert stop["harness_seen"] == 0 and stop["attached"] == 0
    if result["isolation"]["mode"] != "uid":
        assert stop["uid"] != 0 or os.geteuid() != 0


def test_a_detached_daemon_is_killed_with_the_run(world):
    token = f"DAWNBENCH-CHEAT-DAEMON-{uuid.uuid4().hex}"
    code = f'''
    import subprocess, sys

    class Cheat(Base):
        def setup(self, ctx):
            super().setup(ctx)
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{token}"],
                             start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    '''
    proc, result, _ = run_cheat(world, code, "--max-epochs", "1")
    assert_not_converged(proc, result)
    leftovers = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                leftovers.append(pid)
        except OSError:
            pass
    assert leftovers == []


def test_state_does_not_carry_from_one_run_to_the_next(world):
    # Every place a worker can write (HOME, TMPDIR, /tmp, its work folder) is wiped after a run.
    code = '''
    import tempfile

    class Cheat(Base):
        def train_epoch(self, epoch):
            places = {os.path.expanduser("~/.cache/cheat"), os.path.join(tempfile.gettempdir(), "cheat"),
                      "/tmp/cheat", os.path.join(str(self.ctx.work_dir), "cheat")}
            found = sum(os.path.exists(place) for place in places)
            for place in places:
                try:
                    os.makedirs(os.path.dirname(place), exist_ok=True)
                    open(place, "w").write("state")
                except OSError:
                    pass
            stats = super().train_epoch(epoch)
            stats["found"] = found
            return stats
    '''
    for _ in range(2):
        proc, result, run_dir = run_cheat(world, code, "--max-epochs", "1", name=f"cheat{_}")
        stop = [e for e in events(run_dir) if e["key"] == "epoch_stop"][0]["metadata"]
        assert stop["found"] == 0


def test_inference_timing_cannot_be_patched(world, tmp_path):
    references, data, results = world
    write_reference(references, "honest")
    write_reference(references, "cheat", '''
    import time
    time.perf_counter = lambda: 0.0
    time.monotonic = lambda: 0.0

    class Cheat(Base):
        def infer(self, x):
            time.sleep(0.002)
            return super().infer(x)
    ''')
    proc, result, run_dir = harness_run(references, "honest", data, results, "--max-epochs", "1")
    model = run_dir / "model"
    out = subprocess.run([sys.executable, "-m", "harness", "infer", "cheat", "--references", str(references),
                          "--data", str(data), "--model", str(model), "--limit", "200", "--warmup", "5",
                          "--no-progress", "--out", str(tmp_path / "infer")], capture_output=True, text=True)
    import json
    assert out.returncode in (0, 1), out.stderr[-2000:]
    inference = json.loads((tmp_path / "infer" / "inference.json").read_text())
    assert inference["latency_ms"]["min"] >= 2.0, out.stderr[-2000:]
    assert inference["round_trip_overhead_ms"] > 0


def test_the_entry_must_be_a_reference_class(world):
    references, data, results = world
    directory = write_reference(references, "cheat", "Cheat = os.path.join\n")
    proc, result, run_dir = harness_run(references, "cheat", data, results)
    assert proc.returncode != 0
    assert result is None or result["status"] == "DNC"
    lines = [line for line in proc.stderr.splitlines() if "field 'entry'" in line]
    assert lines and all("not a class" in line for line in lines) and "Traceback" not in proc.stderr
    assert directory.is_dir()


def test_labels_do_not_leak_through_the_snapshot_folder(world):
    # The trainer writes into its snapshots; the predictor reads them. Neither sees a label.
    data = world[1]
    code = f'''
    class Cheat(Base):
        def save(self, path):
            super().save(path)
            try:
                import shutil
                shutil.copy("{data}/fashion-mnist/t10k-labels-idx1-ubyte", path)
            except OSError as e:
                open(os.path.join(path, "blocked"), "w").write(str(e))

        def predict(self):
            labels = os.path.join(self.snapshot, "t10k-labels-idx1-ubyte")
            if os.path.exists(labels):
                return np.eye(10)[np.frombuffer(open(labels, "rb").read()[8:], np.uint8)]
            raise RuntimeError("CHEAT-BLOCKED: " + open(os.path.join(self.snapshot, "blocked")).read()[:60])

        def load(self, path):
            super().load(path)
            self.snapshot = str(path)
    '''
    proc, result, _ = run_cheat(world, code)
    assert_not_converged(proc, result)
    assert "CHEAT-BLOCKED" in result["dnc_reason"]


def test_the_eval_labels_are_checked_before_any_folder(world, tmp_path):
    references, data, results = world
    write_reference(references, "honest")
    broken = tmp_path / "broken-data"
    (broken / "fashion-mnist").mkdir(parents=True)
    for f in (data / "fashion-mnist").iterdir():
        (broken / "fashion-mnist" / f.name).write_bytes(f.read_bytes())
    labels = broken / "fashion-mnist" / "t10k-labels-idx1-ubyte"
    raw = bytearray(labels.read_bytes())
    raw[8:] = np.eye(10, dtype=np.uint8)[0].tobytes() * ((len(raw) - 8) // 10)
    labels.write_bytes(bytes(raw))
    proc, result, run_dir = harness_run(references, "honest", broken, results)
    assert proc.returncode == 2 and result is None and run_dir is None
    assert "t10k-labels-idx1-ubyte" in proc.stderr and "Traceback" not in proc.stderr
    assert datasets.manifest("fashion-mnist")   # the built-in manifest, untouched


def test_sigterm_of_the_harness_kills_the_workers(world):
    references, data, results = world
    token = f"DAWNBENCH-CHEAT-{uuid.uuid4().hex}"
    write_reference(references, "cheat", f'''
    import time

    class Cheat(Base):
        def train_epoch(self, epoch):
            time.sleep(600)  # {token}
    ''')
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "cheat", "--references", str(references),
                             "--data", str(data), "--results", str(results), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the trainer is in train_epoch once the first epoch has started
    assert wait_for(lambda: "epoch_start" in "".join(p.read_text() for p in results.glob("cheat/*/events.jsonl")),
                    60), proc.stderr
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert survivors(lambda cmdline: b"harness.worker" in cmdline and str(references).encode() in cmdline) == []
