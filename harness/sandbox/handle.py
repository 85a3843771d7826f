"""The harness's handle on one worker process: calls over the channel, and the freeze, thaw and kill
of every process the worker has (its descendants, and in uid mode every process of its uid)."""
from __future__ import annotations

import fcntl
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import DawnbenchError
from harness.sandbox import channel, guardian, kernel, procfs, signaller, uid_mode

if TYPE_CHECKING:
    import numpy as np

    from harness.sandbox.modes import Isolation

FREEZE_SECONDS = 10.0       # a stop reaches a running thread in microseconds; a D-state wait may take longer


class WorkerError(DawnbenchError):
    """The reference's code raised; `usage` when it is the entrant's configuration mistake."""

    def __init__(self, message: str, trace: str = "", usage: bool = False):
        super().__init__(message)
        self.trace, self.usage = trace, usage


class CallTimeout(DawnbenchError):
    """The worker did not answer within the time it was given."""


class FreezeError(DawnbenchError):
    """The worker's processes could not all be stopped (or killed): the run cannot be trusted."""


class WorkerDied(DawnbenchError):
    """The worker process ended without answering (exit, os._exit, a signal, the OOM killer)."""



class Worker:
    """The harness's handle on one worker process: calls over the channel, freeze, thaw, kill."""

    def __init__(self, role: str, isolation: Isolation, popen: subprocess.Popen, to_worker: int,
                 from_worker: int, scratch: Path, uid: int | None):
        self.role, self.isolation, self.popen = role, isolation, popen
        self.to_worker, self.from_worker = to_worker, from_worker
        self.scratch, self.uid = scratch, uid
        self.frozen = False
        self._pidns: tuple[int, int] | None = None
        self._signaller: subprocess.Popen | None = None
        self._requests = 0                  # the number of the last request sent (harness.sandbox.channel)

    def call(self, op: str, max_array: int = channel.MAX_ARRAY, timeout: float | None = None,
             payload: np.ndarray | None = None, **fields):
        """Ask the worker to do `op` (with the array `payload`: a timed inference's example) and wait for
        its answer; CallTimeout after `timeout` seconds without one (the worker is left running: the
        caller decides what that means)."""
        self._requests += 1
        asked = channel.request(op, self._requests, fields)
        who = f"the reference's {self.role} process"
        try:
            waiting = channel.pending(self.from_worker)
            if waiting:
                raise channel.ProtocolError(f"{who} wrote {waiting} bytes to the channel before it was asked "
                                            f"{op} (request {asked['seq']}): a reply before its request")
            channel.send(self.to_worker, asked, payload)
            if timeout is not None and not select.select([self.from_worker], [], [], max(timeout, 0.0))[0]:
                raise CallTimeout(f"the reference's {self.role} process did not answer {op} within {timeout:.1f} s")
            reply, array = channel.receive(self.from_worker, max_array=max_array)
        except channel.ChannelClosed:
            raise WorkerDied(f"the reference's {self.role} process ended during {op} "
                             f"({self._exit_description()})") from None
        channel.check_reply(reply, asked, who)
        if "error" in reply:
            raise WorkerError(f"{self.role} {op}: {reply.get('error')}", str(reply.get("traceback", "")),
                              usage=bool(reply.get("usage")))
        if reply.get("ok") != op:
            raise channel.ProtocolError(f"{who} answered {op} out of turn")
        return reply, array

    def _exit_description(self) -> str:
        try:
            code = self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "still running, its channel closed"
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        if code > 128 and self.isolation.mode.startswith("bwrap"):
            try:
                return f"exit status {code}: killed by signal {signal.Signals(code - 128).name}"
            except ValueError:
                pass
        return f"exit status {code}"

    def processes(self) -> list[int]:
        """Every process of this worker: its descendants (orphans stay in reach: the PID namespace's
        init or the harness as subreaper adopts them), and in uid mode every process of its uid in
        the harness's PID namespace."""
        found, todo = set(), [self.popen.pid]
        while todo:       # the kernel's per-thread child lists: a walk of the tree, not of all of /proc
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
                try:
                    todo += procfs.children(pid)
                except OSError:
                    continue
        if self.uid is not None:
            # its uid's processes in this PID namespace: a container's deeper one has its own harness
            mine = os.stat("/proc/self/ns/pid").st_ino
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        if os.stat(entry.path).st_uid == self.uid and os.stat(f"{entry.path}/ns/pid").st_ino == mine:
                            found.add(int(entry.name))
                    except OSError:
                        pass
        if self.popen.poll() is not None:
            found.discard(self.popen.pid)
        if self._signaller is not None:
            found.discard(self._signaller.pid)    # uid mode: the harness's signaller has the worker's uid
        return sorted(found)

    def _signal_all(self, sig: int) -> list[int]:
        pids = self.processes()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        return pids

    def _namespace(self) -> tuple[int, int] | None:
        """Open handles on the worker's own PID namespace and the user namespace that owns it
        (bwrap), found once: the PID namespace of the shallowest process under the worker's
        bubblewrap that is not in the harness's. Namespaces the reference may nest are deeper,
        and inside these."""
        if self._pidns is None and self.isolation.mode.startswith("bwrap"):
            mine = os.readlink("/proc/self/ns/pid")
            level = [self.popen.pid]
            while level and self._pidns is None:
                deeper = []
                for pid in level:
                    try:
                        if os.readlink(f"/proc/{pid}/ns/pid") != mine:
                            pidns = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
                            # the user namespace that owns it (bubblewrap nests another one inside)
                            self._pidns = (fcntl.ioctl(pidns, kernel.NS_GET_USERNS), pidns)
                            break
                        deeper += procfs.children(pid)
                    except OSError:
                        continue
                level = deeper
        return self._pidns

    def start_signaller(self) -> None:
        """Start the worker's signaller (harness.sandbox.signaller), if it has none. The runner starts
        the trainer's after its init, off the handover; otherwise the first signal starts it."""
        if self._signaller is not None or self.popen.poll() is not None:
            return
        ns = self._namespace()
        if ns is None and self.uid is None:
            return
        self._signaller = signaller.start(ns, self.uid)

    def _signal_inside(self, sig: int, timeout: float = signaller.SIGNAL_SECONDS) -> bool:
        """kill(-1, sig) from inside the worker's PID namespace (bwrap) or as its uid (uid mode),
        sent by its signaller. The kernel signals every process there in one pass under the
        task-list lock, and a fork in progress hands the signal on to its child: nothing forks its
        way out, as it could between a scan of /proc and a signal. False when it could not be sent,
        or no answer came within `timeout` seconds (the worker may stop or kill its signaller: it
        only keeps itself from being frozen, which fails the freeze); the signaller is then
        dropped, and the next call starts a fresh one."""
        self.start_signaller()
        if self._signaller is not None and signaller.send(self._signaller, sig, timeout):
            return True
        self._end_signaller()
        return False

    def _end_signaller(self) -> None:
        current, self._signaller = self._signaller, None
        if current is not None:
            signaller.end(current)

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) of every process of the worker, with the children each has
        reaped: exact while it is frozen."""
        ticks = 0
        for pid in self.processes():
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                ticks += sum(int(x) for x in fields[11:15])     # utime stime cutime cstime
            except (OSError, IndexError, ValueError):
                pass
        return ticks / os.sysconf("SC_CLK_TCK")

    def freeze(self, timeout: float = FREEZE_SECONDS) -> None:
        """Stop every process of the worker, or raise FreezeError. The stop is sent from inside the
        worker's namespace (or as its uid), and it holds only once two looks in a row find the same
        threads, every one stopped and none of them run in between (its CPU time unchanged): then
        there was a moment when all were stopped at once, and from then on none can wake another.
        A thread that was inside a kill(SIGCONT) when a stop arrived is not stopped at the first
        look, or has run by the second; the stop is sent again after any look that was not calm."""
        deadline, seen, inside = time.monotonic() + timeout, None, False
        while True:
            if seen is None:         # after a calm pass, the next only looks: a stop sent again changes nothing
                wait = min(signaller.SIGNAL_SECONDS, deadline - time.monotonic())
                inside = self._signal_inside(signal.SIGSTOP, wait)
                pids = self._signal_all(signal.SIGSTOP)      # the bubblewrap monitors outside it too
            else:
                pids = self.processes()
            if not pids and self.popen.poll() is not None:
                break                                    # nothing of it is left to run
            threads = procfs.threads(pids)
            running = sorted({pid for (pid, _), (state, _) in threads.items() if state not in procfs.STOPPED})
            calm = not running and (inside or self._pidns is None and self.uid is None)
            if calm and threads == seen:
                break
            seen = threads if calm else None
            if time.monotonic() > deadline:
                raise FreezeError(f"the reference's {self.role} processes could not be stopped within "
                                  f"{timeout:g} s (still running: {running[:8] or 'the stop could not be sent'})")
            if not calm:
                time.sleep(0.0002)    # a thread woken to stop needs a CPU for a moment
        self.frozen = True

    def thaw(self) -> None:
        self._signal_inside(signal.SIGCONT)
        self._signal_all(signal.SIGCONT)
        self.frozen = False

    def kill(self, timeout: float = FREEZE_SECONDS) -> list[int]:
        """Kill every process of the worker and remove its scratch; returns the pids still alive
        after `timeout` (none, unless the kernel could not kill them)."""
        deadline, survivors, killed = time.monotonic() + timeout, [], set()
        while True:
            self._signal_inside(signal.SIGKILL, min(signaller.SIGNAL_SECONDS, deadline - time.monotonic()))
            survivors = [p for p in self._signal_all(signal.SIGKILL) if not procfs.dead(p)]
            killed.update(survivors)
            if not survivors or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            survivors = survivors or [self.popen.pid]
        for pid in killed - {self.popen.pid}:   # orphans the harness adopted as subreaper
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        for fd in (self.to_worker, self.from_worker, *(self._pidns or ())):
            try:
                os.close(fd)
            except OSError:
                pass
        self._pidns = None
        self._end_signaller()
        if self.uid is not None and not survivors:
            guardian.guardian.release(self.uid)
            uid_mode.reopen_shared_tmp(self.uid)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return survivors


# The signaller, run as `python -I -S -c _SIGNALLER HARNESS_PID (USERNS_FD PIDNS_FD | UID)`. bwrap: it
# joins the user namespace that owns the worker's PID namespace (taking CAP_SYS_ADMIN there, which
# joining a PID namespace needs, even for an unprivileged harness), then the PID namespace, whose
# members only its child becomes; the parent stays outside to reap that child (the namespace's init
# waits for it when it dies) and kills it on SIGTERM. uid mode: it drops to the worker's uid. Then it
# reads one byte a command, a signal number, sends kill(-1, sig), which spares the sender, and
# answers one byte: 0, 4 (ESRCH: no process to signal) or 5. It ends at the end of its input, and
