"""A harness killed with -9 takes every process of its run along, in each phase and isolation mode.

The harness runs under a small keeper that is a child subreaper: whatever the harness started and
left behind (its workers, their bubblewraps, a daemon a reference double-forked, uid mode's
guardian) is re-parented to the keeper when the harness dies, so the keeper's descendants are
exactly what outlived it. The test kills the harness once the reference says it has reached its
phase, then polls for 2 s until the keeper has no descendant left.

Phases, each where the reference's code holds the run: init (the trainer's setup), train (a
train_epoch that spins and ignores SIGTERM), write (the trainer's save of its snapshot), freeze
(the trainer frozen while the predictor loads the snapshot), eval (the predictor's predict), and a
daemon the trainer double-forked into a new session. Modes: bubblewrap as the machine's user
(bwrap-root as root; .ci/run runs this module again as an unprivileged user: bwrap), and uid mode
(a root harness with the probe set to it, as in a container).

Issue 34: on 3e196d1 the bwrap-root worker (the inner bubblewrap's parent-death signal could not
be sent by the outer one, which had dropped its capabilities) and every uid-mode worker (its
parent-death signal was set before the uid change, which clears it) kept running under PID 1.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from cheats import needs_isolation, write_reference
from polling import wait_for

from bench import killed_run
from harness import local_ranks
from harness.sandbox import modes, scratch

pytestmark = needs_isolation()

PHASES = {
    "init": '''
    def setup(self, ctx):
        announce()
        time.sleep(600)
    ''',
    "train": '''
    def train_epoch(self, epoch):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        announce()
        while True:
            pass
    ''',
    "write": '''
    def save(self, path):
        announce()
        time.sleep(600)
    ''',
    "freeze": '''
    def load(self, path):
        announce()
        time.sleep(600)
    ''',
    "eval": '''
    def predict(self):
        announce()
        time.sleep(600)
    ''',
    "daemon": '''
    def train_epoch(self, epoch):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                while True:
                    time.sleep(1)
            os._exit(0)
        time.sleep(0.5)
        announce()
        time.sleep(600)
    ''',
}
MARK = "DAWNBENCH-PHASE-REACHED"

# The harness in uid mode, whatever this machine's bubblewrap can do.
UID_MODE = killed_run.UID_MODE


def read_until(stream, mark: str, seconds: float) -> str:
    """What `stream` said up to the line with `mark`, its end, or `seconds`, whichever comes first."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [*map(lines.put, stream), lines.put(None)], daemon=True).start()
    said, deadline = "", time.monotonic() + seconds
    while mark not in said:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0))
        except queue.Empty:
            break
        if line is None:
            break
        said += line
    return said


def isolation_modes() -> list:
    uid = pytest.param("uid", marks=pytest.mark.skipif(os.geteuid() != 0, reason="uid mode drops to other uids: root only"))
    return [modes.probe().mode, uid]


