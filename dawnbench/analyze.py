"""The analyses of the DAWNBench papers, one command each: a PNG and the numbers behind it.

    dawnbench analyze thresholds   RUN_OR_ENTRY... --out DIR   time-to-accuracy as a function of the threshold
    dawnbench analyze stability    SERIES...       --out DIR   repeated runs: each run's TTA, median, DNC, cv
    dawnbench analyze cost-vs-time ENTRIES...      --out DIR   training cost vs time; training time vs latency
    dawnbench analyze curves       RUN_OR_ENTRY... --out DIR   accuracy vs on-clock time, several runs
    dawnbench analyze roofline     RUN...          --out DIR   counted FLOPs, achieved vs peak FLOP/s, MFU, energy
                                                               (dawnbench/roofline.py)

Each writes <analysis>.png and <analysis>.json into DIR and prints their paths. The numbers come
from plain functions (`*_numbers`), apart from the drawing (`plot_*`). Metric values are in the
units of the DAWNBench logs: percent for accuracies, a fraction for F1. Which way is better is the
task's kind's (harness.task_kinds): where lower is better (a loss, an error rate) a threshold is
reached at or under it, a log's steps are its running minima and the plots turn to match.
"""
from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from dawnbench import analyze_generalization, analyze_lesion, analyze_scaling, entries, plots, roofline
from dawnbench.analysis_io import PROG, InputError, add_analysis, read_json, read_series, write_outputs
from dawnbench.entries import Entry, EntryError, number, to_log_units
from dawnbench.series import tta_statistics
from harness import safe_read
from harness.arguments import Parser, folder, tool_main
from harness.errors import report
from harness.tasks import TASKS, Task

# The other thresholds `thresholds` reads a task's logs at are the task's (tasks.toml's other_thresholds).
TASK_THRESHOLD_SOURCE = "the task's threshold (harness/data/tasks.toml)"


@dataclass
class Curve:
    """One training log: (on-clock hours, metric value in log units), in epoch order."""
    label: str
    source: str
    task: Task
    points: list[tuple[float, float]]
    target: float | None = None          # the run's own threshold (log units) when it was not the task's
    notes: dict = field(default_factory=dict)

    @property
    def column(self) -> str:
        return self.task.accuracy_field

    @property
    def threshold(self) -> float:
        return entries.log_threshold(self.task)


# ---------------------------------------------------------------- reading inputs

def curve_from_entry(entry: Entry) -> Curve:
    if entry.kind != "train":
        raise InputError(f"{entry.path}: an inference entry has no training log; give a training entry "
                         f"(<Task>/train/<name>.json) or a run folder")
    points = []
    for n, row in enumerate(entry.rows, start=2):
        hours, value = number(row.get("hours")), number(row.get(entry.metric_column))
        if hours is None or value is None:
            raise InputError(f"{entries.tsv_path(entry.path, entry.fields)}:{n}: needs numbers in the "
                             f"'hours' and '{entry.metric_column}' columns")
        points.append((hours, value))
    if not points:
        raise InputError(f"{entries.tsv_path(entry.path, entry.fields)}: the training log has no rows")
    return Curve(label=entry.name, source=str(entry.path), task=entry.task, points=points,
                 notes=_system(entry.fields))


def _system(fields: dict) -> dict:
    """What ran it, as a curve's legend names it: the framework (its runtime) and the hardware."""
    return {key: entries.text(fields.get(key)).strip() or None for key in ("framework", "hardware")}


