"""What a run leaves behind, written as it goes, by the harness alone (docs/RULES.md, "What a run
leaves behind"):

    events.jsonl            the MLLOG event log, in MLPerf's order, a line at a time
    <reference>.tsv         the DAWNBench log: a row per scored epoch
    predictions/            each scored epoch's predictions (harness.stored_predictions)
    model/                  the snapshot that was scored last, as it was scored
    env.json, result.json   at the end; result.json last: where it is, the folder is whole

The runner says what happened (an epoch trained, an epoch scored, the run ended) and reads the
clock; the record decides how it is written. On ranks other than 0 it has no folder: it writes
nothing and still keeps the history.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness import precision, safe_write, stored_predictions
from harness.clock import Clock
from harness.events import EventLog
from harness.stop_rules import CONVERGED, Outcome
from harness.tasks import SCORE_NAMES

# The names the harness writes beside a trainer's stats: in epoch_stop's metadata, and in a history row of
# result.json (the scores of every task, the times). A trainer's stat of one of these names would stand
# in for the harness's figure (a "tta_seconds" in train_epoch's dict was result.json's time, issue 33),
# so the runner refuses it (harness.runner._check_stats).
HARNESS_KEYS = frozenset({"clock_s", "epoch_num", "samples_all_ranks", "epoch", "tta_seconds", "wall_seconds",
                          "handover_ms", "train_seconds", *SCORE_NAMES})


class RunRecord:
    def __init__(self, run_dir: Path | None, spec, clock: Clock):
        self.run_dir, self.spec, self.task, self.clock = run_dir, spec, spec.task, clock
        # Every write checks the folder is still the one the run made (safe_write.RunFolder)
        self.folder = safe_write.RunFolder(run_dir) if run_dir else None
        self.log = EventLog(run_dir / "events.jsonl" if run_dir else None, clock.wall_ms, self.folder)
        self.tsv = safe_write.LineFile(run_dir / f"{spec.name}.tsv", folder=self.folder) if run_dir else None
        if self.tsv:
            self.tsv.write("\t".join(self.task.tsv_columns) + "\n")
        self.history: list[dict] = []       # a row per scored epoch: result.json's history
        self.eval_from_epoch = 1            # the reference's first evaluated epoch, as the header logged it
        self.precision = dict(precision.NOT_REPORTED)   # what the trainer reports it trains in, once set up

    # --- the log, in the order a run writes it ------------------------------------------------

    def header(self, *, hardware: str, seed: int, eval_set, threshold: float, hyperparameters: dict,
               isolation, dataset_files: list, train_examples: tuple[int, str] | None = None,
               eval_from_epoch: int = 1, max_epochs: int | None = None, nodes: int = 1,
               world_size: int = 1) -> None:
        """What the run is, before any of the reference's code runs; then init_start at 0."""
        task, log = self.task, self.log
        self.eval_from_epoch = eval_from_epoch
        log.point("submission_benchmark", task.name)
        log.point("submission_org", self.spec.author)
        log.point("submission_platform", hardware)
        log.point("dawnbench_nodes", nodes, world_size=world_size)    # what the cost multiplies; verify reads it
        log.point("seed", seed)
        log.point("eval_samples", eval_set.scored, dropped=eval_set.dropped)
        log.point("dawnbench_threshold", threshold, metric=task.metric)
        log.point("dawnbench_hyperparameters", hyperparameters)
        log.point("dawnbench_isolation", isolation.mode, reason=isolation.reason)
        log.point("dawnbench_dataset", task.dataset, files=dataset_files)
        if train_examples is not None:      # the eval bound's training set, and where the harness took it from
            log.point("dawnbench_train_examples", train_examples[0], source=train_examples[1])
        # Which epochs are evaluated: eval_from_epoch..max_epochs, the reference's choice (docs/RULES.md)
        log.point("dawnbench_eval_from_epoch", eval_from_epoch, max_epochs=max_epochs)
        log.point("submission_division", "open")        # docs/RULES.md "The MLPerf reading"
        log.point("submission_status", "research")
        log.point("cache_clear", False)                 # logged as MLPerf requires; the OS cache is not dropped
        log.start("init_start", 0.0)

    def trains_in(self, recorded: dict) -> None:
        """The trainer's report of its training precision (harness.precision.recorded), in the init span."""
        self.precision = recorded
        self.log.point("dawnbench_precision", recorded["train"], self.clock.elapsed(), reason=recorded["reason"])

    def initialized(self) -> None:
        t = self.clock.elapsed()
        self.log.end("init_stop", t)
        self.log.start("run_start", t)     # MLPerf's order; the DAWNBench clock still counts from init_start

    def epoch_started(self, epoch: int) -> None:
        self.log.start("epoch_start", self.clock.elapsed(), epoch_num=epoch)

    def epoch_trained(self, epoch: int, stats: dict, samples_all_ranks: float, world_size: int) -> None:
        t = self.clock.elapsed()
        if epoch == 1:  # MLPerf: exactly once, the whole run's (every rank's); each epoch's is in epoch_stop
            self.log.point("train_samples", int(samples_all_ranks), t, epoch_num=epoch)
        self.log.end("epoch_stop", t, **stats, epoch_num=epoch,
                     **({"samples_all_ranks": samples_all_ranks} if world_size > 1 else {}))

    def eval_started(self, epoch: int) -> None:
        self.log.start("eval_start", self.clock.elapsed(), epoch_num=epoch)

    def eval_inputs(self, files: list[dict]) -> None:
        """What the harness derived from the eval files for the predictor (label-free copies)."""
        self.log.point("dawnbench_eval_inputs", len(files), self.clock.elapsed(), files=files)

    def store_predictions(self, epoch: int, predictions) -> dict:
        """The epoch's predictions, for `harness verify` to re-score offline: {file, sha256}, or {} with no folder."""
        if not self.run_dir:
            return {}
        self.folder.check()
        try:
            return stored_predictions.save(self.run_dir, epoch, self.task, predictions)
        except OSError as exc:       # a full or read-only disk: one line, not a traceback
            raise safe_write.WriteError(self.run_dir / "predictions", exc) from None

    def epoch_scored(self, epoch: int, *, value: float, scores: dict, stored: dict, on_clock: float,
                     stats: dict, handover_s: float, snapshot=None, eval_cost: dict | None = None,
                     train_seconds: float = 0.0) -> dict:
        """eval_accuracy (with the scored snapshot's hash) and eval_stop (with what the eval cost
        and its bound) in the log, a TSV row, a history row (returned). `train_seconds`: every train
        span through this epoch (the train time, beside time-to-accuracy; not in the TSV)."""
        t, task = self.clock.elapsed(), self.task
        self.log.point("eval_accuracy", value, t, epoch_num=epoch, metric=task.metric,
                       **{k: v for k, v in scores.items() if k != task.metric},
                       **({"predictions_file": stored["file"], "predictions_sha256": stored["sha256"]}
                          if stored else {}),
                       **({"snapshot_sha256": snapshot.sha256, "snapshot_bytes": snapshot.bytes} if snapshot else {}))
        self.log.end("eval_stop", t, epoch_num=epoch, **(eval_cost or {}))
        row = {**stats, "epoch": epoch, "tta_seconds": round(on_clock, 3), "train_seconds": round(train_seconds, 3),
               "wall_seconds": round(t, 3), **scores,
               "handover_ms": round(1000 * handover_s, 3)}     # the harness's figures last: they win
        self.history.append(row)
        if self.tsv:
            self.tsv.write("\t".join(task.tsv_row(epoch, on_clock / 3600.0, scores)) + "\n")
        return row

    def keep_model(self, snapshot: Path) -> None:
        """The scored snapshot becomes the run's model/: harness work, after the clock."""
        if self.run_dir:
            safe_write.copy_tree(snapshot, self.run_dir / "model", self.folder)
            # the folder inside the run, not its path on this machine: the log goes into a public entry
            self.log.point("checkpoint", "model", self.clock.elapsed())

    def error(self, trace: str) -> None:
        self.log.point("dawnbench_error", trace, self.clock.read() if self.clock.start_perf is not None else 0.0)

    def close(self, outcome: Outcome, wall: float, reached_at: dict | None = None) -> None:
        """run_stop with the outcome (and a converged run's train time); the log and the TSV closed."""
        if self.tsv:
            self.tsv.close()
        self.log.end("run_stop", wall, status="success" if outcome.status == CONVERGED else "aborted",
                     dawnbench_status=outcome.status, reason=outcome.reason,
                     **({"train_seconds": reached_at["train_seconds"]} if reached_at else {}))
        self.log.close()

    # --- the end ------------------------------------------------------------------------------

    def result(self, identity: dict, outcome: Outcome, *, reached_at: dict | None, epochs: int, wall: float,
               threshold: float, cost_per_hour: float | None, eval_examples: int, seed: int, world_size: int,
               hyperparameters: dict) -> dict:
        """result.json's content: the identity (harness.result_identity), then what this run did.
        `reached_at` is the history row of the epoch that converged, None for a DNC."""
        task = self.task
        tta_seconds = reached_at["tta_seconds"] if reached_at else None
        train_seconds = reached_at["train_seconds"] if reached_at else None
        return {
            **identity,
            "logFilename": f"{self.spec.name}.tsv",      # DAWNBench v1: the TSV beside the JSON
            "misc": {"reference": self.spec.name, "description": self.spec.description},
            "run_id": self.run_dir.name if self.run_dir else None,
            "status": outcome.status,
            "dnc_reason": outcome.reason or None,
            "metric": task.metric,
            "metric_value": (reached_at or (self.history[-1] if self.history else {})).get(task.metric),
            "threshold": threshold,
            "official_threshold": threshold == task.threshold,
            "tta_seconds": tta_seconds,
            "train_seconds": train_seconds,     # the train spans only, through the converging epoch
            "wall_seconds": round(wall, 3),
            "cost_usd": cost_per_hour * tta_seconds / 3600.0
            if cost_per_hour is not None and tta_seconds is not None else None,
            "epochs": epochs,
            "eval_from_epoch": self.eval_from_epoch,
            "eval_examples": eval_examples,
            "seed": seed,
            "world_size": world_size,
            "hyperparameters": hyperparameters,
            "precision": self.precision,        # the reference's report (harness.precision), not checked
            "spans_seconds": {k: round(v, 4) for k, v in self.clock.totals.items()},
            "history": self.history,
        }

    def write(self, result: dict, env: dict) -> None:
        """env.json, then result.json: where it is, the folder is whole."""
        if not self.run_dir:
            return
        safe_write.write_json(self.run_dir / "env.json", env, folder=self.folder)
        safe_write.write_json(self.run_dir / "result.json", result, folder=self.folder)
        self.folder.check()
        _give_to_owner_of(self.run_dir)


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
