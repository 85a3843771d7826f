"""`harness verify RUN_DIR [--data DIR]`: re-check a finished run from its own files, offline.

A run folder holds its log (events.jsonl), the stored predictions of every evaluated epoch
(predictions/, harness.stored_predictions), result.json and the DAWNBench TSV. From the log alone
this recomputes the time-to-accuracy of every epoch, the DAWNBench v1 rule (docs/RULES.md):

    tta(k) = clock_s of epoch k's epoch_stop - the eval (and checkpoint) spans that ended before it

and from the stored predictions and the official labels (checksummed) the metric of every epoch;
then it checks that the log, result.json and the TSV all say the same, that the run stopped at
the first epoch that reaches the threshold (as the task's kind compares), and that every
predictions file is the one the log names.

What it proves is consistency: the folder agrees with itself. It cannot prove that the run happened
as logged: whoever holds the folder can rewrite every file of it to agree (every clock reading
scaled, the times re-derived). Running the entry again does: `dawnbench reproduce` (a host tool).

One line per check, then a verdict line. Exit status 0: verified; 1: a disagreement (the verdict
names the first); 2: a RUN_DIR that is not a readable run folder, or no eval labels here (one line).

The folder is untrusted (someone's upload): every file is read through harness.safe_read (a regular
file inside the folder, no link out, no FIFO or device, size-capped, JSON depth-checked) and the
predictions through harness.stored_predictions.load (no pickle, bounded inflation).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import (
    datasets,
    eval_bound,
    eval_labels,
    lm_audit,
    lm_eval,
    load,
    precision,
    safe_read,
    snapshots,
    stored_predictions,
    worker_env,
)
from harness.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, DawnbenchError, command, shown
from harness.events import PREFIX
from harness.provenance import official_line
from harness.safe_read import Refused
from harness.tasks import TASKS, Task

# Every tolerance is a rounding the harness applies when it writes, and no more.
READING_S = 0.5e-6          # events.jsonl: each clock_s is rounded to 6 decimals
RESULT_S = 0.5e-3           # result.json: tta_seconds, wall_seconds (total and per row) to 3 decimals
HOURS_H = 0.5e-6            # the TSV's hours column: 6 decimals
TIME_MS = 1.01              # events' time_ms = round(start + clock_s) in ms: +-0.5 ms each, plus float error
FLOAT_S = 1e-9              # float arithmetic on sums of a few hundred readings
# The metric is compared exactly: the same scoring code on the same ids gives the same float, and
# the TSV's accuracy cells are compared as the strings the harness formats (2 or 4 decimals).

MAX_EVENTS_BYTES = 32 * 2**20     # a line per event, a handful of events per epoch
MAX_RESULT_BYTES = 4 * 2**20      # result.json: one short history row per epoch
_TREE, _OWNER = "run folder", "a run"
EXCLUDED_SPANS = (("eval_start", "eval_stop"), ("checkpoint_start", "checkpoint_stop"))
# a task whose eval is on the clock (tasks.toml's eval_on_clock, MLPerf's rule): its checkpoints alone are off it
ON_CLOCK_EVAL_EXCLUDED = EXCLUDED_SPANS[1:]
# What a verified verdict proves, and what it does not, on the verdict line itself.
CONSISTENCY = ("consistent: its files agree with each other; that it happened as logged takes running it again: "
               f"{command('reproduce')}")


class VerifyError(DawnbenchError):
    """RUN_DIR is not a run folder that can be read (exit 2); the message is the one line."""


class Disagreement(Exception):
    """A check's first problem (one line)."""


@dataclass
class Check:
    name: str
    ok: bool | None          # None: not run (its inputs are missing or failed an earlier check)
    detail: str
    note: bool = False       # a measurement to read, not a disagreement (a busy machine): never a failure

    def line(self) -> str:
        mark = "note" if self.note else {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        return f"{mark} {self.name}: {self.detail}"


@dataclass
class Verification:
    run_dir: Path
    checks: list[Check] = field(default_factory=list)
    labels_problem: str | None = None      # why the metric could not be recomputed here
    summary: str = ""
    official: str = ""      # result.json's verdict: `official: yes`, or `unofficial: ` and every reason

    @property
    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if c.ok is False), None)

    @property
    def verified(self) -> bool:
        return self.first_failure is None and self.labels_problem is None

    @property
    def status(self) -> str:
        """The leaderboard's words: "verified", "failed: <reason>" or "not verified: <why>"."""
        failure = self.first_failure
        if failure is not None:
            return f"failed: {failure.name}: {failure.detail}"
        if self.labels_problem is not None:
            return "not verified: no eval labels on this machine"
        return "verified"

    @property
    def exit_code(self) -> int:
        if self.first_failure is not None:
            return EXIT_FAILED
        return EXIT_USAGE if self.labels_problem is not None else EXIT_OK

    def verdict(self) -> str:
        failure = self.first_failure
        if failure is not None:
            return f"disagreement: {failure.name}: {failure.detail}"
        if self.labels_problem is not None:
            return f"not verified: {self.labels_problem}"
        return f"verified: {self.summary} ({CONSISTENCY})"

    def lines(self) -> list[str]:
        return [c.line() for c in self.checks] + ([self.official] if self.official else []) + [self.verdict()]


# ---------------------------------------------------------------- reading the folder

def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _line(text: str, limit: int = 200) -> str:
    """Untrusted text as one printable line (no newline, no terminal escape), clipped."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


def _shown(value: Any, limit: int = 200) -> str:
    """An untrusted value as Python writes it (repr escapes what is not printable), clipped."""
    return _line(repr(value), limit)


def _read(run_dir: Path, name: str, limit: int) -> bytes:
    path = run_dir / name
    if not (path.exists() or path.is_symlink()):
        if name == "result.json" and (run_dir / "events.jsonl").is_file():
            # the harness writes result.json last: a log without it is a run that never finished
            raise VerifyError(f"{path}: missing: the run folder is incomplete (its log was started, but the harness "
                              f"writes result.json last, when the run ends); the run was stopped before its end: "
                              f"run it again")
        raise VerifyError(f"{path}: missing; a run folder of `harness run` holds result.json, events.jsonl and "
                          f"its TSV (give the folder the run printed)")
    try:
        return safe_read.read_bytes(path, run_dir, limit, _TREE, _OWNER)
    except Refused as e:
        raise VerifyError(f"{path}: {e.reason}") from None


def _result(run_dir: Path) -> tuple[dict, Task]:
    path = run_dir / "result.json"
    try:
        result = safe_read.parse_json(safe_read.decode(_read(run_dir, "result.json", MAX_RESULT_BYTES)), "a result")
    except Refused as e:
        raise VerifyError(f"{path}: {e.reason}") from None
    if not isinstance(result, dict):
        raise VerifyError(f"{path}: not a JSON object (is this the result.json of `harness run`?)")
    task = TASKS.get(result.get("task")) if isinstance(result.get("task"), str) else None
    if task is None:
        raise VerifyError(f"{path}: task is {str(result.get('task'))[:40]!r}, not one of {', '.join(sorted(TASKS))}")
    for key in _WHOLE_FIELDS:       # a float here (a number no float holds reads as inf) is no count the checks could use
        if isinstance(result.get(key), float):
            raise VerifyError(f"{path}: {key} is {result[key]!r}, not a whole number (is this the result.json of "
                              f"`harness run`?)")
    return result, task


# result.json's counts: the checks read each as a whole number, or fall back to the task's when it is not one
_WHOLE_FIELDS = ("seed", "nodes", "world_size", "eval_examples", "epochs", "eval_from_epoch")


def read_events(run_dir: Path) -> list[dict]:
    """The records of run_dir/events.jsonl, read as untrusted; VerifyError when it is not a harness's log."""
    path = run_dir / "events.jsonl"
    try:
        text = safe_read.decode(_read(run_dir, "events.jsonl", MAX_EVENTS_BYTES))
    except Refused as e:
        raise VerifyError(f"{path}: {e.reason}") from None
    records = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if not line.startswith(PREFIX):
            raise VerifyError(f"{path}:{n}: does not start with {PREFIX.strip()!r} (an MLLOG line of the harness)")
        try:
            record = safe_read.parse_json(line[len(PREFIX):], "an event")
        except Refused as e:
            raise VerifyError(f"{path}:{n}: {e.reason}") from None
        metadata = record.get("metadata") if isinstance(record, dict) else None
        if (not isinstance(record, dict) or not isinstance(record.get("key"), str)
                or not isinstance(metadata, dict) or _number(metadata.get("clock_s")) is None
                or not isinstance(record.get("time_ms"), int) or isinstance(record.get("time_ms"), bool)):
            raise VerifyError(f"{path}:{n}: not an event of the harness (key, time_ms and metadata.clock_s needed)")
        record["line"] = n
        records.append(record)
    if not records:
        raise VerifyError(f"{path}: empty (the run logged nothing)")
    return records