def curve_from_run(run_dir: Path) -> Curve:
    """A run folder: result.json and its <reference>.tsv, or result.json's per-epoch `history`."""
    result_file = run_dir / "result.json"
    result = read_json(result_file)
    if not isinstance(result, dict) or result.get("task") not in TASKS:
        raise InputError(f"{result_file}: not a run's result.json (field 'task' must be one of "
                         f"{', '.join(TASKS)})")
    task = TASKS[result["task"]]
    column = task.accuracy_field
    label = f"{result.get('reference') or run_dir.parent.name}/{run_dir.name}"
    name = result.get("logFilename")
    log = run_dir / name if isinstance(name, str) and name and Path(name).name == name else None
    points: list[tuple[float, float]] = []
    if log is not None and log.is_file():
        try:
            header, rows = entries.read_tsv(log, run_dir)
        except safe_read.Refused as e:
            raise InputError(f"{log}: not readable: {e.reason}") from None
        if "hours" not in header or column not in header:
            raise InputError(f"{log}:1: the header needs 'hours' and '{column}', it has {header}")
        h, c = header.index("hours"), header.index(column)
        for n, cells in enumerate(rows, start=2):
            try:
                hours, value = float(cells[h]), float(cells[c])
            except (IndexError, ValueError):
                raise InputError(f"{log}:{n}: not a number in 'hours' or '{column}' ({cells!r})") from None
            points.append((hours, value))
    else:
        history = result.get("history")
        if not isinstance(history, list):
            raise InputError(f"{run_dir}: no log to read: neither {name or '<reference>.tsv'} nor a "
                             f"'history' list in result.json")
        for n, row in enumerate(history):
            seconds = number(row.get("tta_seconds")) if isinstance(row, dict) else None
            value = number(row.get(task.metric)) if isinstance(row, dict) else None
            if seconds is None or value is None:
                raise InputError(f"{result_file}: history[{n}] needs numbers 'tta_seconds' and '{task.metric}'")
            points.append((seconds / 3600.0, to_log_units(task, value)))
    if not points:
        raise InputError(f"{run_dir}: the run logged no epoch")
    target = number(result.get("threshold"))
    target = to_log_units(task, target) if target is not None else None
    return Curve(label=label, source=str(run_dir), task=task, points=points,
                 target=target if target is not None and target != entries.log_threshold(task) else None,
                 notes={"status": result.get("status"), **_system(result)})


def _entry_paths(root: Path) -> list[Path]:
    return entries.find(root) if root.is_dir() else []


def read_curves(paths: list[Path], warn=None) -> list[Curve]:
    """Curves from run folders (or their result.json), training entries and entry trees. A bad
    named input raises InputError; inside a tree, an entry that does not load is passed to `warn`."""
    curves = []
    for path in map(Path, paths):
        if path.is_dir() and (path / "result.json").is_file():
            curves.append(curve_from_run(path))
        elif path.is_file() and path.name == "result.json":
            curves.append(curve_from_run(path.parent))
        elif path.is_file():
            try:
                curves.append(curve_from_entry(entries.load(path)))
            except EntryError as e:
                raise InputError(f"{e} (expected a run folder or a training entry)") from None
        elif path.is_dir() and _entry_paths(path):
            for entry in _load_tree(path, warn):
                if entry.kind == "train":
                    try:
                        curves.append(curve_from_entry(entry))
                    except InputError as e:
                        if warn:
                            warn(str(e))
        elif path.is_dir():
            raise InputError(f"{path}: not a run folder (no result.json) nor an entry tree "
                             f"(<Task>/train/<name>.json)")
        else:
            raise InputError(f"{path}: no such file or folder")
    return curves


def _load_tree(root: Path, warn) -> list[Entry]:
    loaded, _ = entries.load_tree(root, report=warn)
    return loaded


def read_entries(paths: list[Path], warn=None) -> list[Entry]:
    """Entries from entry files and entry trees (an entry in a tree that does not load goes to `warn`)."""
    found = []
    for path in map(Path, paths):
        if path.is_file():
            try:
                found.append(entries.load(path))
            except EntryError as e:
                raise InputError(str(e)) from None
        elif path.is_dir():
            if not _entry_paths(path):
                raise InputError(f"{path}: no entries in it (expected <Task>/<train|inference>/<name>.json)")
            found += _load_tree(path, warn)
        else:
            raise InputError(f"{path}: no such file or folder")
    return found


# ---------------------------------------------------------------- the numbers

def tta_at(points: list[tuple[float, float]], threshold: float, task: Task) -> float | None:
    """Hours of the first point that reaches `threshold` as `task` counts it (None if none does)."""
    for hours, value in points:
        if task.reaches(value, threshold):
            return hours
    return None


def threshold_steps(points: list[tuple[float, float]], task: Task) -> list[tuple[float, float]]:
    """The step function threshold -> time-to-accuracy, exactly: (v, h) pairs, each v better than the
    one before, such that every threshold from the previous v (excluded) to v (included) is reached
    first at h. They are the log's running bests: maxima, or minima where lower is better."""
    steps: list[tuple[float, float]] = []
    for hours, value in points:
        if not steps or task.kind.better(value, steps[-1][0]):
            steps.append((value, hours))
    return steps


