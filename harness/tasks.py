"""The task registry: kind, metric, threshold, eval-set size and log columns of each task.

The numbers live in data/tasks.toml; this module reads them, and a task's kind (harness.task_kinds)
counts, scores and compares its predictions.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import DawnbenchError, UsageError
from harness.task_kinds import Figure, ImageClassification, TaskKind, UnknownKindError, resolve

_TASKS_FILE = Path(__file__).parent / "data" / "tasks.toml"


class UnknownTaskError(DawnbenchError, ValueError):
    pass


RULES = ("single", "mean")


@dataclass(frozen=True)
class Acceptance:
    """The task's acceptance rule (tasks.toml's `[tasks.<name>.acceptance]`; docs/RULES.md, "Acceptance
    rules"): `single`, one run's first evaluated epoch at or past the threshold (DAWNBench v1, every
    task's default), or `mean`, a series of at least `n_min` runs whose mean final metric is past the
    threshold at a one-sided p below `alpha`. `n_min` and `alpha` hold whatever the rule, so the mean
    rule's verdict can be computed for any task (dawnbench.evidence)."""
    rule: str = "single"
    n_min: int = 5
    alpha: float = 0.01


def _acceptance(name: str, t: object) -> Acceptance:
    """[tasks.<name>.acceptance], checked: a wrong rule, n_min or alpha fails at import, in one line."""
    where = f"tasks.toml [tasks.{name}.acceptance]"
    if not isinstance(t, dict):
        raise UnknownTaskError(f"{where} must be a table (rule, n_min, alpha)")
    unknown = sorted(set(t) - {"rule", "n_min", "alpha"})
    rule, n_min, alpha = t.get("rule", "single"), t.get("n_min", 5), t.get("alpha", 0.01)
    if unknown:
        raise UnknownTaskError(f"{where}: unknown key {unknown[0]!r}; the keys are rule, n_min, alpha")
    if rule not in RULES:
        raise UnknownTaskError(f"{where}: rule {rule!r} is not one of {', '.join(RULES)}")
    # two runs are the least a t-test's spread needs
    if not isinstance(n_min, int) or isinstance(n_min, bool) or n_min < 2:
        raise UnknownTaskError(f"{where}: n_min {n_min!r} must be a whole number, 2 or more")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 < alpha < 1:
        raise UnknownTaskError(f"{where}: alpha {alpha!r} must be a number between 0 and 1 (0.01: p below 1%)")
    return Acceptance(rule=rule, n_min=n_min, alpha=float(alpha))


@dataclass(frozen=True)
class Task:
    name: str
    display_name: str
    dataset: str
    metric: str            # one of its kind's figures ("top1", "top5", "f1", ...)
    threshold: float       # as a fraction, for every metric
    eval_examples: int
    tsv_columns: tuple[str, ...]
    train_examples: int = 0         # the official training set's size (the eval bound's denominator)
    max_snapshot_mib: float = 0.0   # the cap on a snapshot, the task's alone (docs/RULES.md, "Snapshots ...")
    eval_passes: float = 1.0        # what an eval example may cost in the eval bound, the task's alone
    eval_on_clock: bool = False     # the eval span counts in the time-to-accuracy (MLPerf's rule), no eval bound
    kind: TaskKind = field(default_factory=ImageClassification)
    other_thresholds: tuple[tuple[float, str], ...] = ()   # (value, source): where analyses also read the logs
    acceptance: Acceptance = field(default_factory=Acceptance)   # how a run or a series is accepted
    settings: object = None         # the kind's own numbers ([tasks.<name>.<kind.settings_table>]), or None

    @property
    def figure(self) -> Figure:
        """The ranked figure: the metric, the entry's field that carries it and its unit."""
        return self.kind.figure(self.metric)

    @property
    def accuracy_field(self) -> str:
        """The entry's (and TSV's) field of the ranked figure: top1Accuracy, f1Score, ..."""
        return self.figure.field

    @property
    def figures(self) -> tuple[Figure, ...]:
        """Every figure the task logs: its kind's that its TSV has a column for, and its metric."""
        return tuple(f for f in self.kind.figures if f.field in self.tsv_columns or f.metric == self.metric)

    @property
    def lower_is_better(self) -> bool:
        return self.kind.lower_is_better

    def margin(self, value: float, threshold: float | None = None) -> float:
        """How far `value` is past `threshold` (default: the task's): positive past it, negative short."""
        return self.kind.margin(value, self.threshold if threshold is None else threshold)

    def reaches(self, value: float, threshold: float | None = None) -> bool:
        """Whether `value` (a fraction, as the harness computes it) meets `threshold` (default: the task's)."""
        return self.kind.reaches(value, self.threshold if threshold is None else threshold)

    def target(self, threshold: float | None) -> float:
        """The threshold a run or an inference is held to: the task's, or `threshold` (--threshold) when it
        is in the figure's range; UsageError (one line) when it is not."""
        if threshold is None:
            return self.threshold
        if not self.figure.holds(threshold):
            written = " as a fraction" if self.figure.upper == 1 else ""
            raise UsageError(f"--threshold {threshold:g}: give a finite number {self.figure.range_text} ({self.name}'s "
                             f"{self.figure.label}{written}, as its threshold {self.threshold:g} is written), e.g. "
                             f"--threshold {self.threshold:g}")
        return threshold

    def score(self, predictions, labels, drop=None) -> dict[str, float]:
        """Every metric the task logs, as fractions; the harness calls this, never a reference.
        `drop`: indices of eval examples left out of the score (ImageNet's blacklist); the
        predictions still cover every example."""
        return self.kind.score(self, predictions, labels, drop)

    def count(self, predictions) -> int:
        return self.kind.count(predictions)

    def tsv_row(self, epoch: int, hours: float, scores: dict[str, float]) -> list[str]:
        """One DAWNBench log row: each figure in its field's unit, as the v1 entries."""
        cells = {"epoch": str(epoch), "hours": f"{hours:.6f}"}
        cells.update({f.field: f.tsv_cell(scores.get(f.metric, float("nan"))) for f in self.kind.figures})
        return [cells[c] for c in self.tsv_columns]


