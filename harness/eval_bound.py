"""What an eval span may cost: one inference pass over the eval set, not training moved off the clock.

The eval span is off the DAWNBench clock, and the reference's own code runs in it (the predictor's
start, `load`, `predict`). The harness cannot tell an inference pass from training done there, so
it bounds the span's wall time by what training on as many examples cost the trainer that epoch:

    bound = passes x eval examples / training examples x (every rank's train span that epoch, summed)
            + PER_EVAL_S + the trainer's init span (the predictor starts afresh in every eval)

An inference pass over an example costs at most what training on it did (a forward pass against a
forward, a backward and an update: about a third), so `passes` is 1 unless the task allows more
(tasks.toml's `eval_passes`, the same for every entry of the task and never a reference's to set):
test-time augmentation over many views runs as many forward passes per example (cifar10-fast's six
views cost 3.2 training examples each on a CPU, so CIFAR-10 allows 5). The examples trained are the task's official training set
(tasks.toml), which the ranks train between them, each rank's span measured by its harness (never rank 0's
alone, times the ranks: issue 46), and never the trainer's own count: a trainer that said it trained on
one example would otherwise make the bound thousands of seconds (issue 33). A fresh predictor starts
in every eval (no state carried from one eval to the next), so every bound adds the trainer's init
span, which the harness measured, for that start.
Past the bound the run is DNC with the figures (docs/RULES.md, "The eval span"), and the predictor
is stopped there rather than waited for. A task whose eval is on the clock (tasks.toml's `eval_on_clock`, MLPerf's
rule: the language-model tasks) has no bound: its eval is paid for in its time-to-accuracy.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DawnbenchError

PER_EVAL_S = 5.0     # an honest eval's fixed costs (a snapshot's load, a first trace), on a loaded machine too


class EvalOverBound(DawnbenchError):
    """The predictor took longer than an inference pass may: the run is DNC."""


@dataclass(frozen=True)
class EvalBound:
    seconds: float
    formula: str        # the bound with its figures, for the log and the DNC reason

    @classmethod
    def of(cls, *, train_s: float, eval_examples: int, train_examples: int, rank_train_s=(),
           start_s: float | None = None, passes: float = 1.0, starts: int = 1) -> EvalBound:
        """The bound of one eval. `train_examples`: the task's official training set (tasks.toml), which the
        run's ranks trained in an epoch between them; `rank_train_s`: every rank's train span that epoch (one
        process: `train_s`, its own). Training one example cost the sum of those spans over the training set:
        every rank's time, never one rank's times the ranks (rank 0 training the whole set while rank 1
        returned at once doubled the allowance, issue 46). `start_s` (the trainer's init span) where the
        predictor starts in the eval, `starts` times (a language model's look-ahead audit starts a second,
        harness.lm_audit); `passes` the task's eval cost per example, in training examples. Nothing the
        trainer reports (its `samples`) enters it."""
        spans = [float(t) for t in rank_train_s] or [float(train_s)]
        rank_seconds = sum(spans)
        share = passes * eval_examples / max(train_examples, 1) * rank_seconds
        seconds = share + PER_EVAL_S + starts * (start_s or 0.0)
        trained = (f"({' + '.join(f'{t:.2f}' for t in spans)}) s train spans of {len(spans)} ranks"
                   if len(spans) > 1 else f"{rank_seconds:.2f} s train span")
        formula = ((f"{passes:g} passes x " if passes != 1 else "") +
                   f"{eval_examples} eval / {train_examples} training examples x {trained} + {PER_EVAL_S:g} s" +
                   (f" + {start_s:.2f} s for the predictor's start (the trainer's init span)"
                    if start_s is not None and starts == 1 else
                    f" + {starts} x {start_s:.2f} s for the predictors' starts (the trainer's init span)"
                    if start_s is not None else ""))
        return cls(seconds, formula)

    def over(self, epoch: int, wall_s: float) -> EvalOverBound:
        return EvalOverBound(f"the eval span of epoch {epoch} took over {wall_s:.1f} s of the reference's code, past "
                             f"its bound of {self.seconds:.1f} s = {self.formula}: an inference pass may not cost "
                             f"more than training on as many examples (docs/RULES.md, \"The eval span\")")