def crossings(c: Curve) -> list[dict]:
    """The time-to-accuracy at the task's threshold and at each of its other_thresholds, the easiest
    first; epoch: the crossing's row (1-based) in the log."""
    marks = [(to_log_units(c.task, v), why) for v, why in c.task.other_thresholds]
    out = []
    for threshold, why in c.task.kind.easiest_first(marks + [(c.threshold, TASK_THRESHOLD_SOURCE)],
                                                    key=lambda mark: mark[0]):
        row = next((n for n, (_, value) in enumerate(c.points, start=1) if c.task.reaches(value, threshold)), None)
        hours = c.points[row - 1][0] if row else None
        out.append({"threshold": round(threshold, 6), "source": why, "epoch": row, "hours": hours,
                    "hms": entries.hms(hours) if hours is not None else None})
    return out


def thresholds_numbers(curves: list[Curve]) -> dict:
    out = []
    for c in curves:
        values = [v for _, v in c.points]
        tta = tta_at(c.points, c.threshold, c.task)
        out.append({"label": c.label, "source": c.source, "task": c.task.display_name, "metric": c.column,
                    "direction": c.task.kind.direction,
                    "task_threshold": c.threshold, "range": [min(values), max(values)],
                    "tta_hours_at_task_threshold": tta,
                    "tta_hms_at_task_threshold": entries.hms(tta) if tta is not None else None,
                    "crossings": crossings(c),
                    "steps": [{"threshold": v, "hours": h, "seconds": round(h * 3600, 3)}
                              for v, h in threshold_steps(c.points, c.task)]})
    return {"analysis": "thresholds", "inputs": out}


def curves_numbers(curves: list[Curve]) -> dict:
    out = []
    for c in curves:
        tta = tta_at(c.points, c.threshold, c.task)
        out.append({"label": c.label, "source": c.source, "task": c.task.display_name, "metric": c.column,
                    "direction": c.task.kind.direction,
                    "task_threshold": c.threshold, "run_threshold": c.target,
                    "tta_hours": tta, "tta_hms": entries.hms(tta) if tta is not None else None,
                    "points": [{"hours": h, "value": v} for h, v in c.points], **c.notes})
    return {"analysis": "curves", "inputs": out}


def stability_numbers(series: list[dict]) -> dict:
    out = []
    for s in series:
        runs = s["runs"]
        converged = [float(r["tta_seconds"]) for r in runs if r.get("status") == "converged"]
        # summary.json's statistics as written; from the runs, computed as a series does, if absent
        stats = s.get("tta_seconds") if isinstance(s.get("tta_seconds"), dict) else tta_statistics(converged)
        n = s.get("n") if isinstance(s.get("n"), int) else len(runs)
        out.append({"label": s["_label"], "source": s["_source"], "reference": s.get("reference"),
                    "task": s.get("task"), "threshold": s.get("threshold"), "n": n,
                    "converged": len(converged), "dnc": n - len(converged),
                    "fraction_converged": len(converged) / n if n else None,
                    "runs": [{"seed": r.get("seed"), "status": r.get("status"),
                              "tta_seconds": number(r.get("tta_seconds"))} for r in runs],
                    "tta_seconds": converged, "median_seconds": number(stats.get("median")),
                    "cv": number(stats.get("cv")), "olympic_mean_seconds": number(stats.get("olympic_mean")),
                    "unfinished": s.get("_unfinished")})
    return {"analysis": "stability", "series": out}


def _team_and_model(entry: Entry) -> tuple[str, str]:
    """An entry's team and model, compared loosely ("ResNet 152" is "ResNet152", "Resnet-50" is "ResNet50")."""
    return tuple(re.sub(r"[^a-z0-9]", "", entries.text(entry.fields.get(key)).lower()) for key in ("author", "model"))


