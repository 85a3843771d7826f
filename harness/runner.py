"""The runner: the one loop every reference runs under. It owns the clock.

    labels <- official files (checksummed)           before the clock
    run_start, setup                                 init span      (on the clock)
    for epoch: train_epoch                           train span     (on the clock)
               predict + score                       eval span      (off the clock)
               stop at the first epoch >= threshold
    save                                             checkpoint span (off the clock)
    run_stop

See docs/RULES.md for what counts and how DNC is decided.
"""
from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import datasets, environment, paths, provenance
from harness.clock import Clock
from harness.events import EventLog
from harness.reference import Context, Reference
from harness.registry import ReferenceSpec
from harness.tasks import RULES_VERSION

CONVERGED, DNC = "converged", "DNC"


class Terminated(BaseException):
    """SIGTERM (e.g. torchrun stopping the group after another rank failed)."""


class PredictionCountError(Exception):
    pass


@dataclass
class RunOptions:
    seed: int = 0
    max_epochs: int | None = None       # default: the reference's budget
    max_seconds: float | None = None    # on-clock seconds; default: the reference's budget
    threshold: float | None = None      # default: the task's; a lowered one is marked unofficial
    results_root: Path = field(default_factory=paths.results_root)     # default ./results
    data_root: Path | None = None
    run_id: str | None = None
    progress: bool = True
    cost_per_hour: float | None = None  # USD per hour for every node together (price x nodes)
    save_model: bool = True
    instance: str | None = None         # "provider:instance" the price came from (the host's prices table)
    nodes: int = 1
    price: dict | None = None           # {"instance", "usd_per_hour", "source", "date"} of one node


def dist_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun and other launchers set them."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def _new_run_dir(results_root: Path, reference: str, seed: int, run_id: str | None) -> Path:
    base = results_root / reference
    base.mkdir(parents=True, exist_ok=True)
    stem = run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-seed{seed}"
    for n in range(1, 1000):
        candidate = base / (stem if n == 1 else f"{stem}-{n}")
        try:
            candidate.mkdir()   # never reuse a folder: earlier results are never overwritten
            return candidate
        except FileExistsError:
            if run_id:
                raise FileExistsError(f"run folder {candidate} already exists; choose another --run-id") from None
    raise RuntimeError(f"could not create a run folder under {base}")


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _say(msg: str, rank: int) -> None:
    if rank == 0:
        print(msg, file=sys.stderr, flush=True)


