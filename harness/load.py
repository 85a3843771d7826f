"""How busy the machine was while a run ran: env.json's `load` (issue 35, "A noisy machine").

A run's time is the hardware's only where nothing else competed for its CPUs. The harness measures
that itself, outside the sandbox and from /proc, read at the run's start and at its end only:

- the load average (os.getloadavg) before and after the run;
- the CPUs the run may use (os.sched_getaffinity) and their busy time over the run's span
  (/proc/stat, per CPU: user + nice + system + irq + softirq + steal jiffies);
- the CPU seconds of the run's own processes in that span: the trainer's and the predictors'
  (harness.sandbox.handle.Worker.cpu_seconds, as the runner reads them) and the harness's own process;
- what is left of the busy time is the other processes': `others_share` is it over the span's
  CPU time (wall seconds x the run's CPUs).

It is a measurement beside the result, never a ranked figure: it changes no time and no verdict.
"""
from __future__ import annotations

import math
import os
import resource
import time

# Other processes' share of the run's CPUs over which the run is said to have shared its machine.
# 25%: an idle machine's daemons take a few percent, so a quarter is well above that noise; and it is
# what one busy process takes of 4 CPUs, or half a core of 2: enough to slow a run that keeps every
# CPU it may use busy by a visible fraction, so its time is no longer the hardware's.
OTHERS_THRESHOLD = 0.25
# /proc/stat's columns: user nice system idle iowait irq softirq steal (guest time is inside user)
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)
SOURCE = "measured by the harness outside the sandbox: /proc/stat, /proc/<pid>/stat, os.getloadavg"


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_ids() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def _busy_jiffies(cpus: list[int]) -> tuple[int, int] | None:
    """(busy jiffies of `cpus` since boot, how many of them /proc/stat lists); None without /proc/stat."""
    try:
        with open("/proc/stat", "rb") as f:
            lines = f.read().decode("ascii", "replace").splitlines()
    except OSError:
        return None
    wanted, busy, found = {f"cpu{i}" for i in cpus}, 0, 0
    for line in lines:
        parts = line.split()
        if parts and parts[0] in wanted:
            try:
                busy += sum(int(parts[1 + c]) for c in _BUSY_COLUMNS if 1 + c < len(parts))
                found += 1
            except ValueError:
                return None
    return (busy, found) if found else None


def _own_cpu() -> float:
    """The harness process's own CPU seconds (its threads; not its children: the workers are counted apart)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Meter:
    """The machine's load read at a run's start; `stop` reads it again and makes env.json's `load`."""

    def __init__(self):
        self.cpus = _cpu_ids()
        self.loadavg_before = _loadavg()
        self.jiffies = _busy_jiffies(self.cpus)
        self.own = _own_cpu()
        self.began = time.perf_counter()

    def warning_before(self) -> str | None:
        """One line when the machine is already busy: its 1-minute load average over its CPUs. The load
        average counts runnable tasks of the whole machine, so it is compared with the machine's CPUs
        (os.cpu_count), not with the run's (a run pinned to 2 of 64 CPUs is not crowded by a load of 3)."""
        machine = os.cpu_count() or len(self.cpus)
        if self.loadavg_before is None or self.loadavg_before[0] <= machine:
            return None
        return (f"warning: this machine is busy before the run: its 1-minute load average is "
                f"{self.loadavg_before[0]:g}, above its {machine} CPUs: the run's time will not be the "
                f"hardware's alone (see env.json's load)")

    def stop(self, trainer_cpu_s: float, predictors_cpu_s: float) -> dict:
        """The reading at the run's end (before its workers are killed): the raw figures of this rank."""
        wall = time.perf_counter() - self.began
        end = _busy_jiffies(self.cpus)
        busy = None
        if self.jiffies is not None and end is not None and end[1] == self.jiffies[1]:
            busy = (end[0] - self.jiffies[0]) / os.sysconf("SC_CLK_TCK")
        return {"loadavg_before": self.loadavg_before, "loadavg_after": _loadavg(),
                "logical_cpus": os.cpu_count(), "usable_cpus": len(self.cpus), "wall_s": wall,
                "busy_cpu_s": busy,
                "run_cpu_s": {"trainer": trainer_cpu_s, "predictors": predictors_cpu_s,
                              "harness": _own_cpu() - self.own}}


def record(raw: dict, run_cpu_s: float | None = None, note: str | None = None) -> dict:
    """env.json's `load` from a Meter's reading. `run_cpu_s`: the run's processes' CPU seconds on this
    machine when more than this rank's (every local rank's, summed); None where they cannot be known
    (several ranks per node over several nodes), and then no share of others is computed."""
    own = raw["run_cpu_s"]
    total = None if note else sum(own.values()) if run_cpu_s is None else run_cpu_s
    load = {**raw, "run_cpu_s": {k: round(v, 2) for k, v in own.items()}, "wall_s": round(raw["wall_s"], 3)}
    load["run_cpu_s"]["total"] = round(total, 2) if total is not None else None
    span = raw["wall_s"] * raw["usable_cpus"]
    busy = raw["busy_cpu_s"]
    others = None if busy is None or total is None else max(busy - total, 0.0)
    load.update({
        "busy_cpu_s": round(busy, 2) if busy is not None else None,
        "others_cpu_s": round(others, 2) if others is not None else None,
        "others_share": round(others / span, 3) if others is not None and span > 0 else None,
        "run_share": round(total / span, 3) if total is not None and span > 0 else None,
        "threshold": OTHERS_THRESHOLD,
        "source": SOURCE,
    })
    load["busy"] = load["others_share"] is not None and load["others_share"] > OTHERS_THRESHOLD
    if note:
        load["note"] = note
    return load


def warning_after(load: dict) -> str | None:
    """One line when other processes took more than OTHERS_THRESHOLD of the run's CPUs."""
    if not load.get("busy"):
        return None
    return (f"warning: other processes used {100 * load['others_share']:.0f}% of the {load['usable_cpus']} "
            f"CPUs this run may use during the run: its time is not the hardware's alone (see env.json's load)")


class LoadError(ValueError):
    """env.json's load is not what the harness writes (hand-edited, or a run before issue 35)."""


def _fraction(load: dict, name: str) -> float:
    value = load.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise LoadError(f"env.json's load.{name} is {str(value)[:40]!r}, not a share of the CPUs")
    return float(value)


def summary(load: object) -> tuple[bool, str]:
    """(whether the machine was busy, one line) for verify and the leaderboard's entry page; LoadError
    (one line) for a record that is not the harness's."""
    if not isinstance(load, dict):
        raise LoadError("env.json has no load record (a run before issue 35)")
    cpus = load.get("usable_cpus")
    if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1:
        raise LoadError(f"env.json's load.usable_cpus is {str(cpus)[:40]!r}, not a number of CPUs")
    if load.get("others_share") is None:
        why = load.get("note") or "the machine's busy time could not be read"
        return False, f"not measured: {str(why)[:200]}"
    others, run = _fraction(load, "others_share"), _fraction(load, "run_share")
    before = load.get("loadavg_before")
    avg = (f"; 1-minute load average {before[0]:g} before the run"
           if isinstance(before, list) and before and isinstance(before[0], (int, float))
           and not isinstance(before[0], bool) else "")
    busy = others > OTHERS_THRESHOLD
    return busy, (f"other processes used {100 * others:.0f}% of the {cpus} CPUs the run could use during the run "
                  f"(the run's own {100 * run:.0f}%)" + (": its time is not the hardware's alone" if busy else "")
                  + avg)
