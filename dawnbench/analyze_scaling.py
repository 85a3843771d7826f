"""`dawnbench analyze scaling SERIES_OR_RUN... --out DIR`: how training scales with the process count.

The DAWNBench v1 analysis plotted, over runs of one reference at several process (or node) counts,
the speedup of time-to-accuracy and of the time per epoch against the smallest count, the epochs
each count needed, and the ideal (linear) line. Each input is a series folder (summary.json, its
runs in <series>/<run id>/) or a run folder; runs are grouped by the world size the harness wrote in
each run's own result.json (a series' summary.json does not carry it, and nothing an entrant writes
is read). Runs of different references, tasks or thresholds are refused: their times do not compare.

Per count: the median time-to-accuracy over the converged runs, the median epochs to converge, the
median train seconds per epoch over every run (the train spans / epochs trained, so a run that did
not converge still has one), and each speedup against the smallest count; where a count has no
converged run its time-to-accuracy speedup is null, and `note` says why.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from dawnbench import analysis_io, plots
from dawnbench.analysis_io import InputError
from dawnbench.entries import number
from harness.errors import report


def _run(run_dir: Path) -> dict:
    result = analysis_io.read_json(run_dir / "result.json")
    if not isinstance(result, dict):
        raise InputError(f"{run_dir / 'result.json'}: not a run's result.json (not a JSON object)")
    world = result.get("world_size")
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise InputError(f"{run_dir / 'result.json'}: no whole number 'world_size' (the process count the harness "
                         f"records); give run folders written by `dawnbench run`")
    for key in ("reference", "task"):
        if not isinstance(result.get(key), str):
            raise InputError(f"{run_dir / 'result.json'}: no '{key}'; give run folders written by `dawnbench run`")
    epochs, train = result.get("epochs"), number((result.get("spans_seconds") or {}).get("train"))
    converged = result.get("status") == "converged"
    return {"run": str(run_dir), "reference": result["reference"], "task": result["task"],
            "threshold": number(result.get("threshold")), "world_size": world, "seed": result.get("seed"),
            "status": "converged" if converged else "DNC",
            "tta_seconds": number(result.get("tta_seconds")) if converged else None,
            "epochs": epochs if isinstance(epochs, int) and not isinstance(epochs, bool) else None,
            "seconds_per_epoch": train / epochs if train is not None and isinstance(epochs, int) and epochs > 0 else None,
            "metric_value": number(result.get("metric_value"))}


def read_runs(path: Path, warn=lambda line: None) -> list[dict]:
    """The runs of one input: a run folder (or its result.json), or a series (its folder or summary.json)."""
    path = Path(path)
    if path.is_file() and path.name == "result.json":
        path = path.parent
    if path.is_dir() and (path / "result.json").is_file():
        return [_run(path)]
    if (path.is_dir() and (path / "summary.json").is_file()) or (path.is_file() and path.name == "summary.json"):
        summary = analysis_io.read_series(path, warn)
        folder = Path(summary["_source"]).parent
        runs = []
        for n, entry in enumerate(summary["runs"]):
            name = entry.get("run_dir")
            if not isinstance(name, str) or Path(name).name != name or not (folder / name / "result.json").is_file():
                warn(f"{summary['_source']}: runs[{n}] has no run folder with a result.json here; left out")
                continue
            runs.append(_run(folder / name))
        if not runs:
            raise InputError(f"{summary['_source']}: none of its runs has a run folder with a result.json")
        return runs
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    raise InputError(f"{path}: neither a run folder (result.json) nor a series (summary.json); give what "
                     f"`dawnbench run REF` or `dawnbench run REF --runs N` wrote")


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def scaling_numbers(runs: list[dict]) -> dict:
    """The figures of runs of one reference at one threshold, by process count. Raises InputError
    when the runs mix references, tasks or thresholds."""
    for key, what in (("reference", "references"), ("task", "tasks"), ("threshold", "thresholds")):
        seen = sorted({str(r[key]) for r in runs})
        if len(seen) > 1:
            raise InputError(f"the runs mix {what} ({', '.join(seen)}): scaling compares runs of one reference "
                             f"at one threshold; give the series or runs of one of them")
    counts: dict[int, list[dict]] = {}
    for r in runs:
        counts.setdefault(r["world_size"], []).append(r)
    base_count = min(counts)
    rows = []
    for count in sorted(counts):
        group = counts[count]
        done = [r for r in group if r["status"] == "converged"]
        rows.append({"processes": count, "n": len(group), "converged": len(done),
                     "tta_seconds_median": _median([r["tta_seconds"] for r in done]),
                     "epochs_to_converge_median": _median([r["epochs"] for r in done]),
                     "seconds_per_epoch_median": _median([r["seconds_per_epoch"] for r in group]),
                     "ideal_speedup": count / base_count,
                     "runs": [{k: r[k] for k in ("run", "seed", "status", "tta_seconds", "epochs",
                                                 "seconds_per_epoch", "metric_value")} for r in group]})
    base = rows[0]
    for row in rows:
        tta, per_epoch = row["tta_seconds_median"], row["seconds_per_epoch_median"]
        row["speedup_tta"] = (base["tta_seconds_median"] / tta
                              if tta and base["tta_seconds_median"] is not None else None)
        row["speedup_per_epoch"] = (base["seconds_per_epoch_median"] / per_epoch
                                    if per_epoch and base["seconds_per_epoch_median"] is not None else None)
        row["note"] = (f"no run converged at {row['processes']} process(es): no time-to-accuracy speedup"
                       if not row["converged"] else
                       f"no run converged at the smallest count ({base_count}): no time-to-accuracy speedup"
                       if not base["converged"] else None)
    first = runs[0]
    return {"analysis": "scaling", "reference": first["reference"], "task": first["task"],
            "threshold": first["threshold"], "base_processes": base_count,
            "world_size_source": "each run's result.json (world_size, written by the harness)", "counts": rows}


def plot_scaling(numbers: dict, path: Path) -> None:
    rows = numbers["counts"]
    xs = [r["processes"] for r in rows]
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, 1, cols=2, width=5.2)
        ax = axes[0, 0]
        ax.plot(xs, [r["ideal_speedup"] for r in rows], "k--", linewidth=1, label="ideal (linear)")
        for key, label, marker in (("speedup_tta", "time-to-accuracy", "o"), ("speedup_per_epoch", "time per epoch", "s")):
            points = [(r["processes"], r[key]) for r in rows if r[key] is not None]
            if points:
                ax.plot(*zip(*points), marker=marker, label=label)
        for r in rows:
            if r["speedup_tta"] is None:
                ax.annotate("DNC" if not r["converged"] else "base DNC", (r["processes"], r["ideal_speedup"]),
                            fontsize=7, textcoords="offset points", xytext=(3, -10))
        ax.set_xticks(xs)
        ax.set_xlabel("processes")
        ax.set_ylabel(f"speedup over {numbers['base_processes']} process(es)")
        ax.set_title(plots.short(f"{numbers['reference']}: scaling"))
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=7)     # inside: a legend outside would run into the right panel
        ax = axes[0, 1]
        ax.bar([str(x) for x in xs], [r["epochs_to_converge_median"] or 0 for r in rows])
        for i, r in enumerate(rows):
            ax.annotate(f"{r['converged']}/{r['n']} converged", (i, r["epochs_to_converge_median"] or 0),
                        fontsize=7, ha="center", textcoords="offset points", xytext=(0, 3))
        ax.set_xlabel("processes")
        ax.set_ylabel("epochs to converge (median)")
        ax.set_ylim(0, 1.2 * max([r["epochs_to_converge_median"] or 0 for r in rows] + [1]))
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_title("epochs to converge")
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        plots.save(fig, plt, path)


def run(args) -> int:
    """`analyze scaling` on parsed options: every bad input its line, then nothing written."""
    def warn(line: str) -> None:
        print(f"{analysis_io.PROG}: {line}", file=sys.stderr)

    runs, errors = [], []
    for path in args.inputs:
        try:
            runs += read_runs(path, warn)
        except InputError as e:
            errors.append(e)
    numbers = None
    if not errors:
        try:
            numbers = scaling_numbers(runs)
        except InputError as e:
            errors.append(e)
    if errors:
        return max(report(analysis_io.PROG, e) for e in errors)
    return analysis_io.write_outputs(args, numbers, plot_scaling)


HELP = "speedup of time-to-accuracy and per epoch over process counts, epochs to converge, the ideal line"


def add_parser(sub) -> None:
    analysis_io.add_analysis(sub, "scaling", HELP, "series folders (summary.json) or run folders of one reference "
                                               "at several process counts")
