"""`dawnbench compare REF --versions PIN_A PIN_B [--runs N] [--runtime native|docker] [-- run options]`: the same
reference, two framework pins, the same seeds (make compare REF=... VERSIONS="<pin A> <pin B>" RUNS=N ARGS=...).

Natively (the default; dawnbench/compare_native.py) each pin gets an environment of its own, built as a
reference's is (`.venv/<REF>@<pin>`), for the runs' sandboxed workers; with `--runtime docker` each gets an
image, the reference's built twice, differing only in the pin (a build argument). Either way the runs go
RUNS times with seeds 0..RUNS-1, interleaved, alternating which version goes first so drift of the
machine falls on both alike, and it prints per version time-to-accuracy and training throughput
(min / median / max), each run's time (`*`: at a lowered threshold, unofficial), each median with its
exact interval, the speedup B/A (Hodges-Lehmann estimate with its exact Mann-Whitney interval: the one
figure the table and the plot's title both give, at one rounding), the machine's load over the runs (each
run's env.json: other processes' share of its CPUs) and a verdict: B is faster, B is slower, not
distinguishable (the interval holds 1) or too few runs (under 3 converged a side). Writes compare.json
(the same figures, the intervals, the load and the verdict), the run folders with each run's output
(runs/) and compare.png (the runs as points, hollow at a lowered threshold; the medians and their
intervals; axes from zero) under bench-results/compare-<REF>-<time>/.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from math import comb
from pathlib import Path

from dawnbench import compare_native, containers, interleave, stoppable
from dawnbench.interleave import machine_load
from dawnbench.series import tta_statistics
from harness import registry
from harness.arguments import DATA_FOLDER, MAX_RUNS, Parser, folder, parse_forwarding, reports_errors, whole
from harness.errors import EXIT_OK, DawnbenchError, UsageError, command, report

PROG = command("compare")
RUNTIMES = ("native", "docker")

# ------------------------------------------------------------------ statistics
#
# Both intervals are exact and distribution-free, computed from order statistics, so a handful of runs
# gets an interval whose confidence is what it says, and the same times always give the same interval
# (no resampling). A bootstrap was the alternative and is not used: with 3 to 5 runs a side the
# bootstrap distribution of a median takes only a few values and its percentile interval covers less
# than it claims, and it depends on a random draw.
#
# - A version's median: [x_(k), x_(n+1-k)] of its n sorted times covers the median with probability
#   1 - 2 P(Binomial(n, 1/2) <= k-1) for any continuous distribution. The largest k reaching 95%;
#   fewer than 6 runs cannot reach 95% (5 runs: min..max is a 93.75% interval, 3 runs 75%), and the
#   interval is then min..max with the confidence it has, said as such.
# - The speedup B/A: the Hodges-Lehmann estimate and the Mann-Whitney (Moses) interval of the shift
#   between the two versions' log times, i.e. of the ratio A time / B time: the median and order
#   statistics of the n*m pairwise ratios a_i / b_j, with k from the exact null distribution of the
#   Mann-Whitney U. It assumes B's times are A's scaled by one factor (a version that speeds every
#   step up), which is the question a version bump asks; it uses every pair of runs, not only the two
#   medians, so it is the sharper of the two at a few runs. 95% needs 4 runs a side (3 a side reach
#   90%: min..max of the 9 ratios, 1 - 2/C(6,3)); the achieved confidence is said.

CONFIDENCE = 0.95
MIN_RUNS = 3              # converged runs a side below which no verdict is given
EXACT_U_MAX_PAIRS = 10_000  # n*m up to this: the exact U distribution; beyond, its normal approximation


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}".rstrip("0").rstrip(".") + "%"


def median_interval(values: list[float]) -> dict | None:
    """The exact order-statistic interval of the median of `values` (None under 2 values):
    low, high, its confidence, and the runs it would take to reach CONFIDENCE."""
    n = len(values)
    if n < 2:
        return None
    xs = sorted(values)
    total, tail, k = 2 ** n, 1, 1            # tail: the count of Binomial(n, 1/2) outcomes <= k-1
    while k + 1 <= n // 2 and 1 - 2 * (tail + comb(n, k)) / total >= CONFIDENCE:
        tail += comb(n, k)
        k += 1
    return {"low": xs[k - 1], "high": xs[n - k], "confidence": 1 - 2 * tail / total,
            "method": "order statistics of the runs (exact, distribution-free)"}


def _u_cdf(n: int, m: int) -> list[float]:
    """P(U <= u), u = 0..n*m, for the Mann-Whitney U of samples of n and m without ties: the
    coefficients of the Gaussian binomial [n+m choose n]_q over C(n+m, n), exact in integers up to
    EXACT_U_MAX_PAIRS pairs, else the normal approximation with continuity correction."""
    pairs = n * m
    if pairs > EXACT_U_MAX_PAIRS:
        normal = statistics.NormalDist(pairs / 2, math.sqrt(pairs * (n + m + 1) / 12))
        return [normal.cdf(u + 0.5) for u in range(pairs + 1)]
    n, m = min(n, m), max(n, m)
    poly = [1] + [0] * pairs
    for i in range(1, n + 1):                 # times (1 - q^(m+i)), divided by (1 - q^i)
        shift = m + i
        for u in range(pairs, shift - 1, -1):
            poly[u] -= poly[u - shift]
        for u in range(i, pairs + 1):
            poly[u] += poly[u - i]
    total, running, cdf = comb(n + m, n), 0, []
    for count in poly:
        running += count
        cdf.append(running / total)
    return cdf


def ratio_interval(numerators: list[float], denominators: list[float]) -> dict | None:
    """The ratio of two samples' scales (numerator over denominator): the Hodges-Lehmann estimate
    (the median of the pairwise log ratios, back to a ratio) and the exact Mann-Whitney interval,
    with the confidence it has (None unless both samples have a value)."""
    n, m = len(numerators), len(denominators)
    if not n or not m or min(numerators + denominators) <= 0:
        return None
    logs = sorted(math.log(x) - math.log(y) for x in numerators for y in denominators)
    cdf = _u_cdf(n, m)
    k = 1
    while k + 1 <= len(logs) // 2 and 1 - 2 * cdf[k] >= CONFIDENCE:
        k += 1
    return {"estimate": math.exp(statistics.median(logs)), "low": math.exp(logs[k - 1]),
            "high": math.exp(logs[len(logs) - k]), "confidence": max(0.0, 1 - 2 * cdf[k - 1]),
            "method": "Hodges-Lehmann estimate, exact Mann-Whitney interval of the pairwise ratios"}


def runs_for_confidence(kind: str) -> int:
    """The fewest runs (a side, for the ratio) whose widest interval reaches CONFIDENCE."""
    n = 2
    while True:
        reached = (1 - 2 / 2 ** n) if kind == "median" else (1 - 2 / comb(2 * n, n))
        if reached >= CONFIDENCE:
            return n
        n += 1


def verdict(a_times: list[float], b_times: list[float], interval: dict | None, runs: int) -> dict:
    """The plain answer to "is B faster than A?" from the converged runs' times: faster, slower,
    not distinguishable (the interval holds 1) or too few runs (under MIN_RUNS converged a side),
    with the number of runs to try next."""
    n_a, n_b = len(a_times), len(b_times)
    more = min(MAX_RUNS, max(2 * runs, runs_for_confidence("ratio")))
    if min(n_a, n_b) < MIN_RUNS:
        return {"verdict": "too few runs",
                "line": f"too few runs to compare: A has {n_a} converged run{'s' * (n_a != 1)}, B {n_b}; "
                        f"{MIN_RUNS} a side at least: run more (RUNS={max(more, MIN_RUNS)})"}
    assert interval is not None
    level = _percent(interval["confidence"])
    each = f"{n_a} runs each" if n_a == n_b else f"{n_a} and {n_b} runs"
    low_level = (f"; {n_a if n_a == n_b else min(n_a, n_b)} a side cannot give {_percent(CONFIDENCE)}, "
                 f"{runs_for_confidence('ratio')} can") if interval["confidence"] < CONFIDENCE else ""
    span = f"{level} interval {interval['low']:.3f}-{interval['high']:.3f}x"
    if interval["low"] > 1:
        word, line = "faster", f"B is faster than A: speedup {interval['estimate']:.3f}x, {span} ({each}{low_level})"
    elif interval["high"] < 1:
        word, line = "slower", f"B is slower than A: speedup {interval['estimate']:.3f}x, {span} ({each}{low_level})"
    else:
        word = "not distinguishable"
        line = (f"not distinguishable with {each}: the {span} includes 1{low_level}; "
                f"run more (RUNS={more})")
    return {"verdict": word, "line": line}


def throughput(result: dict) -> float | None:
    """Training samples per second of training time (the clock's train span). The samples are the
    trainer's own count, so this is a systems figure read as claimed, never ranked or bounded on
    (docs/RULES.md, "The eval span")."""
    samples = sum(row.get("samples") or 0 for row in result.get("history", []))
    train = (result.get("spans_seconds") or {}).get("train")
    return samples / train if samples and train else None


def stats(values: list[float | None]) -> dict:
    """min / median / max (and mean, stdev, cv: dawnbench.series's figures) and the median's interval."""
    values = [v for v in values if v is not None]
    return {**tta_statistics(values), "median_interval": median_interval(values)}


def lowered(run: dict) -> bool:
    """A run at a threshold other than the task's (`--threshold`): unofficial, its time is not the
    task's time-to-accuracy. Results without the field (older ones) are not marked."""
    return run.get("official_threshold") is False


def summarize(runs: dict[str, list[dict]], versions: list[str]) -> dict:
    """Per version: the runs' status, time-to-accuracy and throughput with the medians' intervals;
    then B over A: the ratio of medians, the Hodges-Lehmann ratio with its interval, and the verdict."""
    summary = {"versions": {}, "confidence_target": CONFIDENCE, "min_runs_for_verdict": MIN_RUNS}
    for pin in versions:
        results = runs[pin]
        summary["versions"][pin] = {
            "runs": [{"seed": r["seed"], "status": r["status"], "tta_seconds": r["tta_seconds"],
                      "samples_per_second": throughput(r), "epochs": r["epochs"], "image_digest": r.get("image_digest"),
                      "threshold": r.get("threshold"), "official_threshold": r.get("official_threshold"),
                      "official": r.get("official")}
                     for r in results],
            "converged": sum(r["status"] == "converged" for r in results),
            "tta_seconds": stats([r["tta_seconds"] for r in results if r["status"] == "converged"]),
            "samples_per_second": stats([throughput(r) for r in results]),
        }
    a, b = (summary["versions"][pin] for pin in versions)
    # the ratios take positive figures only (a time of 0 s is no measurement: it counts as no run)
    times = [[r["tta_seconds"] for r in v["runs"] if r["status"] == "converged" and (r["tta_seconds"] or 0) > 0]
             for v in (a, b)]
    rates = [[r["samples_per_second"] for r in v["runs"] if (r["samples_per_second"] or 0) > 0] for v in (a, b)]
    # Speedup of B over A: how many times faster B reaches the target (A's time / B's time), and
    # how many times more samples B trains per second.
    summary["speedup_tta"] = (a["tta_seconds"]["median"] / b["tta_seconds"]["median"]
                              if a["tta_seconds"]["median"] and b["tta_seconds"]["median"] else None)
    summary["speedup_tta_interval"] = ratio_interval(times[0], times[1])
    summary["speedup_throughput"] = (b["samples_per_second"]["median"] / a["samples_per_second"]["median"]
                                     if a["samples_per_second"]["median"] and b["samples_per_second"]["median"] else None)
    summary["speedup_throughput_interval"] = ratio_interval(rates[1], rates[0])
    summary["verdict"] = verdict(times[0], times[1], summary["speedup_tta_interval"],
                                 max(len(runs[pin]) for pin in versions))
    summary["lowered_threshold_runs"] = sum(lowered(r) for v in (a, b) for r in v["runs"])
    return summary


def _interval_text(interval: dict | None, fmt: str, unit: str = "") -> str:
    if interval is None:
        return "no interval from fewer than 2 runs"
    if interval["confidence"] <= 0:         # one run a side: the one ratio, which no interval covers
        return "no interval from one run a side"
    return (f"{_percent(interval['confidence'])} interval {interval['low']:{fmt}}-"
            f"{interval['high']:{fmt}}{unit}")


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
    for label, pin in zip("AB", versions):
        runs = summary["versions"][pin]["runs"]
        each = [f"seed {r['seed']} " + (f"{r['tta_seconds']:.1f}" if r["status"] == "converged" else r["status"])
                + ("*" if lowered(r) else "") for r in runs]
        lines.append(f"{label} runs, time-to-accuracy (s): {', '.join(each)}")
    if summary["lowered_threshold_runs"]:
        thresholds = sorted({r["threshold"] for pin in versions for r in summary["versions"][pin]["runs"]
                             if lowered(r) and r["threshold"] is not None})
        at = f" ({', '.join(format(x, 'g') for x in thresholds)})" if thresholds else ""
        lines.append(f"* unofficial: at a threshold{at} other than the task's (--threshold); "
                     f"not the task's time-to-accuracy")
    need = runs_for_confidence("median")
    for label, pin in zip("AB", versions):
        t = summary["versions"][pin]["tta_seconds"]
        interval = t["median_interval"]
        short = (f" ({t['n']} runs cannot give {_percent(CONFIDENCE)}, {need} can)"
                 if interval and interval["confidence"] < CONFIDENCE else "")
        lines.append(f"{label} median time-to-accuracy {f(t['median'], '.1f')} s, "
                     f"{_interval_text(interval, '.1f', ' s')}{short}")
    rate = summary["speedup_throughput_interval"]
    lines.append(f"{speedup_text(summary)}; throughput {f(rate and rate['estimate'], '.3f')}x, "
                 f"{_interval_text(rate, '.3f', 'x')}")
    if summary.get("load"):
        lines.append(summary["load"]["line"])
    lines.append(f"verdict: {summary['verdict']['line']}")
    return lines


def speedup_text(summary: dict) -> str:
    """The speedup B/A of time-to-accuracy as the table and the plot's title both say it: the Hodges-Lehmann
    estimate and its interval, at the verdict's rounding (the ratio of medians, another figure, is in
    compare.json only: two speedups that differ in the third digit read as a contradiction)."""
    tta = summary["speedup_tta_interval"]
    if tta is None:
        return "speedup B/A: time-to-accuracy -, no interval without a converged run a side"
    return (f"speedup B/A: time-to-accuracy {tta['estimate']:.3f}x (Hodges-Lehmann), "
            f"{_interval_text(tta, '.3f', 'x')}")


def title_text(summary: dict, reference: str) -> str:
    """compare.png's title: the table's speedup line as it is (speedup_text), the verdict, the load."""
    word = summary["verdict"]["verdict"]
    title = f"{reference}: {speedup_text(summary)}"
    title += f"\nB {word}" if word in ("faster", "slower") else f"\n{word}"
    if summary["lowered_threshold_runs"]:
        title += "; unofficial: runs at a lowered threshold"
    if summary.get("load"):
        title += f"\n{summary['load']['short']}"
    return title


def plot(summary: dict, versions: list[str], path: Path, reference: str) -> dict:
    """compare.png: per version its runs as points (hollow: at a lowered threshold, unofficial),
    the median as a bar and its interval as a line with caps; time and throughput axes from zero.
    Returns each panel's y-axis limits (compare.json's `plot_y_limits`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    limits = {}
    for ax, key, label in [(axes[0], "tta_seconds", "time-to-accuracy (s)"),
                           (axes[1], "samples_per_second", "training throughput (samples/s)")]:
        for i, pin in enumerate(versions):
            v = summary["versions"][pin]
            runs = [r for r in v["runs"] if r[key] is not None]
            for marked, face in ((False, f"C{i}"), (True, "none")):
                values = [r[key] for r in runs if lowered(r) == marked]
                ax.scatter([i - 0.08] * len(values), values, facecolors=face, edgecolors=f"C{i}", zorder=3)
            if v[key]["median"] is not None:
                ax.hlines(v[key]["median"], i - 0.25, i + 0.25, colors="black", zorder=4)
            interval = v[key]["median_interval"]
            if interval:
                ax.errorbar([i + 0.12], [v[key]["median"]], yerr=[[v[key]["median"] - interval["low"]],
                                                                    [interval["high"] - v[key]["median"]]],
                            fmt="none", ecolor="black", capsize=4, zorder=4)
                ax.annotate(_percent(interval["confidence"]), (i + 0.16, interval["high"]), fontsize=7)
        ax.set_xticks(range(len(versions)), [f"{'AB'[i]}: {pin}" for i, pin in enumerate(versions)], fontsize=8)
        ax.set_ylabel(label)
        ax.set_xlim(-0.6, len(versions) - 0.4)
        ax.set_ylim(bottom=0)             # from zero: a difference reads at its size
        ax.grid(axis="y", alpha=0.3)
        limits[key] = [float(x) for x in ax.get_ylim()]
    handles = [Line2D([], [], marker="o", ls="", color="gray", label="run"),
               Line2D([], [], color="black", marker="_", markersize=12, ls="", label="median, and its interval")]
    if summary["lowered_threshold_runs"]:
        handles.insert(1, Line2D([], [], marker="o", ls="", markerfacecolor="none", color="gray",
                                 label="run at a lowered threshold (unofficial)"))
    axes[0].legend(handles=handles, loc="lower left", fontsize=7)
    fig.suptitle(title_text(summary, reference), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return limits


def forwarded_data(options: list[str]) -> Path | None:
    """The folder of a `--data DIR` (or `--data=DIR`) among the run options, if any."""
    for i, option in enumerate(options):
        if option.startswith("--data="):
            return Path(option.partition("=")[2])
        if option == "--data" and i + 1 < len(options):
            return Path(options[i + 1])
    return None


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's `compare`) or on a parser of its own (`python -m dawnbench.compare`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = ("The same reference under two framework pins, the same seeds, interleaved: each version's "
                     "time-to-accuracy and throughput with intervals, the speedup B/A and a verdict.")
    p.add_argument("reference", metavar="REF")
    p.add_argument("--versions", nargs=2, required=True, metavar=("PIN_A", "PIN_B"),
                   help="two pins of the reference's framework (torch==2.13.0, tensorflow-cpu==2.21.0) or of "
                        "another package it installs (numpy==2.3.5)")
    p.add_argument("--runs", type=whole("--runs", 1, MAX_RUNS, 3), default=3, help="runs a version (default 3)")
    p.add_argument("--runtime", default="native", metavar="|".join(RUNTIMES),
                   help="native (default): an environment a pin, .venv/<REF>@<pin>; docker: an image a pin")
    p.add_argument("--base-image", default=None, help="--runtime docker: the images' base")
    p.add_argument("--out", type=folder("--out", "give the folder to write the comparison into (made if missing)"),
                   default=None, help="default bench-results/compare-<REF>-<time>/")
    p.add_argument("--data", type=DATA_FOLDER, default=None)
    p.epilog = "-- RUN OPTIONS: after --, the options of every run (--threshold 0.5 --max-epochs 2 --data DIR ...)"
    p.set_defaults(run_options=[])
    return p


def _runs(a, data: Path | None, out: Path) -> tuple[dict, dict, dict]:
    """Every run of both versions, interleaved (dawnbench.interleave): (their result.json by pin, their env.json
    loads, what each side was: its image or environment)."""
    sides, setup_seconds = {}, {}
    spec = registry.load_spec(a.reference)
    if a.runtime == "native":
        compare_native.check(spec.directory, a.versions)      # a pin that names nothing: before any set-up
    for pin in a.versions:
        started = time.monotonic()
        sides[pin] = (containers.build(a.reference, a.base_image, pin, progress="steps") if a.runtime == "docker"
                      else compare_native.environment(spec.name, spec.directory, pin))
        setup_seconds[pin] = round(time.monotonic() - started, 1)

    def start(pin: str, seed: int, run_id: str) -> tuple[int, Path, Path | None]:
        options = [*a.run_options, "--seed", str(seed), "--run-id", run_id, "--no-progress", "--no-save"]
        if a.runtime == "docker":
            status = containers.run(a.reference, options, image=sides[pin], results=out / "runs", data_root=data)
            stoppable.raise_if_stopped()        # it stopped its container on the signal, and returned
            return status, out / "runs" / a.reference / run_id, None
        log = out / "runs" / f"{run_id}.log"
        status = compare_native.run(a.reference, [*options, "--results", str(out / "runs")], sides[pin], log)
        return status, out / "runs" / a.reference / run_id, log

    try:
        done = interleave.run_rounds(a.versions, a.runs, list(range(a.runs)),
                                     lambda pin, _round, seed: f"{'AB'[a.versions.index(pin)]}-seed{seed}", start)
    except interleave.Interrupted as e:     # the run under way was stopped and wrote its DNC: every folder stays
        raise stoppable.Interrupted(f"interrupted ({e.name}): the run under way was stopped (its DNC kept); the "
                                    f"{len(e.done)} runs that finished are kept in {out / 'runs'}; no comparison "
                                    f"is written (it is every round)", e.signum) from None
    runs = {pin: [r.result for r in done if r.side == pin] for pin in a.versions}
    loads = [r.load for r in done]
    if a.runtime == "docker":
        what = {pin: {"tag": img.tags[0] if img.tags else None, "id": img.id, "build_seconds": setup_seconds[pin]}
                for pin, img in sides.items()}
    else:
        what = {pin: {"environment": str(Path(python).parent.parent.name), "setup_seconds": setup_seconds[pin]}
                for pin, python in sides.items()}
    return runs, {"records": loads}, what


def run(a) -> int:
    try:
        if a.runtime not in RUNTIMES:
            raise UsageError(f"--runtime {a.runtime!r}: expected native (an environment a pin) or docker (an image "
                             f"a pin)")
        if a.versions[0] == a.versions[1]:
            raise UsageError(f"--versions {a.versions[0]} {a.versions[1]}: give two different framework pins, "
                             f"e.g. tensorflow-cpu==2.20.0 tensorflow-cpu==2.21.0")
        if a.base_image and a.runtime != "docker":
            raise UsageError("--base-image goes with --runtime docker (natively there is no image)")
        out = a.out or containers.project_root() / "bench-results" / \
            f"compare-{a.reference}-{time.strftime('%Y%m%d-%H%M%S')}"
        # What fails in seconds is checked before the set-ups of minutes: the reference, its data
        # (--data here, or among the run options, as `make compare ARGS="--data DIR"` gives it).
        data = a.data or forwarded_data(a.run_options)
        containers.check_data(registry.load_spec(a.reference), data)
        if a.data and not forwarded_data(a.run_options) and a.runtime == "native":
            a.run_options = [*a.run_options, "--data", str(a.data)]
        runs, loads, sides = _runs(a, data, out)
    except DawnbenchError as e:
        return report(PROG, e)
    summary = summarize(runs, a.versions)
    summary["load"] = machine_load(loads["records"])
    summary.update(reference=a.reference, run_options=a.run_options, runtime=a.runtime,
                   **({"images": sides} if a.runtime == "docker" else {"environments": sides}))
    summary["plot_y_limits"] = plot(summary, a.versions, out / "compare.png", a.reference)
    (out / "compare.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for line in table(summary, a.versions):
        print(line)
    print(f"written: {out / 'compare.json'}, {out / 'compare.png'}")
    return EXIT_OK


@reports_errors(PROG)
def main(argv: list[str] | None = None) -> int:
    """`python -m dawnbench.compare` (and bench.compare): as `dawnbench compare`."""
    return run(parse_forwarding(build_parser(), sys.argv[1:] if argv is None else list(argv)))


if __name__ == "__main__":
    sys.exit(main())