def run(spec: ReferenceSpec, hyperparameters: dict, opts: RunOptions) -> dict:
    """Run one reference to its threshold or its budget; returns result.json's content."""
    task = spec.task
    rank, world_size, local_rank = dist_env()
    threshold = task.threshold if opts.threshold is None else opts.threshold
    max_epochs = opts.max_epochs or spec.max_epochs
    max_seconds = opts.max_seconds or spec.max_seconds
    data_root = Path(opts.data_root or datasets.default_data_root())

    # The harness's own labels, from the checksummed official files; a missing dataset fails
    # here, before any folder is made, with the fetch command.
    labels = datasets.load_eval_labels(task.dataset, data_root)
    # Before any of the reference's code runs: the code and data this run is of, and whether it is official.
    lowered = [] if threshold == task.threshold else [
        f"--threshold {threshold:g} is not the task's {task.threshold:g} (a smoke test)"]
    prov = provenance.collect(spec, datasets.verified_files(), lowered)

    ref: Reference = spec.load_entry_class()()
    run_dir = _new_run_dir(Path(opts.results_root), spec.name, opts.seed, opts.run_id) if rank == 0 else None
    system = environment.describe_system(Path(data_root))
    random.seed(opts.seed)
    np.random.seed(opts.seed)

    clock = Clock(sync=ref.synchronize)
    log = EventLog(run_dir / "events.jsonl" if run_dir else None, clock.wall_ms)
    tsv = open(run_dir / f"{spec.name}.tsv", "w", buffering=1, encoding="utf-8") if run_dir else None
    if tsv:
        tsv.write("\t".join(task.tsv_columns) + "\n")

    previous_sigterm = signal.getsignal(signal.SIGTERM)

    def _on_sigterm(signum, frame):
        raise Terminated("terminated by SIGTERM")
    signal.signal(signal.SIGTERM, _on_sigterm)

    status, reason, epoch = DNC, "", 0
    scores: dict[str, float] = {}
    reached_at: dict | None = None
    history: list[dict] = []
    try:
        clock.start()
        log.point("submission_benchmark", task.name)
        log.point("submission_org", spec.author)
        log.point("submission_platform", environment.hardware_label(system, world_size))
        log.point("seed", opts.seed)
        log.point("eval_samples", task.eval_examples)
        log.point("dawnbench_threshold", threshold, metric=task.metric)
        log.point("dawnbench_hyperparameters", hyperparameters)
        log.start("run_start", 0.0)
        log.start("init_start", 0.0)
        ctx = Context(config=dict(hyperparameters), data_root=data_root, seed=opts.seed, task=task,
                      rank=rank, world_size=world_size, local_rank=local_rank,
                      work_dir=run_dir, show_progress=opts.progress)
        ref.setup(ctx)
        clock.lap("init")
        log.end("init_stop", clock.elapsed())

        for epoch in range(1, max_epochs + 1):
            clock.lap("harness")
            log.start("epoch_start", clock.elapsed(), epoch_num=epoch)
            stats = dict(ref.train_epoch(epoch) or {})
            clock.lap("train")
            loss = float(stats.get("loss", float("nan")))
            on_clock, bad_loss = ref.all_max([clock.on_clock(), 0.0 if math.isfinite(loss) else 1.0])
            log.point("train_samples", int(stats.get("samples", 0)), clock.elapsed(), epoch_num=epoch)
            log.end("epoch_stop", clock.elapsed(), epoch_num=epoch,
                    **{k: float(v) for k, v in stats.items() if isinstance(v, (int, float))})
            if bad_loss:
                reason = f"diverged: training loss is {loss} at epoch {epoch}"
                break

            log.start("eval_start", clock.elapsed(), epoch_num=epoch)
            predictions = ref.predict()
            count = task.count(predictions)
            if count != task.eval_examples or count != len(labels):
                raise PredictionCountError(
                    f"predict() returned {count} predictions; the {task.name} eval set has "
                    f"{task.eval_examples} examples, every one needs a prediction in canonical order")
            scores = task.score(predictions, labels)
            clock.lap("eval")
            value = scores[task.metric]
            (reached,) = ref.all_max([1.0 if value >= threshold else 0.0])
            log.point("eval_accuracy", value, clock.elapsed(), epoch_num=epoch, metric=task.metric,
                      **{k: v for k, v in scores.items() if k != task.metric})
            log.end("eval_stop", clock.elapsed(), epoch_num=epoch)
            row = {"epoch": epoch, "tta_seconds": round(on_clock, 3),
                   "wall_seconds": round(clock.elapsed(), 3), **scores,
                   **{k: v for k, v in stats.items() if isinstance(v, (int, float))}}
            history.append(row)
            if tsv:
                tsv.write("\t".join(task.tsv_row(epoch, on_clock / 3600.0, scores)) + "\n")
            _say(f"epoch {epoch:3d}/{max_epochs}  loss {loss:.4f}  {task.metric} {100 * value:6.2f}% "
                 f"(target {100 * threshold:.2f}%)  time-to-accuracy clock {on_clock:7.1f} s", rank)
            if reached:
                status, reached_at = CONVERGED, row
                break
            if on_clock >= max_seconds:
                reason = f"budget: {on_clock:.1f} s on the clock >= max_seconds={max_seconds:g}"
                break
        else:
            reason = f"budget: max_epochs={max_epochs} reached without {task.metric} >= {threshold}"

        if opts.save_model and not reason.startswith("diverged"):
            if run_dir:
                ref.save(run_dir / "model")
            clock.lap("checkpoint")
            log.point("checkpoint", str(run_dir / "model") if run_dir else None, clock.elapsed())
    except (Exception, KeyboardInterrupt, Terminated) as exc:
        status = DNC
        reason = f"error: {type(exc).__name__}: {exc}"
        trace = traceback.format_exc()
        log.point("dawnbench_error", trace, clock.read() if clock.start_perf is not None else 0.0)
        print(trace, file=sys.stderr)
        if clock.start_perf is not None:
            clock.lap("harness")
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        if tsv:
            tsv.close()

    wall = clock.elapsed()
    try:
        wall = ref.all_max([wall])[0]
    except Exception:   # a broken process group must not cost us the result file
        pass
    try:
        ref.close()
    except Exception as exc:
        print(f"warning: {spec.name} close() failed: {exc!r}", file=sys.stderr)
    log.end("run_stop", wall, status="success" if status == CONVERGED else "aborted",
            dawnbench_status=status, reason=reason)
    log.close()

    tta_seconds = reached_at["tta_seconds"] if reached_at else None
    cost_usd = (opts.cost_per_hour * tta_seconds / 3600.0
                if opts.cost_per_hour is not None and tta_seconds is not None else None)
    result = {
        # DAWNBench v1 training-entry fields
        "version": "v1.0",
        "author": spec.author,
        "authorEmail": spec.author_email,
        "framework": environment.framework_label(spec.framework),
        "codeURL": spec.code_url,
        "model": spec.model,
        "hardware": environment.hardware_label(system, world_size),
        "costPerHour": opts.cost_per_hour,
        "timestamp": time.strftime("%Y-%m-%d", time.gmtime(clock.start_wall or time.time())),
        "logFilename": f"{spec.name}.tsv",
        "commitHash": prov["git"]["commit"],
        "misc": {"reference": spec.name, "description": spec.description},
        # explicit-unit fields
        "reference": spec.name,
        "task": task.name,
        "rules_version": RULES_VERSION,
        "run_id": run_dir.name if run_dir else None,
        "status": status,
        "dnc_reason": reason or None,
        "metric": task.metric,
        "metric_value": (reached_at or (history[-1] if history else {})).get(task.metric),
        "threshold": threshold,
        "official_threshold": threshold == task.threshold,
        "tta_seconds": tta_seconds,
        "wall_seconds": round(wall, 3),
        "cost_usd": cost_usd,
        "instance": opts.instance,
        "nodes": opts.nodes,
        "price": opts.price,
        "epochs": epoch,
        "eval_examples": task.eval_examples,
        "seed": opts.seed,
        "world_size": world_size,
        "hyperparameters": hyperparameters,
        "spans_seconds": {k: round(v, 4) for k, v in clock.totals.items()},
        "history": history,
        "image_digest": system["image_digest"],
        **prov,     # git, provenance, official, unofficial_reasons
    }
    if rank == 0:
        _write_json(run_dir / "result.json", result)
        _write_json(run_dir / "env.json", {**system, "framework_extra": _safe(ref.framework_versions)})
        if status == CONVERGED:
            _say(f"converged: {task.metric} {100 * result['metric_value']:.2f}% at epoch {epoch}; "
                 f"time-to-accuracy {tta_seconds:.1f} s (eval and checkpoint excluded), "
                 f"wall {wall:.1f} s", rank)
        else:
            _say(f"DNC: {reason}", rank)
        _say(f"results: {run_dir}", rank)
    result["run_dir"] = str(run_dir) if run_dir else None
    return result


def _safe(fn) -> dict:
    try:
        return fn()
    except Exception as exc:  # a version probe must not lose a finished run
        return {"error": repr(exc)}