def _tsv(run_dir: Path, result: dict) -> tuple[str, list[list[str]]]:
    """(the TSV's name, its non-blank lines split on tabs); a missing TSV is a disagreement, not a bad folder."""
    name = result.get("logFilename")
    if not isinstance(name, str) or not name.endswith(".tsv") or "/" in name or "\\" in name or name.startswith("."):
        name = f"{result.get('reference')}.tsv"
    path = run_dir / name
    if not (path.exists() or path.is_symlink()):
        raise Disagreement(f"{name} is missing (the run's DAWNBench log)")
    try:
        text = safe_read.decode(safe_read.read_bytes(path, run_dir, safe_read.MAX_TSV_BYTES, _TREE, _OWNER))
    except Refused as e:
        raise Disagreement(f"{name} {e.reason}") from None
    return name, [line.rstrip("\r").split("\t") for line in text.split("\n") if line.strip()]


# ---------------------------------------------------------------- the log's epochs

@dataclass
class Epoch:
    number: int
    stop: dict           # epoch_stop
    eval_start: dict
    accuracy: dict       # eval_accuracy
    eval_stop: dict
    tta: float = math.nan
    scores: dict = field(default_factory=dict)      # recomputed (or, without labels, as logged)
    tta_eval_off: float = math.nan      # the time with the eval spans left out: what a wrong eval-on-clock log says


def _clock(record: dict) -> float:
    return float(record["metadata"]["clock_s"])


def _epoch_num(record: dict) -> int | None:
    value = record["metadata"].get("epoch_num")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# What the harness logs only once the reference's init is over (run_start and after it).
RUN_PHASE_KEYS = ("init_stop", "epoch_start", "epoch_stop", "train_samples", "eval_start", "eval_accuracy",
                  "eval_stop", "dawnbench_eval_inputs", "checkpoint_start", "checkpoint_stop", "checkpoint")


def _started(events: list[dict]) -> bool:
    """True when the run got past its init (one run_start); False when the log is that of a run that
    ended in init (the reference's setup raised or its process died): init_start, no run_start and
    nothing of the run phase. Disagreement for anything else."""
    starts = sum(e["key"] == "run_start" for e in events)
    if starts == 1:
        return True
    if starts > 1:
        raise Disagreement(f"the log has {starts} run_start events, not one")
    if sum(e["key"] == "init_start" for e in events) != 1:
        raise Disagreement("the log has no run_start and not one init_start (the harness logs init_start before "
                           "the reference's code runs)")
    late = next((e for e in events if e["key"] in RUN_PHASE_KEYS or _epoch_num(e) is not None), None)
    if late is not None:
        raise Disagreement(f"line {late['line']}: {late['key']} in a log without run_start (a run that ended in "
                           f"init logs nothing after init_start but its error and run_stop)")
    return False


@dataclass(frozen=True)
class Schedule:
    """Which epochs the run evaluates (docs/RULES.md, "Evaluated epochs"): from `first` to `max_epochs`,
    as its log's dawnbench_eval_from_epoch says; a log of an earlier harness, which evaluated every
    epoch, has none (`logged` False)."""
    first: int = 1
    max_epochs: int | None = None
    logged: bool = False

    def words(self) -> str:
        if not self.logged:
            return "every epoch evaluated (a log before eval_from_epoch)"
        return (f"epochs {self.first} to {self.max_epochs} evaluated (eval_from_epoch {self.first})"
                if self.first > 1 else f"every epoch to {self.max_epochs} evaluated")


def _schedule(events: list[dict]) -> Schedule:
    """The log's evaluated epochs; Disagreement when it names none that ends at its last epoch."""
    logged = [e for e in events if e["key"] == "dawnbench_eval_from_epoch"]
    if not logged:
        return Schedule()
    if len(logged) > 1:
        raise Disagreement(f"line {logged[1]['line']}: a second dawnbench_eval_from_epoch (the log names one schedule)")
    first, last = logged[0].get("value"), logged[0]["metadata"].get("max_epochs")
    whole = [isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (first, last)]
    if not all(whole):
        raise Disagreement(f"line {logged[0]['line']}: dawnbench_eval_from_epoch {_shown(first)} with max_epochs "
                           f"{_shown(last)} is not two whole numbers of epochs")
    if first > last:
        raise Disagreement(f"line {logged[0]['line']}: eval_from_epoch {first} is after max_epochs {last}: a run "
                           f"that never evaluates its last epoch is refused before it starts")
    return Schedule(first, last, True)


