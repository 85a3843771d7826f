"""Where Python drops what a signal handler raises, and how a handler gets its signal through anyway.

A handler that stops a run by raising (KeyboardInterrupt, Terminated, Stopped) runs between two bytecodes
of whatever the main thread was doing. Inside logging's at-fork hooks (run around every fork that has a
preexec_fn, as every child the harness starts has: harness.sandbox.kernel.dies_with_harness) Python
reports and drops what it raises ("Exception ignored in: <function _releaseLock>"): the signal is spent and
the run goes on to its budget (CI's numpy-1.23.5 tier, 2026-11-28: a series' Ctrl-C lost). Every handler
that raises asks `dropped_here` first and, if so, `send_again`s its signal instead, to land after the hook.
"""
from __future__ import annotations

import os
import threading

AGAIN_AFTER_S = 0.05    # long past a fork's hooks (microseconds), short against a person waiting on Ctrl-C


def dropped_here(frame) -> bool:
    """Whether a handler called with this frame runs inside logging's at-fork hooks."""
    return (frame is not None and frame.f_globals.get("__name__") == "logging"
            and frame.f_code.co_name in ("_acquireLock", "_releaseLock"))


def send_again(signum: int) -> None:
    """This process gets `signum` again AGAIN_AFTER_S from now (a daemon timer: it never holds an exit)."""
    again = threading.Timer(AGAIN_AFTER_S, os.kill, (os.getpid(), signum))
    again.daemon = True
    again.start()
