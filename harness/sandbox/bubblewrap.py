"""Bubblewrap mode: each worker in namespaces of its own, seeing only what its view shows.

- `bwrap`: bubblewrap, as an unprivileged user: own user, mount, PID, IPC and UTS namespaces (and a
  network namespace with only a loopback, unless the worker is one of several ranks), every
  capability dropped, a fresh /proc, a new session, death with the harness. The mount namespace
  shows the system's programs read-only, the Python environment, harness/ and common/, the
  reference's own folder, the role's data files and a private scratch folder, and nothing else:
  not the run folder, not the eval labels, not the rest of the checkout.
- `bwrap-root`: the same when the harness runs as root. A privileged bubblewrap builds the view
  (so sources under /root can be shown), drops to the unprivileged uid 65534 and starts the
  unprivileged one inside it: the reference is never root, not even mapped to it.
"""
from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

SANDBOX_UID = 65534                         # nobody: the reference's uid under bwrap-root
VIEW = Path("/dawnbench")                   # where the scratch, data and snapshots appear in a bwrap view
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/sys")


def _base(inner: bool, network: bool = False) -> list[str]:
    argv = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if not network:
        # A network namespace of its own, with only a loopback: nothing comes in (weights, data,
        # code fetched during the run) and nothing it computes goes out.
        argv.append("--unshare-net")
    if inner:
        argv += ["--bind", "/", "/"]
    return argv


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


def argv(mode: str, view: View, command: list[str], chdir: str = "/", network: bool = False) -> list[str]:
    if mode == "bwrap":
        return [*_base(inner=False, network=network), *view.mounts(), *_system_mounts(["--proc", "/proc"]),
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
        inner = [*_base(inner=True, network=network), "--proc", "/proc", "--dev", "/dev", *_gpu_devices(),
                 "--chdir", chdir]
        setpriv = ["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--"]
        return [*outer, "--", *setpriv, *inner, "--", *command]
    return list(command)


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


def python_paths(python: str) -> list[str]:
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


def layout(role: str, scratch: Path, python: str, *, data_files: list[tuple[Path, str]], snapshots: Path | None,
           extra_ro: list[tuple[str, str]], hidden: list[str]) -> tuple[View, dict[str, str]]:
    """What a worker of `role` sees (its view), and where it sees its folders."""
    seen = {"data_root": str(VIEW / "data"), "work_dir": str(VIEW / "scratch/work"),
            "scratch": str(VIEW / "scratch"), "references": str(VIEW / "scratch/reference"),
            "home": str(VIEW / "scratch/home"), "tmp": "/tmp"}
    view = View()
    view.ro += [(p, p) for p in SYSTEM_DIRS if os.path.isdir(p)]
    view.ro += [(p, p) for p in python_paths(python)]
    view.ro += [(str(src), str(VIEW / "data" / rel)) for src, rel in data_files]
    view.ro += list(extra_ro)
    view.rw.append((str(scratch), str(VIEW / "scratch")))
    view.rw.append((str(scratch / "tmp"), "/tmp"))
    view.hidden += [p for p in hidden if os.path.isdir(p)]
    if snapshots is not None:
        seen["snapshots"] = str(VIEW / "snapshots")
        (view.rw if role == "train" else view.ro).append((str(snapshots), str(VIEW / "snapshots")))
    return view, seen
