"""The analyses of the DAWNBench papers, one command each: a PNG and the numbers behind it.

    dawnbench analyze thresholds   RUN_OR_ENTRY... --out DIR   time-to-accuracy as a function of the threshold
    dawnbench analyze stability    SERIES...       --out DIR   repeated runs: each run's TTA, median, DNC, cv
    dawnbench analyze cost-vs-time ENTRIES...      --out DIR   training cost vs time; training time vs latency
    dawnbench analyze curves       RUN_OR_ENTRY... --out DIR   accuracy vs on-clock time, several runs
    dawnbench analyze roofline     RUN...          --out DIR   counted FLOPs, achieved vs peak FLOP/s, MFU, energy
                                                               (dawnbench/roofline.py)

Each writes <analysis>.png and <analysis>.json into DIR and prints their paths. The numbers come
from plain functions (`*_numbers`), apart from the drawing (`plot_*`). Metric values are in the
units of the DAWNBench logs: percent for accuracies, a fraction for F1.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dawnbench import entries, roofline, safe_read
from dawnbench.entries import Entry, EntryError, number, to_log_units
from dawnbench.series import tta_statistics
from harness import outputs
from harness.arguments import Parser, file_or_folder, folder
from harness.errors import EXIT_OK, DawnbenchError, command, report
from harness.tasks import TASKS, Task

PROG = command("analyze")
LABEL_CHARS = 60      # longer labels are cut in the plots (never in the numbers)

# The other thresholds `thresholds` reads a task's logs at are the task's (tasks.toml's other_thresholds).
TASK_THRESHOLD_SOURCE = "the task's threshold (harness/data/tasks.toml)"


class InputError(DawnbenchError):
    """An input that cannot be analysed; the message names it and says what was expected."""


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

def _read_json(path: Path):
    """A run's or a series' JSON, read like an entry's: nothing from outside its folder, bounded."""
    try:
        return safe_read.read_json(path, Path(path).parent)
    except safe_read.Refused as e:
        raise InputError(f"{path}: not readable JSON: {e.reason}") from None


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
    result = _read_json(result_file)
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


