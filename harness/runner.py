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

import math
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from harness import collective, datasets, environment, outputs, paths, provenance, sandbox, stored_predictions, views
from harness.clock import Clock
from harness.events import EventLog
from harness.registry import ReferenceSpec, check_trains
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
    series_id: str | None = None        # the run folder is results/<REF>/<series id>/<run id>
    progress: bool = True
    cost_per_hour: float | None = None  # USD per hour for every node together (price x nodes)
    save_model: bool = True
    instance: str | None = None         # "provider:instance" the price came from (the host's prices table)
    nodes: int = 1
    price: dict | None = None           # {"instance", "usd_per_hour", "source", "date"} of one node


@dataclass(frozen=True)
class EvalSet:
    """The eval set a run scores: `examples` predictions are asked for, all but the `dropped` ones
    (ImageNet's blacklist) are scored."""
    task: object
    examples: int
    dropped_indices: object = None

    @property
    def dropped(self) -> int:
        return 0 if self.dropped_indices is None else len(self.dropped_indices)

    @property
    def scored(self) -> int:
        return self.examples - self.dropped

    def reasons(self) -> list[str]:
        """Why a run on this eval set is not official: a fixture's or a subset's size."""
        if self.examples == self.task.eval_examples:
            return []
        return [f"the eval set has {self.examples} examples, not the {self.task.eval_examples} of the "
                f"{self.task.name} task (fixture or subset data)"]


def official_verdict(spec: ReferenceSpec, threshold: float, data_reasons: list[str], eval_set: EvalSet, isolation,
                     reasons: list[str] | tuple = ()) -> dict:
    """git, provenance, official and unofficial_reasons (harness.provenance.collect) of a run or of
    an inference on this eval set: the harness's reasons first, then the caller's `reasons`."""
    task = spec.task
    found = [] if threshold == task.threshold else [
        f"--threshold {threshold:g} is not the task's {task.threshold:g} (a smoke test)"]
    found += list(data_reasons) + eval_set.reasons() + list(reasons)
    blacklist = datasets.manifest(task.dataset).get("blacklist", {})
    if eval_set.dropped_indices is not None and "sha256" not in blacklist:
        found.append(f"the {task.dataset} blacklist cannot be proven official: datasets.toml records no sha256 "
                     f"of {blacklist['file']} to check it against (its sha256 is in provenance.datasets)")
    if not isolation.isolated:
        found.append(isolation.reason)
    return provenance.collect(spec, datasets.verified_files(), found)


def dist_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun and other launchers set them."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def _say(msg: str, rank: int) -> None:
    if rank == 0:
        print(msg, file=sys.stderr, flush=True)


def _data_files(task, data_root: Path, role: str, derived: Path) -> list[tuple[Path, str]]:
    return views.view_files(task.dataset, data_root, role, derived)


def start_worker(role: str, spec: ReferenceSpec, isolation, *, data_root: Path, derived: Path,
                 snapshots: Path | None, env: dict[str, str] | None = None):
    """A sandboxed worker of `role`, with the role's data; returns it and the paths it sees."""
    env, copies = dict(env or {}), []
    override = os.environ.get(datasets.MANIFEST_ENV)
    if override:   # the fixture checksums an unofficial run was started with, for the worker's own checks
        copies.append(Path(override))
        env[datasets.MANIFEST_ENV] = "{scratch}/" + Path(override).name
    return sandbox.start(role, isolation, reference_dir=spec.directory,
                         data_files=views.view_files(spec.task.dataset, data_root, role, derived),
                         snapshots=snapshots, copies=copies, env=env, hidden=views.system_copies())


