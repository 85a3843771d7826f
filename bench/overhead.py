"""What the harness and its isolation cost: the same reference, seed and epochs driven by a bare
in-process loop and by the harness (sandboxed trainer, a snapshot per epoch, freeze and thaw).

`python -m bench.overhead [REF] --max-epochs 2 --repeats 6`. Both sides start their clock
before the reference's code is imported. Eval is excluded from both: the bare loop never
evaluates, and the harness's eval spans are off its clock. Each repeat runs both, in fresh
processes, back to back, alternating which goes first; the overhead is the median of the paired
ratios, with a bootstrap 95% confidence interval, and the per-epoch handover (freeze, thaw) the
harness measured.
"""
from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.arguments import MAX_EPOCHS, MAX_RUNS, SEED_MAX, Parser, reports_errors, whole

BARE = r"""
import sys, time
from pathlib import Path
from harness import datasets, registry
from harness.reference import Context
spec = registry.load_spec(sys.argv[1]); epochs = int(sys.argv[2]); seed = int(sys.argv[3])
cfg = registry.resolve_hyperparameters(spec, [])
t0 = time.perf_counter()    # before the import, as the harness's clock
ref = spec.load_entry_class()()
ref.setup(Context(config=cfg, data_root=datasets.default_data_root(), seed=seed, task=spec.task, show_progress=False))
ref.synchronize()
for epoch in range(1, epochs + 1):
    ref.train_epoch(epoch)
ref.synchronize()
print(time.perf_counter() - t0)
"""


def bare(reference: str, epochs: int, seed: int) -> float:
    out = subprocess.run([sys.executable, "-c", BARE, reference, str(epochs), str(seed)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def harnessed(reference: str, epochs: int, seed: int, results: Path, tag: str) -> dict:
    # threshold 1.0 is never reached, so the run trains exactly `epochs` epochs (DNC on budget)
    subprocess.run([sys.executable, "-m", "dawnbench", "run", reference, "--seed", str(seed),
                    "--max-epochs", str(epochs), "--threshold", "1.0", "--no-progress", "--no-save",
                    "--results", str(results), "--run-id", tag], capture_output=True, text=True)
    r = json.loads((results / reference / tag / "result.json").read_text())
    spans = r["spans_seconds"]
    return {"on_clock": spans["init"] + spans["train"] + spans.get("harness", 0.0),
            "harness_span": spans.get("harness", 0.0),
            "handover_ms": [row.get("handover_ms", float("nan")) for row in r["history"]]}


@reports_errors("python -m bench.overhead")
def main(argv=None) -> int:
    p = Parser(prog="python -m bench.overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("reference", nargs="?", default="fashion-mnist-cnn-pytorch",
                   help="a reference name (default fashion-mnist-cnn-pytorch)")
    p.add_argument("--max-epochs", type=whole("--max-epochs", 1, MAX_EPOCHS, 2), default=2, metavar="N",
                   help="epochs each side trains (default 2; the harnessed run's threshold is never met)")
    p.add_argument("--repeats", type=whole("--repeats", 1, MAX_RUNS, 6), default=6, metavar="N",
                   help="paired repeats (default 6)")
    p.add_argument("--seed", type=whole("--seed", 0, SEED_MAX, 0), default=0, metavar="N",
                   help="the seed of every run (default 0)")
    a = p.parse_args(argv)
    results = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    bares, harnesses, spans, handovers = [], [], [], []
    for i in range(a.repeats):
        # alternate which side goes first, so a machine that speeds up or slows down favours neither
        if i % 2 == 0:
            bares.append(bare(a.reference, a.max_epochs, a.seed))
            h = harnessed(a.reference, a.max_epochs, a.seed, results, f"overhead-{i}")
        else:
            h = harnessed(a.reference, a.max_epochs, a.seed, results, f"overhead-{i}")
            bares.append(bare(a.reference, a.max_epochs, a.seed))
        harnesses.append(h["on_clock"])
        handovers.extend(h["handover_ms"])
        spans.append(h["harness_span"])
        print(f"repeat_{i}_bare_seconds={bares[-1]:.3f} repeat_{i}_harness_seconds={harnesses[-1]:.3f}", flush=True)
    b, h = statistics.median(bares), statistics.median(harnesses)
    print(f"bare_seconds={b:.3f} harness_seconds={h:.3f}")
    # Each repeat runs bare then harness back to back; the median of the per-pair ratios cancels
    # slow drift in machine speed better than comparing the two sets as wholes.
    ratios = [hh / bb - 1 for hh, bb in zip(harnesses, bares)]
    print(f"harness_overhead_pct={100 * statistics.median(ratios):.2f}")
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    print(f"harness_overhead_ci95_pct={100 * boots[50]:.2f}..{100 * boots[1949]:.2f}")
    print(f"handover_ms_median={statistics.median(handovers):.2f} handover_ms_max={max(handovers):.2f}")
    print(f"harness_overhead_min_pct={100 * (min(harnesses) - min(bares)) / min(bares):.2f}")
    # the run-to-run spread of the bare loop alone: differences below it are the machine, not the harness
    print(f"bare_spread_pct={100 * (max(bares) - min(bares)) / b:.2f}")
    print(f"harness_span_pct={100 * statistics.median(spans) / h:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