@pytest.mark.parametrize("mode", isolation_modes())
@pytest.mark.parametrize("phase", sorted(PHASES))
def test_a_harness_killed_with_9_leaves_no_process(tmp_path, fashion_root, phase, mode):
    references = tmp_path / "references"
    write_reference(references, "cheat", f'''
    import os, signal, sys, time

    def announce():
        print("{MARK}", file=sys.stderr, flush=True)

    class Cheat(Base):
    ''' + PHASES[phase].replace("\n", "\n    "))
    harness = [sys.executable, "-c", UID_MODE] if mode == "uid" else [sys.executable, "-m", "harness"]
    # uid mode's workers must pass through TMPDIR to their scratch folders (pytest's tmp_path is root's only)
    tmp = Path(tempfile.mkdtemp(prefix="dawnbench-killed-"))
    os.chmod(tmp, 0o755)
    keeper, pid = killed_run.keep([*harness, "run", "cheat", "--references", str(references), "--data",
                                   str(fashion_root), "--results", str(tmp_path / "results"), "--no-progress",
                                   "--max-epochs", "1"], env={**os.environ, "TMPDIR": str(tmp)})
    try:
        said = read_until(keeper.stderr, MARK, seconds=120)      # the harness relays its workers' stderr
        assert MARK in said, said[-3000:]
        os.kill(pid, signal.SIGKILL)
        left = killed_run.left_after(keeper, 2)
        assert left == [], f"2 s after kill -9 of the harness ({mode}, {phase}), still running: {left}"
    finally:
        killed_run.release(keeper)
        scratch.sweep_stale(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_worker_whose_harness_is_gone_ends_without_a_traceback():
    """A worker that answers into a closed channel (its harness died mid-call) ends quietly, not
    with harness.sandbox.channel.ChannelClosed's traceback on the user's terminal (issue 34)."""
    from harness.sandbox import channel
    to_worker_r, to_worker_w = os.pipe()
    from_worker_r, from_worker_w = os.pipe()
    worker = subprocess.Popen([sys.executable, "-m", "harness.worker", str(to_worker_r), str(from_worker_w)],
                              pass_fds=(to_worker_r, from_worker_w), stderr=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parent.parent)
    os.close(to_worker_r)
    os.close(from_worker_w)
    os.close(from_worker_r)                  # nobody will read the answer
    channel.send(to_worker_w, {"op": "noop"})
    _, stderr = worker.communicate(timeout=60)
    os.close(to_worker_w)
    assert worker.returncode == 0 and stderr == "", stderr


# --- several ranks: the launcher, a rank or a worker killed --------------------------------------------

RANKS_PHASE = f'''
import sys, time

class Cheat(Base):
    def train_epoch(self, epoch):
        print(f"{MARK} rank={{self.ctx.rank}}", file=sys.stderr, flush=True)
        time.sleep(600)
'''


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _rank(pid: int) -> int | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    return next((int(v[5:]) for v in environ if v.startswith(b"RANK=")), None)


@pytest.mark.parametrize("victim, reason", [
    ("launcher", "the rank launcher ended (it was killed): every rank was stopped"),
    ("rank", "rank 1 failed: killed by SIGKILL"),
    ("worker", "rank 1 failed: error: "),
])
def test_a_killed_multi_rank_run_leaves_no_process_and_names_what_failed(tmp_path, fashion_root, victim, reason):
    """Issue 47: a kill -9 of the rank launcher left both ranks' harnesses, bubblewraps and workers (10-16
    processes), which trained on and wrote a converged result.json for the run its user had killed; a rank
    killed was never noticed (the launcher polled rank 0 alone) and a rank's worker killed left rank 0 waiting.
    Now nothing is left 2 s after the kill, and rank 0's record is DNC naming what failed."""
    references, results = tmp_path / "references", tmp_path / "results"
    write_reference(references, "cheat", RANKS_PHASE)
    log = tmp_path / "stderr"
    with open(log, "w") as stderr:
        keeper, launcher = killed_run.keep([*local_ranks.launcher_command(2), "run", "cheat", "--references",
                                            str(references), "--data", str(fashion_root), "--results", str(results),
                                            "--no-progress", "--max-epochs", "1"], stderr=stderr)
    try:
        said = wait_for(lambda: log.read_text().count(MARK) == 2, seconds=180) or log.read_text()
        assert log.read_text().count(MARK) == 2, said[-3000:]
        ranks = {_rank(pid): pid for pid in killed_run.descendants(launcher) if _parent(pid) == launcher}
        target = {"launcher": launcher, "rank": ranks[1],
                  "worker": next((pid for pid in killed_run.descendants(ranks[1])
                                  if b"harness.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()), None)}[victim]
        assert target, killed_run.describe(killed_run.descendants(ranks[1]))
        os.kill(target, signal.SIGKILL)
        # the launcher itself, where it lives, ends too: the keeper's descendants are every process of the run
        left = killed_run.left_after(keeper, 2)
        assert left == [], f"2 s after kill -9 of the {victim}, still running: {left}"
    finally:
        killed_run.release(keeper)
    said = log.read_text()
    assert "Traceback" not in said, said[-3000:]
    (run_dir,) = (results / "cheat").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "DNC" and result["dnc_reason"].startswith(reason), result["dnc_reason"]