def _structure(events: list[dict], task: Task, scored: int) -> tuple[list[Epoch], dict, float, str, bool]:
    """The evaluated epochs, the run_stop event, the threshold, a summary and whether the run got past
    its init; Disagreement otherwise. A run that ended in init has no epochs, and must be DNC. The
    epochs before the schedule's first are trained and never evaluated; every one from it on is."""
    started = _started(events)
    schedule = _schedule(events)
    last, offsets = -math.inf, []
    for e in events:
        t = _clock(e)
        if t < last - READING_S:
            raise Disagreement(f"line {e['line']}: {e['key']} at clock {t} s, before the line above it ({last} s)")
        last = max(last, t)
        offsets.append(e["time_ms"] - 1000.0 * t)
    if max(offsets) - min(offsets) > TIME_MS:
        worst = max(range(len(events)), key=lambda i: abs(offsets[i] - offsets[0]))
        raise Disagreement(f"line {events[worst]['line']}: {events[worst]['key']}'s clock_s and time_ms disagree by "
                           f"{abs(offsets[worst] - offsets[0]):.1f} ms with the run's start (one clock writes both)")
    stops = [e for e in events if e["key"] == "run_stop"]
    if len(stops) != 1 or stops[0] is not events[-1]:
        raise Disagreement("the log must end with its one run_stop event")
    if not started and stops[0]["metadata"].get("dawnbench_status") != "DNC":
        raise Disagreement(f"the run ended in init (no run_start), but its run_stop says "
                           f"{_shown(stops[0]['metadata'].get('dawnbench_status'))}, not DNC")
    thresholds = [e for e in events if e["key"] == "dawnbench_threshold"]
    threshold = _number(thresholds[0].get("value")) if len(thresholds) == 1 else None
    if threshold is None:
        raise Disagreement("no dawnbench_threshold event with the run's threshold")
    samples = [e.get("value") for e in events if e["key"] == "eval_samples"]
    if samples != [scored]:
        raise Disagreement(f"eval_samples is {samples[:2]}, not the {scored} scored examples result.json records")

    by_epoch: dict[int, dict[str, dict]] = {}
    for e in events:
        if e["key"] in ("epoch_stop", "eval_start", "eval_accuracy", "eval_stop"):
            n = _epoch_num(e)
            if n is None:
                raise Disagreement(f"line {e['line']}: {e['key']} without an integer epoch_num")
            slot = by_epoch.setdefault(n, {})
            if e["key"] in slot:
                raise Disagreement(f"line {e['line']}: a second {e['key']} for epoch {n}")
            slot[e["key"]] = e
    epochs = []
    for k, n in enumerate(sorted(by_epoch), start=1):
        slot = by_epoch[n]
        if n != k:
            raise Disagreement(f"epoch {n} is logged where epoch {k} should be (epochs count from 1, none skipped)")
        if schedule.max_epochs is not None and n > schedule.max_epochs:
            raise Disagreement(f"epoch {n} is logged, past the run's max_epochs {schedule.max_epochs}")
        if n < schedule.first:      # trained, never evaluated: an eval of it is not the run's
            if set(slot) != {"epoch_stop"}:
                extra = ", ".join(sorted(set(slot) - {"epoch_stop"})) or "no epoch_stop"
                raise Disagreement(f"epoch {n} is before the first evaluated epoch ({schedule.first}, the log's "
                                   f"dawnbench_eval_from_epoch), but the log has its {extra}")
            continue
        if "eval_accuracy" not in slot:
            if n == max(by_epoch) and set(slot) <= {"epoch_stop", "eval_start"}:
                break       # the run ended in this epoch (diverged, or an error in predict): not evaluated
            raise Disagreement(f"epoch {n} has no eval_accuracy")
        missing = [key for key in ("epoch_stop", "eval_start", "eval_stop") if key not in slot]
        if missing:
            raise Disagreement(f"epoch {n}'s {', '.join(missing)} missing from the log")
        epoch = Epoch(n, slot["epoch_stop"], slot["eval_start"], slot["eval_accuracy"], slot["eval_stop"])
        if not _clock(epoch.stop) <= _clock(epoch.eval_start) <= _clock(epoch.accuracy) <= _clock(epoch.eval_stop):
            raise Disagreement(f"epoch {n}: epoch_stop, eval_start, eval_accuracy, eval_stop are not in time order")
        if epoch.accuracy["metadata"].get("metric") != task.metric or _number(epoch.accuracy.get("value")) is None:
            raise Disagreement(f"epoch {n}: eval_accuracy is not a {task.metric} value")
        epochs.append(epoch)
    summary = f"{len(events)} events, " + (f"{len(epochs)} evaluated epochs ({schedule.words()})" if started
                                           else "ended in init (no run_start)")
    return epochs, stops[0], threshold, summary, started


def _excluded_spans(events: list[dict], kinds=EXCLUDED_SPANS) -> list[tuple[float, float]]:
    """(start, stop) clock readings of every span off the DAWNBench clock: eval, and checkpoint if logged
    (`kinds`: the (start, stop) keys of the spans off the task's clock)."""
    spans = []
    for start_key, stop_key in kinds:
        open_at: float | None = None
        for e in events:
            if e["key"] == start_key:
                if open_at is not None:
                    raise Disagreement(f"line {e['line']}: {start_key} inside another {start_key} span")
                open_at = _clock(e)
            elif e["key"] == stop_key:
                if open_at is None:
                    raise Disagreement(f"line {e['line']}: {stop_key} without its {start_key}")
                spans.append((open_at, _clock(e)))
                open_at = None
    return spans


def recompute_tta(events: list[dict], epochs: list[Epoch], eval_on_clock: bool = False) -> None:
    """Each epoch's time-to-accuracy from the log: its epoch_stop minus the excluded spans before it; for a
    task whose eval is on the clock (tasks.toml's eval_on_clock), its eval_stop minus the checkpoint spans."""
    spans = _excluded_spans(events)
    for epoch in epochs:
        t = _clock(epoch.stop)
        epoch.tta = epoch.tta_eval_off = t - sum(stop - start for start, stop in spans if stop <= t)
    if eval_on_clock:
        spans = _excluded_spans(events, ON_CLOCK_EVAL_EXCLUDED)
        for epoch in epochs:
            t = _clock(epoch.eval_stop)
            epoch.tta = t - sum(stop - start for start, stop in spans if stop <= t)


def _tta_tolerance(epoch: Epoch, events: list[dict]) -> float:
    """How far the recomputed time may be from the harness's own, from the readings it sums."""
    readings = 1 + 2 * sum(1 for e in events if e["key"] in ("eval_stop", "checkpoint_stop")
                           and _clock(e) <= _clock(epoch.stop))
    return readings * READING_S + FLOAT_S


def train_spans(events: list[dict], through: int) -> tuple[float, int]:
    """The train time through epoch `through` from the log: every epoch's epoch_start to epoch_stop, from
    the first epoch on, and the number of readings summed; Disagreement where an epoch's span is not there."""
    clock: dict[tuple[str, int | None], float] = {}
    for e in events:
        if e["key"] in ("epoch_start", "epoch_stop"):
            clock.setdefault((e["key"], _epoch_num(e)), _clock(e))
    total = 0.0
    for n in range(1, through + 1):
        start, stop = clock.get(("epoch_start", n)), clock.get(("epoch_stop", n))
        if start is None or stop is None or stop < start:
            raise Disagreement(f"epoch {n}'s train span (epoch_start to epoch_stop) is not in the log")
        total += stop - start
    return total, 2 * through


def _schedule_check(result: dict, events: list[dict]) -> str:
    schedule = _schedule(events)
    recorded = result.get("eval_from_epoch", 1 if not schedule.logged else None)
    if recorded != schedule.first or isinstance(recorded, bool):
        raise Disagreement(f"result.json's eval_from_epoch {_shown(recorded)} is not the log's {schedule.first}")
    return schedule.words() + ("; result.json's eval_from_epoch agrees" if schedule.logged else "")


# The node count in the harness's hardware label (harness.environment.hardware_label): "(2 nodes)" after GPUs,
# ", 2 nodes)" at the end of a CPU's; none: one node.
_NODES_IN_LABEL = re.compile(r"(?:\(|, )(\d+) nodes\)$")


