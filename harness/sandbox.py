"""The reference's processes: started in a sandbox, frozen while the harness evaluates, killed at the end.

Three ways to isolate, the first that works on this machine (docs/RULES.md, "Isolation"):

- `bwrap`: bubblewrap, as an unprivileged user: own user, mount, PID, IPC and UTS namespaces, every
  capability dropped, a fresh /proc, a new session, death with the harness. The mount namespace
  shows the system's programs read-only, the Python environment, harness/ and common/, the
  reference's own folder, the role's data files and a private scratch folder, and nothing else:
  not the run folder, not the eval labels, not the rest of the checkout.
- `bwrap-root`: the same when the harness runs as root. A privileged bubblewrap builds the view
  (so sources under /root can be shown), drops to the unprivileged uid 65534 and starts the
  unprivileged one inside it: the reference is never root, not even mapped to it.
- `uid` (root in a container, where Docker's seccomp profile forbids namespaces): the worker runs
  under its own uid (trainer and predictor differ), with no new privileges and death with the
  harness; its data are copies in its own scratch folder, and the labels and the run folder are
  under a folder its uid cannot enter (the container's launcher mounts them there).

Where none works (no user namespaces and not root) the run still goes with `none`, and is never
official; the reason is one line in result.json.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import channel, worker_env
from harness.errors import PROG_ENV, DawnbenchError
from harness.guardian import guardian
from harness.provenance import BUILD_INFO

ISOLATION_ENV = "DAWNBENCH_ISOLATION"      # "none" switches isolation off (never official)
SANDBOX_UID = 65534                         # nobody: the reference's uid under bwrap-root
# uid mode's worker uids. A uid-mode harness freezes and kills with kill(-1) as a worker's uid, which
# reaches every process of that uid in its PID namespace and the ones below it; so no two harnesses
# may share a uid where one can reach the other's workers. Each harness process takes a slot of its
# own (uid_slot: a lock held while it lives), and its role's uid is the role's base plus twice the
# slot: the ranks of one run, two runs on one host, and tests side by side each have their own. An
# image's bases are fixed (slot 0 is 10002 and 10003); its Dockerfile gives the role folders
# (ROLE_MOUNTS) to the base as a group, which every slot's worker of that role has. A harness
# outside an image takes other bases: a host's uid-mode run once froze a container run's trainer
# for good (a CI run of issue 35: the container's harness waited 30 minutes).
IMAGE_UIDS = {"train": 10002, "predict": 10003}
HOST_UIDS = {"train": 20002, "predict": 20003}
UID_SLOTS = 64                              # uid-mode harnesses at once in one PID namespace
UID_SLOT_DIRS = (Path("/run/dawnbench-uid-slots"), Path(tempfile.gettempdir()) / "dawnbench-uid-slots")
WORKER_USER = "dawnbench"                   # the user name a worker's environment gives
VIEW = Path("/dawnbench")                   # where the scratch, data and snapshots appear in a bwrap view
# Where a container launcher mounts a role's large folders (ImageNet's train/ and val/): one folder
# per role, which only that role's group may enter. Docker allows no mount namespaces, and copying
# 140 GB per run is out of the question (uid mode).
ROLE_MOUNTS = Path("/dawnbench-views")
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/sys")
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 38, 4, 36
CLONE_NEWPID, CLONE_NEWUSER = 0x20000000, 0x10000000
NS_GET_USERNS = 0xB701               # ioctl: the user namespace that owns a namespace
FREEZE_SECONDS = 10.0       # a stop reaches a running thread in microseconds; a D-state wait may take longer
SIGNAL_SECONDS = 2.0        # a signaller's answer takes microseconds; none by then: it is dropped, a fresh one asked


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


@dataclass(frozen=True)
class Isolation:
    mode: str                   # bwrap | bwrap-root | uid | none
    reason: str | None = None   # why a run under it cannot be official (mode none)

    @property
    def isolated(self) -> bool:
        return self.mode != "none"


def _prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def protect_harness() -> None:
    """Make the harness process undumpable (no ptrace, no /proc/<pid>/mem or fd by its own uid) and
    the reaper of its orphans, so a reference's detached daemon stays in reach to be frozen and killed."""
    try:
        _prctl(PR_SET_DUMPABLE, 0)
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        pass