def cost_vs_time_numbers(loaded: list[Entry], price_of=None, time_of=None) -> dict:
    """Per task: training hours at the threshold vs training cost (DAWNBench figure 7), and training
    hours vs inference latency (figure 5) for a training and an inference entry of the same name or,
    where names differ (DAWNBench v1's ImageNet entries named the two apart), of the same team and
    model: that pair's fastest training and lowest latency. `price_of(entry)` gives the USD per hour
    to plot (the leaderboard's: the prices table's for a verified run); by default the entry's own
    costPerHour. `time_of(entry)` gives the training hours to plot and whose they are, (hours,
    "judge" | "claimed"), or None (the leaderboard's: the judge's median where the verified tier ranks
    the entry, dawnbench.ranking.ranked_time); by default the entry's own claim. Every point keeps the
    claim beside it (`claimed_hours`, `claimed_train_hours`). Where a plot has no point, `why` says why
    in one line."""
    price_of = price_of or entries.cost_per_hour
    time_of = time_of or _claimed_time
    tasks: dict[str, dict] = {}
    for task in TASKS.values():
        train = {e.name: e for e in loaded if e.task is task and e.kind == "train"}
        infer = {e.name: e for e in loaded if e.task is task and e.kind == "inference"}
        reached = {name: e for name, e in infer.items() if entries.reaches_threshold(e)
                   and entries.latency_ms(e) is not None}
        timed = {name: t for name, e in train.items() if (t := time_of(e)) is not None}
        hours = {name: h for name, (h, _) in timed.items()}
        cost_rows, pairs = [], []
        for name, e in sorted(train.items()):
            price = price_of(e)
            if name in hours and price is not None:
                cost_rows.append({"entry": name, "model": entries.text(e.fields.get("model")),
                                  "hardware": entries.text(e.fields.get("hardware")),
                                  "hours": hours[name], "time_basis": timed[name][1],
                                  "claimed_hours": entries.training_hours(e),
                                  "costPerHour": price, "cost_usd": hours[name] * price})
            if name in hours and name in reached:
                pairs.append({"entry": name, "model": entries.text(e.fields.get("model")),
                              "train_hours": hours[name], "time_basis": timed[name][1],
                              "claimed_train_hours": entries.training_hours(e),
                              "latency_ms": entries.latency_ms(reached[name]), "paired_by": "name"})
        paired = {p["entry"] for p in pairs}
        groups: dict[tuple, tuple[list, list]] = {}
        for name in sorted(hours):
            if name not in paired:
                groups.setdefault(_team_and_model(train[name]), ([], []))[0].append(name)
        for name in sorted(reached):
            if name not in paired and _team_and_model(reached[name]) in groups:
                groups[_team_and_model(reached[name])][1].append(name)
        for trained, inferred in groups.values():
            if trained and inferred:
                fastest = min(trained, key=lambda n: (hours[n], n))
                quickest = min(inferred, key=lambda n: (entries.latency_ms(reached[n]), n))
                pairs.append({"entry": fastest, "inference_entry": quickest,
                              "model": entries.text(train[fastest].fields.get("model")),
                              "train_hours": hours[fastest], "time_basis": timed[fastest][1],
                              "claimed_train_hours": entries.training_hours(train[fastest]),
                              "latency_ms": entries.latency_ms(reached[quickest]), "paired_by": "team and model"})
        if not (train or infer):
            continue
        why_cost = (None if cost_rows else
                    "no training entry reaches the threshold" if not hours else
                    f"no priced entries: {len(hours)} training entr{'y has' if len(hours) == 1 else 'ies have'} "
                    f"no price")
        why_pairs = (None if pairs else
                     "no training entry reaches the threshold" if not hours else
                     "no inference entry reaches the threshold" if not reached else
                     f"no training and inference entry share a name or a team and model ({len(hours)} training, "
                     f"{len(reached)} inference entries)")
        tasks[task.display_name] = {"cost_vs_time": cost_rows, "time_vs_latency": pairs,
                                    "why": {"cost_vs_time": why_cost, "time_vs_latency": why_pairs}}
    return {"analysis": "cost-vs-time", "tasks": tasks}


def _claimed_time(entry: Entry) -> tuple[float, str] | None:
    hours = entries.training_hours(entry)
    return None if hours is None else (hours, "claimed")


# ---------------------------------------------------------------- the plots

