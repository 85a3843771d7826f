"""The signaller: the one process that sends a worker's freeze, thaw and kill signals from where they
reach every process of the worker at once (inside its PID namespace under bubblewrap, as its uid in
uid mode). The harness starts it once per worker and asks it over a pipe, so no freeze starts a
process."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

from harness.sandbox import kernel

SIGNAL_SECONDS = 2.0        # a signaller's answer takes microseconds; none by then: it is dropped, a fresh one asked


# The program, run as `python -I -S -c _SIGNALLER HARNESS_PID (USERNS_FD PIDNS_FD | UID)`. bwrap: it
# joins the user namespace that owns the worker's PID namespace (taking CAP_SYS_ADMIN there, which
# joining a PID namespace needs, even for an unprivileged harness), then the PID namespace, whose
# members only its child becomes; the parent stays outside to reap that child (the namespace's init
# waits for it when it dies) and kills it on SIGTERM. uid mode: it drops to the worker's uid. Then it
# reads one byte a command, a signal number, sends kill(-1, sig), which spares the sender, and
# answers one byte: 0, 4 (ESRCH: no process to signal) or 5. It ends at the end of its input, and
# dies with the harness (parent-death signal) and, under bubblewrap, with the namespace. Undumpable
# throughout: the worker can neither ptrace it nor open its /proc/<pid>/fd.
_SIGNALLER = f"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl({kernel.PR_SET_DUMPABLE}, 0, 0, 0, 0)
args = [int(a) for a in sys.argv[1:]]
if len(args) == 3:
    if os.fstat(args[1]).st_ino != os.stat("/proc/self/ns/user").st_ino and libc.setns(args[1], {kernel.CLONE_NEWUSER}):
        os._exit(2)
    if libc.setns(args[2], {kernel.CLONE_NEWPID}):
        os._exit(3)
    os.close(args[1])
    os.close(args[2])
    libc.prctl({kernel.PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)
    if os.getppid() != args[0]:
        os._exit(1)
    child = os.fork()
    if child:
        os.close(0)
        os.close(1)
        signal.signal(signal.SIGTERM, lambda *_: os.kill(child, {int(signal.SIGKILL)}))
        os._exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) & 255)
else:
    os.setgroups([])
    os.setresgid(args[1], args[1], args[1])
    os.setresuid(args[1], args[1], args[1])
    libc.prctl({kernel.PR_SET_NO_NEW_PRIVS}, 1, 0, 0, 0)
    libc.prctl({kernel.PR_SET_DUMPABLE}, 0, 0, 0, 0)
    libc.prctl({kernel.PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)     # after the uid change, which clears it
    if os.getppid() != args[0]:
        os._exit(1)
if len(args) == 3:
    libc.prctl({kernel.PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)     # the child's: its parent outside
while True:
    sig = os.read(0, 1)
    if not sig:
        os._exit(0)
    code = 0 if libc.kill(-1, sig[0]) == 0 else 4 if ctypes.get_errno() == 3 else 5
    os.write(1, bytes([code]))
"""


def start(namespaces: tuple[int, int] | None, uid: int | None) -> subprocess.Popen | None:
    """A signaller for the worker whose PID namespace (and the user namespace that owns it) are the
    open handles `namespaces` (bwrap), or whose uid is `uid` (uid mode); None where it cannot start."""
    # A fresh interpreter, not a fork of the harness: a library the harness process holds may
    # start threads in a forked child (MXNet does), and a process with threads cannot join a
    # user namespace. It is started as the harness's uid and changes uid itself without an exec,
    # so it is never a dumpable process of the worker's uid (whose /proc/<pid>/fd would hand
    # the worker its pipes).
    args = [str(os.getpid()), *(str(fd) for fd in namespaces)] if namespaces else [str(os.getpid()), str(uid)]
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _SIGNALLER, *args],
                                pass_fds=namespaces or (), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, bufsize=0, start_new_session=True)
    except OSError:
        return None


def send(signaller: subprocess.Popen, sig: int, timeout: float = SIGNAL_SECONDS) -> bool:
    """kill(-1, sig) sent by `signaller`: True once it answered that the signal went out (or found
    no process left to signal); False when it could not be asked or gave no answer in `timeout`."""
    try:
        os.write(signaller.stdin.fileno(), bytes([sig]))
        if select.select([signaller.stdout.fileno()], [], [], max(timeout, 0.0))[0]:
            answer = os.read(signaller.stdout.fileno(), 1)
            if answer:
                return answer[0] in (0, 4)        # 4: no process left to signal (ESRCH)
    except OSError:
        pass
    return False


def end(signaller: subprocess.Popen) -> None:
    """Close the signaller's pipes, and end it if the end of its input did not (a signaller the
    worker stopped); bwrap: its parent outside the namespace kills it on SIGTERM and reaps it."""
    for pipe in (signaller.stdin, signaller.stdout):
        try:
            pipe.close()
        except OSError:
            pass
    try:
        signaller.wait(timeout=0.05)
    except subprocess.TimeoutExpired:
        signaller.terminate()
        try:
            signaller.wait(timeout=2)
        except subprocess.TimeoutExpired:
            signaller.kill()
            signaller.wait()
