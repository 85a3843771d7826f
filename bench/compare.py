"""Version-bump comparison: the same reference, two framework pins, the same seeds.

  python -m bench.compare REF --versions "tensorflow-cpu==2.20.0" "tensorflow-cpu==2.21.0" --runs 3 [-- run options]
  (make compare REF=... VERSIONS="<pin A> <pin B>" RUNS=N ARGS=...)

Builds the reference's image twice, differing only in the framework pin (a build argument), runs
each image RUNS times with seeds 0..RUNS-1, alternating which version goes first so drift of the
machine falls on both alike, and prints per version time-to-accuracy and training throughput
(min / median / max) and the speedup B/A of the medians. Writes compare.json, the run folders
and compare.png (both versions' runs, per seed) under bench-results/compare-<REF>-<time>/.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from dawnbench import containers
from harness import registry
from harness.arguments import DATA_FOLDER, MAX_RUNS, Parser, folder, reports_errors, whole
from harness.errors import DawnbenchError, UsageError, report


def throughput(result: dict) -> float | None:
    """Training samples per second of training time (the clock's train span). The samples are the
    trainer's own count, so this is a systems figure read as claimed, never ranked or bounded on
    (docs/RULES.md, "The eval span")."""
    samples = sum(row.get("samples") or 0 for row in result.get("history", []))
    train = (result.get("spans_seconds") or {}).get("train")
    return samples / train if samples and train else None


def stats(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0, "min": None, "median": None, "max": None}
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values)}


def summarize(runs: dict[str, list[dict]], versions: list[str]) -> dict:
    """Per version: the runs' status, time-to-accuracy and throughput; then B over A."""
    summary = {"versions": {}}
    for pin in versions:
        results = runs[pin]
        summary["versions"][pin] = {
            "runs": [{"seed": r["seed"], "status": r["status"], "tta_seconds": r["tta_seconds"],
                      "samples_per_second": throughput(r), "epochs": r["epochs"], "image_digest": r.get("image_digest")}
                     for r in results],
            "converged": sum(r["status"] == "converged" for r in results),
            "tta_seconds": stats([r["tta_seconds"] for r in results if r["status"] == "converged"]),
            "samples_per_second": stats([throughput(r) for r in results]),
        }
    a, b = (summary["versions"][pin] for pin in versions)
    # Speedup of B over A: how many times faster B reaches the target (A's time / B's time), and
    # how many times more samples B trains per second.
    summary["speedup_tta"] = (a["tta_seconds"]["median"] / b["tta_seconds"]["median"]
                              if a["tta_seconds"]["median"] and b["tta_seconds"]["median"] else None)
    summary["speedup_throughput"] = (b["samples_per_second"]["median"] / a["samples_per_second"]["median"]
                                     if a["samples_per_second"]["median"] and b["samples_per_second"]["median"] else None)
    return summary


def table(summary: dict, versions: list[str]) -> list[str]:
    def f(x, fmt):
        return format(x, fmt) if x is not None else "-"
    lines = [f"{'version':32s} {'converged':>9s} {'TTA min':>9s} {'median':>9s} {'max':>9s} "
             f"{'samples/s min':>13s} {'median':>9s} {'max':>9s}"]
    for label, pin in zip("AB", versions):
        v = summary["versions"][pin]
        t, s = v["tta_seconds"], v["samples_per_second"]
        lines.append(f"{label} {pin:30s} {v['converged']:>4d}/{len(v['runs']):<4d} {f(t['min'], '9.1f')} "
                     f"{f(t['median'], '9.1f')} {f(t['max'], '9.1f')} {f(s['min'], '13.0f')} "
                     f"{f(s['median'], '9.0f')} {f(s['max'], '9.0f')}")
    lines.append(f"speedup B/A: time-to-accuracy {f(summary['speedup_tta'], '.3f')}x, "
                 f"throughput {f(summary['speedup_throughput'], '.3f')}x (medians)")
    return lines


def plot(summary: dict, versions: list[str], path: Path, reference: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in [(axes[0], "tta_seconds", "time-to-accuracy (s)"),
                           (axes[1], "samples_per_second", "training throughput (samples/s)")]:
        for i, pin in enumerate(versions):
            runs = summary["versions"][pin]["runs"]
            values = [r[key] for r in runs if r[key] is not None]
            ax.scatter([i] * len(values), values, label=pin, zorder=3)
            if values:
                ax.hlines(statistics.median(values), i - 0.25, i + 0.25, colors="black", zorder=4)
        ax.set_xticks(range(len(versions)), [f"{'AB'[i]}: {pin}" for i, pin in enumerate(versions)], fontsize=8)
        ax.set_ylabel(label)
        ax.set_xlim(-0.6, len(versions) - 0.4)
        ax.grid(axis="y", alpha=0.3)
    speed = summary["speedup_tta"]
    fig.suptitle(f"{reference}: B/A speedup {speed:.2f}x (median time-to-accuracy)" if speed else reference)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def forwarded_data(options: list[str]) -> Path | None:
    """The folder of a `--data DIR` (or `--data=DIR`) among the run options, if any."""
    for i, option in enumerate(options):
        if option.startswith("--data="):
            return Path(option.partition("=")[2])
        if option == "--data" and i + 1 < len(options):
            return Path(options[i + 1])
    return None


@reports_errors("dawnbench")
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    forwarded = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = Parser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("reference")
    p.add_argument("--versions", nargs=2, required=True, metavar=("PIN_A", "PIN_B"))
    p.add_argument("--runs", type=whole("--runs", 1, MAX_RUNS, 3), default=3)
    p.add_argument("--base-image", default=None)
    p.add_argument("--out", type=folder("--out", "give the folder to write the comparison into (made if missing)"),
                   default=None, help="default bench-results/compare-<REF>-<time>/")
    p.add_argument("--data", type=DATA_FOLDER, default=None)
    a = p.parse_args(argv)
    out = a.out or containers.project_root() / "bench-results" / f"compare-{a.reference}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        if a.versions[0] == a.versions[1]:
            raise UsageError(f"--versions {a.versions[0]} {a.versions[1]}: give two different framework pins, "
                             f"e.g. tensorflow-cpu==2.20.0 tensorflow-cpu==2.21.0")
        # What fails in seconds is checked before two builds of minutes: the reference, its data
        # (--data here, or among the run options, as `make compare ARGS="--data DIR"` gives it).
        data = a.data or forwarded_data(forwarded)
        containers.check_data(registry.load_spec(a.reference), data)
        images, build_seconds = {}, {}
        for pin in a.versions:
            started = time.monotonic()
            images[pin] = containers.build(a.reference, a.base_image, pin, quiet=True)
            build_seconds[pin] = round(time.monotonic() - started, 1)
        runs = {pin: [] for pin in a.versions}
        for seed in range(a.runs):
            order = a.versions if seed % 2 == 0 else a.versions[::-1]
            for pin in order:
                label = "AB"[a.versions.index(pin)]
                run_id = f"{label}-seed{seed}"
                status = containers.run(a.reference, [*forwarded, "--seed", str(seed), "--run-id", run_id,
                                                      "--no-progress", "--no-save"],
                                        image=images[pin], results=out / "runs", data_root=data)
                result_file = out / "runs" / a.reference / run_id / "result.json"
                if not result_file.is_file():
                    raise UsageError(f"the {pin} run with seed {seed} left no result.json (exit {status}); "
                                     f"its output is above")
                runs[pin].append(json.loads(result_file.read_text(encoding="utf-8")))
    except DawnbenchError as e:
        return report("dawnbench", e)
    summary = summarize(runs, a.versions)
    summary.update(reference=a.reference, run_options=forwarded,
                   images={pin: {"tag": img.tags[0] if img.tags else None, "id": img.id,
                                "build_seconds": build_seconds[pin]} for pin, img in images.items()})
    (out / "compare.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plot(summary, a.versions, out / "compare.png", a.reference)
    for line in table(summary, a.versions):
        print(line)
    print(f"written: {out / 'compare.json'}, {out / 'compare.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
