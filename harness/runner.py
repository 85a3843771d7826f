"""The runner: the one loop every reference runs under. It owns the clock.

    labels <- official files (checksummed)           before the clock (harness.plan)
    run_start, setup                                 init span      (on the clock)
    for epoch: train_epoch                           train span     (on the clock)
               predict + score                       eval span      (off the clock, or on it for a task
                                                     whose tasks.toml says eval_on_clock), from the
                                                     reference's eval_from_epoch on
               stop when the stop rules say so       (harness.stop_rules)
    save                                             checkpoint span (off the clock)
    run_stop, result.json                            (harness.run_record)

See docs/RULES.md for what counts and how DNC is decided.
"""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from harness import (
    collective,
    data_views,
    dropped_signals,
    energy,
    environment,
    eval_bound,
    lm_audit,
    lm_eval,
    load,
    precision,
    provenance,
    result_identity,
    run_record,
    safe_write,
    snapshots,
    stop_rules,
)
from harness.clock import Clock, excluded
from harness.errors import DawnbenchError
from harness.plan import Plan, RunOptions, make_plan
from harness.registry import ReferenceSpec, check_reach, check_trains
from harness.roles import start_worker
from harness.run_record import RunRecord
from harness.sandbox import channel, handle, kernel, scratch
from harness.stop_rules import CONVERGED, DNC, Outcome


class Terminated(BaseException):
    """SIGTERM or SIGHUP: the rank launcher stopping the ranks after one failed (or dying: the ranks' parent-death
    signal), `docker stop`, a closed terminal or a dropped ssh session."""


class PredictionCountError(Exception):
    pass


class BudgetSpent(DawnbenchError):
    """The time budget ran out while the reference's code was still working: the run is DNC."""


# Verdicts the harness reaches on the reference's behaviour: each is the run's DNC reason as it stands.
VERDICTS = (BudgetSpent, eval_bound.EvalOverBound, snapshots.SnapshotRefused, handle.FreezeError,
            channel.ProtocolError, lm_eval.LMRefused)


def _say(msg: str, rank: int = 0) -> None:
    """A line on the terminal (rank 0's): a terminal that is gone (SIGHUP: a closed window, a dropped ssh
    session) must not cost the run its record."""
    if rank == 0:
        with contextlib.suppress(OSError, ValueError):
            print(msg, file=sys.stderr, flush=True)


def run(spec: ReferenceSpec, hyperparameters: dict, opts: RunOptions) -> dict:
    """Run one reference to its threshold or its budget; returns result.json's content.

    Before any folder: the data checked, the eval labels loaded, the verdict made. Then, on the
    clock from before the reference's imports: the trainer's init; each epoch it trains and is
    frozen, the predictor scores the epoch's snapshot off the clock, the trainer is thawed, and the
    stop rules decide. The scored model is kept, and the record is closed however the run ends."""
    check_trains(spec)
    check_reach(spec, opts.threshold)      # every way in (a series, reproduce, compare): never a run bound to end DNC
    plan = make_plan(spec, hyperparameters, opts)
    with _Stops() as stops:
        try:
            this = _Run(plan, stops)
        except (KeyboardInterrupt, Terminated) as exc:     # before its folder was made: nothing was written
            raise Interrupted(exc) from None
        outcome, epoch = Outcome(DNC, "not started"), 0
        with this.workers():
            try:
                stops.arm()         # a signal held since the folder was made raises here: its DNC, every file
                this.start()
                for epoch in range(1, plan.budget.max_epochs + 1):
                    trained = this.train(epoch)
                    outcome = stop_rules.decide(plan.budget, epoch, trained.loss, trained.on_clock)
                    if outcome is None:
                        if stop_rules.evaluated(plan.budget, epoch):
                            reached, on_clock = this.evaluate(epoch, trained)
                        else:       # before the reference's first evaluated epoch: on the clock, nothing scored
                            reached, on_clock = this.skip(epoch, trained)
                        outcome = stop_rules.decide(plan.budget, epoch, trained.loss, on_clock, reached)
                    if outcome is not None:
                        break
                this.keep_model(outcome)
                stops.close()
            except safe_write.WriteError:
                stops.close()
                raise       # the run folder cannot take its files: no result to write, one line to say why
            except (Exception, KeyboardInterrupt, Terminated) as exc:
                stops.close()
                outcome = this.failed(exc)
        if this.survivors:      # a process the kernel would not kill may still write where it can
            outcome = Outcome(DNC, f"error: the reference's processes {this.survivors[:8]} could not be killed "
                                   f"at the end of the run")
        result = this.finish(outcome, epoch)
        if stops.noted:
            _say(f"({', '.join(stops.noted)} while the run closed: its record was finished first)", plan.rank)
        return result