def _bwrap_base(inner: bool, network: bool = False) -> list[str]:
    argv = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if not network:
        # A network namespace of its own, with only a loopback: nothing comes in (weights, data,
        # code fetched during the run) and nothing it computes goes out.
        argv.append("--unshare-net")
    if inner:
        argv += ["--bind", "/", "/"]
    return argv


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """The isolation this machine allows, tried once per process."""
    if os.environ.get(ISOLATION_ENV) == "none":
        return Isolation("none", f"isolation switched off by {ISOLATION_ENV}=none")
    root = os.geteuid() == 0
    if shutil.which("bwrap"):
        mode = "bwrap-root" if root else "bwrap"
        view = View(ro=[(p, p) for p in SYSTEM_DIRS if os.path.isdir(p)])
        argv = _argv(mode, view, ["/bin/true"])
        try:
            ok = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                timeout=30, preexec_fn=_child_setup(None)).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return Isolation(mode)
    if root:
        return Isolation("uid")
    why = "bubblewrap is not installed" if not shutil.which("bwrap") else "bubblewrap cannot create namespaces here"
    return Isolation("none", f"the reference could not be isolated: {why} and the harness is not root; "
                             f"install bubblewrap (apt-get install bubblewrap) where user namespaces are allowed")


@dataclass
class View:
    """What a worker sees: read-only and writable binds (source, target), and the parents to create."""
    ro: list[tuple[str, str]] = field(default_factory=list)
    rw: list[tuple[str, str]] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)      # folders shown empty (copies of datasets)

    def mounts(self) -> list[str]:
        # Outer folders first: a bind of /tmp must not hide a later bind of a folder inside /tmp.
        binds = sorted([("--ro-bind", *b) for b in self.ro] + [("--bind", *b) for b in self.rw],
                       key=lambda b: len(Path(b[2]).parts))
        argv, made = [], {"/"}
        for option, source, target in binds:
            for parent in reversed(Path(target).parents):
                if str(parent) not in made:
                    # bubblewrap makes missing parents 0700; the unprivileged reference must pass through them
                    argv += ["--perms", "0755", "--dir", str(parent)]
                    made.add(str(parent))
            made.add(target)
            argv += [option, source, target]
        for path in self.hidden:
            argv += ["--tmpfs", path]
        return argv