def _hardware_check(result: dict, events: list[dict]) -> str:
    """result.json's hardware, nodes and world_size are what the harness logged before the reference's
    code ran: the cost is the prices table's price for that hardware x those nodes, so a run of 4 nodes
    that says 1 would cost a quarter. The log's dawnbench_nodes; in a log of an earlier harness the count
    in its hardware label (submission_platform); a log with neither records none."""
    platform = [e.get("value") for e in events if e["key"] == "submission_platform"]
    logged = [e for e in events if e["key"] == "dawnbench_nodes"]
    if len(platform) > 1 or len(logged) > 1:
        raise Disagreement("the log names its hardware or its nodes twice")
    label = platform[0] if platform else None
    if label is not None and result.get("hardware") != label:
        raise Disagreement(f"hardware {_shown(result.get('hardware'))}, but the log's submission_platform is "
                           f"{_shown(label)}")
    nodes = result.get("nodes", 1)
    if logged:
        want, source = logged[0].get("value"), "the log's dawnbench_nodes"
        world = logged[0]["metadata"].get("world_size")
        if result.get("world_size") != world:
            raise Disagreement(f"world_size {_shown(result.get('world_size'))}, but the log's dawnbench_nodes "
                               f"records {_shown(world)} processes")
    elif isinstance(label, str):
        found = _NODES_IN_LABEL.search(label)
        want, source = int(found[1]) if found else 1, "the node count of the log's submission_platform"
    else:
        return "not recorded (a log without submission_platform or dawnbench_nodes)"
    if nodes != want or isinstance(nodes, bool):
        raise Disagreement(f"nodes {_shown(nodes)}, but {source} is {_shown(want)}: the run's nodes are what its "
                           f"harness recorded")
    return f"{_shown(label)}, {want} node{'s' * (want != 1)}, as the log records them"


def _precision_check(result: dict, events: list[dict]) -> str:
    """result.json's precision is the log's dawnbench_precision: the reference's report, which the
    harness logged at the end of the trainer's init (harness.precision); not checked beyond its form."""
    logged = [e for e in events if e["key"] == "dawnbench_precision"]
    recorded = result.get("precision")
    if not logged:
        if recorded is None:
            return "not recorded (a run of a harness before the training precision)"
        if isinstance(recorded, dict) and recorded.get("train") is None:
            return "none reported: the run ended before the trainer's setup returned"
        raise Disagreement(f"precision {_shown(recorded)}, but the log records none (dawnbench_precision)")
    if len(logged) > 1:
        raise Disagreement("the log records the training precision twice")
    word, reason = logged[0].get("value"), logged[0]["metadata"].get("reason")
    if word not in precision.PRECISIONS:
        raise Disagreement(f"the log's dawnbench_precision {_shown(word)} is not one of {', '.join(precision.PRECISIONS)}")
    if recorded != {"train": word, "reason": reason}:
        raise Disagreement(f"precision {_shown(recorded)}, but the log's dawnbench_precision is {word} ({_shown(reason)})")
    return f"{word}, as the reference reports it: {_line(str(reason), 120)}"


def _train_time_check(result: dict, events: list[dict], epochs: list[Epoch], run_stop: dict,
                      lower_bound: bool) -> str:
    """The train time (docs/RULES.md): the train spans only, from the first epoch through the one that
    converged, recomputed from the log for result.json, its history rows and run_stop."""
    if "train_seconds" not in result and not _schedule(events).logged:
        return "not recorded (a run of a harness before the train time)"
    history = result.get("history") if isinstance(result.get("history"), list) else []
    for row, epoch in zip(history, epochs):
        total, readings = train_spans(events, epoch.number)
        _same_time(f"history epoch {epoch.number}: train_seconds", row.get("train_seconds"), total,
                   RESULT_S + readings * READING_S + FLOAT_S, lower_bound)
    logged = run_stop["metadata"].get("train_seconds")
    if result.get("status") != "converged":
        if result.get("train_seconds") is not None or logged is not None:
            raise Disagreement(f"train_seconds {_shown(result.get('train_seconds'))} (run_stop: {_shown(logged)}) "
                               f"for a DNC run (it has none)")
        return "none: the run did not converge"
    through = epochs[-1].number
    total, readings = train_spans(events, through)
    tolerance = RESULT_S + readings * READING_S + FLOAT_S
    _same_time("train_seconds", result.get("train_seconds"), total, tolerance, lower_bound)
    _same_time("run_stop's train_seconds", logged, total, tolerance, lower_bound)
    return (f"{total:.3f} s through epoch {through}: its train spans (epoch_start to epoch_stop) only, as "
            f"result.json, its history and run_stop record; time-to-accuracy {epochs[-1].tta:.3f} s")


# ---------------------------------------------------------------- the checks

def _predictions(run_dir: Path, task: Task, epochs: list[Epoch]) -> tuple[dict[int, Any], str]:
    stored = {}
    for epoch in epochs:
        meta = epoch.accuracy["metadata"]
        name, digest = meta.get("predictions_file"), meta.get("predictions_sha256")
        if not isinstance(name, str) or not isinstance(digest, str):
            raise Disagreement(f"epoch {epoch.number}'s eval_accuracy names no predictions file and sha256 "
                               f"(the run stored no predictions: rerun it with this harness)")
        try:
            stored[epoch.number] = stored_predictions.load(run_dir, name, task, digest)
        except Refused as e:
            raise Disagreement(f"epoch {epoch.number}: {e.reason}") from None
    return stored, f"{len(stored)} files, each the bytes whose sha256 the log records"


def _labels_problem(task: Task, data_root: Path | None, error: DawnbenchError) -> str:
    try:
        entry = datasets.manifest(task.dataset)
        present = (datasets.files_dir(task.dataset, data_root) / entry["eval_labels"]).exists()
    except DawnbenchError:
        present = False
    if not present:
        return (f"no {task.dataset} eval labels on this machine ({error}); give --data DIR with the dataset, "
                f"or fetch it")
    return f"the {task.dataset} eval labels cannot be used: {error}"


def _metric(task: Task, epochs: list[Epoch], stored: dict[int, Any], labels: Any, dropped: Any) -> str:
    if not epochs:
        return f"no evaluated epoch: no {task.metric} to recompute"
    for epoch in epochs:
        try:
            scores = task.score(stored[epoch.number], labels, dropped)
        except ValueError as e:
            raise Disagreement(f"epoch {epoch.number}: the stored predictions cannot be scored: {e}") from None
        logged = {task.metric: epoch.accuracy.get("value"),
                  **{k: v for k, v in epoch.accuracy["metadata"].items() if k in scores and k != task.metric}}
        for name, value in scores.items():
            if name in logged and logged[name] != value:
                raise Disagreement(f"epoch {epoch.number}: {name} of the stored predictions is {value!r}, "
                                   f"the log says {logged[name]!r}")
        epoch.scores = scores
    values = ", ".join(task.figure.said(e.scores[task.metric]) for e in epochs[:8]) + (", ..." if len(epochs) > 8 else "")
    return f"{task.metric} recomputed from the stored predictions and the official labels: {values} (as logged)"