@dataclass(frozen=True)
class Trained:
    """One epoch's training as the harness saw it: the trainer's stats, the loss every rank agrees
    diverged or not, the on-clock seconds so far (every rank's max), the freeze's cost."""
    stats: dict
    loss: float
    on_clock: float
    handover_s: float
    train_s: float = 0.0        # the epoch's train span
    cpu_s: float = 0.0          # the trainer's CPU seconds in it (every process, reaped children too)
    train_total_s: float = 0.0  # every train span so far, this epoch's included (every rank's max): the train time
    rank_train_s: tuple = ()    # every rank's train span this epoch, rank by rank (the eval bound's)


class _Run:
    """One run's moving parts: the clock, the record, the ranks and the reference's workers."""

    def __init__(self, plan: Plan, stops: _Stops):
        self.plan, self.spec, self.task, self.opts = plan, plan.spec, plan.spec.task, plan.opts
        self.group = collective.Group(plan.rank, plan.world_size)
        stops.hold()        # from the folder on, a signal waits for the run's try: its DNC, with every file
        run_dir = safe_write.new_run_dir(self.opts.results_root, self.spec.name, self.opts.seed, self.opts.run_id,
                                      self.opts.series_id) if plan.rank == 0 else None
        try:
            self.system = environment.describe_system(plan.data_root, plan.worker_env)
            kernel.protect_harness()
            # the workers synchronize their device before they answer; the spans off the clock are the task's
            self.clock = Clock(excluded=excluded(self.task.eval_on_clock))
            self.record = RunRecord(run_dir, self.spec, self.clock)
            self.trainer = self.predictor = None
            self.seen: dict = {}
            self.predictor_seen: dict = {}
            self.view_files: dict[str, list] = {}     # each role's data files, as its first start found them
            self.last_snapshot: Path | None = None
            self.reached_at: dict | None = None
            self.framework_extra: dict = {}
            self.init_s = 0.0                   # the trainer's init span: each eval's allowance for its predictor's start
            self.trainer_cpu = 0.0              # the trainer's CPU seconds at its last freeze
            self.predictors_cpu = 0.0           # every eval's predictor's CPU seconds
            self.meter: load.Meter | None = None    # the machine's load, read at start() and before the kill
            self.load_raw: dict | None = None
            # the devices' energy over the train spans, read by the harness (rank 0: its machine's devices)
            self.energy = energy.Meter() if plan.rank == 0 else None
            self.survivors: list[int] = []      # processes the final kill could not end
            self.failure: BaseException | None = None   # what ended the run, where something raised
            # One trainer needs no network. Several ranks keep their harness's for the collective: the host's,
            # or under `python -m harness.local_ranks` one namespace with only a loopback that they share.
            self.network = plan.world_size > 1
            shared = (f"loopback only (one namespace shared by the {plan.world_size} local ranks)"
                      if self.system.get("network_interfaces") == ["lo"] else "the host's (the ranks' collective)")
            self.system["network"] = {
                "train": shared if self.network else "loopback only (its own namespace)",
                "predict": "loopback only (its own namespace)"}
            if plan.isolation.mode in ("uid", "none"):
                self.system["network"] = {role: "not isolated by the harness (a container's own: none under "
                                                "docker-compose)" for role in ("train", "predict")}
        except BaseException:       # an error before the record opened: no half folder stays
            if run_dir is not None:
                shutil.rmtree(run_dir, ignore_errors=True)
            self.group.close()
            raise

    @contextlib.contextmanager
    def workers(self):
        """The scratch folder the workers' snapshots go to; at the end the workers are killed and it is removed."""
        self.work = scratch.private_dir("run")
        for folder in ("snapshots", "scored"):    # the trainer's, and the harness's copies it cannot reach
            (self.work / folder).mkdir()
        os.chmod(self.work, 0o755)
        os.chmod(self.work / "scored", 0o755)
        try:
            yield
        finally:
            self._read_load()
            for worker in (self.trainer, self.predictor):
                if worker is not None:
                    self.survivors += worker.kill()
            shutil.rmtree(self.work, ignore_errors=True)

    def _read_load(self) -> None:
        """The machine's load at the run's end, while the workers still live: the trainer's CPU seconds
        now (it may not be frozen after a budget or an error: then a live read), the predictors'."""
        if self.meter is None:
            return
        trainer = self.trainer_cpu
        if self.trainer is not None:
            trainer = max(trainer, self.trainer.cpu_seconds())
        predictors = self.predictors_cpu + (self.predictor.cpu_seconds() if self.predictor is not None else 0.0)
        self.load_raw = self.meter.stop(trainer, predictors)

    def _start_worker(self, role: str, timeout: float):
        """A worker of `role` through its init; CallTimeout when init takes longer than `timeout`."""
        trains = role == "train"
        if role not in self.view_files:     # derived once: a predictor starts in every eval
            self.view_files[role] = data_views.view_files(self.task.dataset, self.plan.data_root, role,
                                                     self.work / "derived")
        worker, seen = start_worker(role, self.spec, self.plan.isolation, data_root=self.plan.data_root,
                                    derived=self.work / "derived",
                                    snapshots=self.work / ("snapshots" if trains else "scored"),
                                    network=trains and self.network, data_files=self.view_files[role])
        if trains:
            self.trainer = worker
        else:
            self.predictor = worker
        p = self.plan
        reply, _ = worker.call("init", timeout=timeout, name=self.spec.name, config=dict(p.hyperparameters),
                               eval_examples=p.eval_set.examples, seed=self.opts.seed, task=self.task.name,
                               rank=p.rank, world_size=p.world_size, local_rank=p.local_rank,
                               show_progress=self.opts.progress, role=role, data_root=seen["data_root"],
                               work_dir=seen["work_dir"], references=seen["references"],
                               shown_directory=str(self.spec.directory))
        if trains:      # its signaller now, in init, so that no handover starts a process
            self.record.trains_in(precision.recorded(reply.get("precision")))
            worker.start_signaller()
        return worker, seen

    def _on_clock_left(self, during: str) -> float:
        """Seconds of the time budget left; BudgetSpent when none is."""
        left = self.plan.budget.max_seconds - self.clock.on_clock() - (self.clock.read() - self.clock.elapsed())
        if left <= 0:
            raise self._spent(during)
        return left

    def _spent(self, during: str) -> BudgetSpent:
        return BudgetSpent(f"budget: time budget exceeded during {during}: the reference had not answered at "
                           f"max_seconds={self.plan.budget.max_seconds:g} s on the clock")

    def start(self) -> None:
        """The clock starts before the reference's code is imported (its imports count), then the
        log's header and the trainer's init span."""
        p = self.plan
        self.meter = load.Meter()       # cheap: the load average and /proc/stat, read now and at the end
        busy = self.meter.warning_before()
        if busy:
            _say(busy, p.rank)
        self.clock.start()
        self.record.header(hardware=self._hardware(), seed=self.opts.seed, eval_set=p.eval_set,
                           threshold=p.budget.threshold, hyperparameters=p.hyperparameters, isolation=p.isolation,
                           dataset_files=p.dataset_files,
                           train_examples=(p.train_examples, p.train_examples_source),
                           eval_from_epoch=p.budget.eval_from_epoch, max_epochs=p.budget.max_epochs,
                           nodes=self.opts.nodes, world_size=p.world_size)
        try:
            _, self.seen = self._start_worker("train", timeout=p.budget.max_seconds)
        except handle.CallTimeout:
            raise self._spent("init") from None
        self.init_s = self.clock.lap("init")
        self.record.initialized()

    def train(self, epoch: int) -> Trained:
        """One epoch on the clock. Then, where the epoch is evaluated, the trainer is frozen: nothing
        of it runs until the next epoch, so no thread trains on while the harness evaluates off the
        clock. An epoch that is not evaluated has no off-clock span after it: the trainer is left running."""
        p = self.plan
        self.clock.lap("harness")
        self.record.epoch_started(epoch)
        evaluated = stop_rules.evaluated(p.budget, epoch)
        scored = p.rank == 0 and evaluated      # no snapshot of an epoch never scored
        snapshot = f"{self.seen['snapshots']}/{_snapshot_name(epoch)}" if scored else None
        if self.energy:
            self.energy.begin()
        try:
            reply, _ = self.trainer.call("train", epoch=epoch, snapshot=snapshot,
                                         timeout=self._on_clock_left(f"epoch {epoch}"))
        except handle.CallTimeout:
            self.trainer.freeze()
            self.clock.lap("train")
            if self.energy:
                self.energy.end()
            raise self._spent(f"epoch {epoch}") from None
        # Every rank freezes before an evaluated epoch's eval, which is off the clock on every rank. Before
        # an epoch that is not evaluated, the freeze guards nothing: no span leaves the clock until the next
        # epoch's end, so whatever the trainer does meanwhile is timed (on the clock, in the harness span
        # and the next train span), and the snapshot it could touch is taken only after a freeze. Its freeze and
        # thaw would cost about 2 ms on the clock for nothing (docs/RULES.md, "The freeze").
        handover = _timed(self.trainer.freeze) if evaluated else 0.0
        train_s = self.clock.lap("train")
        if self.energy:
            self.energy.end()
        # Frozen, the count holds still: exact. Not frozen (an unevaluated epoch), it is read live; the CPU
        # seconds it misses go to the next epoch's count, which is only logged, never bounded (docs/RULES.md,
        # "The eval span"), and the run's total is read at its end.
        cpu = self.trainer.cpu_seconds()
        cpu_s, self.trainer_cpu = cpu - self.trainer_cpu, cpu
        stats = _check_stats(reply.get("stats") or {})
        loss = float(stats.get("loss", float("nan")))
        on_clock, bad_loss, train_total = self.group.max([self.clock.on_clock(), 0.0 if math.isfinite(loss) else 1.0,
                                                          self.clock.totals["train"]])
        # `samples` is what this rank trained on; MLPerf's train_samples is the whole run's, every rank's. In the
        # same round trip every rank's train span, rank by rank, for the eval bound (a sum of one-hot rows)
        own = [train_s if r == p.rank else 0.0 for r in range(p.world_size)]
        samples_all, *rank_train_s = self.group.sum([stats.get("samples", 0.0), *own])
        self.record.epoch_trained(epoch, stats, samples_all, p.world_size)
        if bad_loss and math.isfinite(loss):     # another rank's loss diverged: so did the run
            loss = float("nan")
        return Trained(stats, loss, on_clock, handover, train_s, cpu_s, train_total, tuple(rank_train_s))

    def evaluate(self, epoch: int, trained: Trained) -> tuple[bool, float]:
        """Off the clock (on it for a task whose eval is: tasks.toml's eval_on_clock): rank 0 takes the epoch's
        snapshot out of the frozen trainer's reach and scores it within the eval bound (within the time budget
        left where the eval is on the clock), every rank learns whether it reached the threshold, the
        trainer is thawed, the epoch is recorded. Returns whether it reached it, and the on-clock seconds
        after the eval (every rank's max): the epoch's time-to-accuracy."""
        p = self.plan
        self.record.eval_started(epoch)
        value, scores, stored, taken, cost, verdict = float("nan"), {}, {}, None, {}, 0.0
        if p.rank == 0:
            taken = self._take_snapshot(epoch)
            value, scores, stored, cost = self._score(epoch, trained)
            verdict = 1.0 if self.task.reaches(value, p.budget.threshold) else 0.0
        (reached,) = self.group.broadcast([verdict])
        self.clock.lap("eval")
        on_clock = self.group.max([self.clock.on_clock()])[0] if self.clock.eval_on_clock else trained.on_clock
        handover = trained.handover_s + _timed(self.trainer.thaw)
        row = self.record.epoch_scored(epoch, value=value, scores=scores, stored=stored, on_clock=on_clock,
                                       stats=trained.stats, handover_s=handover, snapshot=taken, eval_cost=cost,
                                       train_seconds=trained.train_total_s)
        figure = self.task.figure
        _say(f"epoch {epoch:3d}/{p.budget.max_epochs}  loss {trained.loss:.4f}  {self.task.metric} {figure.said(value)} "
             f"(target {figure.said(p.budget.threshold)})  time-to-accuracy clock {on_clock:7.1f} s", p.rank)
        if reached:
            self.reached_at = row
        return bool(reached), on_clock

    def skip(self, epoch: int, trained: Trained) -> tuple[bool, float]:
        """An epoch before the reference's first evaluated one (eval_from_epoch): no snapshot is
        scored (the trainer was asked for none), no eval span opens, the trainer was not frozen (`train`)
        and goes on: the clock runs on. Returns False (an unscored epoch reaches nothing) and the clock's seconds."""
        p = self.plan
        _say(f"epoch {epoch:3d}/{p.budget.max_epochs}  loss {trained.loss:.4f}  not evaluated (the reference evaluates "
             f"from epoch {p.budget.eval_from_epoch})  clock {trained.on_clock:7.1f} s", p.rank)
        return False, trained.on_clock

    def _take_snapshot(self, epoch: int) -> snapshots.Taken:
        """The frozen trainer's snapshot, copied and hashed where it cannot reach; its own copy removed."""
        name = _snapshot_name(epoch)
        taken = snapshots.take(self.work / "snapshots" / name, self.work / "scored" / name,
                               int(self.task.max_snapshot_mib * 2**20))    # the task's cap, never the reference's
        shutil.rmtree(self.work / "snapshots" / name, ignore_errors=True)
        if self.last_snapshot is not None:      # only the last scored snapshot can become the model
            shutil.rmtree(self.last_snapshot, ignore_errors=True)
        self.last_snapshot = self.work / "scored" / name
        return taken

    def _score(self, epoch: int, trained: Trained) -> tuple[float, dict, dict, dict]:
        """A fresh predictor loads the epoch's snapshot and predicts every eval example within the
        eval bound, and is killed with its scratch: no state of one eval reaches the next (a predictor
        that lived for the run kept each epoch's snapshot and trained on them all, issue 33). The
        harness counts, scores and stores the predictions. Returns the metric, the scores, the stored
        file and the eval's cost."""
        p, task = self.plan, self.task
        charged, starts = task.kind.eval_charge(task, p.eval_set.examples)
        bound = eval_bound.EvalBound.of(train_s=trained.train_s, eval_examples=charged,
                                        train_examples=p.train_examples, rank_train_s=trained.rank_train_s,
                                        start_s=self.init_s, passes=self.spec.task.eval_passes, starts=starts)
        began = time.perf_counter()
        during = f"the eval of epoch {epoch}"

        def left() -> float:
            if self.clock.eval_on_clock:      # paid for on the clock: no bound, the time budget's rest
                return self._on_clock_left(during)
            over = bound.seconds - (time.perf_counter() - began)
            if over <= 0:
                raise bound.over(epoch, time.perf_counter() - began)
            return over
        audit, cpu_before = None, self.predictors_cpu
        try:
            self._predictor_for(epoch, left)
            if epoch == 1:
                self.record.eval_inputs(data_views.derived_files(self.work / "derived"))
            # A language model's stream (harness.data_formats.Stream's labels): the harness asks the predictor for
            # its windows, then audits a fresh one (the lm kind). Neither a kind nor a format says how a
            # predictor is asked (they run outside the eval's processes), so the one such branch stays here.
            if isinstance(p.labels, lm_eval.TokenStream):
                predictions, audit = self._lm_passes(epoch, left)
                left()      # the harness's checks are in the span: past the bound after them is past it
            else:
                answer, array = self.predictor.call("predict", timeout=left())
                predictions = answer["answers"] if "answers" in answer else array
        except handle.CallTimeout:
            if self.clock.eval_on_clock:
                raise self._spent(during) from None
            raise bound.over(epoch, time.perf_counter() - began) from None
        wall_s = time.perf_counter() - began
        self._retire_predictor()
        cpu_s = self.predictors_cpu - cpu_before        # every predictor of the eval's
        # an eval on the clock has no bound (docs/RULES.md, "The eval span"): the log says so, and logs none
        bounded = ({"eval_on_clock": True} if self.clock.eval_on_clock else
                   {"eval_bound_s": round(bound.seconds, 3), "eval_passes": self.spec.task.eval_passes})
        cost = {"predictor_s": round(wall_s, 3), "predictor_cpu_s": round(cpu_s, 3), **bounded,
                "fresh_predictor": True, "train_s": round(trained.train_s, 3),
                "rank_train_s": [round(t, 3) for t in trained.rank_train_s],
                "train_cpu_s": round(trained.cpu_s, 3), **({"lm": audit} if audit else {})}
        count = task.count(predictions) if predictions is not None else 0
        if count != p.eval_set.examples:
            raise PredictionCountError(
                f"predict() returned {count} predictions; the {task.name} eval set has "
                f"{p.eval_set.examples} examples, every one needs a prediction in canonical order")
        scores = task.score(predictions, p.labels, p.eval_set.dropped_indices)
        stored = self.record.store_predictions(epoch, predictions)     # in the eval span
        return scores[task.metric], scores, stored, cost

    def _predictor_for(self, epoch: int, left) -> None:
        """A fresh predictor (a new worker, its own scratch) with the epoch's snapshot loaded."""
        _, self.predictor_seen = self._start_worker("predict", timeout=left())
        self.predictor.call("load", path=f"{self.predictor_seen['snapshots']}/{_snapshot_name(epoch)}", timeout=left())

    def _retire_predictor(self) -> None:
        """The predictor frozen (nothing of it runs outside its eval span), its CPU seconds counted, and
        killed with its scratch."""
        self.predictor.freeze()
        self.predictors_cpu += self.predictor.cpu_seconds()
        self._end_predictor()

    def _lm_passes(self, epoch: int, left) -> tuple:
        """A language model's eval (harness.lm_eval, harness.lm_audit): the audit's positions drawn, the
        first pass over the harness's windows, then a second fresh predictor asked for the drawn prefixes
        alone. Returns the scored tokens' log-probabilities and the record of the audit; AuditFailed (DNC)
        when the two passes disagree."""
        settings = self.task.settings
        windows = lm_eval.Windows.of(self.plan.labels, settings.window)
        draw = lm_audit.Draw.of(windows, settings)

        def ask(inputs):
            return self.predictor.call("predict", payload=inputs, timeout=left())[1]
        def ask_next(rows, lengths):
            return self.predictor.call("next_distribution", payload=rows, lengths=[int(n) for n in lengths],
                                       timeout=left())[1]
        logp, kept = lm_eval.first_pass(ask, windows, settings, draw.positions)
        self._retire_predictor()            # nothing of the first pass reaches the audit
        self._predictor_for(epoch, left)
        if settings.reply == "next":
            record = lm_audit.audit_next(ask_next, draw, windows, kept, settings)
        else:
            record = lm_audit.check(draw, windows, kept, ask(draw.inputs), settings)
        return logp, {"windows": list(windows.inputs.shape), "windows_sha256": windows.sha256,
                      "stream_sha256": self.plan.labels.sha256, "audit": record}

    def _end_predictor(self) -> None:
        """The eval's predictor killed, every process of it, and its scratch (HOME, TMPDIR) removed."""
        predictor, self.predictor = self.predictor, None
        if predictor is not None:
            self.survivors += predictor.kill()

    def keep_model(self, outcome: Outcome) -> None:
        """After the last epoch: the framework's versions, and the model of the last scored epoch as
        its snapshot was scored (none after a diverged loss)."""
        self.framework_extra = _versions(self.trainer)
        if self.opts.save_model and self.last_snapshot is not None and not outcome.diverged:
            self.record.keep_model(self.last_snapshot)

    def failed(self, exc: BaseException) -> Outcome:
        """A run that raised ends as DNC with the trace in its log. On the terminal, the reference's
        own exception shows its trace (the entrant's code, to debug); everything else, the
        entrant's configuration mistakes and the harness's verdicts and errors, is one line.
        Call it inside the except."""
        trace = getattr(exc, "trace", "") or traceback.format_exc()
        self.failure = exc
        if self.clock.start_perf is None:   # stopped before the clock started (a signal held until the try):
            self.clock.start()              # the record's times are then from here, its wall ~0
        outcome = stop_rules.failed(exc, (handle.WorkerError, handle.WorkerDied), VERDICTS)
        if self.plan.world_size > 1 and not self._stopped():     # for the launcher to name this rank
            collective.note_failure(self.plan.rank, outcome.reason)
        self.record.error(trace)
        if isinstance(exc, handle.WorkerError) and not exc.usage:
            _say(trace)
        else:
            _say(f"{self.spec.name}: {exc if getattr(exc, 'usage', False) else outcome.reason}")
        self.clock.lap("harness")
        return outcome

    def _stopped(self) -> bool:
        """Whether the run's failure came from outside this rank: a SIGTERM (the launcher stopping the ranks
        after one failed), a signal the launcher's user sent it (forwarded, or a Ctrl-C the terminal sent
        every rank) or another rank's closed connection."""
        return isinstance(self.failure, (Terminated, KeyboardInterrupt, collective.CollectiveError))

    def _named(self, outcome: Outcome) -> Outcome:
        """A failed run of several ranks names the rank that failed first: this one, or, where the launcher
        saw another fail first (collective.first_failure), that one and its reason, not the SIGTERM that
        stopped this one (issue 47)."""
        p = self.plan
        other = collective.first_failure(p.rank)
        if other is None and self._stopped():     # its note is a launcher's poll away (50 ms)
            deadline = time.monotonic() + 0.5
            while other is None and time.monotonic() < deadline:
                time.sleep(0.02)
                other = collective.first_failure(p.rank)
        if other is None:
            return Outcome(DNC, f"rank {p.rank}: {outcome.reason}")
        return Outcome(DNC, other if self._stopped() else f"{other}; then rank {p.rank}: {outcome.reason}")

    def finish(self, outcome: Outcome, epochs: int) -> dict:
        """run_stop at the wall time (every rank's max), then env.json and result.json on rank 0."""
        p = self.plan
        wall = self.clock.elapsed()
        own_cpu = sum(self.load_raw["run_cpu_s"].values()) if self.load_raw else 0.0
        run_cpu = None
        if self.failure is None:    # a failed rank waits for no other: it may be mid-epoch (issue 47)
            try:
                wall = self.group.max([wall])[0]
                if p.world_size > 1 and self.opts.nodes == 1:   # every rank's processes ran on this machine
                    run_cpu = self.group.sum([own_cpu])[0]
            except Exception:   # a lost rank must not cost us the result file
                pass
        elif p.world_size > 1:
            outcome = self._named(outcome)
        self.group.close()
        self.record.close(outcome, wall, self.reached_at if outcome.status == CONVERGED else None)
        who = result_identity.fields(self.spec, system=self.system, isolation=p.isolation, prov=p.prov,
                              hardware=self._hardware(), cost_per_hour=self.opts.cost_per_hour,
                              instance=self.opts.instance, nodes=self.opts.nodes, price=self.opts.price,
                              started=self.clock.start_wall, used_blacklist=p.eval_set.dropped_indices is not None)
        result = self.record.result(who, outcome, reached_at=self.reached_at, epochs=epochs, wall=wall,
                                    threshold=p.budget.threshold, cost_per_hour=self.opts.cost_per_hour,
                                    eval_examples=p.eval_set.scored, seed=self.opts.seed, world_size=p.world_size,
                                    hyperparameters=p.hyperparameters)
        machine = self._load(run_cpu)
        if self.energy:
            self.energy.end()       # a span a failure cut short
            result["energy"] = self.energy.record()     # informative, never ranked (harness.energy)
            self.energy.close()
        if p.rank == 0:
            self.record.write(result, {**self.system, "framework_extra": self.framework_extra, "load": machine})
            if outcome.status == CONVERGED:
                _say(f"converged: {self.task.metric} {self.task.figure.said(result['metric_value'])} at epoch {epochs}; "
                     f"time-to-accuracy {result['tta_seconds']:.1f} s "
                     f"({'eval included' if self.clock.eval_on_clock else 'eval excluded'}), wall {wall:.1f} s", p.rank)
            else:
                _say(f"DNC: {outcome.reason}", p.rank)
            _say(provenance.official_line(result), p.rank)
            if machine is not None and load.warning_after(machine):
                _say(load.warning_after(machine), p.rank)
            _say(f"results: {self.record.run_dir}", p.rank)
        result["run_dir"] = str(self.record.run_dir) if self.record.run_dir else None
        return result

    def _load(self, run_cpu: float | None) -> dict | None:
        """env.json's load (harness.load): a measurement beside the result, never a ranked figure."""
        if self.load_raw is None:
            return None
        p, note = self.plan, None
        if p.world_size > 1 and run_cpu is None:
            note = (f"{p.world_size} ranks over {self.opts.nodes} nodes: the other ranks' processes on this "
                    f"node cannot be told from other processes" if self.opts.nodes > 1
                    else "the other ranks' CPU seconds could not be collected")
        return load.record(self.load_raw, run_cpu, note)

    def _hardware(self) -> str:
        return environment.hardware_label(self.system, self.plan.world_size, self.opts.nodes)