def _system_mounts(proc: list[str]) -> list[str]:
    argv = []
    for name in ("bin", "lib", "lib64", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += [*proc, "--dev", "/dev"]
    return argv + _gpu_devices()


def _gpu_devices() -> list[str]:
    argv = []
    for dev in sorted(Path("/dev").glob("nvidia*")):      # GPUs, when the machine has them
        argv += ["--dev-bind", str(dev), str(dev)]
    return argv


def _argv(mode: str, view: View, command: list[str], chdir: str = "/", network: bool = False) -> list[str]:
    if mode == "bwrap":
        return [*_bwrap_base(inner=False, network=network), *view.mounts(), *_system_mounts(["--proc", "/proc"]),
                "--chdir", chdir, "--", *command]
    if mode == "bwrap-root":
        # The privileged outer bubblewrap shows the host's /proc so that the inner, unprivileged one
        # may mount a fresh one over it (the kernel refuses a new /proc where the old one is partly hidden).
        # It has a PID namespace of its own, whose init dies with the harness (--die-with-parent: root
        # signals root) and takes every process inside along, the nested namespaces included. A
        # parent-death signal on the unprivileged inner bubblewrap is no substitute: the outer one
        # drops its capabilities, so when it dies the kernel may not signal uid 65534 (issue 34: a
        # kill -9 of the harness left the inner bubblewrap and the worker training under PID 1).
        outer = ["bwrap", "--die-with-parent", "--unshare-pid", "--tmpfs", "/tmp", *view.mounts(),
                 *_system_mounts(["--bind", "/proc", "/proc"])]
        inner = [*_bwrap_base(inner=True, network=network), "--proc", "/proc", "--dev", "/dev", *_gpu_devices(),
                 "--chdir", chdir]
        setpriv = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--"]
        return [*outer, "--", *setpriv, *inner, "--", *command]
    return list(command)


def reachable_by_others(path: str | os.PathLike) -> bool:
    """Whether a uid that owns no folder on the way and is in none of their groups (uid mode's
    workers) can reach `path`: every folder from / down to it, itself included, lets others pass (o+x)."""
    target = Path(path).resolve()
    for folder in [*reversed(target.parents), target]:
        try:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def readable_by(path: str | os.PathLike, uid: int, gid: int) -> bool:
    """Whether a process of `uid` and `gid`, with no other group (the sandbox's user: its groups are
    cleared), may read `path` by its mode bits (links followed): a file's r, a folder's r and x (listed
    and entered). Root reads anything, so the harness's own reading proves nothing for the workers."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
    return (st.st_mode >> shift) & need == need


def worker_reads_as(isolation: Isolation) -> int | None:
    """The uid the workers read the data views as where that is not the harness's (bwrap-root: each
    data file is bound into the view as it is, so its own mode bits decide); None where the harness's
    own reading settles it (bwrap as a user: the same uid; uid mode: copies made for the role's uid;
    no sandbox)."""
    return SANDBOX_UID if isolation.mode == "bwrap-root" else None


def role_groups() -> dict[str, int]:
    """Each role's group in uid mode: its base uid, the image's inside one, the host's outside."""
    return IMAGE_UIDS if BUILD_INFO.is_file() else HOST_UIDS     # every image's build writes BUILD_INFO


def uid_mode_uids() -> dict[str, int]:
    """The worker uid of each role in uid mode for this harness process (its slot's)."""
    return {role: base + 2 * uid_slot() for role, base in role_groups().items()}


_slot: list[int] = []        # [index, the lock's fd], once taken: held until this process ends


