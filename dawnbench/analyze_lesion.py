"""`dawnbench analyze lesion REF --off TECHNIQUE... [--factor] [--runs N] --out DIR`: what each technique bought.

The DAWNBench v1 analysis' lesion study: the recipe run whole and with each named technique removed;
with --factor its factor analysis instead: every named technique removed, then added back one at a
time in the order given, the last variant being the recipe. A reference names its techniques in its
reference.toml, each with the --set assignments that remove it:

    [techniques]
    label_smoothing = { off = "label_smoothing=0", about = "label smoothing 0.1" }

Those are data, checked as --set is (harness.registry._check_techniques): they choose values of the
reference's declared hyperparameters and nothing else. Each variant is a series (`dawnbench run REF
--runs N`, dawnbench.series) in results/REF/<time>-lesion-<k>-<variant>/; every figure is read back
from the runs' result.json contents (summary.json), written by the harness. Per variant: the median
time-to-accuracy and the mean's 95% Student-t interval over the converged runs, the epochs of the
converged runs, and the final metric of every run (the converging epoch's, else the last one's) with
its interval; a variant none of whose runs converged says so. One run gives no interval (null).
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time
from pathlib import Path

from dawnbench import analysis_io, evidence, plots, series
from harness import cli as harness_cli
from harness import registry
from harness.arguments import MAX_RUNS, whole
from harness.errors import DawnbenchError, UsageError, report

HELP = "run the recipe without each named technique (or, --factor, adding them one at a time); TTA, epochs, accuracy"
CONFIDENCE = 0.95


def add_parser(sub) -> None:
    a = sub.add_parser("lesion", help=HELP, description=HELP)
    harness_cli.add_run_options(a)
    a.add_argument("--off", action="append", default=[], metavar="TECHNIQUE", required=True,
                   help="a technique of the reference's [techniques] table to remove (repeatable)")
    a.add_argument("--factor", action="store_true",
                   help="factor analysis: start with every named technique off, add them back one at a time")
    a.add_argument("--runs", type=whole("--runs", 1, MAX_RUNS, 3), default=1, metavar="N",
                   help="runs per variant, seeds SEED..SEED+N-1 (default 1)")
    analysis_io.add_out(a)


def variants(spec, names: list[str], factor: bool) -> list[dict]:
    """[{label, off: [technique], sets: [--set]}], in the order they run."""
    declared = spec.techniques
    if not declared:
        raise UsageError(f"{spec.name} declares no techniques: add a [techniques] table to its reference.toml, "
                         f"e.g. label_smoothing = {{ off = \"label_smoothing=0\", about = \"...\" }}")
    for name in names:
        if name not in declared:
            raise UsageError(f"--off {name}: {spec.name} declares no technique {name!r}; declared: "
                             f"{', '.join(declared)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UsageError(f"--off {repeated[0]} is given twice: name each technique once")

    def variant(label: str, off: list[str]) -> dict:
        return {"label": label, "off": off, "sets": [s for name in off for s in declared[name]["off"]]}
    if not factor:
        return [variant("recipe", [])] + [variant(f"without {n}", [n]) for n in names]
    steps = [variant("none of them", list(names))]
    for k in range(1, len(names) + 1):
        steps.append(variant("+ " + " + ".join(names[:k]), list(names[k:])))
    return steps


def interval(values: list[float]) -> list[float] | None:
    """The mean's two-sided 95% Student-t interval (dawnbench.evidence's, as a series reports it); None
    under two values."""
    found = evidence.interval(values, CONFIDENCE)
    return None if found["lo"] is None else [found["lo"], found["hi"]]


def stats(values: list) -> dict:
    values = [float(v) for v in values if v is not None]
    return {"n": len(values), "median": statistics.median(values) if values else None,
            "mean": statistics.fmean(values) if values else None, "min": min(values) if values else None,
            "max": max(values) if values else None, "interval95": interval(values)}


def lesion_numbers(spec, plan: list[dict], summaries: list[dict], factor: bool) -> dict:
    rows = []
    for v, s in zip(plan, summaries):
        runs = s["runs"]
        done = [r for r in runs if r.get("status") == "converged"]
        rows.append({**v, "series": s["_source"], "n": len(runs), "converged": len(done),
                     "tta_seconds": stats([r.get("tta_seconds") for r in done]),
                     "epochs_to_converge": stats([r.get("epochs") for r in done]),
                     "final_metric": stats([r.get("metric_value") for r in runs]),
                     "note": None if done else f"no run of {len(runs)} converged"})
    reference = rows[-1] if factor else rows[0]      # the whole recipe
    for row in rows:
        a, b = row["tta_seconds"]["median"], reference["tta_seconds"]["median"]
        row["tta_vs_recipe"] = a / b if a is not None and b else None
    return {"analysis": "lesion", "kind": "factor" if factor else "lesion", "reference": spec.name,
            "task": spec.task.name, "metric": summaries[0].get("metric"), "threshold": summaries[0].get("threshold"),
            "techniques": {n: spec.techniques[n] for v in plan for n in v["off"]}, "variants": rows}


def plot_lesion(numbers: dict, path: Path) -> None:
    rows = numbers["variants"]
    labels = [plots.short(r["label"]) for r in rows]
    with plots.pyplot() as plt:
        fig, axes = plots.grid(plt, 1, cols=2, width=max(5.2, 1.6 * len(rows)))
        for ax, key, ylabel in ((axes[0, 0], "tta_seconds", "time to threshold (s), median; bar: 95% interval"),
                                (axes[0, 1], "final_metric", f"final {numbers['metric']}, mean; bar: 95% interval")):
            centre = "median" if key == "tta_seconds" else "mean"
            for x, r in enumerate(rows):
                s = r[key]
                if s[centre] is None:
                    ax.annotate("DNC", (x, 0), ha="center", fontsize=8, textcoords="offset points", xytext=(0, 3))
                    continue
                ax.bar(x, s[centre], color="C0" if x else "C1")
                if s["interval95"]:
                    lo, hi = s["interval95"]
                    ax.errorbar(x, s["mean"], yerr=[[s["mean"] - lo], [hi - s["mean"]]], color="k", capsize=4)
                ax.plot([x] * 2, [s["min"], s["max"]], "k.", alpha=0.5)
            ax.set_xticks(range(len(rows)), [f"{lab}\n{r['converged']}/{r['n']} converged" for lab, r in zip(labels, rows)],
                          fontsize=7)
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(axis="y", alpha=0.3)
        axes[0, 0].set_title(plots.short(f"{numbers['reference']}: {numbers['kind']}"))
        if numbers["threshold"] is not None:
            axes[0, 1].axhline(numbers["threshold"], color="k", linestyle="--", linewidth=1)
        fig.tight_layout()
        plots.save(fig, plt, path)


def run(args) -> int:
    try:
        harness_cli.check_run_options(args)
        spec = registry.load_spec(args.reference, args.references)
        registry.check_trains(spec)
        registry.check_entry_defined(spec)
        if args.seed + args.runs - 1 > harness_cli.SEED_MAX:
            raise UsageError(f"--seed {args.seed} --runs {args.runs}: the last seed is beyond {harness_cli.SEED_MAX}")
        plan = variants(spec, args.off, args.factor)
        # every variant's configuration checked before the first run
        for v in plan:
            v["hyperparameters"] = registry.resolve_hyperparameters(spec, args.assignments + v["sets"])
        opts = harness_cli.run_options(args, harness_cli.machine_cost(args))
        results_root = Path(opts.results_root).resolve()
        summaries = []
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        for k, v in enumerate(plan, 1):
            slug = "recipe" if not v["off"] else ("none" if args.factor and k == 1 else
                                                   "-".join(v["off"]) if not args.factor else f"plus-{k - 1}")
            folder = series.new_series_dir(results_root, spec.name, f"{stamp}-lesion-{k}-{slug}")
            print(f"{analysis_io.PROG}: variant {k}/{len(plan)}: {v['label']} ({' '.join(v['sets']) or 'as declared'}) "
                  f"in {folder}", file=sys.stderr, flush=True)
            try:
                code = series.run_series(spec, v.pop("hyperparameters"), opts, args.runs, series_dir=folder)
            except DawnbenchError:
                with contextlib.suppress(OSError):
                    folder.rmdir()           # nothing ran (a missing dataset): leave nothing behind
                raise
            if code >= 128 or code == 2:       # interrupted, or a run that could not start: stop here
                return code
            summaries.append(analysis_io.read_series(folder))
    except DawnbenchError as e:
        return report(analysis_io.PROG, e)
    for v in plan:
        v.pop("hyperparameters", None)
    return analysis_io.write_outputs(args, lesion_numbers(spec, plan, summaries, args.factor), plot_lesion)
