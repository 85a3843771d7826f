"""The freeze holds against a reference that tries to outrun it, on the sandbox this machine gives.

The hopper forks and exits as fast as it can, so no pid lives long enough for a scan of /proc to
catch it, and every few hops it sends SIGCONT to everything it can reach, as a process that
escaped the stop would to wake the frozen trainer. A heartbeat thread in the worker and the hopper
itself write a counter; after `freeze()` neither may move for `STILL` seconds, in every trial. After
`thaw()` it must move again: the test can fail, because the hopper is alive.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import survivors

from harness.sandbox import handle, launch, modes, procfs, signaller, uid_mode

pytestmark = pytest.mark.harness

TRIALS, STILL = 8, 1.5

HOPPER = '''
import os, signal, threading, time
from pathlib import Path
from harness.reference import Reference


def hop(beat):
    n = 0
    while True:
        if os.fork():
            os._exit(0)            # the parent dies at once: the pid that a scan found is gone
        n += 1
        if n % 5 == 0:
            try:
                os.kill(-1, signal.SIGCONT)
            except OSError:
                pass
            beat.write_text(str(n))


def tick(beat):
    n = 0
    while True:
        n += 1
        beat.write_text(str(n))
        time.sleep(0.005)


CHAINS = 8      # hoppers side by side: a walk of /proc must catch them all in the same pass


class Hopper(Reference):
    def setup(self, ctx):
        work = Path(ctx.work_dir)
        threading.Thread(target=tick, args=(work / "tick",), daemon=True).start()
        for chain in range(CHAINS):
            if os.fork() == 0:
                hop(work / "hop")

    def train_epoch(self, epoch):
        return {"loss": 1.0}

    def predict(self):
        return None

    def save(self, path):
        pass

    def load(self, path):
        pass

    def eval_inputs(self):
        return None

    def infer(self, x):
        return x
'''

TOML = '''task = "fashion-mnist"
framework = "numpy"
model = "none"
entry = "train:Hopper"
description = "a process that forks and exits to outrun the freeze"

[budget]
max_epochs = 1
max_seconds = 60
'''

# The sandbox this machine gives (bwrap or bwrap-root), and, as root, the container's uid mode too.
MODES = [modes.probe().mode] + (["uid"] if os.geteuid() == 0 and modes.probe().mode != "uid" else [])
needs_isolation = pytest.mark.skipif(not modes.probe().isolated, reason=str(modes.probe().reason))


def start_hopper(tmp_path: Path, mode: str | None = None, code: str = HOPPER) -> handle.Worker:
    folder = tmp_path / "references" / "hopper"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(code)
    (folder / "reference.toml").write_text(TOML)
    isolation = modes.Isolation(mode) if mode else modes.probe()
    worker, seen = launch.start("train", isolation, reference_dir=folder, data_files=[], snapshots=None)
    worker.call("init", name="hopper", config={}, eval_examples=10000, seed=0, task="fashion-mnist", rank=0,
                world_size=1, local_rank=0, show_progress=False, role="train", data_root=seen["data_root"],
                work_dir=seen["work_dir"], references=seen["references"])
    return worker


def beats(worker: handle.Worker) -> tuple[str, str]:
    work = worker.scratch / "work"
    return tuple((work / name).read_text() if (work / name).exists() else "" for name in ("tick", "hop"))


def moved(worker: handle.Worker, seconds: float) -> bool:
    """Whether either heartbeat changes within `seconds`."""
    first, deadline = beats(worker), time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
        if beats(worker) != first:
            return True
    return False


@needs_isolation
@pytest.mark.parametrize("mode", MODES)
def test_a_hopper_cannot_outrun_the_freeze(tmp_path, mode):
    worker = start_hopper(tmp_path, mode)
    try:
        assert moved(worker, 10), "the hopper never started: the test would prove nothing"
        escaped = []
        for trial in range(TRIALS):
            worker.freeze()
            if moved(worker, STILL):
                escaped.append(trial)
            worker.thaw()
            assert moved(worker, 5), f"trial {trial}: nothing moves after thaw(): the hopper died"
        assert escaped == [], f"the worker ran while frozen in trials {escaped} of {TRIALS}"
    finally:
        assert worker.kill() == []


@needs_isolation
@pytest.mark.parametrize("mode", MODES)
def test_kill_leaves_nothing_of_the_hopper(tmp_path, mode):
    worker = start_hopper(tmp_path, mode)
    assert moved(worker, 10)
    assert worker.kill() == []
    assert not worker.scratch.exists()
    assert survivors(lambda cmdline: str(worker.scratch).encode() in cmdline) == []


@needs_isolation
def test_a_freeze_that_cannot_stop_every_process_raises(tmp_path, monkeypatch):
    """A freeze never says frozen when a process still runs: here the stop is never sent."""
    worker = start_hopper(tmp_path)
    try:
        monkeypatch.setattr(handle.Worker, "_signal_inside", lambda self, sig, timeout=0: False)
        monkeypatch.setattr(handle.Worker, "_signal_all", lambda self, sig: self.processes())
        with pytest.raises(handle.FreezeError, match="could not be stopped"):
            worker.freeze(timeout=0.5)
        assert not worker.frozen
    finally:
        monkeypatch.undo()
        worker.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="uid mode drops to other uids: it needs root")
def test_two_uid_mode_harnesses_side_by_side_leave_each_others_workers_alone(tmp_path):
    """uid mode freezes and kills with kill(-1) as the worker's uid. With one uid a role, the ranks of
    one run in a container, or two harnesses on one host, froze, thawed and killed each other's
    workers (a CI run of issue 35 hung 30 minutes on it). Each harness process now holds a uid slot of
    its own: here another process holds one, a process runs as that slot's trainer uid, and this
    process's uid-mode worker is frozen, thawed and killed around it (with one uid a role, the
    neighbour is killed: measured on the code before)."""
    env = {**os.environ, "PYTHONPATH": str(Path(uid_mode.__file__).parents[2])}
    other = subprocess.Popen([sys.executable, "-c", "import sys; from harness.sandbox import uid_mode; "
                              "print(uid_mode.uid_slot(), flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    neighbour = None
    try:
        slot = int(other.stdout.readline())
        assert slot != uid_mode.uid_slot()
        uid = uid_mode.role_groups()["train"] + 2 * slot
        neighbour = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "600"])
        worker = start_hopper(tmp_path, "uid")
        try:
            assert worker.uid != uid and moved(worker, 10)
            worker.freeze()
            worker.thaw()
        finally:
            assert worker.kill() == []
        state = Path(f"/proc/{neighbour.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        assert neighbour.poll() is None and state == b"S", f"the other slot's process was {state.decode()}"
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
        other.stdin.close()
        other.wait(timeout=30)


def signaller_inside(worker: handle.Worker) -> int:
    """The pid of the process that sends the worker's signals: bwrap: the child its parent made
    inside the namespace; uid mode: the signaller itself."""
    outer = worker._signaller.pid
    if worker.uid is not None:
        return outer
    deadline = time.monotonic() + 5
    while not (children := procfs.children(outer)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return children[0]


@needs_isolation
@pytest.mark.parametrize("mode", MODES)
def test_no_process_is_started_per_handover(tmp_path, mode, monkeypatch):
    """Issue 37: the signals come from a signaller started once, not from a process per freeze."""
    worker = start_hopper(tmp_path, mode)
    try:
        worker.freeze()                  # the first may start the signaller
        worker.thaw()
        started = []
        real = subprocess.Popen.__init__

        def counted(self, *args, **kwargs):
            started.append(args[0] if args else kwargs.get("args"))
            real(self, *args, **kwargs)
        monkeypatch.setattr(subprocess.Popen, "__init__", counted)
        forks = []
        monkeypatch.setattr(os, "fork", lambda: forks.append(1) or pytest.fail("the harness forked"))
        signaller = getattr(worker, "_signaller", None)
        for _ in range(10):
            worker.freeze()
            assert not moved(worker, 0.1)
            worker.thaw()
        assert started == [] and forks == [], f"{len(started)} processes started in 10 freezes and thaws"
        assert signaller is not None and worker._signaller is signaller, "not the same signaller throughout"
    finally:
        monkeypatch.undo()
        assert worker.kill() == []


@needs_isolation
@pytest.mark.parametrize("mode", MODES)
def test_a_signaller_that_does_not_answer_is_replaced(tmp_path, mode):
    """A worker may stop its signaller (uid mode, unprivileged bubblewrap: the same uid): the
    harness hears nothing within its wait, drops it, and a fresh one sends the next stop; the freeze
    never waits for it unbounded, and never calls a worker frozen that was not stopped."""
    worker = start_hopper(tmp_path, mode)
    try:
        worker.freeze()           # the hopper's SIGCONT would wake the signaller where its uid reaches it
        first, inside = worker._signaller, signaller_inside(worker)
        os.kill(inside, signal.SIGSTOP)           # what the worker could do
        t = time.monotonic()
        assert worker._signal_inside(signal.SIGSTOP, timeout=0.3) is False
        assert time.monotonic() - t < 3
        assert worker._signaller is None and first.returncode is not None, "the silent signaller still runs"
        assert not os.path.exists(f"/proc/{inside}"), "the silent signaller was not reaped"
        worker.thaw()                              # a fresh one
        assert worker._signaller is not None and worker._signaller.pid != first.pid
        worker.freeze()
        assert not moved(worker, STILL)
        worker.thaw()
        assert moved(worker, 5)
    finally:
        assert worker.kill() == []


@needs_isolation
@pytest.mark.parametrize("mode", MODES)
def test_a_killed_signaller_is_replaced_and_the_freeze_holds(tmp_path, mode):
    worker = start_hopper(tmp_path, mode)
    try:
        worker.start_signaller()
        os.kill(signaller_inside(worker), signal.SIGKILL)        # what the worker could do
        worker.freeze(timeout=5)
        assert not moved(worker, STILL)
        worker.thaw()
    finally:
        assert worker.kill() == []


SABOTEUR = HOPPER.replace("CHAINS = 8", """CHAINS = 8


