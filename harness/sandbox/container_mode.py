"""Container mode: each worker a container of the entrant's image, started by the judge through the
engine's CLI (docs/RULES.md, "The judge in an image"). The judge (on the host, or in the judge image of
docker/Dockerfile.judge) executes no file of the entrant's layers: only the workers run there.

A worker container has no network (`--network none`), a read-only root with a tmpfs /tmp, the role's
view bind-mounted (its data and the reference's copy read-only, its scratch folder writable), the
sandbox's uid, no capabilities and no way to gain any (`--cap-drop ALL`, `no-new-privileges`). The
channel is its stdin and stdout (`docker run -i`); the worker's own prints go to its stderr. Its
processes live in a PID namespace the harness's /proc checks cannot see, so the freeze and thaw are
the engine's (`pause`, `unpause`: the cgroup freezer), the kill is `kill` and removal, and its CPU time
is its cgroup's. Nothing outlives the judge: every container carries the judge's label, runs with
`--rm`, and a reaper (a small process like uid mode's guardian) removes every container of that label
the moment the judge dies, whatever killed it.

The engine is the `docker` CLI (or $DAWNBENCH_CONTAINER_ENGINE), through subprocess: the harness stays
numpy-only.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness.errors import UsageError
from harness.sandbox import bubblewrap, kernel, scratch
from harness.sandbox.handle import FreezeError, Worker

IMAGE_ENV = "DAWNBENCH_WORKER_IMAGE"            # the entrant's image (tag or ID) the workers run in
ENGINE_ENV = "DAWNBENCH_CONTAINER_ENGINE"       # the engine's CLI: docker unless named
LABEL = "org.dawnbench.worker-of"               # the judge a worker container belongs to (the reaper's filter)
CODE = "/dawnbench/code"                        # the judge's harness/ and common/, read-only, for harness.worker
ENGINE_SECONDS = 60                             # an engine command (run, pause, kill) answers in well under this
SANDBOX_UID = bubblewrap.SANDBOX_UID             # nobody: the workers' uid in their container


def engine() -> str:
    return os.environ.get(ENGINE_ENV) or "docker"


def image() -> str:
    """The entrant's image, or one line saying how to name it."""
    named = os.environ.get(IMAGE_ENV, "").strip()
    if not named:
        raise UsageError(f"DAWNBENCH_ISOLATION=container needs ${IMAGE_ENV}, the reference's image (tag or ID); "
                         f"make run RUNTIME=docker sets it")
    return named


def available() -> str | None:
    """Why container mode cannot run here, or None."""
    if not shutil.which(engine()):
        return f"container mode needs the {engine()} CLI on PATH (apt-get install docker.io)"
    try:
        answered = _engine("image", "inspect", "--format", "{{.Id}}", image())
    except subprocess.TimeoutExpired:
        return f"the {engine()} engine did not answer within {ENGINE_SECONDS} s"
    if answered.returncode != 0:
        return f"the engine has no image {image()}: build it (make build REF=...) or name another in ${IMAGE_ENV}"
    return None


def view(role: str, scratch_dir: Path, *, data_files: list[tuple[Path, str]], snapshots: Path | None,
         extra_ro: list[tuple[str, str]] = (), code_dirs: list[Path] = ()) -> tuple[bubblewrap.View, dict[str, str]]:
    """What a worker container of `role` sees, as mounts, and where it sees its folders: the paths of a
    bubblewrap view (bubblewrap.VIEW), so a reference finds the same folders in every mode. Nothing of
    the host's system: the image's own /usr, /etc and interpreter."""
    seen = {"data_root": str(bubblewrap.VIEW / "data"), "work_dir": str(bubblewrap.VIEW / "scratch/work"),
            "scratch": str(bubblewrap.VIEW / "scratch"), "references": str(bubblewrap.VIEW / "scratch/reference"),
            "home": str(bubblewrap.VIEW / "scratch/home"), "tmp": "/tmp"}
    mounts = bubblewrap.View()
    mounts.ro += [(str(folder), f"{CODE}/{folder.name}") for folder in code_dirs]
    mounts.ro += [(str(src), str(bubblewrap.VIEW / "data" / rel)) for src, rel in data_files]
    mounts.ro += list(extra_ro)
    mounts.rw.append((str(scratch_dir), str(bubblewrap.VIEW / "scratch")))
    if snapshots is not None:
        seen["snapshots"] = str(bubblewrap.VIEW / "snapshots")
        (mounts.rw if role == "train" else mounts.ro).append((str(snapshots), str(bubblewrap.VIEW / "snapshots")))
    return mounts, seen


