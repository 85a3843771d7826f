"""A worker started under the machine's isolation: its scratch folder, its copy of the reference's
code, its data (shown by bubblewrap, or copied in uid mode and with no isolation), its environment,
and the channel's pipes."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from harness import worker_env
from harness.errors import PROG_ENV, UsageError
from harness.sandbox import bubblewrap, container_mode, guardian, kernel, scratch, uid_mode
from harness.sandbox.handle import Worker
from harness.sandbox.modes import Isolation

WORKER_USER = "dawnbench"                   # the user name a worker's environment gives


def start(role: str, isolation: Isolation, *, reference_dir: Path, data_files: list[tuple[Path, str]],
          snapshots: Path | None, extra_ro: list[tuple[str, str]] = (), copies: list[Path] = (),
          env: dict[str, str] | None = None, hidden: list[str] = (), stderr=None,
          network: bool = False) -> tuple[Worker, dict]:
    """Start a worker for `role`. Returns it and the paths it sees: data_root, work_dir, snapshots.
    `copies` are put in its scratch folder; "{scratch}" in an `env` value is that folder as it sees it.
    `network`: the host's network (a trainer among several ranks, for the collective); otherwise a
    bubblewrap worker has a loopback of its own only (a container has no network at all)."""
    if isolation.mode == "container":       # a container of the entrant's image (harness.sandbox.container_mode)
        if network:
            raise UsageError("container mode runs one rank: several ranks' trainers would need the judge's network "
                             "(--network container:JUDGE), which is not built yet; run with --nproc 1")
        return container_mode.start(role, isolation, reference_dir=reference_dir, data_files=data_files,
                                    snapshots=snapshots, extra_ro=extra_ro, copies=copies, env=env, hidden=hidden,
                                    stderr=stderr)
    uid = uid_mode.uid_mode_uids()[role] if isolation.mode == "uid" else None
    # The reference's interpreter, never the harness's own environment (harness.worker_env).
    python = worker_env.resolved(worker_env.worker_python())
    owner = bubblewrap.SANDBOX_UID if isolation.mode == "bwrap-root" else uid
    folder = scratch.make_scratch(role, owner)
    bwrap = isolation.mode.startswith("bwrap")
    if bwrap:
        view, seen = bubblewrap.layout(role, folder, python, data_files=data_files, snapshots=snapshots,
                                       extra_ro=extra_ro, hidden=hidden)
    else:
        uid_mode.place_data(role, folder, data_files)     # uid mode, and none: no mount namespace to show them
        seen = {"data_root": str(folder / "data"), "work_dir": str(folder / "work"), "scratch": str(folder),
                "references": str(folder / "reference"), "home": str(folder / "home"), "tmp": str(folder / "tmp")}
        if snapshots is not None:
            seen["snapshots"] = str(snapshots)
    # The reference's code runs from a copy without __pycache__: a planted .pyc whose header matches
    # the source would otherwise run instead of the code that was hashed and reviewed.
    shutil.copytree(reference_dir, folder / "reference" / reference_dir.name, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for source in copies:
        shutil.copyfile(source, folder / source.name)
        if owner is not None:
            os.chown(folder / source.name, owner, owner)
    if owner is not None:
        scratch.chown_tree(folder / "reference", owner)
        scratch.chown_tree(folder / "data", owner)
        if snapshots is not None and role == "train":
            os.chown(snapshots, owner, owner)
        if snapshots is not None and role == "serve":
            # The model is the server's alone: in uid mode the predictor beside it, which holds the eval
            # inputs, would otherwise read it and send each example with its answer.
            os.chown(snapshots, owner, owner)
            os.chmod(snapshots, 0o700)
    env = {k: v.replace("{scratch}", seen["scratch"]) for k, v in (env or {}).items()}
    to_worker_r, to_worker_w = os.pipe()
    from_worker_r, from_worker_w = os.pipe()
    command = [python, "-m", "harness.worker", str(to_worker_r), str(from_worker_w)]
    argv = bubblewrap.argv(isolation.mode, view, command, chdir=seen["work_dir"], network=network) if bwrap else command
    if uid is not None:
        guardian.guardian.hold(uid)      # before it starts: a harness killed from here on takes the uid's processes along
        uid_mode.shut_shared_tmp(uid)    # no /tmp of its own: the shared ones are closed to it while it lives
    try:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=stderr,
                                 pass_fds=(to_worker_r, from_worker_w), cwd=None if bwrap else seen["work_dir"],
                                 env=worker_environment(seen["home"], seen["tmp"], env),
                                 preexec_fn=child_setup(uid, uid_mode.role_groups()[role] if uid is not None else None))
    except BaseException:
        if uid is not None:
            guardian.guardian.release(uid)
            uid_mode.reopen_shared_tmp(uid)
        raise
    finally:
        os.close(to_worker_r)
        os.close(from_worker_w)
    return Worker(role, isolation, popen, to_worker_w, from_worker_r, folder, uid), seen


def child_setup(uid: int | None, group: int | None = None):
    """preexec_fn: in uid mode, drop to `uid` (with its role's `group` beside its own) with no way
    back; die with the harness."""
    return kernel.child_setup(None if uid is None else lambda: uid_mode.drop(uid, group))


def worker_environment(home: str, tmp: str, extra: dict[str, str]) -> dict[str, str]:
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
