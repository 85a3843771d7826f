"""`dawnbench analyze generalization RUN... --out DIR`: do fast models generalize?

The DAWNBench v1 analysis crowdsourced new images to ask it; fresh test sets drawn later the same
way now exist (CIFAR-10.1 for CIFAR-10, Recht et al. 2018; ImageNetV2 for ImageNet, 2019). Per run
folder, the run's stored model is scored by the harness (harness.fresh_eval: a sandboxed predictor
of the run's reference, the label-free view, the harness's labels and metric) on the task's eval
set and on the fresh one; the gap is original minus fresh, in points. Intervals, 95%:
  - the fresh-set accuracy: Wilson's score interval (binomial, n = the fresh set's size);
  - the gap: Newcombe's hybrid score interval (1998, method 10) for the difference of two
    independent proportions, from the two sets' Wilson intervals.
Beside them the published gaps (dawnbench/data/published_gaps.toml, with sources). A task with no
fresh set gets one line saying so and no figures: a split of the training set is no stand-in.
Informative only: nothing here is ranked.
"""
from __future__ import annotations

import math
import sys
import tomllib
from pathlib import Path

from dawnbench import analysis_io, launcher, plots
from dawnbench.analysis_io import InputError
from harness import datasets, paths, registry
from harness.arguments import folder
from harness.errors import DawnbenchError, report

GAPS_FILE = Path(__file__).parent / "data" / "published_gaps.toml"
Z95 = 1.959963984540054     # the standard normal's 97.5% quantile


def load_gaps(path: Path = GAPS_FILE) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion."""
    if n <= 0:
        raise ValueError("no examples")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p1 - p2 (independent samples)."""
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson(k1, n1, z), wilson(k2, n2, z)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


def gap_numbers(scored: dict, metric: str, published: dict | None) -> dict:
    """The accuracies, the gap and their intervals, from the harness's two scores (fractions)."""
    original, fresh = scored["original"], scored["fresh"]
    n1, n2 = original["examples"], fresh["examples"]
    k1, k2 = round(original[metric] * n1), round(fresh[metric] * n2)
    low, high = wilson(k2, n2)
    g_low, g_high = newcombe(k1, n1, k2, n2)
    row = {"metric": metric,
           "original": {"dataset": original["dataset"], "examples": n1, "accuracy": k1 / n1, "correct": k1,
                        "interval_95": list(wilson(k1, n1))},
           "fresh": {"dataset": fresh["dataset"], "examples": n2, "accuracy": k2 / n2, "correct": k2,
                     "interval_95": [low, high]},
           "gap_points": 100 * (k1 / n1 - k2 / n2), "gap_interval_95_points": [100 * g_low, 100 * g_high],
           "interval_method": "fresh accuracy: Wilson score interval; gap: Newcombe's hybrid score interval "
                              "(independent samples), both 95%"}
    if published:
        row["published_gap_points"] = {k: published[k] for k in ("low_points", "high_points", "models", "source")}
        row["within_published"] = published["low_points"] <= row["gap_points"] <= published["high_points"]
    return row


def no_fresh_set(task: str, display_name: str, gaps: dict | None = None) -> str:
    """Why a task has no gap: the published_gaps.toml line, and that no split stands in."""
    why = (gaps or load_gaps()).get("none", {}).get(task, f"no fresh test set of {display_name} is in the dataset manifest")
    return f"{why}; a split of the training set is no stand-in, so no generalization gap"


def _stored_model_scores(run_dir: Path, result: dict, fresh: str, references, data_root) -> dict:
    from harness import fresh_eval
    name = result["reference"]
    try:
        spec = registry.load_spec(name, paths.references_root(references))
    except (registry.UsageError, FileNotFoundError) as e:
        raise InputError(f"{run_dir}: the reference {name} is not found to load its model ({e}); give --references DIR") from None
    if not (run_dir / "model").is_dir():
        raise InputError(f"{run_dir}: the run kept no model (model/ is missing; a run with --no-save-model keeps none)")
    hyper = result.get("hyperparameters") if isinstance(result.get("hyperparameters"), dict) else {}
    root = Path(data_root) if data_root else datasets.default_data_root()
    try:
        with launcher.reference_workers(name):
            return fresh_eval.score(spec, hyper, run_dir / "model", root, fresh, seed=int(result.get("seed") or 0))
    except DawnbenchError as e:
        raise InputError(f"{run_dir}: {e}") from None