def _logged_scores(task: Task, epochs: list[Epoch]) -> None:
    for epoch in epochs:
        meta = epoch.accuracy["metadata"]
        epoch.scores = {task.metric: float(epoch.accuracy["value"]),
                        **{k: float(v) for k, v in meta.items() if k in task.kind.score_names
                           and _number(v) is not None}}


def _result_check(result: dict, task: Task, epochs: list[Epoch], run_stop: dict, threshold: float,
                  events: list[dict], lower_bound: bool, started: bool) -> str:
    status = result.get("status")
    if status not in ("converged", "DNC"):
        raise Disagreement(f"status is {str(status)[:30]!r}, not converged or DNC")
    if run_stop["metadata"].get("dawnbench_status") != status:
        raise Disagreement(f"status {status}, but the log's run_stop says {run_stop['metadata'].get('dawnbench_status')!r}")
    if result.get("metric") != task.metric:
        raise Disagreement(f"metric is {result.get('metric')!r}, the {task.name} task's is {task.metric}")
    if _number(result.get("threshold")) != threshold:
        raise Disagreement(f"threshold {result.get('threshold')!r}, the log's dawnbench_threshold is {threshold}")
    if result.get("official_threshold") is not (threshold == task.threshold):
        raise Disagreement(f"official_threshold is {result.get('official_threshold')!r} for threshold {threshold} "
                           f"(the task's is {task.threshold})")
    history = result.get("history")
    if not isinstance(history, list) or len(history) != len(epochs):
        raise Disagreement(f"history has {len(history) if isinstance(history, list) else 'no'} rows, "
                           f"the log {len(epochs)} evaluated epochs")
    for row, epoch in zip(history, epochs):
        if not isinstance(row, dict) or row.get("epoch") != epoch.number:
            raise Disagreement(f"history row {epoch.number} is not epoch {epoch.number}'s")
        for name, value in epoch.scores.items():
            if row.get(name) != value:
                raise Disagreement(f"history epoch {epoch.number}: {name} {row.get(name)!r}, recomputed {value!r}")
        _same_tta(f"history epoch {epoch.number}: tta_seconds", row.get("tta_seconds"), epoch, task,
                  RESULT_S + _tta_tolerance(epoch, events), lower_bound)
        _same_time(f"history epoch {epoch.number}: wall_seconds", row.get("wall_seconds"), _clock(epoch.eval_stop),
                   RESULT_S + READING_S + FLOAT_S, False)
    _same_time("wall_seconds", result.get("wall_seconds"), _clock(run_stop), RESULT_S + READING_S + FLOAT_S, False)

    reached = next((e for e in epochs if task.reaches(e.scores[task.metric], threshold)), None)
    said = task.figure.said     # each figure in its own unit: 70.00% for an accuracy, 0.7523 for F1
    if status == "converged":
        if reached is None:
            raise Disagreement(f"status converged, but no epoch's {task.metric} reaches {said(threshold)}")
        if reached is not epochs[-1]:
            raise Disagreement(f"epoch {reached.number} is the first with {task.metric} {task.kind.relation} {said(threshold)}, "
                               f"but the run went on to epoch {epochs[-1].number}")
        if result.get("epochs") != reached.number:
            raise Disagreement(f"epochs is {result.get('epochs')!r}, the run converged at epoch {reached.number}")
        trained = max((_epoch_num(e) or 0 for e in events if e["key"] == "epoch_stop"), default=0)
        if trained != reached.number:
            raise Disagreement(f"the run converged at epoch {reached.number}, but its log trains to epoch {trained}")
        if result.get("metric_value") != reached.scores[task.metric]:
            raise Disagreement(f"metric_value {result.get('metric_value')!r}, epoch {reached.number}'s "
                               f"{task.metric} is {reached.scores[task.metric]!r}")
        _same_tta("tta_seconds", result.get("tta_seconds"), reached, task,
                  RESULT_S + _tta_tolerance(reached, events), lower_bound)
        return (f"converged at epoch {reached.number}, the first with {task.metric} {task.kind.relation} "
                f"{said(threshold)}: {task.metric} {said(reached.scores[task.metric])}, time-to-accuracy {reached.tta:.3f} s; "
                f"status, tta_seconds, metric_value, epochs and {len(history)} history rows agree")
    if reached is not None:
        raise Disagreement(f"status DNC, but epoch {reached.number} reaches {said(threshold)} (the run stops there converged)")
    if result.get("tta_seconds") is not None:
        raise Disagreement(f"tta_seconds {result.get('tta_seconds')!r} for a DNC run (it has none)")
    logged_reason = run_stop["metadata"].get("reason") or None
    if result.get("dnc_reason") != logged_reason:
        raise Disagreement(f"dnc_reason {_shown(result.get('dnc_reason'))}, but the log's run_stop says "
                           f"{_shown(logged_reason)}")
    last = epochs[-1].scores[task.metric] if epochs else None
    if result.get("metric_value") != last:
        raise Disagreement(f"metric_value {result.get('metric_value')!r}, the last evaluated epoch's is {last!r}")
    if not isinstance(result.get("epochs"), int) or result["epochs"] < (epochs[-1].number if epochs else 0):
        raise Disagreement(f"epochs is {result.get('epochs')!r}, the log evaluated epochs to "
                           f"{epochs[-1].number if epochs else 0}")
    if not started and result["epochs"] != 0:
        raise Disagreement(f"epochs is {result['epochs']!r}, but the run ended in init, before its first epoch")
    return (f"DNC, no epoch with {task.metric} {task.kind.relation} {said(threshold)}; status, dnc_reason, metric_value, "
            f"epochs and {len(history)} history rows agree")


def _same_tta(what: str, recorded: Any, epoch: Epoch, task: Task, tolerance: float, lower_bound: bool) -> None:
    """A recorded time-to-accuracy against the log's; for a task whose eval is on the clock, one that left the eval
    out (a harness's or an entrant's that excluded it) is named as such."""
    value = _number(recorded)
    if task.eval_on_clock and value is not None and value < epoch.tta - tolerance:
        raise Disagreement(f"{what} {value} leaves the eval out (the log gives {epoch.tta:.6f} s with it, "
                           f"{epoch.tta_eval_off:.6f} s without): the {task.name} task's eval is on the clock "
                           f"(tasks.toml eval_on_clock, docs/RULES.md \"The eval span\")")
    _same_time(what, recorded, epoch.tta, tolerance, lower_bound)


def _same_time(what: str, recorded: Any, recomputed: float, tolerance: float, lower_bound: bool) -> None:
    value = _number(recorded)
    if value is None:
        raise Disagreement(f"{what} is {str(recorded)[:30]!r}, not a number")
    ok = value >= recomputed - tolerance if lower_bound else abs(value - recomputed) <= tolerance
    if not ok:
        raise Disagreement(f"{what} {value}, but the log gives {recomputed:.6f} s (tolerance {tolerance:.2g} s)")