def read_series(path: Path, warn=lambda line: None) -> dict:
    """A repeated-run series: its folder (holding summary.json) or the summary.json itself. One
    that did not finish its runs (killed, interrupted, still going) is said to `warn`, and marked."""
    path = Path(path)
    summary_file = path / "summary.json" if path.is_dir() else path
    if not summary_file.is_file():
        raise InputError(f"{path}: no summary.json; give a series folder written by "
                         f"`dawnbench run REF --runs N` (results/<REF>/<series id>/) or its summary.json")
    summary = _read_json(summary_file)
    runs = summary.get("runs") if isinstance(summary, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise InputError(f"{summary_file}: not a series summary (field 'runs' must be a list of objects)")
    for n, run in enumerate(runs):
        if run.get("status") == "converged" and number(run.get("tta_seconds")) is None:
            raise InputError(f"{summary_file}: runs[{n}] converged but has no number 'tta_seconds'")
    summary["_source"] = str(summary_file)
    summary["_label"] = f"{summary.get('reference') or summary_file.parent.parent.name}/{summary_file.parent.name}"
    requested = summary.get("requested_runs")
    short = isinstance(requested, int) and not isinstance(requested, bool) and len(runs) < requested
    if short or summary.get("in_progress") is True or summary.get("interrupted") is True:
        how = ("interrupted" if summary.get("interrupted") is True else
               "still running, or killed before it could say so" if summary.get("in_progress") is True else "short")
        summary["_unfinished"] = f"{len(runs)} of {requested if isinstance(requested, int) else '?'} runs ({how})"
        warn(f"{summary_file}: an unfinished series: {summary['_unfinished']}; its statistics cover those runs only")
    return summary


# ---------------------------------------------------------------- the numbers

def tta_at(points: list[tuple[float, float]], threshold: float) -> float | None:
    """Hours of the first point at or over `threshold` (None if the log never reaches it)."""
    for hours, value in points:
        if value >= threshold:
            return hours
    return None


def threshold_steps(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The step function threshold -> time-to-accuracy, exactly: (v, h) pairs, v increasing, such
    that for every threshold in (previous v, v] the time is h. They are the log's running maxima."""
    steps: list[tuple[float, float]] = []
    for hours, value in points:
        if not steps or value > steps[-1][0]:
            steps.append((value, hours))
    return steps


def crossings(c: Curve) -> list[dict]:
    """The time-to-accuracy at the task's threshold and at each of its other_thresholds, lowest first;
    epoch: the crossing's row (1-based) in the log."""
    marks = [(to_log_units(c.task, v), why) for v, why in c.task.other_thresholds]
    out = []
    for threshold, why in sorted(marks + [(c.threshold, TASK_THRESHOLD_SOURCE)]):
        row = next((n for n, (_, value) in enumerate(c.points, start=1) if value >= threshold), None)
        hours = c.points[row - 1][0] if row else None
        out.append({"threshold": round(threshold, 6), "source": why, "epoch": row, "hours": hours,
                    "hms": entries.hms(hours) if hours is not None else None})
    return out


def thresholds_numbers(curves: list[Curve]) -> dict:
    out = []
    for c in curves:
        values = [v for _, v in c.points]
        tta = tta_at(c.points, c.threshold)
        out.append({"label": c.label, "source": c.source, "task": c.task.display_name, "metric": c.column,
                    "task_threshold": c.threshold, "range": [min(values), max(values)],
                    "tta_hours_at_task_threshold": tta,
                    "tta_hms_at_task_threshold": entries.hms(tta) if tta is not None else None,
                    "crossings": crossings(c),
                    "steps": [{"threshold": v, "hours": h, "seconds": round(h * 3600, 3)}
                              for v, h in threshold_steps(c.points)]})
    return {"analysis": "thresholds", "inputs": out}


def curves_numbers(curves: list[Curve]) -> dict:
    out = []
    for c in curves:
        tta = tta_at(c.points, c.threshold)
        out.append({"label": c.label, "source": c.source, "task": c.task.display_name, "metric": c.column,
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


def cost_vs_time_numbers(loaded: list[Entry], price_of=None) -> dict:
    """Per task: training hours at the threshold vs training cost (DAWNBench figure 7), and training
    hours vs inference latency for a training and an inference entry of the same name (figure 5).
    `price_of(entry)` gives the USD per hour to plot (the leaderboard's: the prices table's for a
    verified run); by default the entry's own costPerHour."""
    price_of = price_of or entries.cost_per_hour
    tasks: dict[str, dict] = {}
    for task in TASKS.values():
        train = {e.name: e for e in loaded if e.task is task and e.kind == "train"}
        infer = {e.name: e for e in loaded if e.task is task and e.kind == "inference"}
        cost_rows, pairs = [], []
        for name, e in sorted(train.items()):
            hours, price = entries.training_hours(e), price_of(e)
            if hours is not None and price is not None:
                cost_rows.append({"entry": name, "model": entries.text(e.fields.get("model")),
                                  "hardware": entries.text(e.fields.get("hardware")),
                                  "hours": hours, "costPerHour": price, "cost_usd": hours * price})
            i = infer.get(name)
            latency = entries.latency_ms(i) if i is not None else None
            if hours is not None and latency is not None and entries.reaches_threshold(i):
                pairs.append({"entry": name, "model": entries.text(e.fields.get("model")),
                              "train_hours": hours, "latency_ms": latency})
        if cost_rows or pairs:
            tasks[task.display_name] = {"cost_vs_time": cost_rows, "time_vs_latency": pairs}
    return {"analysis": "cost-vs-time", "tasks": tasks}


# ---------------------------------------------------------------- the plots

@contextlib.contextmanager
def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with matplotlib.rc_context({"font.size": 9}):
        yield plt


def _short(label: str) -> str:
    """A label from an entry, cut to size, as plain text: an unescaped "$" would start mathtext
    (and a malformed formula fails the drawing)."""
    label = label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…"
    return label.replace("$", r"\$")


def time_unit(max_hours: float) -> tuple[str, float]:
    """A readable unit for a time axis: (name, factor from hours)."""
    seconds = max_hours * 3600
    if seconds < 120:
        return "seconds", 3600.0
    if seconds < 2 * 3600:
        return "minutes", 60.0
    return "hours", 1.0


def curve_legend(item: dict) -> str:
    """A curve's legend entry: the run, its time to the task's threshold, and what ran it (the
    framework, its runtime, on the hardware), so that curves of one reference on two systems differ."""
    reached = f"TTA {item['tta_hms']}" if item.get("tta_hms") else "threshold not reached"
    ran = " on ".join(v for v in (item.get("framework"), item.get("hardware")) if v)
    return f"{_short(item['label'])} ({reached})" + (f"\n{_short(ran)}" if ran else "")


def _legend_outside(ax) -> None:
    """The legend right of the axes, where it covers no curve however many there are; left out of
    tight_layout (which would shrink the axes to fit it) and added to the saved image by _save."""
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    legend.set_in_layout(False)


def _single_values_spread(ax) -> None:
    """An axis whose data is one value (one point, or points that share it) gets limits from zero to
    past the value, or a decade around it on a log axis, instead of matplotlib's +-5% around it,
    which reads as a range the data does not have. The quantities here (times, costs, latencies,
    accuracies) are >= 0, so zero is their natural origin."""
    box = ax.dataLim
    for lo, hi, set_limits, scale in ((box.x0, box.x1, ax.set_xlim, ax.get_xscale()),
                                      (box.y0, box.y1, ax.set_ylim, ax.get_yscale())):
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi != lo:
            continue
        if scale == "log" and hi > 0:
            set_limits(hi / 10 ** 0.5, hi * 10 ** 0.5)
        elif hi != 0:
            set_limits(sorted((0.0, 1.25 * hi)))
        else:
            set_limits(-1.0, 1.0)


def _save(fig, plt, path: Path) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(fd)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    try:
        # the image grows to hold the legends outside the axes (and nothing else is cut)
        fig.savefig(tmp, dpi=100, format="png", bbox_inches="tight", bbox_extra_artists=legends)
        os.chmod(tmp, 0o644)          # mkstemp's 0600 would hide the plot from a web server
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def _label_inside(ax, labels: list[tuple[str, float, float]]) -> None:
    """Each point's label beside it and inside the axes, where the axes clip it: to the point's left
    in the right half of the axes, below it near the top (a label always to the upper right ran into
    the right and top edges, and was cut there)."""
    ax.get_xlim(), ax.get_ylim()        # the limits as drawn (autoscaled), before reading positions
    to_axes = ax.transData + ax.transAxes.inverted()
    for text, px, py in labels:
        fx, fy = to_axes.transform((px, py))
        left, below = fx > 0.5, fy > 0.85
        ax.annotate(text, (px, py), fontsize=7, textcoords="offset points", xytext=(-3 if left else 3, -3 if below else 3),
                    ha="right" if left else "left", va="top" if below else "bottom")


def _grid(plt, n: int, cols: int = 1, width: float = 6.4, height: float = 4.0):
    fig, axes = plt.subplots(n, cols, figsize=(width * cols, height * n), squeeze=False)
    return fig, axes


def _by_task(items: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for item in items:
        groups.setdefault(item["task"], []).append(item)
    return groups


def plot_thresholds(numbers: dict, path: Path) -> None:
    groups = _by_task(numbers["inputs"])
    with _pyplot() as plt:
        fig, axes = _grid(plt, len(groups))
        for ax, (task, items) in zip(axes[:, 0], groups.items()):
            unit, factor = time_unit(max(s["hours"] for i in items for s in i["steps"]))
            for item in items:
                steps = item["steps"]
                xs = [item["range"][0]] + [s["threshold"] for s in steps]
                ys = [steps[0]["hours"] * factor] + [s["hours"] * factor for s in steps]
                (line,) = ax.step(xs, ys, where="pre", label=_short(item["label"]))
                for mark in item["crossings"]:
                    if mark["hours"] is not None:
                        task_mark = mark["threshold"] == item["task_threshold"]
                        ax.plot([mark["threshold"]], [mark["hours"] * factor], "o",
                                color=line.get_color(), fillstyle="full" if task_mark else "none")
            threshold = items[0]["task_threshold"]
            ax.axvline(threshold, color="k", linestyle="--", linewidth=1, label=f"{task} threshold {threshold:g}")
            for mark in items[0]["crossings"]:
                if mark["threshold"] != threshold:
                    ax.axvline(mark["threshold"], color="gray", linestyle=":", linewidth=1,
                               label=f"{mark['threshold']:g}: {_short(mark['source'].split(' (')[0])}")
            ax.set_xlabel(f"threshold ({items[0]['metric']})")
            ax.set_ylabel(f"time to accuracy ({unit})")
            ax.set_title(f"{task}: time-to-accuracy vs threshold")
            ax.grid(alpha=0.3)
            _single_values_spread(ax)
            _legend_outside(ax)
        fig.tight_layout()
        _save(fig, plt, path)


def plot_curves(numbers: dict, path: Path, title: str | None = None) -> None:
    groups = _by_task(numbers["inputs"])
    with _pyplot() as plt:
        fig, axes = _grid(plt, len(groups))
        for ax, (task, items) in zip(axes[:, 0], groups.items()):
            unit, factor = time_unit(max(p["hours"] for i in items for p in i["points"]))
            for item in items:
                ax.plot([p["hours"] * factor for p in item["points"]], [p["value"] for p in item["points"]],
                        marker=".", label=curve_legend(item))
                if item["run_threshold"] is not None:
                    ax.axhline(item["run_threshold"], color="gray", linestyle=":", linewidth=1,
                               label=f"run threshold {item['run_threshold']:g}")
            threshold = items[0]["task_threshold"]
            ax.axhline(threshold, color="k", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
            ax.set_xlabel(f"on-clock time ({unit})")
            ax.set_ylabel(items[0]["metric"])
            ax.set_title(_short(title) if title else f"{task}: accuracy vs time")
            ax.grid(alpha=0.3)
            _single_values_spread(ax)
            _legend_outside(ax)
        fig.tight_layout()
        _save(fig, plt, path)


def plot_stability(numbers: dict, path: Path) -> None:
    series = numbers["series"]
    with _pyplot() as plt:
        fig, axes = _grid(plt, 1, width=max(6.4, 2.2 * len(series)))
        ax = axes[0, 0]
        top = max([t for s in series for t in s["tta_seconds"]] or [1.0])
        unit, factor = time_unit(top / 3600)
        factor /= 3600        # from seconds
        ticks = []
        for x, s in enumerate(series):
            times = [t * factor for t in s["tta_seconds"]]
            cv = f"{100 * s['cv']:.1f}%" if s["cv"] is not None else "n/a"
            ax.plot([x] * len(times), times, "o", alpha=0.7,
                    label=f"{_short(s['label'])}: cv {cv}, DNC {s['dnc']}/{s['n']}")
            if s["median_seconds"] is not None:
                ax.hlines(s["median_seconds"] * factor, x - 0.25, x + 0.25, color="k", linewidth=2)
            ticks.append(f"{_short(s['label'])}\n{s['converged']}/{s['n']} reached, DNC {s['dnc']}"
                         + (f"\nunfinished: {s['unfinished']}" if s.get("unfinished") else ""))
        ax.set_xticks(range(len(series)), ticks)
        ax.set_xlim(-0.6, len(series) - 0.4)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(f"time to accuracy ({unit}); bar: median")
        ax.set_title("stability over repeated runs")
        ax.grid(axis="y", alpha=0.3)
        _legend_outside(ax)
        fig.tight_layout()
        _save(fig, plt, path)


def plot_cost_vs_time(numbers: dict, path: Path, tasks: list[str] | None = None) -> None:
    groups = {t: v for t, v in numbers["tasks"].items() if tasks is None or t in tasks}
    with _pyplot() as plt:
        fig, axes = _grid(plt, max(1, len(groups)), cols=2, width=5.2)
        for row, (task, data) in zip(axes, groups.items()):
            for ax, points, x, y, xlabel, ylabel, title in (
                    (row[0], data["cost_vs_time"], "hours", "cost_usd", "training time (hours)",
                     "training cost (USD)", "training cost vs time"),
                    (row[1], data["time_vs_latency"], "train_hours", "latency_ms", "training time (hours)",
                     "inference latency (ms)", "training time vs inference latency")):
                ax.set_title(f"{task}: {title}")
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                if not points:
                    ax.text(0.5, 0.5, "no entries", ha="center", va="center", transform=ax.transAxes)
                    ax.set_xticks([])          # no data: matplotlib's 0..1 would read as a scale
                    ax.set_yticks([])
                    continue
                xs, ys = [p[x] for p in points], [p[y] for p in points]
                ax.scatter(xs, ys)
                # Log axes as in the paper, where the points span enough to need them.
                if min(xs) > 0 and max(xs) / min(xs) > 20:
                    ax.set_xscale("log")
                if min(ys) > 0 and max(ys) / min(ys) > 20:
                    ax.set_yscale("log")
                _single_values_spread(ax)
                if len(points) <= 12:
                    _label_inside(ax, [(_short(p["model"] or p["entry"]), p[x], p[y]) for p in points])
                ax.grid(alpha=0.3, which="both")
        fig.tight_layout()
        _save(fig, plt, path)


def plot_roofline(numbers: dict, path: Path) -> None:
    """Achieved FLOP/s against operational intensity (log-log), under each device's roofs: its peak
    (flat) and, where the table has it, its memory bandwidth (the slope). A run without an estimate
    of its bytes sits at the left edge, its MFU in the label."""
    runs = numbers["inputs"]
    with _pyplot() as plt:
        fig, axes = _grid(plt, 1, width=7.0, height=4.6)
        ax = axes[0, 0]
        placed = [r for r in runs if r["achieved_flops_per_s"]]
        intensities = [r["operational_intensity"] for r in placed if r["operational_intensity"]] or [1.0]
        lo, hi = min(intensities) / 30, max(intensities) * 30
        roofs = {}
        for r in runs:
            peak = r["peak"]
            if peak.get("flops_per_s"):
                roofs.setdefault((peak["flops_per_s"], peak.get("memory_gbps"), r["device"]["count"]),
                                 f"{r['device']['count']} x {_short(r['device']['name'])} {r['precision']['value']}")
        for (flops, gbps, count), name in roofs.items():
            xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
            ys = [min(flops, x * gbps * 1e9 * count) if gbps else flops for x in xs]
            ax.plot(xs, ys, linestyle="--", linewidth=1, label=f"roof: {name}, {flops / 1e12:.3g} TFLOP/s"
                    + (f", {gbps * count:g} GB/s" if gbps else " (measured matmul)"))
        for r in placed:
            x = r["operational_intensity"] or lo
            mfu = f"MFU {100 * r['mfu']:.2f}%" if r["mfu"] is not None else "no peak"
            ax.plot([x], [r["achieved_flops_per_s"]], "o",
                    label=f"{_short(r['label'])}: {r['achieved_flops_per_s'] / 1e9:.3g} GFLOP/s, {mfu}")
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
        _legend_outside(ax)
        fig.tight_layout()
        _save(fig, plt, path)


# ---------------------------------------------------------------- the command

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
    for module in _own_modules().values():
        module.add_parser(sub)
    return p


def add_analysis(sub, name: str, help_text: str, inputs: str) -> Parser:
    """An analysis' subcommand: its inputs and --out."""
    a = sub.add_parser(name, help=help_text, description=help_text)
    a.add_argument("inputs", nargs="+", type=file_or_folder("", "give " + inputs), metavar="INPUT", help=inputs)
    add_out(a)
    return a


def add_out(a: Parser) -> None:
    a.add_argument("--out", type=folder("--out", "give the folder to write the PNG and JSON into (made if "
                                                 "missing), e.g. --out analysis/"),
                   required=True, help="the folder to write the PNG and JSON into")


def _own_modules() -> dict:
    """The analyses that are modules of their own (they import this one, so they are imported here,
    late): {name: module with add_parser(sub) and run(args)}."""
    from dawnbench import analyze_lesion, analyze_scaling
    return {"scaling": analyze_scaling, "lesion": analyze_lesion}


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


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except DawnbenchError as e:
        return report(PROG, e)
    return run(args)


def run(args) -> int:
    """The command on parsed options (dawnbench.cli runs it from the one tree)."""
    own = _own_modules()
    if args.analysis in own:
        return own[args.analysis].run(args)

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
    if numbers is not None and args.analysis == "cost-vs-time" and not numbers["tasks"]:
        errors.append(InputError("no training entry with a costPerHour reaches its threshold, and no training "
                                 "and inference entries of the same name do: nothing to plot"))
    if errors:
        return max(report(PROG, e) for e in errors)
    return write_outputs(args, numbers, PLOTS[args.analysis])


def write_outputs(args, numbers: dict, plot) -> int:
    """<analysis>.png (drawn by `plot`) and <analysis>.json into --out; their paths printed."""
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return report(PROG, InputError(f"cannot make the output folder {args.out} ({e})"))
    png, data = args.out / f"{args.analysis}.png", args.out / f"{args.analysis}.json"
    try:
        try:
            plot(numbers, png)
        except OSError as e:
            raise outputs.WriteError(png, e, "--out") from None
        outputs.write_json(data, numbers, "--out")
    except outputs.WriteError as e:
        return report(PROG, e)
    print(png)
    print(data)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