def uid_slot() -> int:
    """This process's uid slot: the first of UID_SLOTS lock files under a folder only root may
    enter (uid mode is root's) that no other live process holds."""
    if not _slot:
        for folder in UID_SLOT_DIRS:
            try:
                folder.mkdir(mode=0o700, exist_ok=True)
                if folder.is_symlink() or folder.stat().st_uid != os.geteuid() or folder.stat().st_mode & 0o077:
                    continue            # not this user's own folder: another user could hold its locks
            except OSError:
                continue
            for index in range(UID_SLOTS):
                fd = os.open(folder / f"slot-{index}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                _slot[:] = [index, fd]
                return index
            raise DawnbenchError(f"{UID_SLOTS} uid-mode harnesses are running on this machine already "
                                 f"(their locks are in {folder}): wait for one to end")
        raise DawnbenchError(f"no folder for uid mode's locks: none of {', '.join(map(str, UID_SLOT_DIRS))} "
                             f"could be made private to this user")
    return _slot[0]


def _child_setup(uid: int | None, group: int | None = None):
    """preexec_fn: in uid mode, drop to `uid` (with its role's `group` beside its own) with no way
    back; die with the harness."""
    harness = os.getpid()

    def setup():
        if uid is not None:
            os.setgroups([group] if group is not None else [])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            _prctl(PR_SET_NO_NEW_PRIVS, 1)
        # After the uid change, which clears the parent-death signal (issue 34: uid mode's workers
        # outlived a kill -9 of the harness); a harness gone before it was set is gone for good.
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != harness:
            os._exit(1)
        os.umask(0o022)
    return setup


def _python_paths(python: str) -> list[str]:
    """The workers' interpreter, its environment, and the folders harness/ and common/ are imported
    from; not the harness's own environment, unless the workers share it."""
    import harness
    real = os.path.realpath(python)
    # a venv's bin/python: the venv (bin's parent), and the installation the link leads to
    paths = {os.path.dirname(os.path.dirname(os.path.abspath(python))), os.path.dirname(real),
             os.path.dirname(os.path.dirname(real))}
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        paths |= {sys.prefix, sys.base_prefix}
    paths.add(str(Path(harness.__file__).resolve().parent))
    common = Path(harness.__file__).resolve().parent.parent / "common"
    if common.is_dir():
        paths.add(str(common))
    # Keep only the outermost of nested paths: a bind inside a bind is redundant.
    kept: list[str] = []
    for p in sorted(paths, key=len):
        if os.path.isdir(p) and not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept


def _worker_env(home: str, tmp: str, extra: dict[str, str]) -> dict[str, str]:
    """The harness's environment without its own variables (DAWNBENCH_* but the user's command name,
    PYTHON*) and without the run id, the secret of the harness ranks' channel (harness.collective);
    torchrun's other variables stay, so a trainer joins the launcher's store."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DAWNBENCH_", "PYTHON")) and k != "TORCHELASTIC_RUN_ID"}
    if os.environ.get(PROG_ENV):      # only how the user types `dawnbench`, for the messages of common/
        env[PROG_ENV] = os.environ[PROG_ENV]
    import harness
    # USER and LOGNAME: a worker's uid may have no passwd entry (uid mode), and libraries that ask
    # who runs them (getpass.getuser(): torch's on a CUDA machine) fall back to pwd, which raises.
    env.update({"HOME": home, "TMPDIR": tmp, "PYTHONUNBUFFERED": "1", "USER": WORKER_USER, "LOGNAME": WORKER_USER,
                "PYTHONPATH": str(Path(harness.__file__).resolve().parent.parent), **extra})
    return env


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

    def call(self, op: str, max_array: int = channel.MAX_ARRAY, timeout: float | None = None, **fields):
        """Ask the worker to do `op` and wait for its answer; CallTimeout after `timeout` seconds
        without one (the worker is left running: the caller decides what that means)."""
        try:
            channel.send(self.to_worker, {"op": op, **fields})
            if timeout is not None and not select.select([self.from_worker], [], [], max(timeout, 0.0))[0]:
                raise CallTimeout(f"the reference's {self.role} process did not answer {op} within {timeout:.1f} s")
            reply, array = channel.receive(self.from_worker, max_array=max_array)
        except channel.ChannelClosed:
            raise WorkerDied(f"the reference's {self.role} process ended during {op} "
                             f"({self._exit_description()})") from None
        if "error" in reply:
            raise WorkerError(f"{self.role} {op}: {reply.get('error')}", str(reply.get("traceback", "")),
                              usage=bool(reply.get("usage")))
        if reply.get("ok") != op:
            raise channel.ProtocolError(f"the reference's {self.role} process answered {op} out of turn")
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
                    todo += _children(pid)
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
                            self._pidns = (fcntl.ioctl(pidns, NS_GET_USERNS), pidns)
                            break
                        deeper += _children(pid)
                    except OSError:
                        continue
                level = deeper
        return self._pidns

    def start_signaller(self) -> None:
        """Start the worker's signaller, if it has none: the process that sends the freeze's signals
        from inside the worker's PID namespace (bwrap) or as its uid (uid mode), started once and
        then asked over a pipe, so that no freeze starts a process. The runner starts the trainer's
        after its init, off the handover; otherwise the first signal starts it."""
        if self._signaller is not None or self.popen.poll() is not None:
            return
        ns = self._namespace()
        if ns is None and self.uid is None:
            return
        # A fresh interpreter, not a fork of the harness: a library the harness process holds may
        # start threads in a forked child (MXNet does), and a process with threads cannot join a
        # user namespace. It is started as the harness's uid and changes uid itself without an exec,
        # so it is never a dumpable process of the worker's uid (whose /proc/<pid>/fd would hand
        # the worker its pipes).
        args = [str(os.getpid()), *(str(fd) for fd in ns)] if ns else [str(os.getpid()), str(self.uid)]
        try:
            self._signaller = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SIGNALLER, *args],
                                               pass_fds=ns or (), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                               stderr=subprocess.DEVNULL, bufsize=0, start_new_session=True)
        except OSError:
            self._signaller = None

    def _signal_inside(self, sig: int, timeout: float = SIGNAL_SECONDS) -> bool:
        """kill(-1, sig) from inside the worker's PID namespace (bwrap) or as its uid (uid mode),
        sent by its signaller. The kernel signals every process there in one pass under the
        task-list lock, and a fork in progress hands the signal on to its child: nothing forks its
        way out, as it could between a scan of /proc and a signal. False when it could not be sent,
        or no answer came within `timeout` seconds (the worker may stop or kill its signaller: it
        only keeps itself from being frozen, which fails the freeze); the signaller is then
        dropped, and the next call starts a fresh one."""
        self.start_signaller()
        signaller = self._signaller
        if signaller is None:
            return False
        try:
            os.write(signaller.stdin.fileno(), bytes([sig]))
            if select.select([signaller.stdout.fileno()], [], [], max(timeout, 0.0))[0]:
                answer = os.read(signaller.stdout.fileno(), 1)
                if answer:
                    return answer[0] in (0, 4)        # 4: no process left to signal (ESRCH)
        except OSError:
            pass
        self._end_signaller()
        return False

    def _end_signaller(self) -> None:
        """Close the signaller's pipes, and end it if the end of its input did not (a signaller the
        worker stopped); bwrap: its parent outside the namespace kills it on SIGTERM and reaps it."""
        signaller, self._signaller = self._signaller, None
        if signaller is None:
            return
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
                inside = self._signal_inside(signal.SIGSTOP, min(SIGNAL_SECONDS, deadline - time.monotonic()))
                pids = self._signal_all(signal.SIGSTOP)      # the bubblewrap monitors outside it too
            else:
                pids = self.processes()
            if not pids and self.popen.poll() is not None:
                break                                    # nothing of it is left to run
            threads = _threads(pids)
            running = sorted({pid for (pid, _), (state, _) in threads.items() if state not in STOPPED})
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
            self._signal_inside(signal.SIGKILL, min(SIGNAL_SECONDS, deadline - time.monotonic()))
            survivors = [p for p in self._signal_all(signal.SIGKILL) if not _dead(p)]
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
            guardian.release(self.uid)
        shutil.rmtree(self.scratch, ignore_errors=True)
        return survivors


# The signaller, run as `python -I -S -c _SIGNALLER HARNESS_PID (USERNS_FD PIDNS_FD | UID)`. bwrap: it
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
libc.prctl({PR_SET_DUMPABLE}, 0, 0, 0, 0)
args = [int(a) for a in sys.argv[1:]]
if len(args) == 3:
    if os.fstat(args[1]).st_ino != os.stat("/proc/self/ns/user").st_ino and libc.setns(args[1], {CLONE_NEWUSER}):
        os._exit(2)
    if libc.setns(args[2], {CLONE_NEWPID}):
        os._exit(3)
    os.close(args[1])
    os.close(args[2])
    libc.prctl({PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)
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
    libc.prctl({PR_SET_NO_NEW_PRIVS}, 1, 0, 0, 0)
    libc.prctl({PR_SET_DUMPABLE}, 0, 0, 0, 0)
    libc.prctl({PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)     # after the uid change, which clears it
    if os.getppid() != args[0]:
        os._exit(1)
if len(args) == 3:
    libc.prctl({PR_SET_PDEATHSIG}, {int(signal.SIGKILL)}, 0, 0, 0)     # the child's: its parent outside
while True:
    sig = os.read(0, 1)
    if not sig:
        os._exit(0)
    code = 0 if libc.kill(-1, sig[0]) == 0 else 4 if ctypes.get_errno() == 3 else 5
    os.write(1, bytes([code]))
"""


