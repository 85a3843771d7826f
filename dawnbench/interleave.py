"""Two sides' runs interleaved on one machine, A B, B A, A B, ...: what `dawnbench compare` (one reference under
two pins) and `dawnbench challenge` (two entries) share.

Round k runs both sides with the same seed, one right after the other, the first side first in even rounds and
second in odd ones, so a drift of the machine (a slow neighbour, a warming cache, thermal throttling) falls on
both sides alike and each round's two runs see the same load. Each run is started by the caller's `start` (a
judge process natively, or the reference's image), and what it left is read back here: its result.json (a run
that leaves none is one line, and the runs so far stay on disk) and its env.json's `load`, the harness's own
measure of the machine while it ran (harness/load.py), summarized over the runs by `machine_load`.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dawnbench import stoppable
from harness.errors import UsageError


@dataclass
class Run:
    """One run of the order: its round, side and seed, its folder, its result.json and env.json's load."""
    round: int
    side: str
    seed: int
    run_id: str
    folder: Path
    result: dict
    load: dict | None


def order(sides: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, side) in the order they run: A B, B A, A B, ..."""
    return [(k, side) for k in range(rounds) for side in (sides if k % 2 == 0 else sides[::-1])]


def run_rounds(sides: list[str], rounds: int, seeds: list[int], run_id: Callable[[str, int, int], str],
               start: Callable[[str, int, str], tuple[int, Path, Path | None]]) -> list[Run]:
    """Every run of `order(sides, rounds)`, round k with seed seeds[k]: `start(side, seed, run_id)` runs one
    and returns (its exit status, its run folder, the file holding its output or None); `run_id(side,
    round, seed)` names it. UsageError, one line, for a run that left no result.json. A SIGTERM or SIGINT to
    this process stops the run under way (dawnbench.stoppable: `start` passes it on and waits for the run's DNC
    record) and raises Interrupted with the runs done so far."""
    done = []
    try:
        with stoppable.signals_stop():
            for k, side in order(sides, rounds):
                seed = seeds[k]
                name = run_id(side, k, seed)
                status, folder, log = start(side, seed, name)
                if not (folder / "result.json").is_file():
                    raise UsageError(f"the {side} run with seed {seed} left no result.json (exit {status}); its "
                                     f"output is above" + (f" and in {log}" if log else ""))
                result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
                done.append(Run(k, side, seed, name, folder, result, env_load(folder)))
    except KeyboardInterrupt as e:
        raise Interrupted(stoppable.signum_of(e), done) from None
    return done


class Interrupted(stoppable.Stopped):
    """The rounds were stopped by a signal (`signum`): `done`, the runs that finished before it. A
    KeyboardInterrupt still, for a caller that only knows Ctrl-C."""

    def __init__(self, signum: int, done: list[Run]):
        super().__init__(signum)
        self.done = done


def env_load(folder: Path) -> dict | None:
    """The run's env.json `load` (harness/load.py), or None where it records none."""
    try:
        load = json.loads((folder / "env.json").read_text(encoding="utf-8")).get("load")
    except (OSError, ValueError, AttributeError):
        return None
    return load if isinstance(load, dict) else None


def machine_load(records: list[dict | None]) -> dict:
    """The machine's load over the runs, from each run's env.json `load` (harness/load.py): how many runs
    other processes made busy, their largest share of the CPUs, and one line saying it."""
    shares = [r["others_share"] for r in records if isinstance(r, dict) and isinstance(r.get("others_share"), (int, float))]
    busy = sum(1 for r in records if isinstance(r, dict) and r.get("busy") is True)
    cpus = next((r.get("usable_cpus") for r in records if isinstance(r, dict) and r.get("usable_cpus")), None)
    before = [r["loadavg_before"][0] for r in records if isinstance(r, dict) and isinstance(r.get("loadavg_before"), list)
              and r["loadavg_before"] and isinstance(r["loadavg_before"][0], (int, float))]
    if not shares:
        line = f"machine load: not measured in {len(records)} run(s) (env.json records no load)"
    else:
        avg = f"; 1-minute load average {min(before):g}-{max(before):g} before the runs" if before else ""
        line = (f"machine load: other processes used up to {100 * max(shares):.0f}% of the {cpus} CPUs during the runs"
                f" ({busy} of {len(records)} runs busy{': the times are not the hardware' + chr(39) + 's alone' if busy else ''})"
                f"{avg}")
    short = (f"machine load: other processes up to {100 * max(shares):.0f}% of {cpus} CPUs, {busy} of {len(records)} "
             f"runs busy" if shares else "machine load: not measured")       # the plot's title: the same figures
    return {"runs": len(records), "busy_runs": busy, "others_share_max": max(shares) if shares else None,
            "usable_cpus": cpus, "loadavg_before": before, "line": line, "short": short}
