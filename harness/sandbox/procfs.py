"""What /proc says of a worker's processes: their children, and each thread's state and running time
(what the freeze and the kill look at)."""
from __future__ import annotations

import os

STOPPED = (b"T", b"t", b"Z", b"X")


def children(pid: int) -> list[int]:
    found = []
    for task in os.scandir(f"/proc/{pid}/task"):
        try:
            found += [int(c) for c in read(f"{task.path}/children").split()]
        except OSError:
            pass
    return found


def states(pid: int) -> list[bytes]:
    """The state letter of every thread of `pid` (none when it is gone)."""
    found = []
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            try:
                with open(f"{task.path}/stat", "rb") as f:
                    found.append(f.read().rsplit(b")", 1)[1].split()[0])
            except (OSError, IndexError):
                pass
    except OSError:
        pass
    return found


def threads(pids: list[int]) -> dict[tuple[int, str], tuple[bytes, bytes]]:
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
                state = read(f"/proc/{pid}/task/{tid}/stat").rsplit(b")", 1)[1].split()[0]
                try:
                    ran = read(f"/proc/{pid}/task/{tid}/schedstat").split()[0]
                except FileNotFoundError:     # a kernel without CONFIG_SCHED_INFO
                    ran = b" ".join(line for line in read(f"/proc/{pid}/task/{tid}/status").splitlines()
                                    if b"ctxt_switches" in line)
            except (OSError, IndexError):
                continue
            found[(pid, tid)] = (state, ran)
    return found


def read(path: str) -> bytes:
    """A small file of /proc, without the cost of a Python file object (a freeze reads hundreds)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def dead(pid: int) -> bool:
    return all(state in (b"Z", b"X") for state in states(pid))
