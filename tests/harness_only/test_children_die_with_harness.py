"""Every process the harness starts dies with it: a kill -9 of the harness leaves none running.

The workers die with it through their bubblewraps or uid mode's guardian (tests/test_killed_harness.py).
This is the same promise for the harness's own children (the workers' environment probe, the
inference timing process, git, nvidia-smi): each is started with a parent-death signal and checks
that the harness still lives (harness.sandbox.kernel.dies_with_harness). In the CI of d7381f5 the
environment probe, started the moment the harness was killed, ran on for 8 s.
"""
from __future__ import annotations

import ast
import os
import signal
import sys
from pathlib import Path

import pytest
from conftest import REPO
from polling import wait_for

from bench import killed_run

pytestmark = pytest.mark.harness

STARTERS = {"run", "Popen", "check_output", "check_call", "call"}
# Started without a parent-death signal on purpose, each with its reason.
EXEMPT = {
    # uid mode's guardian must outlive the harness: it is what kills the worker uids' processes when the
    # harness dies; it ends when its stdin (the harness's end) closes.
    ("harness/sandbox/guardian.py", "Popen"),
    # the signaller sets its own parent-death signal, after its uid change (which clears one set before)
    ("harness/sandbox/signaller.py", "Popen"),
    # container mode's reaper must outlive the harness too: it removes the judge's worker containers (which
    # the engine, not the killed `docker run` client, holds) once the harness's end of its stdin closes
    ("harness/sandbox/container_mode.py", "Popen"),
}


def starts_without_death_signal(path: Path) -> list[str]:
    """The subprocess calls in `path` that pass no preexec_fn: `file:line call`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STARTERS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
                and not any(k.arg == "preexec_fn" for k in node.keywords)):
            rel = path.relative_to(REPO).as_posix()
            if (rel, node.func.attr) not in EXEMPT:
                found.append(f"{rel}:{node.lineno} subprocess.{node.func.attr}")
    return found


def test_every_process_the_harness_starts_has_a_parent_death_signal():
    missing = [hit for path in sorted((REPO / "harness").rglob("*.py")) for hit in starts_without_death_signal(path)]
    assert missing == [], ("started without preexec_fn=kernel.dies_with_harness() (a kill -9 of the harness "
                           f"leaves it running): {missing}")


def test_the_check_finds_a_call_without_one(tmp_path):
    probe = REPO / "harness" / "_probe_for_test.py"
    probe.write_text("import subprocess\nsubprocess.run(['true'])\nsubprocess.Popen(['true'], preexec_fn=f)\n")
    try:
        assert starts_without_death_signal(probe) == ["harness/_probe_for_test.py:2 subprocess.run"]
    finally:
        probe.unlink()


def test_a_harness_killed_while_it_reads_the_workers_environment_leaves_no_probe(tmp_path, fashion_root):
    """The workers' interpreter is a stand-in whose environment probe takes 60 s (a `sleep` it execs):
    the harness is killed while it waits for it, and the probe must go with it within 2 s."""
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nexec sleep 60\n")
    slow.chmod(0o755)
    env = {**os.environ, "DAWNBENCH_WORKER_PYTHON": str(slow)}
    keeper, pid = killed_run.keep([sys.executable, "-m", "harness", "run", "fashion-mnist-cnn-pytorch", "--data",
                                   str(fashion_root), "--results", str(tmp_path / "results"), "--no-progress",
                                   "--max-epochs", "1"], env=env, cwd=REPO)
    try:
        def sleeping() -> bool:
            return any("sleep 60" in line for line in killed_run.describe(killed_run.descendants(keeper.pid)))
        assert wait_for(sleeping, 60), "the harness never started the workers' environment probe"
        os.kill(pid, signal.SIGKILL)
        left = wait_for(lambda: not killed_run.descendants(keeper.pid), 2) or \
            killed_run.describe(killed_run.descendants(keeper.pid))
        assert left is True, f"2 s after kill -9 of the harness, still running: {left}"
    finally:
        killed_run.release(keeper)
