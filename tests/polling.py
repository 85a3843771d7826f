"""Waiting in tests by polling against a deadline, never by a fixed sleep: a fixed sleep is too short
on a loaded machine (a flaky failure) and too long on an idle one (time lost on every run)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], seconds: float, interval: float = 0.02) -> T:
    """condition()'s first true value within `seconds`, else its last value (false): the caller
    asserts on what it returns, so a timeout fails with what was seen."""
    deadline = time.monotonic() + seconds
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(interval)
    return value


def processes(matches: Callable[[bytes], bool]) -> list[tuple[int, bytes]]:
    """(pid, the start of its command line) of every process whose command line `matches`. A process
    that ends while it is read is passed over; so is a zombie, whose command line is empty."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline and matches(cmdline):
            found.append((int(pid), cmdline[:160]))
    return found


def survivors(matches: Callable[[bytes], bool], seconds: float = 10.0) -> list[tuple[int, bytes]]:
    """The processes that `matches` still after `seconds` ([] as soon as none does): for "no process
    survives" checks, where a killed process may take a moment to leave /proc."""
    left: list[tuple[int, bytes]] = []

    def gone() -> bool:
        left[:] = processes(matches)
        return not left

    wait_for(gone, seconds)
    return left