def run_argv(name: str, judge: str, image_ref: str, python: str, mounts: bubblewrap.View, *, workdir: str,
             env: dict[str, str], gpus: bool = False, uid: int = SANDBOX_UID) -> list[str]:
    """`docker run` of one worker: the channel on its stdin and stdout, everything else shut."""
    argv = [engine(), "run", "-i", "--rm", "--name", name, "--label", f"{LABEL}={judge}",
            "--network", "none", "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,mode=1777",
            "--user", f"{uid}:{uid}", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--ipc", "private", "--log-driver", "none", "--workdir", workdir]
    for source, target in mounts.ro:
        argv += ["--mount", f"type=bind,source={source},target={target},readonly"]
    for source, target in mounts.rw:
        argv += ["--mount", f"type=bind,source={source},target={target}"]
    for path in mounts.hidden:
        argv += ["--tmpfs", path]
    if gpus:
        argv += ["--gpus", "all"]
    for key, value in sorted(env.items()):
        argv += ["--env", f"{key}={value}"]
    # The image's entrypoint is the entrant's: replaced by a shell that moves the channel off fds 0 and 1
    # (3 and 4), so that a print() of the reference's goes to stderr, not into the channel.
    argv += ["--entrypoint", "/bin/sh", image_ref, "-c",
             'exec 3<&0 4>&1 </dev/null 1>&2; exec "$0" -m harness.worker 3 4', python]
    return argv


def worker_env(home: str, extra: dict[str, str]) -> dict[str, str]:
    """A worker container's environment: only what the harness gives it, nothing of the judge's own
    (the image's ENV stays, as the image's)."""
    return {"HOME": home, "TMPDIR": "/tmp", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "USER": "dawnbench", "LOGNAME": "dawnbench", "PYTHONPATH": CODE, **extra}


def gpus_here() -> bool:
    return any(Path("/dev").glob("nvidia[0-9]*"))


# ---------------------------------------------------------------------------------- the reaper

# Run as `python -I -S -c _REAP ENGINE JUDGE`, its stdin the harness's pipe: at end of file, which the
# kernel gives it the moment the harness dies (a kill -9 included), every container of the judge's
# label is killed and removed. A `docker run` client killed with the harness leaves its container
# running: the engine, not the client, holds it.
_REAP = f"""
import signal, subprocess, sys
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP):
    signal.signal(sig, signal.SIG_IGN)
sys.stdin.buffer.read()
engine, judge = sys.argv[1], sys.argv[2]
for _ in range(3):
    listed = subprocess.run([engine, "ps", "-aq", "--filter", "label={LABEL}=" + judge],
                            capture_output=True, text=True, timeout={ENGINE_SECONDS}).stdout.split()
    if not listed:
        break
    subprocess.run([engine, "rm", "-f", *listed], capture_output=True, timeout={ENGINE_SECONDS})
"""


class Reaper:
    """This harness's label and its reaper, started with its first worker container."""

    def __init__(self):
        self.judge = f"{os.uname().nodename}-{os.getpid()}-{secrets.token_hex(4)}"
        self._proc: subprocess.Popen | None = None

    def hold(self) -> str:
        """The label value to give a container; from now on a death of the harness removes it."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _REAP, engine(), self.judge],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True)
        return self.judge


reaper = Reaper()


@contextlib.contextmanager
def probe_container(python: str, program: str, timeout: float):
    """The workers' environment as the image holds it: yields (what `python -I -S -c program` printed
    there, parsed as JSON, or None; the container's root as this machine sees it, /proc/PID/root), so
    that the harness hashes the image's files itself, executing none of them. The container (no network,
    nobody, no capabilities, the reaper's label) is removed on leaving."""
    name = f"dawnbench-probe-{secrets.token_hex(6)}"
    started = _engine("run", "-d", "--rm", "--name", name, "--label", f"{LABEL}={reaper.hold()}",
                      "--network", "none", "--read-only", "--user", f"{SANDBOX_UID}:{SANDBOX_UID}", "--cap-drop", "ALL",
                      "--security-opt", "no-new-privileges", "--log-driver", "none", "--entrypoint", python, image(),
                      "-I", "-S", "-c", "import time; time.sleep(3600)")
    try:
        if started.returncode != 0:
            raise UsageError(f"cannot start {python} in the image {image()}: {started.stderr.strip()[:200]}")
        printed = _engine("exec", name, python, "-I", "-S", "-c", program, timeout=timeout)
        pid = _engine("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        try:
            record = json.loads(printed.stdout) if printed.returncode == 0 else None
        except ValueError:
            record = None
        yield record, f"/proc/{pid}/root"
    finally:
        _engine("rm", "-f", name)


# ---------------------------------------------------------------------------------- the worker

def _engine(*args: str, timeout: float = ENGINE_SECONDS) -> subprocess.CompletedProcess:
    return subprocess.run([engine(), *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, preexec_fn=kernel.dies_with_harness())


def cgroup_cpu_seconds(pid: int, root: str = "/sys/fs/cgroup", proc: str = "/proc") -> float | None:
    """CPU seconds of the cgroup that holds `pid` (a container's init): cgroup v2's cpu.stat
    usage_usec, or v1's cpuacct.usage. None where it cannot be read (a judge that does not share the
    host's /proc and cgroup tree)."""
    try:
        lines = Path(f"{proc}/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":                                   # v2: the unified hierarchy
            try:
                for row in Path(f"{root}{path}/cpu.stat").read_text().splitlines():
                    if row.startswith("usage_usec "):
                        return int(row.split()[1]) / 1e6
            except (OSError, ValueError):
                pass
        elif "cpuacct" in controllers.split(","):               # v1
            for folder in (controllers, "cpuacct", "cpu,cpuacct"):
                try:
                    return int(Path(f"{root}/{folder}{path}/cpuacct.usage").read_text()) / 1e9
                except (OSError, ValueError):
                    continue
    return None


class ContainerWorker(Worker):
    """A worker in a container of its own: the engine freezes, thaws, kills and accounts it."""

    def __init__(self, *args, name: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = name
        self._pid: int | None = None
        self._cpu = 0.0                     # its CPU seconds when last read: what is left once it is gone

    def container_pid(self) -> int | None:
        """The container's init as the judge's PID namespace sees it (once it runs), else None."""
        if self._pid is None:
            done = _engine("inspect", "--format", "{{.State.Pid}}", self.name)
            if done.returncode == 0 and done.stdout.strip().isdigit() and int(done.stdout) > 0:
                self._pid = int(done.stdout)
        return self._pid

    def processes(self) -> list[int]:
        """The container's init, while it runs: its processes are its cgroup's, not the harness's to walk."""
        pid = self.container_pid() if self.popen.poll() is None else None
        return [pid] if pid else []

    def start_signaller(self) -> None:
        """No signaller: the engine sends the freeze."""

    def cpu_seconds(self) -> float:
        """CPU seconds of every process of the container (its cgroup's): exact while it is paused. A
        container that has ended keeps its last reading."""
        if self.popen.poll() is not None:
            return self._cpu
        pid = self.container_pid()
        seconds = cgroup_cpu_seconds(pid) if pid else None
        if seconds is None:
            if self.popen.poll() is not None:
                return self._cpu
            # the eval bound stands on this figure: an unread one is no zero
            raise FreezeError(f"the {self.role} container's CPU time cannot be read from its cgroup "
                              f"(/proc/{pid}/cgroup): run the judge where the host's /proc and /sys/fs/cgroup are seen")
        self._cpu = max(self._cpu, seconds)
        return self._cpu

    def freeze(self, timeout: float = ENGINE_SECONDS) -> None:
        if self.popen.poll() is not None:
            self.frozen = True              # nothing of it is left to run
            return
        done = _engine("pause", self.name, timeout=timeout)
        if done.returncode != 0:
            raise FreezeError(f"the reference's {self.role} container could not be paused: "
                              f"{done.stderr.strip()[:200] or 'no answer from the engine'}")
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen and self.popen.poll() is None:
            _engine("unpause", self.name)
        self.frozen = False

    def kill(self, timeout: float = ENGINE_SECONDS) -> list[int]:
        """Kill and remove the container (a paused one too); returns [its init's pid] if it is still
        listed after `timeout` seconds, else []."""
        deadline = time.monotonic() + timeout
        _engine("rm", "-f", self.name, timeout=timeout)
        left = True
        while time.monotonic() < deadline:
            listed = _engine("ps", "-aq", "--filter", f"name=^{self.name}$")
            left = listed.returncode != 0 or bool(listed.stdout.split())
            if not left:
                break
            time.sleep(0.1)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        for fd in (self.to_worker, self.from_worker):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        return [self._pid or -1] if left else []


def start(role: str, isolation, *, reference_dir: Path, data_files: list[tuple[Path, str]], snapshots: Path | None,
          extra_ro: list[tuple[str, str]] = (), copies: list[Path] = (), env: dict[str, str] | None = None,
          hidden: list[str] = (), stderr=None) -> tuple[ContainerWorker, dict]:
    """Start a worker of `role` as a container of the entrant's image (harness.sandbox.launch.start's
    contract: the worker and the paths it sees)."""
    # imported here: the package's modules import nothing of the harness at load (harness.sandbox)
    from harness import worker_env as workers
    from harness.provenance import code_dirs
    image_ref = image()
    python = workers.worker_python()        # a path in the image, not here
    folder = scratch.make_scratch(role, SANDBOX_UID)
    mounts, seen = view(role, folder, data_files=data_files, snapshots=snapshots, extra_ro=list(extra_ro),
                        code_dirs=code_dirs())
    mounts.hidden += list(hidden)
    shutil.copytree(reference_dir, folder / "reference" / reference_dir.name, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for source in copies:
        shutil.copyfile(source, folder / source.name)
    scratch.chown_tree(folder, SANDBOX_UID)
    if snapshots is not None:
        os.chown(snapshots, SANDBOX_UID, SANDBOX_UID)
    env = {k: v.replace("{scratch}", seen["scratch"]) for k, v in (env or {}).items()}
    name = f"dawnbench-{role}-{secrets.token_hex(6)}"
    argv = run_argv(name, reaper.hold(), image_ref, python, mounts, workdir=seen["work_dir"],
                    env=worker_env(seen["home"], env), gpus=role in ("train", "serve") and gpus_here())
    to_worker_r, to_worker_w = os.pipe()
    from_worker_r, from_worker_w = os.pipe()
    try:
        popen = subprocess.Popen(argv, stdin=to_worker_r, stdout=from_worker_w, stderr=stderr,
                                 preexec_fn=kernel.dies_with_harness())
    finally:
        os.close(to_worker_r)
        os.close(from_worker_w)
    return ContainerWorker(role, isolation, popen, to_worker_w, from_worker_r, folder, None, name=name), seen
