"""uid mode: where bubblewrap cannot run (root in a container, where Docker's seccomp profile forbids
namespaces), each worker runs under a uid of its own (trainer and predictor differ), with no new
privileges and death with the harness; its data are copies in its own scratch folder, and the labels
and the run folder are under a folder its uid cannot enter (the container's launcher mounts them
there). It has no namespaces: what the worker can reach beyond that is the machine's (docs/RULES.md,
"Isolation")."""
from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import stat
import tempfile
from pathlib import Path

from harness.errors import DawnbenchError
from harness.provenance import BUILD_INFO
from harness.sandbox import acl, kernel, procfs

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
# Where a container launcher mounts a role's large folders (ImageNet's train/ and val/): one folder
# per role, which only that role's group may enter. Docker allows no mount namespaces, and copying
# 140 GB per run is out of the question (uid mode).
ROLE_MOUNTS = Path("/dawnbench-views")


NET_DEVICES = Path("/sys/class/net")        # the network interfaces of this network namespace


def unconfined() -> str | None:
    """Why a uid-mode worker here is not confined to its view, as one line of a run's unofficial
    reasons; None inside a reference's image with no network. uid mode has no namespaces: on a bare
    host its workers read whatever other users may read (issue 46: the Fashion-MNIST test labels
    from apt's cache of the Debian package, /var/cache/apt/archives) and reach the host's network."""
    if not BUILD_INFO.is_file():
        return ("uid mode outside a container: the reference's processes see this machine's files (apt's caches, "
                "other users' data) and its network; run in the reference's image (make run-docker) or where "
                "bubblewrap works")
    try:
        devices = sorted(p.name for p in NET_DEVICES.iterdir() if p.name != "lo")
    except OSError:
        devices = []
    if devices:
        return (f"uid mode in a container with a network ({', '.join(devices[:4])}): the reference's processes can "
                f"reach it; run the container without one (docker --network none, as dawnbench's launcher does)")
    return None


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


def role_groups() -> dict[str, int]:
    """Each role's group in uid mode: its base uid, the image's inside one, the host's outside. The
    server of timed inference requests ("serve") is the trainer's uid: no trainer lives beside it, and
    it must not be the predictor's, which holds the eval inputs while it serves."""
    bases = IMAGE_UIDS if BUILD_INFO.is_file() else HOST_UIDS     # every image's build writes BUILD_INFO
    return {**bases, "serve": bases["train"]}


def uid_mode_uids() -> dict[str, int]:
    """The worker uid of each role in uid mode for this harness process (its slot's)."""
    return {role: base + 2 * uid_slot() for role, base in role_groups().items()}


_slot: list[int] = []        # [index, the lock's fd], once taken: held until this process ends


def in_use(uids: list[int]) -> dict[int, str]:
    """Those of `uids` that someone else has, each with whom: a passwd entry names it, or a live process
    runs as it (any of its real, effective, saved or file-system uids, in any PID namespace this one
    shows). A worker uid is one nobody else has: a freeze sends kill(-1) as it, a kill and the
    guardian end every process of it (issue 46: a bystander `sleep` of such a uid was frozen and killed)."""
    found = {}
    for uid in uids:
        try:
            found[uid] = f"the user {pwd.getpwuid(uid).pw_name}"
        except KeyError:
            pass
    wanted = set(uids) - set(found)
    for entry in os.scandir("/proc") if wanted else ():
        if entry.name.isdigit():
            try:
                line = next(x for x in procfs.read(f"{entry.path}/status").splitlines() if x.startswith(b"Uid:"))
            except (OSError, StopIteration):
                continue
            for uid in wanted & {int(x) for x in line.split()[1:]}:
                found.setdefault(uid, f"process {entry.name}")
    return found