def _children(pid: int) -> list[int]:
    found = []
    for task in os.scandir(f"/proc/{pid}/task"):
        try:
            found += [int(c) for c in _read(f"{task.path}/children").split()]
        except OSError:
            pass
    return found


def _states(pid: int) -> list[bytes]:
    """The state letter of every thread of `pid` (none when it is gone)."""
    states = []
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            try:
                with open(f"{task.path}/stat", "rb") as f:
                    states.append(f.read().rsplit(b")", 1)[1].split()[0])
            except (OSError, IndexError):
                pass
    except OSError:
        pass
    return states


STOPPED = (b"T", b"t", b"Z", b"X")


def _threads(pids: list[int]) -> dict[tuple[int, str], tuple[bytes, bytes]]:
    """Every thread of `pids`: its state letter and the nanoseconds it has run (schedstat; without
    it, its context switches), which change whenever it runs, even when it stops again."""
    found = {}
    for pid in pids:
        try:
            tasks = [entry.name for entry in os.scandir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tasks:
            try:
                state = _read(f"/proc/{pid}/task/{tid}/stat").rsplit(b")", 1)[1].split()[0]
                try:
                    ran = _read(f"/proc/{pid}/task/{tid}/schedstat").split()[0]
                except FileNotFoundError:     # a kernel without CONFIG_SCHED_INFO
                    ran = b" ".join(line for line in _read(f"/proc/{pid}/task/{tid}/status").splitlines()
                                    if b"ctxt_switches" in line)
            except (OSError, IndexError):
                continue
            found[(pid, tid)] = (state, ran)
    return found


def _read(path: str) -> bytes:
    """A small file of /proc, without the cost of a Python file object (a freeze reads hundreds)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _dead(pid: int) -> bool:
    return all(state in (b"Z", b"X") for state in _states(pid))


LOCK_PREFIX = "dawnbench-harness-"
_held: list[int] = []


@functools.lru_cache(maxsize=1)
def _session() -> str:
    """This harness process's id in its scratch folders' names, held by a lock on a file in TMPDIR
    for as long as the process lives. A harness killed with -9 cannot clean up, so the next one
    to start sweeps every folder whose lock nobody holds (sweep_stale)."""
    sweep_stale()
    fd, path = tempfile.mkstemp(prefix=".dawnbench-new-")
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held.append(fd)                     # open, and locked, until the process ends
    session = Path(path).name.rsplit("-", 1)[1]
    os.rename(path, Path(path).with_name(f"{LOCK_PREFIX}{session}.lock"))   # visible only once locked
    return session


def sweep_stale(tmp: Path | None = None) -> list[Path]:
    """Remove the scratch folders of harness processes that are gone; returns what was removed."""
    tmp, removed = Path(tmp or tempfile.gettempdir()), []
    for lock in tmp.glob(f"{LOCK_PREFIX}*.lock"):
        session = lock.name[len(LOCK_PREFIX):-len(".lock")]
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue                     # its harness is alive
        for folder in tmp.glob(f"dawnbench-*-{session}-*"):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        lock.unlink(missing_ok=True)
        os.close(fd)
    return removed


def private_dir(kind: str) -> Path:
    """A folder in TMPDIR named for this harness process (`dawnbench-KIND-SESSION-xxxx`), 0700."""
    return Path(tempfile.mkdtemp(prefix=f"dawnbench-{kind}-{_session()}-"))


def make_scratch(role: str, uid: int | None) -> Path:
    """A private folder for one worker: its HOME, TMPDIR and work folder, wiped when it ends."""
    scratch = private_dir(role)
    for sub in ("home", "tmp", "work", "data"):
        (scratch / sub).mkdir()
    if uid is not None:
        for path in [scratch, *scratch.iterdir()]:
            os.chown(path, uid, uid)
    return scratch


def _chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), uid, uid)


def start(role: str, isolation: Isolation, *, reference_dir: Path, data_files: list[tuple[Path, str]],
          snapshots: Path | None, extra_ro: list[tuple[str, str]] = (), copies: list[Path] = (),
          env: dict[str, str] | None = None, hidden: list[str] = (), stderr=None,
          network: bool = False) -> tuple[Worker, dict]:
    """Start a worker for `role`. Returns it and the paths it sees: data_root, work_dir, snapshots.
    `copies` are put in its scratch folder; "{scratch}" in an `env` value is that folder as it sees it.
    `network`: the host's network (a trainer among several ranks, for the collective); otherwise a
    bubblewrap worker has a loopback of its own only (a container has no network at all)."""
    uid = uid_mode_uids()[role] if isolation.mode == "uid" else None
    # The reference's interpreter, never the harness's own environment (harness.worker_env).
    python = worker_env.resolved(worker_env.worker_python())
    owner = SANDBOX_UID if isolation.mode == "bwrap-root" else uid
    scratch = make_scratch(role, owner)
    bwrap = isolation.mode.startswith("bwrap")
    inside = (lambda p: str(VIEW / p)) if bwrap else (lambda p: str(scratch / p))
    seen = {"data_root": inside("data") if bwrap else str(scratch / "data"),
            "work_dir": inside("scratch/work") if bwrap else str(scratch / "work"),
            "scratch": inside("scratch") if bwrap else str(scratch)}
    # The reference's code runs from a copy without __pycache__: a planted .pyc whose header matches
    # the source would otherwise run instead of the code that was hashed and reviewed.
    code = scratch / "reference" / reference_dir.name
    shutil.copytree(reference_dir, code, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    seen["references"] = (inside("scratch/reference") if bwrap else str(scratch / "reference"))
    for source in copies:
        shutil.copyfile(source, scratch / source.name)
        if owner is not None:
            os.chown(scratch / source.name, owner, owner)
    env = {k: v.replace("{scratch}", seen["scratch"]) for k, v in (env or {}).items()}
    view = View()
    if bwrap:
        view.ro += [(p, p) for p in SYSTEM_DIRS if os.path.isdir(p)]
        view.ro += [(p, p) for p in _python_paths(python)]
        view.ro += [(str(src), str(VIEW / "data" / rel)) for src, rel in data_files]
        view.ro += list(extra_ro)
        view.rw.append((str(scratch), str(VIEW / "scratch")))
        view.rw.append((str(scratch / "tmp"), "/tmp"))
        view.hidden += [p for p in hidden if os.path.isdir(p)]
        home, tmp = inside("scratch/home"), "/tmp"
    else:
        for src, rel in data_files:          # copies: the originals sit where this uid cannot go
            target = scratch / "data" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            mounted = ROLE_MOUNTS / role / rel
            if Path(src).is_dir() and mounted.is_dir():
                target.symlink_to(mounted)     # the launcher's mount, which only this role's group may enter
            elif Path(src).is_dir():
                shutil.copytree(src, target)
            else:
                shutil.copyfile(src, target)
        home, tmp = str(scratch / "home"), str(scratch / "tmp")
    if owner is not None:
        _chown_tree(scratch / "reference", owner)
        _chown_tree(scratch / "data", owner)
    if snapshots is not None:
        seen["snapshots"] = str(VIEW / "snapshots") if bwrap else str(snapshots)
        if bwrap:
            (view.rw if role == "train" else view.ro).append((str(snapshots), str(VIEW / "snapshots")))
        if owner is not None and role == "train":
            os.chown(snapshots, owner, owner)
    to_worker_r, to_worker_w = os.pipe()
    from_worker_r, from_worker_w = os.pipe()
    command = [python, "-m", "harness.worker", str(to_worker_r), str(from_worker_w)]
    argv = _argv(isolation.mode, view, command, chdir=seen["work_dir"], network=network)
    if uid is not None:
        guardian.hold(uid)      # before it starts: a harness killed from here on takes the uid's processes along
    try:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=stderr,
                                 pass_fds=(to_worker_r, from_worker_w), cwd=None if bwrap else str(scratch / "work"),
                                 env=_worker_env(home, tmp, env),
                                 preexec_fn=_child_setup(uid, role_groups()[role] if uid is not None else None))
    except BaseException:
        if uid is not None:
            guardian.release(uid)
        raise
    finally:
        os.close(to_worker_r)
        os.close(from_worker_w)
    return Worker(role, isolation, popen, to_worker_w, from_worker_r, scratch, uid), seen
