"""A run's stored model, counted: its FLOPs per training example, from a sandboxed predictor.

The harness starts a predictor of the run's reference (the run's hyperparameters, the eval files'
label-free view, as `dawnbench infer` does), loads the run's model/ into it, and asks it for the
count (harness.flop_count, in the worker). What comes back is checked for shape here, and labelled
as what it is: a count made in the reference's process, informative only (utilization is never
ranked, never a bound).
"""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from harness import data_views, inference
from harness.errors import UsageError
from harness.registry import ReferenceSpec
from harness.sandbox import handle, kernel, modes, scratch


def count(spec: ReferenceSpec, hyperparameters: dict, model_dir: Path, data_root: Path, seed: int = 0) -> dict:
    """{"flops_per_example", "counter", ...} or {"not_counted": reason}."""
    if spec.framework not in ("pytorch", "tensorflow"):
        return {"not_counted": f"{spec.framework}: no FLOP counter of the framework's own (a guess is not a count)"}
    if not Path(model_dir).is_dir():
        return {"not_counted": f"the run kept no model ({model_dir} is missing; a run with --no-save-model keeps none)"}
    isolation = modes.probe()
    data_views.check_workers_can_read(spec.task.dataset, data_root, isolation)
    kernel.protect_harness()
    work = scratch.private_dir("flops")
    os.chmod(work, 0o755)
    worker = None
    try:
        shutil.copytree(model_dir, work / "models" / "model", symlinks=True)
        try:
            worker, seen = inference._start("predict", spec, hyperparameters, data_root, work, isolation, seed,
                                            snapshots=work / "models")
            inference._load(worker, seen, spec, model_dir)
            reply, _ = worker.call("flops")
        except (handle.WorkerError, handle.WorkerDied, UsageError) as e:
            # the reference's own error (its framework missing from the workers' Python, a model that does
            # not load): the count is informative, so the analysis goes on without it, saying why
            return {"not_counted": "the predictor could not count it: " + inference._one_line(str(e), "failed")}
    finally:
        if worker is not None:
            worker.kill()
        shutil.rmtree(work, ignore_errors=True)
    if "not_counted" in reply:
        return {"not_counted": str(reply["not_counted"])[:400]}
    counted = reply.get("count")
    flops = counted.get("flops_per_example") if isinstance(counted, dict) else None
    if not isinstance(flops, (int, float)) or isinstance(flops, bool) or not math.isfinite(flops) or flops <= 0:
        return {"not_counted": f"the predictor's count is not a positive number ({flops!r})"}
    # The rest came from the reference's process too: kept to what the analysis reads, sized and typed
    def amount(value):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        return value if ok else None
    by_op = counted.get("by_op") if isinstance(counted.get("by_op"), dict) else {}
    return {"flops_per_example": float(flops), "counter": str(counted.get("counter"))[:200],
            "examples": amount(counted.get("examples")), "input_shape": [amount(v) for v in counted.get("input_shape") or []][:8],
            "by_op": {str(k)[:80]: amount(v) for k, v in list(by_op.items())[:40]},
            "convention": str(counted.get("convention"))[:200], "parameter_bytes": amount(counted.get("parameter_bytes")),
            "activation_bytes_per_example": amount(counted.get("activation_bytes_per_example")),
            "where": "the sandboxed predictor, on the run's stored model (the reference's process: informative, "
                     "never ranked)"}

