"""Time-to-accuracy of a reference over several seeds: `python -m bench.tta [REF] --runs 3`.

Each run is a fresh process, as a user's would be. Prints name=value lines: each run's outcome and
the spans of its time-to-accuracy, read from its own result.json (the harness's clock, never the
reference's word), then the medians and each figure against its goal (issue 37 §5: the default's
median time-to-accuracy <= 25 s, every run converged; the handover's goal is bench.overhead's).

The spans of a converged run's time-to-accuracy (docs/RULES.md, "Timing"), which add up to it:
  init      the trainer's init span: its sandbox and interpreter started, the reference's imports, setup
  train     the train spans through the converging epoch, less the handover
  handover  the freeze and thaw at the end of each evaluated epoch (history's handover_ms); an epoch
            that is not evaluated has none
  harness   the harness's own laps between epochs
The eval spans are off the clock; `eval` is printed beside, as wall seconds. The freeze is timed in
the train span and the thaw in the next harness lap, and the converging epoch's thaw comes after the
clock stopped: so `train` is short and `harness` long by the thaws, about a millisecond each, and the
spans add up to the time-to-accuracy within one thaw.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.overhead import handover_goal, percentile
from harness.arguments import MAX_RUNS, RESULTS_FOLDER, Parser, reports_errors, whole

TTA_GOAL_S = 25.0       # issue 37 §5: the default's median over `make bench`'s 3 seeds
SPANS = ("init", "train", "handover", "harness")


def spans_of(result: dict) -> dict[str, float] | None:
    """The spans of a converged run's time-to-accuracy, in seconds, and its eval (off the clock);
    None for a run that did not converge (it has no time-to-accuracy)."""
    if result.get("status") != "converged" or result.get("tta_seconds") is None:
        return None
    clock, history = result["spans_seconds"], result["history"]
    handover = sum(row.get("handover_ms", 0.0) for row in history) / 1000
    return {"init": clock.get("init", 0.0), "train": clock.get("train", 0.0) - handover, "handover": handover,
            "harness": clock.get("harness", 0.0), "eval": clock.get("eval", 0.0), "tta": result["tta_seconds"]}


def goal_line(what: str, figure: str, met: bool, goal: str) -> str:
    return f"{what}: {figure} (goal {goal}): {'met' if met else 'not met'}"


def run_lines(seed: int, r: dict | None) -> list[str]:
    """One run's figures and, converged, the spans of its time-to-accuracy. `r`: its result.json,
    None where the run left none."""
    if r is None:
        return [f"run_{seed}_status=error"]
    value = r.get("metric_value")
    lines = [f"run_{seed}_status={r['status']} run_{seed}_epochs={r['epochs']} "
             f"run_{seed}_{r['metric']}={'-' if value is None else f'{value:.4f}'} run_{seed}_tta_seconds={r['tta_seconds']} "
             f"run_{seed}_wall_seconds={r['wall_seconds']}"]
    s = spans_of(r)
    if s is not None:
        lines.append(" ".join(f"run_{seed}_{k}_seconds={s[k]:.3f}" for k in (*SPANS, "eval")))
    return lines


def summary_lines(results: list[dict | None]) -> list[str]:
    """The medians over the runs and each figure against its goal."""
    done = [r for r in results if r is not None]
    spans = [s for s in map(spans_of, done) if s is not None]
    handovers = [row["handover_ms"] for r in done if spans_of(r) for row in r["history"] if "handover_ms" in row]
    converged = sum(1 for r in done if r["status"] == "converged")
    lines = [f"converged_runs={converged}/{len(results)}"]
    if spans:
        ttas = [s["tta"] for s in spans]
        tta = statistics.median(ttas)
        medians = {k: statistics.median(s[k] for s in spans) for k in (*SPANS, "eval")}
        lines += [f"tta_seconds={tta:.2f} tta_min={min(ttas):.2f} tta_max={max(ttas):.2f}",
                  " ".join(f"median_{k}_seconds={medians[k]:.3f}" for k in (*SPANS, "eval")),
                  # each span's median against the median time-to-accuracy (medians of parts need not add up)
                  "spans of the time-to-accuracy, medians: " + ", ".join(
                      f"{k} {medians[k]:.3f} s ({100 * medians[k] / tta:.2f}%)" for k in SPANS)
                  + f"; eval {medians['eval']:.2f} s, off the clock",
                  goal_line("time-to-accuracy", f"median {tta:.2f} s over {len(ttas)} converged runs",
                            tta <= TTA_GOAL_S, f"<= {TTA_GOAL_S:g} s")]
    lines.append(goal_line("converged", f"{converged} of {len(results)} runs", converged == len(results),
                           "every run"))
    if handovers:
        lines.append(handover_goal({"handover_ms_median": statistics.median(handovers),
                                    "handover_ms_p99": percentile(handovers, 99), "handovers": len(handovers)}))
    return lines


@reports_errors("python -m bench.tta")
def main(argv=None) -> int:
    p = Parser(prog="python -m bench.tta", description=__doc__.split("\n\n")[0])
    p.add_argument("reference", nargs="?", default="fashion-mnist-cnn-pytorch",
                   help="a reference name (default fashion-mnist-cnn-pytorch)")
    p.add_argument("--runs", type=whole("--runs", 1, MAX_RUNS, 3), default=3, metavar="N",
                   help="runs, seeds 0..N-1 (default 3)")
    p.add_argument("--results", type=RESULTS_FOLDER, default=None, help="keep the run folders here (dawnbench run's --results)")
    p.add_argument("args", nargs="*", help="extra arguments for `dawnbench run`")
    a = p.parse_args(argv)
    results_dir = a.results or Path(tempfile.mkdtemp(prefix="bench-tta-"))
    results = []
    for seed in range(a.runs):
        cmd = [sys.executable, "-m", "dawnbench", "run", a.reference, "--seed", str(seed), "--no-progress",
               "--no-save", "--results", str(results_dir), "--run-id", f"bench-seed{seed}", *a.args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        result_file = results_dir / a.reference / f"bench-seed{seed}" / "result.json"
        if not result_file.exists():
            print(proc.stderr[-2000:], file=sys.stderr)
        results.append(json.loads(result_file.read_text()) if result_file.exists() else None)
        print("\n".join(run_lines(seed, results[-1])), flush=True)
    print("\n".join(summary_lines(results)))
    print(f"results_dir={results_dir}")
    return 0 if all(r is not None and r["status"] == "converged" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