def _tsv_check(name: str, lines: list[list[str]], task: Task, epochs: list[Epoch], events: list[dict],
               lower_bound: bool) -> str:
    if not lines or lines[0] != list(task.tsv_columns):
        raise Disagreement(f"{name}: header {lines[0] if lines else []}, not {list(task.tsv_columns)}")
    rows = lines[1:]
    if len(rows) != len(epochs):
        raise Disagreement(f"{name}: {len(rows)} rows, the log {len(epochs)} evaluated epochs")
    for n, (cells, epoch) in enumerate(zip(rows, epochs), start=2):
        expected = task.tsv_row(epoch.number, epoch.tta / 3600.0, epoch.scores)
        if len(cells) != len(expected):
            raise Disagreement(f"{name}:{n}: {len(cells)} cells, not {len(expected)}")
        for column, cell, want in zip(task.tsv_columns, cells, expected):
            if column == "hours":
                try:
                    hours = float(cell)
                except ValueError:
                    hours = math.nan
                tol = HOURS_H + _tta_tolerance(epoch, events) / 3600.0
                ok = (hours >= epoch.tta / 3600.0 - tol) if lower_bound else abs(hours - epoch.tta / 3600.0) <= tol
                if not ok:
                    raise Disagreement(f"{name}:{n}: hours {cell}, but the log gives {epoch.tta / 3600.0:.6f} "
                                       f"(epoch {epoch.number}, tolerance {tol:.2g} h)")
            elif cell != want:
                raise Disagreement(f"{name}:{n}: {column} {cell}, recomputed {want} (epoch {epoch.number})")
    return f"{name}: {len(rows)} rows agree (hours within {HOURS_H:g} h of the log, accuracies to the digit)"


# ---------------------------------------------------------------- the whole

def load_labels(task: Task, data_root: Path | None) -> Any:
    return eval_labels.load_task_labels(task, data_root)


def _dropped(task: Task, data_root: Path | None, used: bool) -> Any:
    """The blacklisted indices the run left out of its score, from this machine's dataset."""
    if not used:
        return None
    dropped = eval_labels.load_blacklist(task.dataset, data_root)
    if dropped is None:
        raise DawnbenchError(f"the run scored without the {task.dataset} blacklist, which this machine's dataset "
                             f"lacks; prepare it with --blacklist FILE")
    return dropped


