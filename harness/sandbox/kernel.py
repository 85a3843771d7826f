"""The kernel's process controls the sandbox relies on: prctl, the namespace constants, and the set-up
of every process the harness starts for a worker (death with the harness)."""
from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 38, 4, 36
CLONE_NEWPID, CLONE_NEWUSER = 0x20000000, 0x10000000
NS_GET_USERNS = 0xB701               # ioctl: the user namespace that owns a namespace


def prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def protect_harness() -> None:
    """Make the harness process undumpable (no ptrace, no /proc/<pid>/mem or fd by its own uid) and
    the reaper of its orphans, so a reference's detached daemon stays in reach to be frozen and killed."""
    try:
        prctl(PR_SET_DUMPABLE, 0)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        pass


def dies_with_harness():
    """preexec_fn for every process the harness starts for itself (a probe, a judge process, git,
    nvidia-smi): killed with it, so that a kill -9 of the harness leaves none of them running (CI of
    d7381f5: the workers' environment probe, started as the harness was killed, ran on for 8 s)."""
    return child_setup()


def child_setup(drop: Callable[[], None] | None = None):
    """preexec_fn: run `drop` (uid mode's change of uid, with no way back), then die with the harness."""
    harness = os.getpid()

    def setup():
        if drop is not None:
            drop()
        # After the uid change, which clears the parent-death signal (issue 34: uid mode's workers
        # outlived a kill -9 of the harness); a harness gone before it was set is gone for good.
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != harness:
            os._exit(1)
        os.umask(0o022)
    return setup
