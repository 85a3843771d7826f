"""Inference entries: batch size 1 over every eval example, each call timed by the harness.

DAWNBench's inference figure is the mean latency per item at the task's threshold; the
percentiles and the cost per 10,000 items are reported next to it.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import datasets, environment, paths, runner, sandbox
from harness.registry import ReferenceSpec, UsageError


def _answer(question_id: str, output) -> tuple[str, str]:
    if isinstance(output, str):
        return question_id, output
    if isinstance(output, list) and len(output) == 2:
        return str(output[0]), str(output[1])
    raise ValueError(f"infer() must return the answer text of one question (or [question id, answer text]), "
                     f"got {type(output).__name__}")


def infer(spec: ReferenceSpec, model_path: Path, hyperparameters: dict, *, data_root: Path | None = None,
          warmup: int = 50, limit: int | None = None, cost_per_hour: float | None = None,
          out_dir: Path | None = None, progress: bool = True, seed: int = 0,
          threshold: float | None = None, instance: str | None = None, nodes: int = 1,
          price: dict | None = None) -> dict:
    """`cost_per_hour` is for every node together (price x nodes); `price` is one node's record."""
    task = spec.task
    threshold = task.threshold if threshold is None else threshold
    data_root = Path(data_root or datasets.default_data_root())
    model_path = Path(model_path)
    if not model_path.exists():
        raise FileNotFoundError(f"model {model_path} not found; a converged `dawnbench run` leaves "
                                f"one in results/<reference>/<run id>/model")
    labels = datasets.load_eval_labels(task.dataset, data_root)
    dropped = datasets.load_blacklist(task.dataset, data_root)

    # The model runs in a sandboxed predictor; the timer runs here, in a process the reference's
    # code never enters: each latency is the round trip of one request on the channel.
    isolation = sandbox.probe()
    sandbox.protect_harness()
    work = Path(tempfile.mkdtemp(prefix="dawnbench-infer-"))
    os.chmod(work, 0o755)
    models = work / "models"
    shutil.copytree(model_path, models / "model", symlinks=True)
    worker = None
    try:
        worker, seen = runner.start_worker("predict", spec, isolation, data_root=data_root,
                                           derived=work / "derived", snapshots=models)
        worker.call("init", name=spec.name, config=dict(hyperparameters), seed=seed, task=task.name, rank=0,
                    world_size=1, local_rank=0, show_progress=False, role="predict",
                    data_root=seen["data_root"], work_dir=seen["work_dir"], references=seen["references"])
        try:
            worker.call("load", path=f"{seen['snapshots']}/model")
        except sandbox.WorkerError as e:   # the framework's own error, often many lines: keep it to one
            lines = [line.strip() for line in str(e).splitlines() if line.strip()] or ["load failed"]
            mismatch = [line for line in lines if "mismatch" in line]     # the line that names a shape
            detail = " ".join((mismatch or lines)[0].split())
            raise UsageError(f"model {model_path} does not load into {spec.name} with these hyperparameters "
                             f"({detail[:300]}); give the --set values it was trained with (a run records them "
                             f"in result.json next to model/)") from e
        count = int(worker.call("inputs")[0]["count"])
        n = count if limit is None else min(limit, count)
        if limit is None and n != len(labels):
            raise ValueError(f"eval_inputs() gave {n} examples; the {task.name} eval set here has {len(labels)}")
        overhead = _round_trip_ms(worker)
        for i in range(min(warmup, n)):   # warm caches, allocators and lazy initialisation
            worker.call("infer", index=i)
        latencies = np.empty(n, dtype=np.float64)
        outputs = []
        bar = range(n)
        if progress:
            from tqdm import tqdm
            bar = tqdm(bar, total=n, desc="infer", unit="item", leave=False, file=sys.stderr, mininterval=0.5)
        for i in bar:
            t0 = time.perf_counter()
            reply, array = worker.call("infer", index=i)
            latencies[i] = time.perf_counter() - t0
            outputs.append(reply["answer"] if "answer" in reply else array)
    finally:
        if worker is not None:
            worker.kill()
        shutil.rmtree(work, ignore_errors=True)

    if task.metric == "f1":
        # SQuAD: infer returns the answer text of the i-th question in canonical order (or a pair
        # (question id, answer text)); scored over exactly the questions inferred
        predictions = dict(_answer(labels.ids[i], o) for i, o in enumerate(outputs))
        scores = task.score(predictions, labels[:n])
    else:
        predictions = np.stack([np.asarray(o) for o in outputs])
        # the blacklist (ImageNet's) applies to the whole eval set, as in a run
        scores = task.score(predictions, labels[:n], dropped if n == len(labels) else None)
    value = scores[task.metric]
    ms = latencies * 1000.0
    mean_ms = float(ms.mean())
    system = environment.describe_system(data_root)
    result = {
        "reference": spec.name,
        "task": task.name,
        "model_path": str(model_path),
        "items": n,
        "complete_eval_set": n == len(labels) == task.eval_examples,
        **({"usedBlacklist": dropped is not None and n == len(labels)}
           if "blacklist" in datasets.manifest(task.dataset) else {}),
        "batch_size": 1,
        "warmup_items": min(warmup, n),
        "latency": mean_ms,  # DAWNBench v1 field: ms per item
        "latency_ms": {"mean": mean_ms, "p50": float(np.percentile(ms, 50)),
                       "p90": float(np.percentile(ms, 90)), "p99": float(np.percentile(ms, 99)),
                       "min": float(ms.min()), "max": float(ms.max())},
        "metric": task.metric,
        "metric_value": value,
        **scores,
        "threshold": threshold,
        "official_threshold": threshold == task.threshold,
        "reached_threshold": bool(value >= threshold),
        "costPerHour": cost_per_hour,
        "instance": instance,
        "nodes": nodes,
        "price": price,
        # DAWNBench v1: cost per item = costPerHour x latency / 3.6e6
        "cost": cost_per_hour * mean_ms / 3.6e6 if cost_per_hour is not None else None,
        "cost_per_10k_items_usd": cost_per_hour * mean_ms / 3.6e6 * 1e4 if cost_per_hour is not None else None,
        "hardware": environment.hardware_label(system, 1),
        "framework": environment.framework_label(spec.framework),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        # Each latency is a round trip to the sandboxed predictor; an empty request's median round trip:
        "round_trip_overhead_ms": overhead,
        "isolation": {"mode": isolation.mode, "reason": isolation.reason},
        "image_digest": system["image_digest"],
        "timestamp": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    out_dir = Path(out_dir) if out_dir else paths.results_root() / spec.name / (
        "infer-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "inference.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out_dir / "env.json").write_text(json.dumps(system, indent=2) + "\n", encoding="utf-8")
    result["out_dir"] = str(out_dir)
    return result


def _round_trip_ms(worker, calls: int = 200) -> float:
    """The median round trip of an empty request: what the channel adds to every latency."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        worker.call("noop")
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1000.0)


def summary_lines(result: dict) -> list[str]:
    lat = result["latency_ms"]
    lines = [
        f"{result['items']} items, batch 1: mean {lat['mean']:.3f} ms  p50 {lat['p50']:.3f}  "
        f"p90 {lat['p90']:.3f}  p99 {lat['p99']:.3f}  (round trips to the sandboxed model; an empty one "
        f"takes {result['round_trip_overhead_ms']:.3f} ms)",
        f"{result['metric']} {100 * result['metric_value']:.2f}% "
        f"({'reaches' if result['reached_threshold'] else 'BELOW'} the {100 * result['threshold']:.0f}% threshold)",
    ]
    if result["cost_per_10k_items_usd"] is not None:
        lines.append(f"cost per 10,000 items: ${result['cost_per_10k_items_usd']:.6f}")
    lines.append(f"results: {result['out_dir']}")
    return lines