def verify(run_dir: Path, data_root: Path | None = None,
           labels_for: Callable[[Task, Path | None], Any] = load_labels) -> Verification:
    """Every check of a run folder. VerifyError when it is not a readable run folder (exit 2);
    otherwise a Verification whose checks say what agrees and what does not."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise VerifyError(f"{shown(run_dir, 300)}: not a folder; give a run folder of `harness run` "
                          f"(results/<reference>/<run id>/)")
    result, task = _result(run_dir)
    events = read_events(run_dir)
    report = Verification(run_dir)
    lower_bound = isinstance(result.get("world_size"), int) and result["world_size"] > 1

    def check(name: str, fn: Callable[[], str], *needs: str) -> bool:
        failed = [n for n in needs if not any(c.name == n and c.ok for c in report.checks)]
        if failed:
            report.checks.append(Check(name, None, f"not checked: {', '.join(failed)} did not pass"))
            return False
        try:
            report.checks.append(Check(name, True, fn()))
            return True
        except Disagreement as e:
            report.checks.append(Check(name, False, str(e)))
            return False

    state: dict[str, Any] = {}

    def events_check() -> str:
        scored = result.get("eval_examples")
        epochs, run_stop, threshold, summary, started = _structure(
            events, task, scored if isinstance(scored, int) and not isinstance(scored, bool) else task.eval_examples)
        recompute_tta(events, epochs, task.eval_on_clock)
        state.update(epochs=epochs, run_stop=run_stop, threshold=threshold, started=started)
        return summary + f", run_stop {run_stop['metadata'].get('dawnbench_status')}"

    def tta_check() -> str:
        epochs = state["epochs"]
        if not epochs:
            return "no evaluated epoch, no time-to-accuracy"
        shown = ", ".join(f"{e.tta:.3f}" for e in epochs[:8]) + (", ..." if len(epochs) > 8 else "")
        bound = "; several processes: the log is rank 0's clock, a lower bound of the slowest rank's" \
            if lower_bound else ""
        how = ("eval_stop minus the checkpoint spans before it (the task's eval is on the clock)" if task.eval_on_clock
               else "epoch_stop minus the eval and checkpoint spans before it")
        return f"per epoch, {how}: {shown} s{bound}"

    def predictions_check() -> str:
        # as many predictions as the eval set on disk had (the scored ones and the blacklisted ones)
        (logged,) = [e for e in events if e["key"] == "eval_samples"]
        dropped = logged["metadata"].get("dropped", 0)
        examples = logged["value"] + (dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0)
        stored, summary = _predictions(run_dir, dataclasses.replace(task, eval_examples=examples), state["epochs"])
        state["stored"] = stored
        return summary

    check("events", events_check)
    check("tta", tta_check, "events")
    check("predictions", predictions_check, "events")
    if "epochs" in state:
        try:
            state["labels"] = labels_for(task, data_root)
            state["dropped"] = _dropped(task, data_root, result.get("usedBlacklist") is True)
        except DawnbenchError as e:
            state.pop("labels", None)
            report.labels_problem = _labels_problem(task, data_root, e)
            report.checks.append(Check("labels", None, report.labels_problem))
        else:
            override = os.environ.get(datasets.MANIFEST_ENV)
            report.checks.append(Check("labels", True, (
                f"{task.dataset} eval labels ({len(state['labels']):,}), checksums of "
                + (f"${datasets.MANIFEST_ENV}={override} (not the official ones)" if override
                   else "harness/data/datasets.toml"))))
        if "labels" in state:
            check("metric", lambda: _metric(task, state["epochs"], state["stored"], state["labels"], state["dropped"]),
                  "predictions")
        else:
            report.checks.append(Check("metric", None, "not recomputed without the eval labels; the checks below "
                                                       "compare the logged values"))
        if report.checks[-1].ok is not True:
            _logged_scores(task, state["epochs"])
    check("result.json", lambda: _result_check(result, task, state["epochs"], state["run_stop"], state["threshold"],
                                               events, lower_bound, state["started"]), "events")

    def tsv_check() -> str:
        name, lines = _tsv(run_dir, result)
        return _tsv_check(name, lines, task, state["epochs"], events, lower_bound)
    check("tsv", tsv_check, "events")
    check("eval schedule", lambda: _schedule_check(result, events), "events")
    check("hardware", lambda: _hardware_check(result, events), "events")
    check("precision", lambda: _precision_check(result, events), "events")
    check("train time", lambda: _train_time_check(result, events, state["epochs"], state["run_stop"], lower_bound),
          "result.json")
    check("eval bound", lambda: _eval_bound_check(events, task, result.get("world_size", 1),
                                                  result.get("official") is True), "events")
    check("model", lambda: _model_check(run_dir, events), "events")
    # A language model's look-ahead audits, as logged (its kind's settings, [tasks.<name>.lm]); no kind or
    # format hook says what verify checks beyond the figure, so the one such branch stays here.
    if task.settings is not None:
        check("audit", lambda: _audit_check(events, task, state.get("labels")), "events")
    recorded = _worker_environment(run_dir)
    named = (result.get("provenance") if isinstance(result.get("provenance"), dict) else {}).get(
        "worker_environment_sha256")
    if recorded is None and named is not None:
        # a record left out (an entry submitted without env.json) is a claim nobody can check: never a skip
        report.checks.append(Check("environment", False, f"result.json names the workers' environment sha256 "
                                                         f"{_shown(named, 20)}, but env.json records none (no env.json, or "
                                                         f"no worker_environment in it): give the run's env.json"))
    elif recorded is None:
        report.checks.append(Check("environment", None, "env.json records no workers' environment (a run before "
                                                        "issue 33): not checked"))
    else:
        check("environment", lambda: _environment_check(recorded, result))
    report.checks.append(_load_check(run_dir))

    report.summary = _summary(run_dir, result, task, state)
    report.official = _line(official_line(result), 4000)
    return report


def _eval_bound_check(events: list[dict], task: Task, world_size: object = 1, official: bool = True) -> str:
    """Every eval span's reference code took no longer than its bound, and each logged bound is the
    formula's (harness/eval_bound.py) recomputed from what the harness owns: the task's training-set
    size, eval passes and the run's ranks, the eval examples, the trainer's init span, and each epoch's train
    span, which is no longer than the epoch's logged span. Never from the trainer's `samples`: a log
    whose bound was made of them (one example claimed, a bound of thousands of seconds) does not
    verify. The predictor's start counts in every eval logged `fresh_predictor`, else in the first.
    A run on data other than the official ones (never official) logs the training set the harness
    counted on disk (`dawnbench_train_examples`); an official run's must be the task's."""
    costs = [(_epoch_num(e), e.get("metadata") or {}) for e in events if e["key"] == "eval_stop"]
    measured = [(n, m) for n, m in costs if "predictor_s" in m]
    if not measured:
        return "no eval cost logged (a run of a harness before the eval bound, or no eval)"
    if task.eval_on_clock:      # paid for on the clock: no bound (docs/RULES.md, "The eval span")
        for n, m in measured:
            if m.get("eval_on_clock") is not True or m.get("eval_bound_s") is not None:
                raise Disagreement(f"epoch {n}: eval_stop logs eval_on_clock {_shown(m.get('eval_on_clock'))} and "
                                   f"eval_bound_s {_shown(m.get('eval_bound_s'))}, but the {task.name} task's eval is "
                                   f"on the clock (tasks.toml eval_on_clock): true and no bound")
        longest = max(measured, key=lambda nm: _number(nm[1].get("predictor_s")) or 0.0)
        return (f"not applied: the {task.name} task's eval is on the clock, in its time-to-accuracy; {len(measured)} "
                f"evals, the longest epoch {longest[0]}'s {_shown(longest[1].get('predictor_s'))} s")
    clock = {(e["key"], _epoch_num(e)): _number((e.get("metadata") or {}).get("clock_s")) for e in events}
    counted = [e for e in events if e["key"] == "eval_samples"]
    if len(counted) != 1 or not isinstance(counted[0].get("value"), int):
        raise Disagreement("the log must have one eval_samples event to recompute the eval bound from")
    dropped = (counted[0].get("metadata") or {}).get("dropped", 0)
    examples = counted[0]["value"] + (dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0)
    train_examples = _train_examples(events, task, official)
    ranks = world_size if isinstance(world_size, int) and not isinstance(world_size, bool) and world_size >= 1 else 1
    init_s = (clock.get(("init_stop", None)) or 0.0) - (clock.get(("init_start", None)) or 0.0)
    for i, (n, m) in enumerate(measured):
        took, bound, train_s = _number(m.get("predictor_s")), _number(m.get("eval_bound_s")), _number(m.get("train_s"))
        if took is None or bound is None or took > bound:
            raise Disagreement(f"epoch {n}: the eval took {_shown(m.get('predictor_s'))} s of the reference's code, "
                               f"over its bound of {_shown(m.get('eval_bound_s'))} s")
        start, stop = clock.get(("epoch_start", n)), clock.get(("epoch_stop", n))
        if train_s is None or start is None or stop is None or train_s > stop - start + 0.01:
            raise Disagreement(f"epoch {n}: the eval bound's train span {_shown(m.get('train_s'))} s is not within "
                               f"the epoch's logged span ({_shown(start)} to {_shown(stop)} s on the clock)")
        spans = _rank_spans(n, m, ranks, train_s, stop - start)
        passes = _number(m.get("eval_passes", 1.0))
        if passes != task.eval_passes:       # the task's, never a reference's (tasks.toml)
            raise Disagreement(f"epoch {n}: eval_passes {_shown(m.get('eval_passes'))} is not the {task.name} task's "
                               f"{task.eval_passes:g}")
        fresh = m.get("fresh_predictor") is True
        charged, starts = task.kind.eval_charge(task, examples)     # the kind's, never the log's
        expected = eval_bound.EvalBound.of(train_s=train_s, eval_examples=charged,
                                           train_examples=train_examples, rank_train_s=spans,
                                           start_s=init_s if fresh or i == 0 else None, passes=passes, starts=starts)
        # each span is logged to the millisecond, and the formula multiplies their sum by E/N: allow that rounding
        rounding = 0.01 + passes * charged * len(spans) / max(train_examples, 1) * 5e-4
        if abs(expected.seconds - bound) > rounding:
            raise Disagreement(f"epoch {n}: the logged eval bound {bound:.3f} s is not the formula's "
                               f"{expected.seconds:.3f} s = {expected.formula} (the task's training set, never "
                               f"the trainer's count)")
    worst = max(measured, key=lambda nm: nm[1]["predictor_s"] / max(nm[1]["eval_bound_s"], 1e-9))
    return (f"{len(measured)} evals within their bounds, each recomputed from the task's sizes and the log; the "
            f"closest, epoch {worst[0]}: {worst[1]['predictor_s']:.2f} s of {worst[1]['eval_bound_s']:.2f} s")


# How far another rank's train span may pass rank 0's logged epoch span: it may start its epoch a few
# milliseconds before rank 0 does (rank 0 writes the eval's records first), never more.
OTHER_RANK_SLACK_S = 0.1


def _rank_spans(n: object, m: dict, ranks: int, train_s: float, epoch_s: float) -> list[float]:
    """Every rank's train span of epoch `n` as its eval_stop logs them (`rank_train_s`), each within the
    epoch's logged span, rank 0's its own `train_s`. A log of one process without them bounds with `train_s`;
    a log of several without them is of a harness that bounded by rank 0's span times the ranks, which one
    rank training the whole set while the others returned at once doubled (issue 46): it does not verify."""
    logged = m.get("rank_train_s")
    if logged is None and ranks == 1:
        return [train_s]
    spans = [_number(t) for t in logged] if isinstance(logged, list) else []
    if len(spans) != ranks or any(t is None or t < 0 for t in spans):
        raise Disagreement(f"epoch {n}: the eval bound needs every rank's train span (rank_train_s, {ranks} of "
                           f"them), the log has {_shown(logged)}: a bound from rank 0's span alone is not this "
                           f"harness's (issue 46)")
    if abs(spans[0] - train_s) > 0.002 or max(spans) > epoch_s + OTHER_RANK_SLACK_S:
        raise Disagreement(f"epoch {n}: the ranks' train spans {_shown(logged)} s are not within the epoch's "
                           f"logged span of {epoch_s:.3f} s, rank 0's being its train_s {train_s:.3f} s")
    return spans


def _train_examples(events: list[dict], task: Task, official: bool) -> int:
    """The eval bound's training set as the log gives it: the task's unless a run that is not official
    logged the count it took from its data on disk; a log of an earlier harness names none."""
    logged = [e.get("value") for e in events if e["key"] == "dawnbench_train_examples"]
    if not logged:
        return task.train_examples
    (count,) = logged if len(logged) == 1 else (None,)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise Disagreement(f"the log's dawnbench_train_examples {_shown(logged)} is not one whole number of examples")
    if official and count != task.train_examples:
        raise Disagreement(f"an official run's eval bound must use the {task.name} training set of "
                           f"{task.train_examples} examples, not the {count} its log names")
    return count


def scored_model_sha256(events: list[dict]) -> str | None:
    """The sha256 the log holds of the run's model: the last scored snapshot's (tree_sha256), or None."""
    scored = [e for e in events if e["key"] == "eval_accuracy"]
    logged = (scored[-1].get("metadata") or {}).get("snapshot_sha256") if scored else None
    return logged if isinstance(logged, str) else None


def _audit_check(events: list[dict], task: Task, labels: Any) -> str:
    """Every eval of a language model logged its look-ahead audit, held to the task's numbers
    (harness.lm_audit.logged_problem): the windows the task cuts (their sha256 where the stream is here),
    its positions, its figures within the task's tolerances. The log's claim: the audit needs the model."""
    settings = task.settings
    counted = [e for e in events if e["key"] == "eval_samples"]
    scored = counted[0].get("value") if len(counted) == 1 else None
    if not isinstance(scored, int) or isinstance(scored, bool):
        raise Disagreement("the log must have one eval_samples event to check the audits against")
    digest = lm_eval.Windows.of(labels, settings.window).sha256 if isinstance(labels, lm_eval.TokenStream) else None
    evals = [(_epoch_num(e), (e.get("metadata") or {}).get("lm")) for e in events if e["key"] == "eval_stop"]
    for n, record in evals:
        problem = lm_audit.logged_problem(record, settings, scored, digest)
        if problem:
            raise Disagreement(f"epoch {n}: {problem}")
    return (f"{len(evals)} evals each logged a look-ahead audit of {min(settings.audit_positions, scored)} positions "
            f"within the task's tolerances" + ("" if digest else " (the windows' sha256 not checked: no eval stream)"))


def _model_check(run_dir: Path, events: list[dict]) -> str:
    """The kept model/ is byte for byte the last scored snapshot: its hash is the one logged then."""
    scored = [e for e in events if e["key"] == "eval_accuracy"]
    logged = scored_model_sha256(events)
    model = run_dir / "model"
    if not model.is_dir():
        return "no model kept (none saved, or the run diverged)"
    if logged is None:
        raise Disagreement("model/ is kept but the log holds no hash of a scored snapshot to check it against")
    try:
        found = snapshots.tree_sha256(model)
    except (OSError, DawnbenchError) as exc:
        raise Disagreement(f"model/ cannot be hashed: {exc}") from None
    if found != logged:
        raise Disagreement(f"model/ is not the snapshot scored at epoch {_epoch_num(scored[-1])}: its sha256 is "
                           f"{found[:16]}..., the log's {str(logged)[:16]}...")
    return f"model/ is the snapshot scored at epoch {_epoch_num(scored[-1])} (sha256 {found[:16]}...)"


def _env(run_dir: Path) -> dict | None:
    """env.json, or None where there is none or it cannot be read."""
    if not (run_dir / "env.json").is_file():
        return None
    try:
        env = safe_read.read_json(run_dir / "env.json", run_dir)
    except (Refused, DawnbenchError, OSError, ValueError):
        return None
    return env if isinstance(env, dict) else None


def _worker_environment(run_dir: Path) -> dict | None:
    """env.json's record of the workers' environment (harness.worker_env), or None where there is none."""
    record = (_env(run_dir) or {}).get("worker_environment")
    return record if isinstance(record, dict) else None


def _load_check(run_dir: Path) -> Check:
    """How busy the machine was (env.json's load, harness.load): a note when other processes took a
    large share of the run's CPUs, never a failure: the time is what it was, on that machine."""
    try:
        busy, words = load.summary((_env(run_dir) or {}).get("load"))
    except load.LoadError as e:
        return Check("load", None, f"{e}: not shown")
    return Check("load", True, words, note=busy)


def _environment_check(record: dict, result: dict) -> str:
    """The workers' environment as recorded agrees with itself: its hash is that of its list of
    distributions and start-up files, and result.json's provenance names the same hash."""
    listed = record.get("distributions")
    if not isinstance(listed, list) or not isinstance(record.get("pth"), list):
        raise Disagreement("env.json's worker_environment has no list of distributions and start-up files")
    found = worker_env.digest(record)
    if found != record.get("sha256"):
        raise Disagreement(f"env.json's worker_environment lists what hashes to {found[:16]}..., not its recorded "
                           f"sha256 {str(record.get('sha256'))[:16]}...")
    provenance = result.get("provenance") if isinstance(result.get("provenance"), dict) else {}
    if provenance.get("worker_environment_sha256") != found:
        raise Disagreement(f"result.json's provenance.worker_environment_sha256 "
                           f"{_shown(provenance.get('worker_environment_sha256'), 20)} is not env.json's {found[:16]}...")
    unexpected = [p.get("file") for p in record["pth"] if isinstance(p, dict) and not worker_env.expected(p)]
    if unexpected != record.get("pth_unexpected"):
        raise Disagreement("env.json's worker_environment.pth_unexpected is not the start-up files its list holds "
                           "that no known package carries")
    extra = (f"; start-up files of no known package: {', '.join(Path(str(p)).name for p in unexpected)}"
             if unexpected else "")
    return f"{len(listed)} distributions, sha256 {found[:16]}... as result.json records{extra}"


def _summary(run_dir: Path, result: dict, task: Task, state: dict) -> str:
    """The verdict's words: what the run was, and for a DNC why, as its log says."""
    epochs = state.get("epochs")
    if epochs:
        last = epochs[-1]
        tta = result.get("tta_seconds")
        said = (f"{run_dir}: {result.get('status')} at epoch {last.number}, {task.metric} "
                f"{task.figure.said(last.scores.get(task.metric, math.nan))}, "
                + (f"time-to-accuracy {tta} s" if tta is not None else "no time-to-accuracy (the threshold was not reached)"))
    elif state.get("started") is False:
        said = f"{run_dir}: {result.get('status')} in init, before its first epoch"
    else:
        said = f"{run_dir}: {result.get('status')}, no evaluated epoch"
    reason = state["run_stop"]["metadata"].get("reason") if "run_stop" in state else None
    if result.get("status") == "DNC" and reason:
        said += f": {_line(str(reason), 500)}"
    return said


def main(run_dir: Path, data_root: Path | None = None, emit: Callable[[str], None] = print,
         emit_error: Callable[[str], None] | None = None) -> int:
    """The command: the lines of `verify`, and its exit code (VerifyError propagates, exit 2). A
    verdict that is the user's to fix (exit 2: no labels where --data points) goes to `emit_error`."""
    report = verify(run_dir, data_root)
    *checks, verdict = report.lines()
    for line in checks:
        emit(line)
    (emit_error or emit)(verdict) if report.exit_code == EXIT_USAGE else emit(verdict)
    return report.exit_code
