"""uid mode's guardian: when the harness dies without cleaning up (kill -9), it kills every process
of the worker uids the harness still held.

Under bubblewrap the worker lives in a PID namespace whose init dies with the harness, and takes
everything inside along. uid mode has no namespaces (a container's seccomp profile forbids them): a
worker's parent-death signal reaches only the worker itself, and a daemon it double-forked is the
harness's orphan (it is the subreaper), which, once the harness is gone, is nobody's. The guardian
is a small separate process that outlives the harness by the few milliseconds it needs: it reads
"+UID" / "-UID" lines on its stdin, and at end of file, which the kernel gives it the moment the
harness dies whatever killed it, it kills every process of a uid still held, in its own PID
namespace (a container's workers have their own harness), through a pidfd so that a reused pid is
never hit, until /proc shows none alive. Each worker uid belongs to one harness process
(harness.sandbox.uid_mode.uid_slot), so it never reaches another harness's workers.
"""
from __future__ import annotations

import subprocess
import sys

# Run as `python -I -S -c _GUARD`: no site, no environment, nothing of the harness's imported.
_GUARD = r"""
import os, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP):
    signal.signal(sig, signal.SIG_IGN)     # a Ctrl-C or a kill of the run's group reaches the harness; it ends at EOF
held, pending = {}, b""
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    pending += chunk
    *lines, pending = pending.split(b"\n")
    for line in lines:
        uid = int(line[1:])
        held[uid] = held.get(uid, 0) + (1 if line[:1] == b"+" else -1)
uids = {u for u, n in held.items() if n > 0}
mine = os.stat("/proc/self/ns/pid").st_ino

def owned(pid):
    # a live process of a held uid in this PID namespace (a container's, deeper, has its own harness)
    try:
        if os.stat(f"/proc/{pid}").st_uid not in uids or os.stat(f"/proc/{pid}/ns/pid").st_ino != mine:
            return False
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False

deadline = time.monotonic() + 10
while uids and time.monotonic() < deadline:
    found = False
    for name in os.listdir("/proc"):
        if name.isdigit() and owned(int(name)):
            try:
                fd = os.pidfd_open(int(name))
            except OSError:
                continue
            try:
                if owned(int(name)):          # still that process, not a reused pid: the pidfd pins it
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    found = True
            except OSError:
                pass
            finally:
                os.close(fd)
    if not found:
        break
    time.sleep(0.005)
"""


class Guardian:
    """The harness's handle on its guardian, started at the first uid it holds."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None

    def hold(self, uid: int) -> None:
        """From now until release(uid), a death of the harness kills every process of `uid`."""
        if self._proc is None:
            # its own session: a terminal's Ctrl-C goes to the harness, which cleans up itself
            self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
        self._say(f"+{uid}")

    def release(self, uid: int) -> None:
        """The harness killed the worker of `uid` itself."""
        if self._proc is not None:
            self._say(f"-{uid}")

    def _say(self, line: str) -> None:
        try:
            self._proc.stdin.write(line.encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:     # it died: nothing to guard with; the harness's own kill still runs
            pass


guardian = Guardian()
