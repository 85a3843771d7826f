"""`python -m harness.local_ranks`: several local ranks share one network namespace with only a loopback.

The end-to-end run over two ranks through it is in test_end_to_end.py; these check the namespace
itself, as root and (in CI's unprivileged pass) as an ordinary user.
"""
import json
import os
import signal
import socket
import subprocess
import time

from conftest import PYTHON, REPO

PROBE = """
import json, socket
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname(), timeout=5)
peer, _ = server.accept()
client.sendall(b"rank")
try:
    socket.create_connection(("192.0.2.1", 80), timeout=2)    # TEST-NET-1: only a route would try it
    outside = "reached"
except OSError as exc:
    outside = type(exc).__name__
print(json.dumps({"interfaces": sorted(n for _, n in socket.if_nameindex()), "loopback": peer.recv(4).decode(),
                  "outside": outside}))
"""


def local_ranks(*command):
    return subprocess.run([PYTHON, "-m", "harness.local_ranks", *command], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_command_runs_with_only_a_working_loopback():
    host = sorted(n for _, n in socket.if_nameindex())
    proc = local_ranks(PYTHON, "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["interfaces"] == ["lo"], (seen, host)
    assert seen["loopback"] == "rank"                  # the ranks reach each other
    assert seen["outside"] != "reached"                 # and nothing else: no route at all
    assert proc.stderr == ""


def test_the_command_keeps_its_user():
    proc = local_ranks(PYTHON, "-c", "import os; print(os.getuid(), os.getgid())")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(os.getuid()), str(os.getgid())]


def test_a_missing_program_is_one_line():
    proc = local_ranks("no-such-launcher", "--standalone")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-launcher: no such program" in lines[0] and "Traceback" not in proc.stderr


def test_no_command_prints_the_usage():
    proc = local_ranks()
    assert proc.returncode == 2 and "python -m harness.local_ranks COMMAND [ARG ...]" in proc.stderr
    assert "harness.local_ranks --nproc-per-node N [-m MODULE] ARG" in proc.stderr


def test_a_bad_rank_count_is_one_line():
    for argv, said in ((["--nproc-per-node", "0", "run", "x"], "--nproc-per-node '0': give the number of local ranks"),
                       (["--nproc-per-node", "2"], "no command for the ranks")):
        proc = local_ranks(*argv)
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_failed_rank_stops_the_others_at_once_and_is_named():
    """Issue 47: the launcher polled rank 0 alone (any() stops at its first answer), so rank 1's failure went
    unseen while rank 0 trained on. Rank 1 fails at once here; rank 0 would sleep a minute."""
    script = 'if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 60'
    started = time.monotonic()
    proc = local_ranks("--nproc-per-node", "2", "-m", "harness.local_ranks", "sh", "-c", script)
    assert time.monotonic() - started < 30, "rank 0 was not stopped"
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == ["dawnbench: rank 1 failed (exit status 3); stopping the other ranks"]


# Each rank, stopped, says what the launcher's note tells a rank's harness to put in its DNC reason.
STOPPED_RANK = """
import os, signal, sys, time
from harness import collective
def stopped(signum, frame):
    # the stop may reach a rank twice (the launcher's forward and its process group's): a second signal
    # must not re-enter the print of the first
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.write(1, f"rank {os.environ['RANK']}: {collective.first_failure(int(os.environ['RANK']))}\\n".encode())
    sys.exit(1)
signal.signal(signal.SIGTERM, stopped)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_stopped_launcher_names_the_ranks_it_stopped():
    """Issue 47: a SIGTERM to the rank launcher ended the run DNC "rank 0: error: Terminated: terminated by
    SIGTERM", naming neither the launcher nor the ranks it stopped. The launcher now notes both before it
    forwards the signal, as it notes a rank that failed, and each rank's DNC reason gives that note."""
    launcher = subprocess.Popen([PYTHON, "-m", "harness.local_ranks", "--nproc-per-node", "2", "-m", "harness.local_ranks",
                                 PYTHON, "-c", STOPPED_RANK], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert [launcher.stdout.readline() for _ in range(2)] == ["ready\n"] * 2
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=30)
    finally:
        launcher.kill()
    said = "the rank launcher was stopped (SIGTERM): it stopped ranks 0 and 1, which were running"
    assert sorted(out.splitlines()) == [f"rank 0: {said}", f"rank 1: {said}"], (out, err)
    assert "Traceback" not in err, err