def curve_legend(item: dict) -> str:
    """A curve's legend entry: the run, its time to the task's threshold, and what ran it (the
    framework, its runtime, on the hardware), so that curves of one reference on two systems differ."""
    reached = f"TTA {item['tta_hms']}" if item.get("tta_hms") else "threshold not reached"
    ran = " on ".join(v for v in (item.get("framework"), item.get("hardware")) if v)
    return f"{plots.short(item['label'])} ({reached})" + (f"\n{plots.short(ran)}" if ran else "")


def _by_task(items: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for item in items:
        groups.setdefault(item["task"], []).append(item)
    return groups


def plot_thresholds(numbers: dict, path: Path) -> None:
    groups = _by_task(numbers["inputs"])
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, len(groups))
        for ax, (task, items) in zip(axes[:, 0], groups.items()):
            kind = entries.TASK_BY_DIR[task].kind
            unit, factor = plots.time_unit(max(s["hours"] for i in items for s in i["steps"]))
            for item in items:
                steps = item["steps"]
                # from the log's worst value (every threshold short of its first reached at once) on
                xs = [kind.easiest_first(item["range"])[0]] + [s["threshold"] for s in steps]
                ys = [steps[0]["hours"] * factor] + [s["hours"] * factor for s in steps]
                (line,) = ax.step(xs, ys, where="pre", label=plots.short(item["label"]))
                for mark in item["crossings"]:
                    if mark["hours"] is not None:
                        task_mark = mark["threshold"] == item["task_threshold"]
                        ax.plot([mark["threshold"]], [mark["hours"] * factor], "o",
                                color=line.get_color(), fillstyle="full" if task_mark else "none")
            threshold = items[0]["task_threshold"]
            ax.axvline(threshold, color="k", linestyle="--", linewidth=1,
                       label=f"{task} threshold: {items[0]['metric']} {kind.relation} {threshold:g}")
            for mark in items[0]["crossings"]:
                if mark["threshold"] != threshold:
                    ax.axvline(mark["threshold"], color="gray", linestyle=":", linewidth=1,
                               label=f"{mark['threshold']:g}: {plots.short(mark['source'].split(' (')[0])}")
            ax.set_xlabel(f"threshold ({items[0]['metric']}, {kind.direction})")
            ax.set_ylabel(f"time to threshold ({unit})")
            ax.set_title(f"{task}: time-to-accuracy vs threshold")
            ax.grid(alpha=0.3)
            plots.single_values_spread(ax)
            # harder thresholds to the right, whichever way is better: the axis runs easiest to hardest
            ax.set_xlim(kind.easiest_first(ax.get_xlim()))
            plots.legend_outside(ax)
        fig.tight_layout()
        plots.save(fig, plt, path)


def plot_curves(numbers: dict, path: Path, title: str | None = None) -> None:
    groups = _by_task(numbers["inputs"])
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, len(groups))
        for ax, (task, items) in zip(axes[:, 0], groups.items()):
            task_of = entries.TASK_BY_DIR[task]
            unit, factor = plots.time_unit(max(p["hours"] for i in items for p in i["points"]))
            for item in items:
                ax.plot([p["hours"] * factor for p in item["points"]], [p["value"] for p in item["points"]],
                        marker=".", label=curve_legend(item))
                if item["run_threshold"] is not None:
                    ax.axhline(item["run_threshold"], color="gray", linestyle=":", linewidth=1,
                               label=f"run threshold {item['run_threshold']:g}")
            threshold = items[0]["task_threshold"]
            ax.axhline(threshold, color="k", linestyle="--", linewidth=1,
                       label=f"threshold: {items[0]['metric']} {task_of.kind.relation} {threshold:g}")
            ax.set_xlabel(f"on-clock time ({unit})")
            ax.set_ylabel(f"{items[0]['metric']} ({task_of.kind.direction})")
            ax.set_title(plots.short(title) if title else f"{task}: {task_of.figure.label} vs time")
            ax.grid(alpha=0.3)
            plots.single_values_spread(ax)
            # the values that reach the threshold, shaded: above its line, or below it where lower is better
            limits = ax.get_ylim()
            ax.axhspan(threshold, task_of.kind.best(limits), color="C2", alpha=0.08, linewidth=0,
                       label="reaches the threshold")
            ax.set_ylim(limits)
            plots.legend_outside(ax)
        fig.tight_layout()
        plots.save(fig, plt, path)


