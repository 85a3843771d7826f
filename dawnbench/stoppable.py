"""A run that a host tool starts (`challenge`, `compare`, `reproduce`) stops with the tool: a SIGTERM or SIGINT
to the tool stops the run under way, which writes its DNC record first, and nothing of the run outlives it.

A terminal's Ctrl-C reaches every process of its foreground group, but a signal sent to the tool alone (a
`kill`, a job scheduler's SIGTERM, `docker stop`) does not: the tool died at once and its run, a judge process
with sandboxed workers, trained on with nobody to read it. So the run starts in a process group of its own
(`popen`), the tool turns its first SIGTERM or SIGINT into `Stopped` (`signals_stop`; a later one is ignored,
so that it never cuts the run's DNC record short), and `stop` passes that signal on to the run once, keeps its
last lines, waits for it (at most STOP_GRACE_SECONDS, then SIGKILL) and kills whatever of its group is left.
As `dawnbench run --runs N` does for its runs (dawnbench.series).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator

from harness import dropped_signals
from harness.errors import UsageError

STOP_GRACE_SECONDS = 60.0       # how long a stopped run gets to write its DNC record before it is killed
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """The tool got SIGTERM or SIGINT (`signum`): a KeyboardInterrupt, so that every place that stops on Ctrl-C
    (a container's run: dawnbench.containers.run) stops on either."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class Interrupted(UsageError):
    """A tool stopped by SIGTERM or SIGINT (`signum`) while its run was under way: one line, and the status of a
    process killed by that signal (128 + signum)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + int(signum)


def signum_of(exc: BaseException) -> int:
    """The signal a KeyboardInterrupt stands for: Stopped's, else SIGINT (Python's own Ctrl-C)."""
    return exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT)


_received: list[int] = []       # the signal that stopped the tool, within signals_stop


def raise_if_stopped() -> None:
    """Raise Stopped again if a signal stopped this tool within signals_stop: for a caller whose run swallowed it
    after stopping the run (a container's: dawnbench.containers.run stops its container and returns its status)."""
    if _received:
        raise Stopped(_received[0])


def _stopped(signum, frame):
    if dropped_signals.dropped_here(frame):     # Python would drop the Stopped raised there: the signal again, after
        dropped_signals.send_again(signum)
        return
    for other in SIGNALS:           # only the first signal stops: a second must not cut the run's DNC short
        signal.signal(other, signal.SIG_IGN)
    _received.append(int(signum))
    raise Stopped(signum)


@contextlib.contextmanager
def signals_stop() -> Iterator[None]:
    """Within it, SIGTERM and SIGINT raise Stopped (the first; later ones are ignored); the handlers before it
    are put back after. Outside the main thread, where Python cannot set handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    previous = {s: signal.signal(s, _stopped) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def popen(command: list[str], **options) -> subprocess.Popen:
    """The run's process, in a process group of its own: a terminal's Ctrl-C reaches the tool alone, which
    passes it on once (`stop`), and the group is what `stop` sweeps."""
    return subprocess.Popen(command, process_group=0, **options)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def stop(proc: subprocess.Popen, signum: int, keep=None) -> int:
    """Stop the run `proc` (started by `popen`) after the tool got `signum`: the signal passed on to it once, its
    remaining output given to `keep` line by line (when its stdout is a pipe: read on the side, so that a full
    pipe never blocks its last writes), at most STOP_GRACE_SECONDS for it to end, then SIGKILL; and whatever of
    its process group is left is killed (which also ends the pipe, should a leftover hold it). Its exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signum)
    timer = threading.Timer(STOP_GRACE_SECONDS, _kill_group, (proc.pid,))
    timer.daemon = True
    timer.start()
    reader = None
    if proc.stdout is not None:
        reader = threading.Thread(target=_drain, args=(proc.stdout, keep), daemon=True)
        reader.start()
    try:
        status = proc.wait()
    finally:
        timer.cancel()
        _kill_group(proc.pid)
    if reader is not None:
        reader.join(timeout=5)
    return status


def _drain(stream, keep) -> None:
    with contextlib.suppress(OSError, ValueError):
        for line in stream:
            if keep is not None:
                keep(line)