def _check_stats(raw: dict) -> dict[str, float]:
    return {k: float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def run(spec: ReferenceSpec, hyperparameters: dict, opts: RunOptions) -> dict:
    """Run one reference to its threshold or its budget; returns result.json's content."""
    check_trains(spec)
    task = spec.task
    rank, world_size, local_rank = dist_env()
    threshold = task.threshold if opts.threshold is None else opts.threshold
    max_epochs = opts.max_epochs or spec.max_epochs
    max_seconds = opts.max_seconds or spec.max_seconds
    data_root = Path(opts.data_root or datasets.default_data_root())

    # The harness's own labels, from the checksummed official files; a missing dataset fails
    # here, before any folder is made, with the fetch command.
    dataset_files, data_reasons = datasets.check_all(task.dataset, data_root)     # before any folder
    labels = datasets.load_eval_labels(task.dataset, data_root)
    dropped = datasets.load_blacklist(task.dataset, data_root)
    eval_set = EvalSet(task, len(labels), dropped)
    isolation = sandbox.probe()
    # Before any of the reference's code runs: the code and data this run is of, and whether it is official.
    prov = official_verdict(spec, threshold, data_reasons, eval_set, isolation)
    group = collective.Group(rank, world_size)

    run_dir = outputs.new_run_dir(opts.results_root, spec.name, opts.seed, opts.run_id,
                                  opts.series_id) if rank == 0 else None
    system = environment.describe_system(Path(data_root))
    sandbox.protect_harness()

    clock = Clock()      # the workers synchronize their device before they answer
    log = EventLog(run_dir / "events.jsonl" if run_dir else None, clock.wall_ms)
    tsv = outputs.LineFile(run_dir / f"{spec.name}.tsv") if run_dir else None
    if tsv:
        tsv.write("\t".join(task.tsv_columns) + "\n")

    previous_sigterm = signal.getsignal(signal.SIGTERM)

    def _on_sigterm(signum, frame):
        raise Terminated("terminated by SIGTERM")
    signal.signal(signal.SIGTERM, _on_sigterm)

    work = Path(tempfile.mkdtemp(prefix="dawnbench-run-"))
    snapshots = work / "snapshots"
    snapshots.mkdir()
    os.chmod(work, 0o755)
    trainer = predictor = None
    framework_extra: dict = {}
    status, reason, epoch = DNC, "", 0
    scores: dict[str, float] = {}
    reached_at: dict | None = None
    history: list[dict] = []
    last_snapshot: Path | None = None
    try:
        clock.start()      # before the reference's code is imported: its imports count
        log.point("submission_benchmark", task.name)
        log.point("submission_org", spec.author)
        log.point("submission_platform", environment.hardware_label(system, world_size, opts.nodes))
        log.point("seed", opts.seed)
        log.point("eval_samples", eval_set.scored, dropped=eval_set.dropped)
        log.point("dawnbench_threshold", threshold, metric=task.metric)
        log.point("dawnbench_hyperparameters", hyperparameters)
        log.point("dawnbench_isolation", isolation.mode, reason=isolation.reason)
        log.point("dawnbench_dataset", task.dataset, files=list(dataset_files.values()))
        log.point("submission_division", "open")        # docs/RULES.md "The MLPerf reading"
        log.point("submission_status", "research")
        log.point("cache_clear", False)                 # logged as MLPerf requires; the OS cache is not dropped
        log.start("init_start", 0.0)
        trainer, seen = start_worker("train", spec, isolation, data_root=data_root, derived=work / "derived",
                                     snapshots=snapshots)
        init = {"name": spec.name, "config": dict(hyperparameters), "eval_examples": eval_set.examples,
                "seed": opts.seed, "task": task.name, "rank": rank, "world_size": world_size,
                "local_rank": local_rank, "show_progress": opts.progress}
        trainer.call("init", **init, role="train", data_root=seen["data_root"], work_dir=seen["work_dir"],
                     references=seen["references"])
        clock.lap("init")
        log.end("init_stop", clock.elapsed())
        log.start("run_start", clock.elapsed())         # MLPerf's order; the DAWNBench clock still counts from init_start

        for epoch in range(1, max_epochs + 1):
            clock.lap("harness")
            log.start("epoch_start", clock.elapsed(), epoch_num=epoch)
            name = f"epoch-{epoch:03d}"
            reply, _ = trainer.call("train", epoch=epoch,
                                    snapshot=f"{seen['snapshots']}/{name}" if rank == 0 else None)
            # Nothing of the trainer runs until the next epoch: no thread trains on while the harness
            # evaluates off the clock.
            handover = time.perf_counter()
            trainer.freeze()
            handover = time.perf_counter() - handover
            clock.lap("train")
            stats = _check_stats(reply.get("stats") or {})
            loss = float(stats.get("loss", float("nan")))
            on_clock, bad_loss = group.max([clock.on_clock(), 0.0 if math.isfinite(loss) else 1.0])
            # `samples` is what this rank trained on; MLPerf's train_samples is the whole run's, every rank's
            (samples_all,) = group.sum([stats.get("samples", 0.0)])
            if epoch == 1:  # MLPerf: exactly once; every epoch's count is in its epoch_stop metadata
                log.point("train_samples", int(samples_all), clock.elapsed(), epoch_num=epoch)
            log.end("epoch_stop", clock.elapsed(), epoch_num=epoch, **stats,
                    **({"samples_all_ranks": samples_all} if world_size > 1 else {}))
            if bad_loss:
                reason = f"diverged: training loss is {loss} at epoch {epoch}"
                break

            log.start("eval_start", clock.elapsed(), epoch_num=epoch)
            value, verdict, stored = float("nan"), 0.0, {}
            if rank == 0:
                if predictor is None:     # started at the first eval, in the eval span: off the clock
                    predictor, pseen = start_worker("predict", spec, isolation, data_root=data_root,
                                                    derived=work / "derived", snapshots=snapshots)
                    predictor.call("init", **init, role="predict", data_root=pseen["data_root"],
                                   work_dir=pseen["work_dir"], references=pseen["references"])
                    # what the harness derived from the eval files for the predictor (label-free copies)
                    log.point("dawnbench_eval_inputs", len(derived := views.derived_files(work / "derived")),
                              clock.elapsed(), files=derived)
                predictor.call("load", path=f"{pseen['snapshots']}/{name}")
                last_snapshot = snapshots / name
                answer, array = predictor.call("predict")
                predictions = answer["answers"] if "answers" in answer else array
                count = task.count(predictions) if predictions is not None else 0
                if count != eval_set.examples:
                    raise PredictionCountError(
                        f"predict() returned {count} predictions; the {task.name} eval set has "
                        f"{eval_set.examples} examples, every one needs a prediction in canonical order")
                scores = task.score(predictions, labels, dropped)
                # what `harness verify` re-scores offline; written in the eval span, off the clock
                try:
                    stored = stored_predictions.save(run_dir, epoch, task, predictions) if run_dir else {}
                except OSError as exc:       # a full or read-only disk: one line, not a traceback
                    raise outputs.WriteError(run_dir / "predictions", exc) from None
                value = scores[task.metric]
                verdict = 1.0 if value >= threshold else 0.0
            (reached,) = group.broadcast([verdict])
            clock.lap("eval")
            thaw = time.perf_counter()
            trainer.thaw()
            handover += time.perf_counter() - thaw
            log.point("eval_accuracy", value, clock.elapsed(), epoch_num=epoch, metric=task.metric,
                      **{k: v for k, v in scores.items() if k != task.metric},
                      **({"predictions_file": stored["file"], "predictions_sha256": stored["sha256"]} if stored else {}))
            log.end("eval_stop", clock.elapsed(), epoch_num=epoch)
            row = {"epoch": epoch, "tta_seconds": round(on_clock, 3),
                   "wall_seconds": round(clock.elapsed(), 3), **scores, **stats,
                   "handover_ms": round(1000 * handover, 3)}
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

        framework_extra = _versions(trainer)
        if opts.save_model and run_dir and last_snapshot is not None and not reason.startswith("diverged"):
            # The model of the last evaluated epoch, as its snapshot was scored: harness work, after the clock.
            outputs.copy_tree(last_snapshot, run_dir / "model")
            log.point("checkpoint", str(run_dir / "model"), clock.elapsed())
    except outputs.WriteError:
        raise           # the run folder cannot take its files: no result to write, one line to say why
    except (Exception, KeyboardInterrupt, Terminated) as exc:
        status = DNC
        trace = getattr(exc, "trace", "") or traceback.format_exc()
        reason = f"error: {exc}" if isinstance(exc, (sandbox.WorkerError, sandbox.WorkerDied)) \
            else f"error: {type(exc).__name__}: {exc}"
        log.point("dawnbench_error", trace, clock.read() if clock.start_perf is not None else 0.0)
        if getattr(exc, "usage", False):     # the entrant's configuration: one line, no traceback
            print(f"{spec.name}: {exc}", file=sys.stderr)
        else:
            print(trace, file=sys.stderr)
        if clock.start_perf is not None:
            clock.lap("harness")
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        for worker in (trainer, predictor):
            if worker is not None:
                worker.kill()
        shutil.rmtree(work, ignore_errors=True)
        if tsv:
            tsv.close()

    wall = clock.elapsed()
    try:
        wall = group.max([wall])[0]
    except Exception:   # a lost rank must not cost us the result file
        pass
    group.close()
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
        "hardware": environment.hardware_label(system, world_size, opts.nodes),
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
        "eval_examples": eval_set.scored,
        # DAWNBench v1's ImageNet field, on tasks that have a blacklist
        **({"usedBlacklist": dropped is not None} if "blacklist" in datasets.manifest(task.dataset) else {}),
        "seed": opts.seed,
        "world_size": world_size,
        "hyperparameters": hyperparameters,
        "spans_seconds": {k: round(v, 4) for k, v in clock.totals.items()},
        "history": history,
        "image_digest": system["image_digest"],
        "isolation": {"mode": isolation.mode, "reason": isolation.reason},
        **prov,     # git, provenance, official, unofficial_reasons
    }
    if rank == 0:
        # result.json last: where it is, the folder is whole
        outputs.write_json(run_dir / "env.json", {**system, "framework_extra": framework_extra})
        outputs.write_json(run_dir / "result.json", result)
        _give_to_owner_of(run_dir)
        if status == CONVERGED:
            _say(f"converged: {task.metric} {100 * result['metric_value']:.2f}% at epoch {epoch}; "
                 f"time-to-accuracy {tta_seconds:.1f} s (eval excluded), "
                 f"wall {wall:.1f} s", rank)
        else:
            _say(f"DNC: {reason}", rank)
        _say(f"results: {run_dir}", rank)
    result["run_dir"] = str(run_dir) if run_dir else None
    return result


def _give_to_owner_of(run_dir: Path) -> None:
    """Root in a container writes for the host's user: the run folder goes to the owner of its parent."""
    if os.geteuid() != 0:
        return
    owner = run_dir.parent.stat()
    if owner.st_uid == 0:
        return
    for dirpath, dirnames, filenames in os.walk(run_dir):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in [*dirnames, *filenames])]:
            os.lchown(name, owner.st_uid, owner.st_gid)


def _versions(trainer) -> dict:
    if trainer.frozen:      # the run ended right after an epoch (a diverged loss): let it answer
        trainer.thaw()
    try:
        return trainer.call("versions")[0]["versions"]
    except Exception as exc:  # a version probe must not lose a finished run
        return {"error": str(exc)}