def plot_stability(numbers: dict, path: Path) -> None:
    series = numbers["series"]
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, 1, width=max(6.4, 2.2 * len(series)))
        ax = axes[0, 0]
        top = max([t for s in series for t in s["tta_seconds"]] or [1.0])
        unit, factor = plots.time_unit(top / 3600)
        factor /= 3600        # from seconds
        ticks = []
        for x, s in enumerate(series):
            times = [t * factor for t in s["tta_seconds"]]
            cv = f"{100 * s['cv']:.1f}%" if s["cv"] is not None else "n/a"
            ax.plot([x] * len(times), times, "o", alpha=0.7,
                    label=f"{plots.short(s['label'])}: cv {cv}, DNC {s['dnc']}/{s['n']}")
            if s["median_seconds"] is not None:
                ax.hlines(s["median_seconds"] * factor, x - 0.25, x + 0.25, color="k", linewidth=2)
            ticks.append(f"{plots.short(s['label'])}\n{s['converged']}/{s['n']} reached, DNC {s['dnc']}"
                         + (f"\nunfinished: {s['unfinished']}" if s.get("unfinished") else ""))
        ax.set_xticks(range(len(series)), ticks)
        ax.set_xlim(-0.6, len(series) - 0.4)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(f"time to threshold ({unit}); bar: median")
        ax.set_title("stability over repeated runs")
        ax.grid(axis="y", alpha=0.3)
        plots.legend_outside(ax)
        fig.tight_layout()
        plots.save(fig, plt, path)


def plot_cost_vs_time(numbers: dict, path: Path, tasks: list[str] | None = None) -> None:
    groups = {t: v for t, v in numbers["tasks"].items() if tasks is None or t in tasks}
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, max(1, len(groups)), cols=2, width=5.2)
        for row, (task, data) in zip(axes, groups.items()):
            explained: dict[str, object] = {}       # the row's marker kinds, explained once right of the row
            for ax, name, x, y, xlabel, ylabel, title in (
                    (row[0], "cost_vs_time", "hours", "cost_usd", "training time (hours)",
                     "training cost (USD)", "training cost vs time"),
                    (row[1], "time_vs_latency", "train_hours", "latency_ms", "training time (hours)",
                     "inference latency (ms)", "training time vs inference latency")):
                points = data[name]
                ax.set_title(f"{task}: {title}")
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                if not points:
                    # why there is no point, in one line wrapped to the axes (an empty plot alone reads as a bug)
                    why = (data.get("why") or {}).get(name) or "no entries"
                    ax.text(0.5, 0.5, textwrap.fill(why.replace("$", r"\$"), 40), ha="center", va="center",
                            transform=ax.transAxes, wrap=True)
                    ax.set_xticks([])          # no data: matplotlib's 0..1 would read as a scale
                    ax.set_yticks([])
                    continue
                xs, ys = [p[x] for p in points], [p[y] for p in points]
                claims = _claims_beside(points, name)
                judged = [p.get("time_basis") == "judge" for p in points]
                if any(judged):
                    # the judge's measurement (the verified tier's figure) apart from the claims that rank
                    # apart, and each judged entry's own claim beside its point, joined to it
                    for (cx, cy), p in claims:
                        ax.plot([cx, p[x]], [cy, p[y]], color="0.6", linestyle=":", linewidth=1)
                    if claims:
                        ax.scatter([c[0] for c, _ in claims], [c[1] for c, _ in claims], marker="x", color="0.45",
                                   label="the entry's claim (not ranked)")
                    ax.scatter([v for v, j in zip(xs, judged) if j], [v for v, j in zip(ys, judged) if j],
                               label="the judge's measurement (verified)")
                    if not all(judged):
                        ax.scatter([v for v, j in zip(xs, judged) if not j], [v for v, j in zip(ys, judged) if not j],
                                   facecolors="none", edgecolors="C1", label="claimed (not reproduced)")
                    for handle, label in zip(*ax.get_legend_handles_labels()):
                        explained.setdefault(label, handle)
                else:
                    ax.scatter(xs, ys)
                spread_x, spread_y = xs + [c[0] for c, _ in claims], ys + [c[1] for c, _ in claims]
                # Log axes as in the paper, where the points span enough to need them.
                if min(spread_x) > 0 and max(spread_x) / min(spread_x) > 20:
                    ax.set_xscale("log")
                if min(spread_y) > 0 and max(spread_y) / min(spread_y) > 20:
                    ax.set_yscale("log")
                plots.single_values_spread(ax)
                if len(points) <= 12:
                    plots.label_inside(ax, [(plots.short(p["model"] or p["entry"]), p[x], p[y]) for p in points])
                ax.grid(alpha=0.3, which="both")
            if explained:
                plots.legend_outside(row[1], list(explained.values()))
        fig.tight_layout()
        plots.save(fig, plt, path)