def uid_slot() -> int:
    """This process's uid slot: the first of UID_SLOTS lock files under a folder only root may
    enter (uid mode is root's) that no other live process holds, and whose uids nobody else has
    (in_use, checked with the lock held: a slot skipped is left to the next harness to look)."""
    if not _slot:
        taken: dict[int, str] = {}
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
                used = in_use([base + 2 * index for base in role_groups().values()])
                if used:
                    taken.update(used)
                    os.close(fd)
                    continue
                _slot[:] = [index, fd]
                return index
            if taken:
                raise DawnbenchError("no uid-mode slot is free: the others' uids are in use ("
                                     + ", ".join(f"{uid}: {who}" for uid, who in sorted(taken.items())[:4])
                                     + "); wait for a harness to end, or free those uids")
            raise DawnbenchError(f"{UID_SLOTS} uid-mode harnesses are running on this machine already "
                                 f"(their locks are in {folder}): wait for one to end")
        raise DawnbenchError(f"no folder for uid mode's locks: none of {', '.join(map(str, UID_SLOT_DIRS))} "
                             f"could be made private to this user")
    return _slot[0]


# The machine's temporary folders every user may write. A uid-mode worker has no mount namespace to
# show it a /tmp of its own (bubblewrap binds its scratch's tmp/ there), so two workers that live at once
# (the predictor and the server of `dawnbench infer`, the trainer and a predictor) could pass files
# through /tmp, and a run's predictors (one uid) could keep files there from one eval to the next. While
# a worker lives its uid may only pass through them (--x: its scratch folder is inside); its own
# temporary folder is its scratch's tmp/ ($TMPDIR), which no other uid may enter. /dev/shm stays: POSIX
# shared memory (a DataLoader's workers, DALI, NCCL) has no other place (docs/RULES.md, "Isolation").
SHARED_TMP = ("/tmp", "/var/tmp")
PASS_THROUGH = 0o1
_shut: dict[int, int] = {}       # uid -> how many of this harness's live workers run as it


def _shared_tmp() -> list[str]:
    found = []
    for path in dict.fromkeys((*SHARED_TMP, tempfile.gettempdir())):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
            found.append(path)
    return found


def shut_shared_tmp(uid: int) -> None:
    """Before a worker of `uid` starts: that uid may no longer write, list or read files in the shared
    temporary folders (a POSIX ACL entry for it alone; every other user keeps the folder as it was).
    Where a file system keeps no ACL the folder stays shared (as on a machine without bubblewrap)."""
    _shut[uid] = _shut.get(uid, 0) + 1
    if _shut[uid] == 1:
        _set_shared_tmp(uid, PASS_THROUGH)


def reopen_shared_tmp(uid: int) -> None:
    """Once the last worker of `uid` is gone: its entry taken away (a harness killed with -9 leaves it,
    which denies only that worker uid, until the next harness of its slot ends a worker of it)."""
    _shut[uid] = _shut.get(uid, 0) - 1
    if _shut[uid] <= 0:
        _shut.pop(uid)
        _set_shared_tmp(uid, None)


def _set_shared_tmp(uid: int, perm: int | None) -> None:
    for path in _shared_tmp():
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)      # another harness may change the same ACL: one at a time
            acl.set_user(path, uid, perm)
        except OSError:
            pass        # no ACL here (or a read-only folder): it stays as the machine has it
        finally:
            os.close(fd)


def drop(uid: int, group: int | None) -> None:
    """In the worker's process before its exec: become `uid` (with its role's `group` beside its own)
    with no way back."""
    os.setgroups([group] if group is not None else [])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1)


def place_data(role: str, scratch: Path, data_files: list[tuple[Path, str]]) -> None:
    """The role's data in the worker's scratch folder (no mount namespace shows them in place): copies,
    as the originals sit where the worker's uid cannot go, or a link to the launcher's mount of a large
    folder, which only the role's group may enter."""
    for src, rel in data_files:
        target = scratch / "data" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        mounted = ROLE_MOUNTS / role / rel
        if Path(src).is_dir() and mounted.is_dir():
            target.symlink_to(mounted)
        elif Path(src).is_dir():
            shutil.copytree(src, target)
        else:
            shutil.copyfile(src, target)
