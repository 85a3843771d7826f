"""The run's one clock.

Time is cut into contiguous laps, each attributed to one span kind, so the spans add up to the
wall time by construction and nothing the harness does between spans falls off the clock.
Every reading first calls the device-synchronize hook: queued GPU work must count where it ran.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

SPANS = ("init", "train", "eval", "checkpoint", "harness")
# DAWNBench v1: eval and checkpointing are off the clock; init and data loading are on it.
EXCLUDED = frozenset({"eval", "checkpoint"})


def excluded(eval_on_clock: bool) -> frozenset[str]:
    """The spans off a task's clock: DAWNBench's, or under tasks.toml's `eval_on_clock` (MLPerf's rule: a
    task whose eval cost is fixed while its training shrinks, docs/RULES.md "The eval span") checkpoints only."""
    return EXCLUDED - {"eval"} if eval_on_clock else EXCLUDED


class Clock:
    def __init__(self, sync: Callable[[], None] | None = None,
                 now: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time, excluded: frozenset[str] = EXCLUDED):
        unknown = set(excluded) - set(SPANS)
        if unknown:
            raise ValueError(f"unknown span {sorted(unknown)[0]!r}; spans are {SPANS}")
        self.excluded = frozenset(excluded)     # the task's (excluded()), never a global switch
        self.sync = sync or (lambda: None)
        self._now = now
        self._wall = wall
        self.start_perf: float | None = None
        self.start_wall: float | None = None
        self._last: float | None = None
        self.totals: dict[str, float] = defaultdict(float)
        self.laps: list[tuple[str, float, float]] = []  # (span, start, end) in seconds since start

    def start(self) -> float:
        self.sync()
        self.start_perf = self._last = self._now()
        self.start_wall = self._wall()
        return 0.0

    def read(self) -> float:
        """Seconds since start, after the device has caught up."""
        self.sync()
        return self._now() - self.start_perf

    def lap(self, span: str) -> float:
        """Close the interval since the previous lap and charge it to `span`; returns its length."""
        if span not in SPANS:
            raise ValueError(f"unknown span {span!r}; spans are {SPANS}")
        self.sync()
        t = self._now()
        length = t - self._last
        self.laps.append((span, self._last - self.start_perf, t - self.start_perf))
        self.totals[span] += length
        self._last = t
        return length

    def elapsed(self) -> float:
        """Inclusive wall time up to the last lap (MLPerf-style: eval included)."""
        return self._last - self.start_perf

    @property
    def eval_on_clock(self) -> bool:
        return "eval" not in self.excluded

    def on_clock(self) -> float:
        """DAWNBench time up to the last lap: everything except the excluded spans (eval and checkpoint, or
        checkpoint alone for a task whose eval is on the clock)."""
        return self.elapsed() - sum(v for k, v in self.totals.items() if k in self.excluded)

    def wall_ms(self, seconds_since_start: float) -> int:
        """A clock reading as Unix milliseconds, for the event log."""
        return int(round((self.start_wall + seconds_since_start) * 1000))