def _claims_beside(points: list[dict], plot: str) -> list[tuple[tuple[float, float], dict]]:
    """Where each point the judge measured would sit by its entry's claim ((x, y), point), for those
    whose claim differs from the judge's time: at the claimed hours, and for the cost plot at the
    claimed hours' cost."""
    out = []
    for p in points:
        if p.get("time_basis") != "judge":
            continue
        if plot == "cost_vs_time":
            claimed = p.get("claimed_hours")
            if claimed is not None and claimed != p["hours"]:
                out.append(((claimed, claimed * p["costPerHour"]), p))
        else:
            claimed = p.get("claimed_train_hours")
            if claimed is not None and claimed != p["train_hours"]:
                out.append(((claimed, p["latency_ms"]), p))
    return out


def plot_roofline(numbers: dict, path: Path) -> None:
    """Achieved FLOP/s against operational intensity (log-log), under each device's roofs: its peak
    (flat) and, where the table has it, its memory bandwidth (the slope). A run without an estimate
    of its bytes sits at the left edge, its MFU in the label."""
    runs = numbers["inputs"]
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, 1, width=7.0, height=4.6)
        ax = axes[0, 0]
        placed = [r for r in runs if r["achieved_flops_per_s"]]
        intensities = [r["operational_intensity"] for r in placed if r["operational_intensity"]] or [1.0]
        lo, hi = min(intensities) / 30, max(intensities) * 30
        roofs = {}
        for r in runs:
            peak = r["peak"]
            if peak.get("flops_per_s"):
                roofs.setdefault((peak["flops_per_s"], peak.get("memory_gbps"), r["device"]["count"]),
                                 f"{r['device']['count']} x {plots.short(r['device']['name'])} {r['precision']['value']}")
        for (flops, gbps, count), name in roofs.items():
            xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
            ys = [min(flops, x * gbps * 1e9 * count) if gbps else flops for x in xs]
            ax.plot(xs, ys, linestyle="--", linewidth=1, label=f"roof: {name}, {flops / 1e12:.3g} TFLOP/s"
                    + (f", {gbps * count:g} GB/s" if gbps else " (measured matmul)"))
        for r in placed:
            x = r["operational_intensity"] or lo
            mfu = f"MFU {100 * r['mfu']:.2f}%" if r["mfu"] is not None else "no peak"
            ax.plot([x], [r["achieved_flops_per_s"]], "o",
                    label=f"{plots.short(r['label'])}: {r['achieved_flops_per_s'] / 1e9:.3g} GFLOP/s, {mfu}")
        if not placed:
            ax.text(0.5, 0.5, "no run with a FLOP count", ha="center", va="center", transform=ax.transAxes)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        heights = [r["achieved_flops_per_s"] for r in placed] + [f for f, _, _ in roofs]
        if heights:      # a decade below the lowest point to a little above the highest roof
            ax.set_ylim(min(heights) / 10, max(heights) * 3)
        ax.set_xlabel("operational intensity (FLOP per byte moved, estimated)")
        ax.set_ylabel("FLOP/s (counted FLOPs over the train spans)")
        ax.set_title("roofline: achieved vs peak (informative, never ranked)")
        ax.grid(alpha=0.3, which="both")
        plots.legend_outside(ax)
        fig.tight_layout()
        plots.save(fig, plt, path)


# ---------------------------------------------------------------- the command

# The analyses that are modules of their own: {name: module with add_parser(sub) and run(args)}.
OWN_MODULES = {"scaling": analyze_scaling, "lesion": analyze_lesion, "generalization": analyze_generalization}

