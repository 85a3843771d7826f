"""The kinds of task: everything that differs between an image classification and a span answer.

A kind owns how a task's predictions are counted, scored, stored and compared with its target
(whether lower is better), what an inference's outputs become, and the figures an entry and its
log carry (their field names and units). harness/data/tasks.toml gives each task its `kind`: a name
of KINDS, or `harness.<module>:<Class>`, a class in a module of the harness itself, never a path an
entrant's files could name. Code outside this module never branches on which task or metric it is:
tests/test_task_kinds.py scans harness/ and dawnbench/ for such a branch.

numpy only inside methods: `dawnbench list` reads the tasks from a bare Python (dawnbench.launcher).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from harness import plugins
from harness.errors import DawnbenchError


class UnknownKindError(DawnbenchError, ValueError):
    pass


@dataclass(frozen=True)
class Figure:
    """One figure a task logs: its name in the harness's scores and log, the DAWNBench entry's (and
    TSV's) field that carries it, and that field's unit: `scale` 100 for percent, 1 for the value as
    computed (a fraction such as F1, or a loss). `upper` is the most the computed value can be (1 for a
    fraction, None for a figure without a bound, a mean squared error or a cross-entropy); it is never
    below 0."""
    metric: str
    field: str
    scale: float
    label: str          # what a message calls it: "F1", "top-1 accuracy"
    upper: float | None = 1.0
    unit: str = ""      # a figure in its own unit prints with it: "bits/byte" (scale 1, upper None)

    @property
    def percent(self) -> bool:
        return self.scale == 100

    def to_log(self, fraction: float) -> float:
        """A figure as the harness computes it (a fraction) in the units of the entries and logs."""
        return fraction * self.scale

    def entry_value(self, fraction: float) -> float:
        """The figure as an entry writes it: percent to 4 decimals, a fraction as computed."""
        return round(self.to_log(fraction), 4) if self.percent else fraction

    def tsv_cell(self, fraction: float) -> str:
        """One DAWNBench log cell: percent with 2 decimals, a fraction with 4, as the v1 entries."""
        return f"{self.to_log(fraction):.2f}" if self.percent else f"{fraction:.4f}"

    @property
    def heading(self) -> str:
        """What a table's column or a page's row calls it: "Top-1 accuracy", "F1", "Error rate"."""
        return self.label[:1].upper() + self.label[1:]

    def shown(self, value: float) -> str:
        """A value in log units as the pages show it: "94.2%", "0.76" for a fraction, "1.523 bits/byte"."""
        if self.unit:
            return f"{value:.3f} {self.unit}"
        return f"{value:g}%" if self.percent else f"{value:g}"

    def said(self, value: float) -> str:
        """A value as the harness computes it, as a message says it, in the figure's own unit: "94.20%" for
        a percent, "0.7523" for F1, "1.69" for a mean squared error, "0.9112 bits/byte" for a figure
        with its unit's words."""
        if self.percent:
            return f"{self.to_log(value):.2f}%"
        return f"{value:.4g} {self.unit}" if self.unit else f"{value:.4g}"

    def holds(self, value: float) -> bool:
        """Whether a computed value (a threshold, an anchor) is in the figure's range: above 0, and at most
        `upper` where it has one."""
        return value > 0 and (self.upper is None or value <= self.upper)

    @property
    def unit_words(self) -> str:
        """The unit an entry's field of it is in, as the schemas describe it."""
        if self.percent:
            return "percent"
        return self.unit or ("a fraction" if self.upper == 1 else "the value as computed")

    @property
    def range_text(self) -> str:
        """The range `holds` accepts, as a refusal says it."""
        return "above 0" + ("" if self.upper is None else f" and at most {self.upper:g}")


class TaskKind:
    """The base every kind fills in. A kind is stateless: a task's own numbers come as `task`."""

    name: ClassVar[str]
    figures: ClassVar[tuple[Figure, ...]]     # every figure a task of this kind may log
    score_names: ClassVar[tuple[str, ...]]    # every key score() may return
    lower_is_better: ClassVar[bool] = False
    exportable: ClassVar[bool] = True         # an ONNX export gives its predictions (scores out)
    infers: ClassVar[bool] = True             # `dawnbench infer` times it an example at a time
    settings_table: ClassVar[str | None] = None   # the kind's own table of a task's row ([tasks.<name>.<table>])

    def settings(self, task: str, table: object) -> Any:
        """A task's own numbers for this kind, from its tasks.toml table `settings_table` (checked: one
        line for a mistake); None for a kind without one."""
        if table is not None:
            raise UnknownKindError(f"tasks.toml [tasks.{task}]: the {self.name} kind takes no table of settings")
        return None

    def scored_labels(self, task, labels: Any) -> Any:
        """The part of the dataset's eval labels the task scores (harness.eval_labels.load_task_labels): all."""
        return labels

    def eval_charge(self, task, examples: int) -> tuple[int, int]:
        """What one eval asks of the predictors, for the eval bound (harness.eval_bound): the examples
        predicted and the predictors started. One pass over the eval set by one fresh predictor."""
        return examples, 1

    def figure(self, metric: str) -> Figure:
        for figure in self.figures:
            if figure.metric == metric:
                return figure
        raise UnknownKindError(f"the {self.name} kind has no metric {metric!r}; "
                               f"its metrics: {', '.join(f.metric for f in self.figures)}")

    # The one place a figure is compared, with the target (reaches, margin) and with another figure
    # (better): every other comparison of the house (the best of a log, thresholds in order, a page's words)
    # is made of these two, so a task where lower is better reads right everywhere.
    def reaches(self, value: float, threshold: float) -> bool:
        """Whether a value meets the target: at or over it (at or under it where lower is better, a
        loss or an error rate); NaN never does."""
        return value <= threshold if self.lower_is_better else value >= threshold

    def margin(self, value: float, threshold: float) -> float:
        """How far a value is past the target, in the metric's units: positive past it, negative short
        (value - threshold, or threshold - value where lower is better). A series' one-sided test
        (dawnbench.evidence) tests these margins against 0, so it reads right for either direction."""
        return threshold - value if self.lower_is_better else value - threshold

    def better(self, value: float, other: float) -> bool:
        """Whether `value` is strictly better than `other`; NaN never is, nor is anything than NaN."""
        return value < other if self.lower_is_better else value > other

    def best(self, values):
        """The best of `values` (messages: "best 0.61"; a log's running best)."""
        return functools.reduce(lambda best, value: value if self.better(value, best) else best, values)

    def easiest_first(self, items, key=lambda item: item):
        """`items` in the order a run reaches them: the easiest threshold (the worst figure) first."""
        def order(a, b) -> int:
            return -1 if self.better(key(b), key(a)) else 1 if self.better(key(a), key(b)) else 0
        return sorted(items, key=functools.cmp_to_key(order))

    @property
    def relation(self) -> str:
        """How a value meets the target, as a message writes it: ">=", or "<=" when lower is better."""
        return "<=" if self.lower_is_better else ">="

    @property
    def goal(self) -> str:
        """How a page says the target is met: "at least", or "at most" when lower is better."""
        return "at most" if self.lower_is_better else "at least"

    @property
    def direction(self) -> str:
        """Which way is better, as an axis label says it."""
        return "lower is better" if self.lower_is_better else "higher is better"

    @property
    def short_side(self) -> str:
        """Where a value that misses the target lies: "below" it, or "above" when lower is better."""
        return "above" if self.lower_is_better else "below"

    def codec(self):
        """How a run keeps its predictions for `verify` (a harness.stored_predictions.Codec: the file's
        suffix, its writer and its reader of untrusted bytes)."""
        raise NotImplementedError

    def count(self, predictions: Any) -> int:
        """How many examples `predictions` answers (the runner checks it is the eval set's size)."""
        import numpy as np
        return len(predictions) if isinstance(predictions, dict) else int(np.shape(predictions)[0])

    def score(self, task, predictions: Any, labels: Any, drop=None) -> dict[str, float]:
        raise NotImplementedError

    def from_outputs(self, outputs: list, labels: Any) -> Any:
        """An inference's per-example outputs, in eval order, as the predictions score() takes."""
        raise NotImplementedError

    def keeps_inference_predictions(self) -> bool:
        """Whether an inference writes the predictions it scored (predictions.npy) beside its record."""
        return False


class ImageClassification(TaskKind):
    """Class scores (N, C), ranked class ids (N, k) or ids (N,) per eval image; top-k accuracy."""

    name = "image-classification"
    figures = (Figure("top1", "top1Accuracy", 100, "top-1 accuracy"),
               Figure("top5", "top5Accuracy", 100, "top-5 accuracy"))
    score_names = ("top1", "top5")

    def codec(self):
        from harness import stored_predictions
        return stored_predictions.IDS

    def kept(self, predictions, labels, drop):
        """The predictions and labels left once `drop` (ImageNet's blacklist, indices) is taken out;
        the predictions still cover every example."""
        import numpy as np
        if drop is not None and len(drop):
            keep = np.ones(len(labels), dtype=bool)
            keep[np.asarray(drop)] = False
            if np.shape(predictions)[0] != len(labels):
                raise ValueError(f"{np.shape(predictions)[0]} predictions for {len(labels)} labels")
            predictions, labels = np.asarray(predictions)[keep], np.asarray(labels)[keep]
        return predictions, labels

    def score(self, task, predictions, labels, drop=None) -> dict[str, float]:
        from harness import metrics
        predictions, labels = self.kept(predictions, labels, drop)
        logged = {f.metric for f in task.figures}
        return {f"top{k}": metrics.topk_accuracy(predictions, labels, k) for k in (1, 5)
                if k == 1 or f"top{k}" in logged}

    def from_outputs(self, outputs: list, labels: Any) -> Any:
        import numpy as np
        return np.stack([np.asarray(o) for o in outputs])

    def keeps_inference_predictions(self) -> bool:
        return True


class SpanAnswer(TaskKind):
    """{question id: answer text} per eval question; SQuAD v1.1's F1 and exact match (official
    normalization). The predictor sees the questions without their answers (harness.data_views)."""

    name = "span-answer"
    figures = (Figure("f1", "f1Score", 1, "F1"),)
    score_names = ("f1", "exact_match")
    exportable = False

    def codec(self):
        from harness import stored_predictions
        return stored_predictions.ANSWERS

    def score(self, task, predictions, labels, drop=None) -> dict[str, float]:
        from harness import metrics
        # labels: the official dataset's `data` list (as SquadLabels); predictions: {question id: text}
        data = labels.data if isinstance(labels, metrics.SquadLabels) else labels
        result = metrics.squad_evaluate(data, predictions)
        return {"f1": result["f1"] / 100.0, "exact_match": result["exact_match"] / 100.0}

    def from_outputs(self, outputs: list, labels: Any) -> Any:
        # infer returns the answer text of the i-th question in canonical order, or a pair
        # (question id, answer text); scored over exactly the questions inferred
        return dict(_answer(labels.ids[i], o) for i, o in enumerate(outputs))



def _answer(question_id: str, output) -> tuple[str, str]:
    if isinstance(output, str):
        return question_id, output
    if isinstance(output, list) and len(output) == 2:
        return str(output[0]), str(output[1])
    raise ValueError(f"infer() must return the answer text of one question (or [question id, answer text]), "
                     f"got {type(output).__name__}")


class LanguageModel(TaskKind):
    """A causal language model on the harness's validation stream (issue 50). The predictor returns
    log-probabilities [N, T, V] for the windows the harness cuts (harness.lm_eval); the harness keeps
    the log-probability of each next token and audits the look-ahead with a fresh predictor
    (harness.lm_audit). The predictions scored and stored are those log-probabilities, one per scored
    token: `bpb` (bits per byte, where a token is a byte) and `ce` (nats per token), lower is better."""

    name = "lm"
    figures = (Figure("bpb", "bitsPerByte", 1, "bits per byte", upper=None, unit="bits/byte"),
               Figure("ce", "crossEntropy", 1, "cross-entropy", upper=None, unit="nats/token"))
    score_names = ("bpb", "ce")
    lower_is_better = True
    exportable = False
    infers = False
    settings_table = "lm"

    def settings(self, task: str, table: object) -> Any:
        from harness.lm_settings import LMSettings
        return LMSettings.of(task, table)

    def codec(self):
        from harness import stored_predictions
        return stored_predictions.LOGPROBS

    def scored_labels(self, task, labels: Any) -> Any:
        # the task's scored_tokens, the stream's first (the speedrun's 10,485,760 of FineWeb's val shard); a
        # shorter stream (a fixture's) is scored whole, its eval set not the task's: the run is unofficial
        from harness.lm_eval import TokenStream
        return labels.first(task.settings.scored_tokens) if isinstance(labels, TokenStream) else labels

    def eval_charge(self, task, examples: int) -> tuple[int, int]:
        # the first pass over every window, then the audit's rows in a second, fresh predictor
        return examples + task.settings.audit_positions * task.settings.window, 2

    def score(self, task, predictions, labels, drop=None) -> dict[str, float]:
        import math

        import numpy as np
        logp = np.asarray(predictions, dtype=np.float64)
        nats = float(-logp.sum() / max(len(logp), 1))
        return {"bpb": nats / math.log(2), "ce": nats}

    def from_outputs(self, outputs: list, labels: Any) -> Any:
        raise ValueError("a language-model task has no per-example inference (issue 50: not yet)")


KINDS: dict[str, type[TaskKind]] = {k.name: k for k in (ImageClassification, SpanAnswer, LanguageModel)}
# The offline evaluators `harness eval NAME` runs: the official script of a kind's metric.
EVALUATORS = {"squad": "harness.squad_eval"}


def resolve(spec: str, task: str) -> TaskKind:
    """The kind tasks.toml names for `task`: a name of KINDS, or `harness.<module>:<Class>`."""
    try:
        return plugins.load_class(spec, TaskKind, what="kind", where=f"tasks.toml [tasks.{task}]", known=KINDS)()
    except ValueError as e:
        raise UnknownKindError(str(e)) from None
