"""What an eval span may cost: one inference pass over the eval set, not training moved off the clock.

The eval span is off the DAWNBench clock, and the reference's own code runs in it (the predictor's
start, `load`, `predict`). The harness cannot tell an inference pass from training done there, so
it bounds the span's wall time by what training on as many examples cost the trainer that epoch:

    bound = passes x (eval examples / examples trained this epoch) x that epoch's train span + PER_EVAL_S
            (+ the trainer's init span at the first eval, when the predictor starts)

An inference pass over an example costs at most what training on it did (a forward pass against a
forward, a backward and an update: about a third), so `passes` is 1 unless the reference declares
more in reference.toml (`[budget] eval_passes`, at most MAX_EVAL_PASSES), visibly: test-time
augmentation over many views runs as many forward passes per example (cifar10-fast's six views cost
3.2 training examples each on a CPU). The examples trained are the trainer's own
count, capped at the task's official training set, so a reference that claims more gains nothing.
Past the bound the run is DNC with the figures (docs/RULES.md, "The eval span"), and the predictor
is stopped there rather than waited for.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DawnbenchError

PER_EVAL_S = 5.0     # an honest eval's fixed costs (a snapshot's load, a first trace), on a loaded machine too
MAX_EVAL_PASSES = 8  # the most a reference may declare: a TTA of ~20 views; more would hide epochs of training


class EvalOverBound(DawnbenchError):
    """The predictor took longer than an inference pass may: the run is DNC."""


@dataclass(frozen=True)
class EvalBound:
    seconds: float
    formula: str        # the bound with its figures, for the log and the DNC reason

    @classmethod
    def of(cls, *, train_s: float, samples: float | None, eval_examples: int, train_examples: int,
           first_start_s: float | None = None, passes: float = 1.0) -> EvalBound:
        """The bound of one eval; `first_start_s` (the trainer's init span) when the predictor starts in it;
        `passes` the reference's declared eval cost per example, in training examples."""
        trained = min(samples or train_examples, train_examples)
        share = passes * eval_examples / max(trained, 1.0) * train_s
        seconds = share + PER_EVAL_S + (first_start_s or 0.0)
        formula = ((f"{passes:g} passes x " if passes != 1 else "") +
                   f"{eval_examples} eval / {trained:g} trained examples x {train_s:.2f} s train span "
                   f"+ {PER_EVAL_S:g} s" + (f" + {first_start_s:.2f} s for the predictor's start (the trainer's "
                                             f"init span)" if first_start_s is not None else ""))
        return cls(seconds, formula)

    def over(self, epoch: int, wall_s: float) -> EvalOverBound:
        return EvalOverBound(f"the eval span of epoch {epoch} took over {wall_s:.1f} s of the reference's code, past "
                             f"its bound of {self.seconds:.1f} s = {self.formula}: an inference pass may not cost "
                             f"more than training on as many examples (docs/RULES.md, \"The eval span\")")