ANALYSES = {
    "thresholds": ("time-to-accuracy as a function of the threshold", "run folders or training entries"),
    "stability": ("repeated-run statistics: each run's TTA, median, DNC count, cv", "series folders or summary.json"),
    "cost-vs-time": ("training cost vs time; training time vs inference latency", "entry files or entry trees"),
    "curves": ("accuracy vs on-clock time for several runs", "run folders or training entries"),
    "roofline": ("how well each run used its hardware: counted FLOPs per example, achieved and peak FLOP/s, MFU, "
                 "operational intensity, energy (informative, never ranked)", "run folders"),
}


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's `analyze`, in the one tree) or on a parser of its own
    (`python -m dawnbench.analyze`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = "The analyses of the DAWNBench papers: each writes <analysis>.png and <analysis>.json into --out."
    sub = p.add_subparsers(dest="analysis", required=True)
    for name, (help_text, inputs) in ANALYSES.items():
        a = add_analysis(sub, name, help_text, inputs)
        if name == "roofline":
            a.add_argument("--precision", choices=roofline.PRECISIONS,
                           help="the arithmetic's precision, for the peak (default: read from the run's hyperparameters)")
            a.add_argument("--references", type=folder("--references", "give the folder holding <reference>/reference.toml"),
                           help="where the runs' references are (to load their stored models)")
            a.add_argument("--data", type=folder("--data", "give the data root, e.g. --data data/"),
                           help="the data root (the predictor that counts the FLOPs reads the eval inputs)")
    for module in OWN_MODULES.values():
        module.add_parser(sub)
    return p


def read_roofline(path: Path, args) -> list[dict]:
    """A run folder (or its result.json): its FLOPs counted by a sandboxed predictor, then its figures."""
    path = Path(path)
    run_dir = path.parent if path.is_file() and path.name == "result.json" else path
    if not (run_dir / "result.json").is_file():
        raise InputError(f"{path}: not a run folder (no result.json); give results/<reference>/<run id>/")
    try:
        counted = roofline.count_flops(run_dir, args.references, args.data)
        return [roofline.run_numbers(run_dir, counted=counted, precision=args.precision)]
    except roofline.InputError as e:
        raise InputError(str(e)) from None


def _skipped(say):
    return lambda line: say(f"skipped: {line}")


READERS = {"stability": lambda path, say: [read_series(path, say)],
           "cost-vs-time": lambda path, say: read_entries([path], _skipped(say)),
           "thresholds": lambda path, say: read_curves([path], _skipped(say)),
           "curves": lambda path, say: read_curves([path], _skipped(say))}
NUMBERS = {"stability": stability_numbers, "cost-vs-time": cost_vs_time_numbers,
           "thresholds": thresholds_numbers, "curves": curves_numbers, "roofline": roofline.roofline_numbers}


PLOTS = {"thresholds": plot_thresholds, "stability": plot_stability, "cost-vs-time": plot_cost_vs_time,
         "curves": plot_curves, "roofline": plot_roofline}


def run(args) -> int:
    """The command on parsed options (dawnbench.cli runs it from the one tree)."""
    if args.analysis in OWN_MODULES:
        return OWN_MODULES[args.analysis].run(args)

    def warn(line: str) -> None:
        print(f"{PROG}: {line}", file=sys.stderr)

    items, errors = [], []
    for path in args.inputs:        # every bad input gets its line, then nothing is written
        try:
            items += (read_roofline(path, args) if args.analysis == "roofline" else READERS[args.analysis](path, warn))
        except InputError as e:
            errors.append(e)
    if not errors and not items:
        errors.append(InputError(f"nothing to analyse in {', '.join(map(str, args.inputs))}"))
    numbers = NUMBERS[args.analysis](items) if not errors else None
    if numbers is not None and args.analysis == "cost-vs-time" and not any(
            t["cost_vs_time"] or t["time_vs_latency"] for t in numbers["tasks"].values()):
        errors.append(InputError("no training entry with a costPerHour reaches its threshold, and no training "
                                 "and inference entries of the same name, or team and model, do: nothing to plot"))
    if errors:
        return max(report(PROG, e) for e in errors)
    return write_outputs(args, numbers, PLOTS[args.analysis])


main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
