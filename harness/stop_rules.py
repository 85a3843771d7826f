"""When a run stops and how it ends (docs/RULES.md, "DNC"): one pure function and its inputs.

    after training epoch e:   a non-finite training loss (any rank)     -> DNC, diverged (not scored)
                              e before eval_from_epoch: not scored, as if it had not reached the threshold
    after scoring epoch e:    the metric at the threshold (or better)    -> converged
                              on-clock seconds at or over max_seconds    -> DNC, the time budget
                              e == max_epochs                            -> DNC, the epoch budget
    anything raised on the way                                           -> DNC, error (`failed`)

No clock, no file, no process: the runner measures, these rules decide, tests/harness_only/test_stop_rules.py
holds their table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

CONVERGED, DNC = "converged", "DNC"


@dataclass(frozen=True)
class Budget:
    """What a run may spend and what it must reach."""
    max_epochs: int
    max_seconds: float          # on-clock seconds
    threshold: float
    metric: str
    eval_from_epoch: int = 1    # the reference's first evaluated epoch; every one after it is evaluated
    relation: str = ">="        # how the metric meets the threshold, as the task's kind writes it (a loss: "<=")


def evaluated(budget: Budget, epoch: int) -> bool:
    """Whether `epoch` is scored: every epoch from the reference's eval_from_epoch on, so always the
    budget's last (harness.registry refuses a schedule without it)."""
    return epoch >= budget.eval_from_epoch


@dataclass(frozen=True)
class Outcome:
    """How a run ended: CONVERGED, or DNC with its reason (one line, as result.json's dnc_reason)."""
    status: str
    reason: str = ""

    @property
    def diverged(self) -> bool:
        return self.reason.startswith("diverged")


def decide(budget: Budget, epoch: int, loss: float, on_clock: float, reached: bool | None = None) -> Outcome | None:
    """The run's end after `epoch`, or None to go on. `reached` is None between training and
    scoring (only a diverged loss ends the run there), else whether the epoch's metric reached the
    threshold (the task's kind says: harness.task_kinds.TaskKind.reaches). A converged epoch wins
    over a spent budget: the epoch that reached it counts."""
    if not math.isfinite(loss):
        return Outcome(DNC, f"diverged: training loss is {loss} at epoch {epoch}")
    if reached is None:
        return None
    if reached:
        return Outcome(CONVERGED)
    if on_clock >= budget.max_seconds:
        return Outcome(DNC, f"budget: {on_clock:.1f} s on the clock >= max_seconds={budget.max_seconds:g}")
    if epoch >= budget.max_epochs:
        return Outcome(DNC, f"budget: max_epochs={budget.max_epochs} reached without {budget.metric} {budget.relation} "
                            f"{budget.threshold}")
    return None


def failed(exc: BaseException, worker_errors: tuple[type, ...] = (), verdicts: tuple[type, ...] = ()) -> Outcome:
    """The DNC of a run that raised: a verdict the harness reached (a spent budget, an eval over
    its bound, a refused snapshot) is its own reason; a worker's error is its own message (it names
    the reference's exception already); anything else is prefixed with its type."""
    if isinstance(exc, verdicts):
        return Outcome(DNC, str(exc))
    if isinstance(exc, worker_errors):
        return Outcome(DNC, f"error: {exc}")
    if isinstance(exc, KeyboardInterrupt):
        return Outcome(DNC, "error: interrupted (Ctrl-C, SIGINT)")
    said = " ".join(str(exc).split())
    return Outcome(DNC, f"error: {type(exc).__name__}: {said}" if said else f"error: {type(exc).__name__}")
