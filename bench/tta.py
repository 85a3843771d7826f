"""Time-to-accuracy of a reference over several seeds: `python -m bench.tta [REF] --runs 3`.

Each run is a fresh process, as a user's would be. Prints name=value lines.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.arguments import MAX_RUNS, RESULTS_FOLDER, Parser, reports_errors, whole


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
    results = a.results or Path(tempfile.mkdtemp(prefix="bench-tta-"))
    ttas, statuses = [], []
    for seed in range(a.runs):
        cmd = [sys.executable, "-m", "dawnbench", "run", a.reference, "--seed", str(seed), "--no-progress",
               "--no-save", "--results", str(results), "--run-id", f"bench-seed{seed}", *a.args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        result_file = results / a.reference / f"bench-seed{seed}" / "result.json"
        if not result_file.exists():
            print(proc.stderr[-2000:], file=sys.stderr)
            print(f"run_{seed}_status=error")
            statuses.append("error")
            continue
        r = json.loads(result_file.read_text())
        statuses.append(r["status"])
        print(f"run_{seed}_status={r['status']} run_{seed}_epochs={r['epochs']} "
              f"run_{seed}_{r['metric']}={r['metric_value']:.4f} run_{seed}_tta_seconds={r['tta_seconds']} "
              f"run_{seed}_wall_seconds={r['wall_seconds']}", flush=True)
        if r["tta_seconds"] is not None:
            ttas.append(r["tta_seconds"])
    converged = statuses.count("converged")
    print(f"converged_runs={converged}/{a.runs}")
    if ttas:
        print(f"tta_seconds={statistics.median(ttas):.2f} tta_min={min(ttas):.2f} tta_max={max(ttas):.2f}")
    print(f"results_dir={results}")
    return 0 if converged == a.runs else 1


if __name__ == "__main__":
    sys.exit(main())