def _eval_on_clock(name: str, value: object) -> bool:
    """[tasks.<name>]'s eval_on_clock, checked: anything but true or false fails at import, in one line."""
    if not isinstance(value, bool):
        raise UnknownTaskError(f"tasks.toml [tasks.{name}]: eval_on_clock {value!r} must be true or false "
                               f"(true: the eval span counts in the time-to-accuracy, MLPerf's rule)")
    return value


def _task(name: str, t: dict) -> Task:
    kind = resolve(t["kind"], name)
    task = Task(
        name=name,
        display_name=t["display_name"],
        dataset=t["dataset"],
        metric=t["metric"],
        threshold=float(t["threshold"]),
        eval_examples=int(t["eval_examples"]),
        tsv_columns=tuple(t["tsv_columns"]),
        train_examples=int(t["train_examples"]),
        max_snapshot_mib=float(t["max_snapshot_mib"]),
        eval_passes=float(t.get("eval_passes", 1.0)),
        eval_on_clock=_eval_on_clock(name, t.get("eval_on_clock", False)),
        kind=kind,
        other_thresholds=tuple((float(o["value"]), str(o["source"])) for o in t.get("other_thresholds", ())),
        acceptance=_acceptance(name, t.get("acceptance", {})),
        settings=kind.settings(name, t.get(kind.settings_table)) if kind.settings_table else None,
    )
    task.kind.figure(task.metric)      # a metric its kind does not know fails here, at import, in one line
    unknown = [c for c in task.tsv_columns[2:] if c not in {f.field for f in task.kind.figures}]
    if list(task.tsv_columns[:2]) != ["epoch", "hours"] or unknown:
        raise UnknownKindError(f"tasks.toml [tasks.{name}]: tsv_columns must be epoch, hours, then fields of the "
                               f"{task.kind.name} kind ({', '.join(f.field for f in task.kind.figures)})")
    return task


def _load() -> tuple[str, dict[str, Task]]:
    with open(_TASKS_FILE, "rb") as f:
        raw = tomllib.load(f)
    return raw["rules_version"], {name: _task(name, t) for name, t in raw["tasks"].items()}


RULES_VERSION, TASKS = _load()
# Every score a task's kind may log (a history row's and an eval_accuracy's names): top1, f1, ...
SCORE_NAMES = frozenset(name for task in TASKS.values() for name in task.kind.score_names)
# Every figure field an entry or a log may carry (top1Accuracy, f1Score, ...), with its unit
FIGURES = {figure.field: figure for task in TASKS.values() for figure in task.kind.figures}


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None