def _check_stats(raw: dict) -> dict[str, float]:
    """train_epoch's numeric stats, as the harness logs them (informational: no bound, time or score
    is read from them). A stat named as a figure the harness writes is the entrant's mistake, or a
    forgery: refused in one line."""
    taken = sorted(set(map(str, raw)) & run_record.HARNESS_KEYS)
    if taken:
        raise handle.WorkerError(f"train_epoch returned {', '.join(map(repr, taken))}, a name of a figure only the "
                                  f"harness writes (docs/RULES.md, \"Stopping and DNC\"); give your own stats other "
                                  f"names", usage=True)
    return {k: float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _snapshot_name(epoch: int) -> str:
    return f"epoch-{epoch:03d}"


def _timed(action) -> float:
    """Seconds `action()` took (the freeze and thaw of the trainer: the handover's cost)."""
    t = time.perf_counter()
    action()
    return time.perf_counter() - t


class _Stops:
    """How SIGINT, SIGTERM and SIGHUP end a run: the first one raises (KeyboardInterrupt, Terminated) where
    the harness is, so the run ends DNC with every file; before the run folder is made, with no folder at
    all; from then until the run's try (arm), it is held and raised there. Once the run closes (its workers
    killed, run_stop, env.json and result.json written) a signal is only noted: a second Ctrl-C 50 ms after
    the first raised out of the workers' kill, a SIGTERM during the final writes killed the harness between
    env.json and result.json, and SIGHUP was not handled at all (issue 47)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    MEANING = {"SIGTERM": "terminated by SIGTERM", "SIGHUP": "hung up (SIGHUP: the terminal closed)"}

    def __init__(self):
        self.closing = self.holding = False
        self.held: list[int] = []       # between hold() and arm()
        self.noted: list[str] = []      # after the first, or once the run closes

    def __enter__(self) -> _Stops:
        self.previous = {s: signal.signal(s, self._on_signal) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def hold(self) -> None:
        self.holding = True

    def arm(self) -> None:
        self.holding = False
        if self.held:
            self._on_signal(self.held.pop(0), None)

    def close(self) -> None:
        self.closing = True

    def _on_signal(self, signum, _frame) -> None:
        if self.closing:
            self.noted.append(signal.Signals(signum).name)
            return
        if self.holding:
            self.held.append(signum)
            return
        if dropped_signals.dropped_here(_frame):    # what it raises there is dropped and the run goes on: again, after
            dropped_signals.send_again(signum)
            return
        self.closing = True         # the first raises; every later one is noted
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(self.MEANING[signal.Signals(signum).name])


class Interrupted(DawnbenchError):
    """A signal before the run's record opened: its folder was removed, nothing was written."""

    def __init__(self, exc: BaseException):
        name, self.exit_code = (("SIGINT", 128 + signal.SIGINT) if isinstance(exc, KeyboardInterrupt) else
                                ("SIGHUP", 128 + signal.SIGHUP) if "SIGHUP" in str(exc) else ("SIGTERM", 128 + signal.SIGTERM))
        super().__init__(f"interrupted ({name}) before the run started: nothing was written")


def _versions(trainer) -> dict:
    if trainer.frozen:      # the run ended right after an epoch (a diverged loss): let it answer
        trainer.thaw()
    try:
        return trainer.call("versions")[0]["versions"]
    except Exception as exc:  # a version probe must not lose a finished run
        return {"error": str(exc)}
