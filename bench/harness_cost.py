"""The `harness_cost` part of `python -m bench.gpu`: what the harness costs a record-class run.

cifar10-fast-pytorch trains its whole schedule (10 epochs, the last partial) on a synthetic
CIFAR-10 written in the official format (bench/synthetic_cifar.py), driven twice per repeat, in
fresh processes, back to back, alternating which goes first: by the harness as a user runs it
(`dawnbench run`: sandboxed trainer, an eval and a freeze/thaw handover every evaluated epoch, from
its reference.toml's eval_from_epoch) and by a bare
in-process loop (setup, train_epoch x 10, no eval). Both clocks start before the reference's code is
imported. Figures (bench/overhead.py's `paired`): the median of the paired ratios of the harness's
on-clock time (init + train + its own spans) over the bare loop's, a bootstrap 95% interval, and the
handover's median, p99 and max over every evaluated epoch of every repeat. The harness's threshold is 1.0, never
met on this data, so both sides train the same epochs. The figures are named by the isolation the
harness chose (`harness_cost_bwrap_root_ratio`, `harness_cost_uid_ratio`, ...).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from bench import overhead, synthetic_cifar
from bench.gpu_common import REPO, Report, Setting, smoke_references
from harness import registry

REFERENCE = "cifar10-fast-pytorch"
# The record-class references this part can time: their whole schedule's epochs, and the tag that
# names their figures (cifar10-fast's figures keep their names from before).
SCHEDULES = {"cifar10-fast-pytorch": (10, ""),           # ceil(9.9): the schedule's epochs, the 10th partial
             "cifar10-airbench-muon-pytorch": (8, "airbench_muon_")}
REPEATS = 4
# The CPU smoke: the same path at a size a CPU finishes in seconds an epoch (the eval set stays
# CIFAR-10's 10,000 images: the harness wants a prediction for each).
SMOKE_SETS = ("batch_size=64", "widths=8,16,16", "tta_level=0", "epochs=2", "eval_batch_size=2500")
SMOKE_TRAIN, SMOKE_EPOCHS, SMOKE_REPEATS = 640, 2, 1


def part_harness_cost(s: Setting, r: Report, reference: str = REFERENCE) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-gpu-harness-cost-") as folder:     # 180 MB of images
        measure(s, r, Path(folder), reference)


def measure(s: Setting, r: Report, root: Path, reference: str = REFERENCE) -> None:
    schedule, tag = SCHEDULES[reference]
    manifest = synthetic_cifar.write_cifar10(root / "data", n_train=SMOKE_TRAIN if s.smoke else 50_000)
    # this checkout's reference, whatever $DAWNBENCH_REFERENCES names
    # the smoke's copy evaluates from its last epoch, as the schedule does from its 10th
    references = smoke_references(root, reference, SMOKE_EPOCHS) if s.smoke else REPO / "references"
    env = {"DAWNBENCH_DATA": str(root / "data"), "DAWNBENCH_DATASETS_MANIFEST": str(manifest),
           "DAWNBENCH_REFERENCES": str(references)}
    if s.smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""        # --cpu-smoke on a GPU machine stays on the CPU
    epochs, repeats = (SMOKE_EPOCHS, SMOKE_REPEATS) if s.smoke else (schedule, REPEATS)
    # a run must reach its first evaluated epoch (the harness refuses a shorter --max-epochs)
    epochs = max(epochs, registry.load_spec(reference, references).eval_from_epoch)
    f = overhead.paired(reference, epochs, 0, repeats, SMOKE_SETS if s.smoke else (), env,
                        log=lambda line: print(line, flush=True))
    # the isolation names the figures: a container's uid mode and bubblewrap cost differently
    key = f"harness_cost_{tag}" + f["isolation"].replace("-", "_").replace(",", "_")
    what = (f"{reference}, {epochs} epochs of synthetic CIFAR-10 (official format), {repeats} paired repeats; "
            f"isolation {f['isolation']}")
    r.figure(f"{key}_bare_s", f["bare_seconds"], "median; setup + the schedule, in one process, no eval")
    r.figure(f"{key}_harness_s", f["harness_seconds"], "median; init + train + harness spans of `dawnbench run`")
    low, high = f["ratio_ci95"]
    r.figure(f"{key}_ratio", f["ratio"], f"median of paired harness/bare ratios, 95% CI {low:.3f}..{high:.3f}; "
             + what)
    r.figure(f"{key}_ratio_ci95_low", low)
    r.figure(f"{key}_ratio_ci95_high", high)
    low, high = f["train_ratio_ci95"]
    r.figure(f"{key}_train_ratio", f["train_ratio"], f"median of paired ratios of the train spans alone "
             f"(the harness's train span over the bare epochs), 95% CI {low:.3f}..{high:.3f}")
    r.figure(f"{key}_train_ratio_ci95_low", low)
    r.figure(f"{key}_train_ratio_ci95_high", high)
    low, high = f["init_ratio_ci95"]
    r.figure(f"{key}_init_ratio", f["init_ratio"], f"harness init over the bare loop's setup, 95% CI {low:.3f}..{high:.3f}")
    # where the seconds go, each side (medians over the repeats)
    r.figure(f"{key}_bare_setup_s", f["bare_setup_seconds"], "from before the reference's import to the end of setup")
    r.figure(f"{key}_bare_train_s", f["bare_train_seconds"], "the epochs alone, each closed by a synchronize")
    r.figure(f"{key}_bare_first_epoch_s", f["bare_first_epoch_seconds"], "epoch 1: cuDNN's autotuning lands here")
    r.figure(f"{key}_harness_init_s", f["harness_init_seconds"], "init span: interpreter, sandbox, import, setup")
    r.figure(f"{key}_harness_train_s", f["harness_train_seconds"], "train spans")
    r.figure(f"{key}_harness_span_s", f["harness_span_seconds"], "the harness's own on-clock spans")
    r.figure(f"{key}_harness_handovers_s", f["harness_handover_seconds"], "the handovers' sum in a run")
    r.figure(f"{key}_handover_ms_median", f["handover_ms_median"], f"per evaluated epoch, {f['handovers']} handovers")
    r.figure(f"{key}_handover_ms_p99", f["handover_ms_p99"], "nearest rank")
    r.figure(f"{key}_handover_ms_max", f["handover_ms_max"])
    r.figure(f"{key}_bare_spread_pct", f["bare_spread_pct"], "the bare loop's own run-to-run spread")
    if not s.smoke:
        r.goal("handover_2ms", f["handover_ms_median"] <= 2.0 and f["handover_ms_p99"] <= 10.0,
               f"median {f['handover_ms_median']:.1f} ms, p99 {f['handover_ms_p99']:.1f} ms a handover "
               "(issue 37's goal: median <= 2 ms, p99 <= 10 ms)")
        r.goal("train_within_2pct", f["train_ratio"] <= 1.02,
               f"train spans {100 * (f['train_ratio'] - 1):+.1f}% against the bare epochs (issue 51's goal: within 2%)")