def run_numbers(path: Path, args, gaps: dict, say) -> dict:
    """One run folder's row, or its one line when its task has no fresh set."""
    from harness import fresh_eval
    path = Path(path)
    run_dir = path.parent if path.is_file() and path.name == "result.json" else path
    if not (run_dir / "result.json").is_file():
        raise InputError(f"{path}: not a run folder (no result.json); give results/<reference>/<run id>/")
    result = analysis_io.read_json(run_dir / "result.json")
    if not isinstance(result, dict) or not isinstance(result.get("reference"), str) or not isinstance(result.get("task"), str):
        raise InputError(f"{run_dir / 'result.json'}: not a run's result.json (no 'reference' or 'task')")
    from harness.tasks import get_task
    task = get_task(result["task"])
    label = f"{result['reference']}/{run_dir.name}"
    fresh = fresh_eval.fresh_set_of(task.dataset)
    if fresh is None:
        line = f"{label}: {no_fresh_set(task.name, task.display_name, gaps)}"
        say(line)
        return {"label": label, "source": str(run_dir), "task": task.name, "fresh_set": None, "note": line}
    try:
        datasets.check_present(fresh, args.data or datasets.default_data_root())
    except datasets.DatasetError as e:
        raise InputError(f"{label}: the fresh test set {fresh} is not on this machine: {e}") from None
    scored = _stored_model_scores(run_dir, result, fresh, args.references, args.data)
    metric = gaps.get("gaps", {}).get(fresh, {}).get("metric", task.metric)
    return {"label": label, "source": str(run_dir), "reference": result["reference"], "task": task.name,
            "status": result.get("status"), "fresh_set": fresh,
            "run_metric_value": result.get("metric_value"),
            "scored_by": "the harness: a sandboxed predictor of the run's reference on the stored model, "
                         "label-free views, labels from the checksummed files",
            **gap_numbers(scored, metric, gaps.get("gaps", {}).get(fresh)), "scores": scored}


def plot_generalization(numbers: dict, path: Path) -> None:
    rows = [r for r in numbers["inputs"] if r.get("fresh_set")]
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, 1, cols=1, width=6.4)
        ax = axes[0, 0]
        if not rows:
            ax.text(0.5, 0.5, "no run has a fresh test set", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        ys = list(range(len(rows)))
        for y, r in zip(ys, rows):
            low, high = r["gap_interval_95_points"]
            ax.errorbar([r["gap_points"]], [y], xerr=[[r["gap_points"] - low], [high - r["gap_points"]]],
                        fmt="o", color="C0", capsize=3, label="this run's gap (95% interval)" if y == 0 else None)
            pub = r.get("published_gap_points")
            if pub:
                ax.plot([pub["low_points"], pub["high_points"]], [y + 0.2, y + 0.2], color="C1", linewidth=5, alpha=0.5,
                        label="published gap (standard models)" if y == 0 else None)
            ax.annotate(f"{100 * r['original']['accuracy']:.1f}% -> {100 * r['fresh']['accuracy']:.1f}% "
                        f"({r['fresh']['dataset']})", (r["gap_points"], y), fontsize=7,
                        textcoords="offset points", xytext=(0, -12), ha="center")
        if rows:
            ax.axvline(0, color="k", linewidth=0.8)
            ax.set_yticks(ys, [plots.short(r["label"]) for r in rows])
            ax.set_ylim(-0.7, len(rows) - 0.3)
            ax.set_xlabel("accuracy gap, original minus fresh test set (points)")
            ax.set_title("generalization to a fresh test set")
            ax.grid(axis="x", alpha=0.3)
            ax.legend(loc="best", fontsize=7)
        fig.tight_layout()
        plots.save(fig, plt, path)


def run(args) -> int:
    """`analyze generalization` on parsed options: every bad input its line, then nothing written."""
    def say(line: str) -> None:
        print(f"{analysis_io.PROG}: {line}", file=sys.stderr)

    gaps = load_gaps()
    rows, errors = [], []
    for path in args.inputs:
        try:
            rows.append(run_numbers(path, args, gaps, say))
        except InputError as e:
            errors.append(e)
    if errors:
        return max(report(analysis_io.PROG, e) for e in errors)
    numbers = {"analysis": "generalization", "ranked": False, "published_gaps_version": gaps.get("version"),
               "note": "informative: the gap is never ranked; intervals are 95%", "inputs": rows}
    return analysis_io.write_outputs(args, numbers, plot_generalization)


HELP = ("each run's stored model scored by the harness on its eval set and on a fresh test set "
        "(CIFAR-10.1, ImageNetV2): both accuracies, the gap with 95 percent intervals, the published gaps")


def add_parser(sub) -> None:
    a = analysis_io.add_analysis(sub, "generalization", HELP, "run folders (with their model/)")
    a.add_argument("--references", type=folder("--references", "give the folder holding <reference>/reference.toml"),
                   help="where the runs' references are (to load their stored models)")
    a.add_argument("--data", type=folder("--data", "give the data root, e.g. --data data/"),
                   help="the data root (the eval sets and the fresh ones)")