def sabotage():
    # stop every signaller this uid may reach, as it appears
    me = os.getpid()
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if int(pid) != me and b"-I\\0-S\\0-c" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(int(pid), signal.SIGSTOP)
            except (OSError, ValueError):
                pass
        time.sleep(0.001)


threading.Thread(target=sabotage, daemon=True).start()""")


@needs_isolation
@pytest.mark.parametrize("mode", MODES)
def test_a_worker_that_stops_its_signallers_is_never_called_frozen(tmp_path, mode):
    """A worker that stops every signaller as it appears (where its uid may: uid mode, unprivileged
    bubblewrap) makes the freeze fail within its timeout, or is frozen; it never hangs the harness
    and is never called frozen while it runs."""
    worker = start_hopper(tmp_path, mode, code=SABOTEUR)
    try:
        assert moved(worker, 10)
        t = time.monotonic()
        try:
            worker.freeze(timeout=3)
        except handle.FreezeError:
            assert not worker.frozen
        else:
            assert not moved(worker, STILL), "called frozen, but the worker runs"
        assert time.monotonic() - t < 3 + 2 * signaller.SIGNAL_SECONDS
    finally:
        assert worker.kill() == []


@needs_isolation
@pytest.mark.parametrize("mode", MODES)
def test_kill_leaves_no_signaller(tmp_path, mode):
    worker = start_hopper(tmp_path, mode)
    worker.freeze()
    worker.thaw()
    outer, inside = worker._signaller, signaller_inside(worker)
    assert worker.kill() == []
    assert worker._signaller is None and outer.returncode is not None
    assert not os.path.exists(f"/proc/{inside}") and not os.path.exists(f"/proc/{outer.pid}")
