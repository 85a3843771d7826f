"""The benchmark's metrics: top-k accuracy and the official SQuAD v1.1 EM/F1.

The harness owns the metric, so everything here depends on numpy and the
standard library only, and the SQuAD part reproduces the official v1.1
evaluation script (``evaluate-v1.1.py``) bit for bit: same normalization, same
token F1, same summation order, so our numbers equal the ones the original
DAWNBench entries reported.
"""

from __future__ import annotations

import json
import operator
import re
import string
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from harness.arguments import path_kind
from harness.errors import DawnbenchError

__all__ = [
    "MetricInputError",
    "topk_accuracy",
    "topk_ids",
    "normalize_answer",
    "exact_match_score",
    "f1_score",
    "metric_max_over_ground_truths",
    "squad_evaluate",
    "squad_version_warning",
    "load_squad_dataset",
    "load_squad_predictions",
    "squad_eval_files",
    "SQUAD_EXPECTED_VERSION",
]

SQUAD_EXPECTED_VERSION = "1.1"


class MetricInputError(DawnbenchError, ValueError):
    """An input file for a metric is missing or malformed (one-line message)."""


# --------------------------------------------------------------------------
# Top-k accuracy
# --------------------------------------------------------------------------

# Rows per block when scoring class scores: bounds the temporary copy made by
# np.partition (~32 MiB of float64) whatever N is.
_TOPK_BLOCK_ELEMENTS = 1 << 22


def topk_accuracy(predictions: Any, labels: Any, k: int) -> float:
    """Fraction in [0, 1] of examples whose label is among the top ``k`` predictions.

    ``predictions`` is one of:

    * class scores: a float array of shape (N, C); higher is better.
    * ranked class ids: an integer array of shape (N, K), K >= k, best first.
    * predicted class ids: an integer array of shape (N,); only for k == 1.

    The dtype decides between the two 2-D forms: floating = scores,
    integer = ranked ids.

    Ties in class scores are broken as a stable descending sort would: among
    equal scores the lower class id ranks first. So with all-equal scores,
    classes 0..k-1 are the top k. NaN scores rank below every number, so a
    diverged model scores low rather than crashing the run.

    ``labels`` is an integer array of shape (N,) with ids >= 0 (and < C for
    scores). Raises ValueError on any shape, dtype or range problem.
    """
    k = _check_k(k)
    preds = np.asarray(predictions)
    labels = np.asarray(labels)

    if preds.ndim not in (1, 2):
        raise ValueError(
            "predictions must be 1-D class ids, or 2-D class scores or ranked class ids; "
            f"got a {preds.ndim}-D array of shape {preds.shape}"
        )
    if labels.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of class ids; got shape {labels.shape}")
    if preds.shape[0] != labels.shape[0]:
        raise ValueError(
            f"predictions have {preds.shape[0]} examples but labels have {labels.shape[0]}"
        )
    if labels.shape[0] == 0:
        raise ValueError("no examples to score: predictions and labels are empty")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integer class ids; got dtype {labels.dtype}")
    if labels.min() < 0:
        raise ValueError(f"labels must be class ids >= 0; found {labels.min()}")

    if preds.ndim == 1:
        if k != 1:
            raise ValueError(
                f"1-D predictions hold one class id per example, so only top-1 can be "
                f"computed, not top-{k}; pass class scores or ranked ids for k > 1"
            )
        if not np.issubdtype(preds.dtype, np.integer):
            raise ValueError(
                f"1-D predictions must be integer class ids; got dtype {preds.dtype}"
            )
        return float(np.mean(preds == labels))

    if np.issubdtype(preds.dtype, np.integer):
        if preds.shape[1] < k:
            raise ValueError(
                f"ranked class ids have {preds.shape[1]} columns, fewer than k={k}"
            )
        hits = (preds[:, :k] == labels[:, None]).any(axis=1)
        return float(np.mean(hits))

    if np.issubdtype(preds.dtype, np.floating):
        return _topk_from_scores(preds, labels, k)

    raise ValueError(
        f"2-D predictions must be float class scores or integer ranked ids; "
        f"got dtype {preds.dtype}"
    )


def _check_k(k: Any) -> int:
    if isinstance(k, bool):
        raise ValueError(f"k must be a positive integer; got {k!r}")
    try:
        k = operator.index(k)
    except TypeError:
        raise ValueError(f"k must be a positive integer; got {k!r}") from None
    if k < 1:
        raise ValueError(f"k must be a positive integer; got {k}")
    return k


def _topk_from_scores(scores: np.ndarray, labels: np.ndarray, k: int) -> float:
    n, c = scores.shape
    if k > c:
        raise ValueError(f"k={k} exceeds the number of classes in the scores ({c})")
    if labels.max() >= c:
        raise ValueError(
            f"labels must be class ids < {c} (the number of score columns); "
            f"found {labels.max()}"
        )

    block = max(1, _TOPK_BLOCK_ELEMENTS // c)
    hits = 0
    for start in range(0, n, block):
        s = scores[start:start + block]
        y = labels[start:start + block]
        if np.isnan(s).any():
            s = np.where(np.isnan(s), -np.inf, s)
        rows = np.arange(s.shape[0])
        label_score = s[rows, y]
        # Partial selection, O(C) per row: kth is the k-th largest score.
        kth = np.partition(s, c - k, axis=1)[:, c - k]
        # Strictly above the k-th largest: fewer than k classes can beat it.
        # Strictly below: at least k classes beat it. Only an exact tie with
        # the k-th largest needs the tie rule, so those rows get an exact rank.
        above = label_score > kth
        tied = np.flatnonzero(label_score == kth)
        hits += int(above.sum())
        if tied.size:
            st, yt, lt = s[tied], y[tied], label_score[tied][:, None]
            higher = (st > lt).sum(axis=1)
            equal_lower_id = ((st == lt) & (np.arange(c) < yt[:, None])).sum(axis=1)
            hits += int(((higher + equal_lower_id) < k).sum())
    return hits / n


def topk_ids(scores: Any, k: int) -> np.ndarray:
    """The ``k`` best class ids per row of class scores (N, C), best first, as int64 (N, k).

    The ranking rule of ``topk_accuracy``: higher scores first, among equal scores the lower
    class id first, NaN below every number. So ``topk_accuracy(topk_ids(s, k), y, j)`` equals
    ``topk_accuracy(s, y, j)`` for every j <= k, which is what lets a run store only these ids
    and still be re-scored exactly (harness.stored_predictions).
    """
    k = _check_k(k)
    scores = np.asarray(scores)
    if scores.ndim != 2 or not np.issubdtype(scores.dtype, np.floating):
        raise ValueError(f"class scores must be a 2-D float array; got {scores.dtype} of shape {scores.shape}")
    n, c = scores.shape
    if k > c:
        raise ValueError(f"k={k} exceeds the number of classes in the scores ({c})")
    out = np.empty((n, k), dtype=np.int64)
    block = max(1, _TOPK_BLOCK_ELEMENTS // max(c, 1))
    for start in range(0, n, block):
        s = scores[start:start + block]
        if np.isnan(s).any():
            s = np.where(np.isnan(s), -np.inf, s)
        # As in _topk_from_scores: kth is the k-th largest score. Every class above it is in the top k;
        # of the classes tied with it, the lowest ids fill the places left.
        kth = np.partition(s, c - k, axis=1)[:, c - k][:, None]
        above = s > kth
        tied = s == kth
        room = k - above.sum(axis=1, keepdims=True)
        chosen = above | (tied & (np.cumsum(tied, axis=1) <= room))
        ids = np.nonzero(chosen)[1].reshape(s.shape[0], k)       # exactly k per row, ascending ids
        values = np.take_along_axis(s, ids, axis=1)
        # A stable sort on descending score keeps equal scores in ascending id order.
        order = np.argsort(-values, axis=1, kind="stable")
        out[start:start + s.shape[0]] = np.take_along_axis(ids, order, axis=1)
    return out


# --------------------------------------------------------------------------
# SQuAD v1.1, as the official evaluate-v1.1.py defines it
# --------------------------------------------------------------------------

# Same character set and pattern as the official script; precompiled because
# the dev set needs ~100k normalizations per evaluation.
_PUNCTUATION_TABLE = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra white space.

    Applied in the official order: lower, remove punctuation, remove articles,
    fix white space. Articles are removed only as whole words, so "banana"
    and "theory" are untouched.
    """
    text = s.lower()
    text = text.translate(_PUNCTUATION_TABLE)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    """Token-level F1 of the normalized answers (0.0 when no token is shared).

    As in the official script, two answers that both normalize to nothing
    (e.g. "the" and "a") have F1 0 even though they are an exact match.
    """
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def metric_max_over_ground_truths(metric_fn, prediction: str, ground_truths: list[str]):
    return max(metric_fn(prediction, gt) for gt in ground_truths)


def squad_evaluate(
    dataset: list, predictions: dict, missing: list | None = None
) -> dict[str, float]:
    """Official SQuAD v1.1 scores: ``{"exact_match": x, "f1": y}`` in percent.

    ``dataset`` is the ``data`` list of the SQuAD JSON; ``predictions`` maps
    question id -> answer text. Every question of the dataset counts: one
    without a prediction scores 0 on both metrics. Instead of printing (as the
    official script does), ids without a prediction are appended to
    ``missing`` when a list is given. Predictions for unknown ids are ignored.
    Raises ValueError if the dataset or predictions are malformed.
    """
    problem = _dataset_problem(dataset)
    if problem:
        raise ValueError(f"SQuAD dataset: {problem}")
    problem = _predictions_problem(predictions)
    if problem:
        raise ValueError(f"SQuAD predictions: {problem}")

    # Accumulate exactly as the official script does (bools summed into an
    # int, F1 as a running float, one division at the end) so results match
    # it to the last bit.
    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    if missing is not None:
                        missing.append(qa["id"])
                    continue
                ground_truths = [answer["text"] for answer in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += metric_max_over_ground_truths(
                    exact_match_score, prediction, ground_truths)
                f1 += metric_max_over_ground_truths(f1_score, prediction, ground_truths)

    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


class SquadLabels:
    """A SQuAD eval set's answers as the harness keeps them: the official ``data`` list. One
    example per question, in file order (the task's canonical order): ``len`` counts questions, and
    ``labels[:n]`` keeps the first n (what `dawnbench infer --limit` scores)."""

    def __init__(self, data: list):
        self.data = data
        self.ids = [qa["id"] for article in data for paragraph in article["paragraphs"] for qa in paragraph["qas"]]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: slice) -> SquadLabels:
        if not isinstance(index, slice):
            raise TypeError("SquadLabels keeps slices of questions only")
        keep = set(self.ids[index])
        return SquadLabels([{**article, "paragraphs": [
            {**paragraph, "qas": [qa for qa in paragraph["qas"] if qa["id"] in keep]}
            for paragraph in article["paragraphs"]]} for article in self.data])


def squad_version_warning(dataset_json: dict) -> str | None:
    """A warning when the dataset is not SQuAD v1.1 (it is still evaluated), else None."""
    if not isinstance(dataset_json, dict) or "version" not in dataset_json:
        return (f"dataset has no \"version\" field; evaluation expects "
                f"v{SQUAD_EXPECTED_VERSION}")
    version = dataset_json["version"]
    if version != SQUAD_EXPECTED_VERSION:
        return (f"evaluation expects v{SQUAD_EXPECTED_VERSION}, but got dataset "
                f"with version {version!r}")
    return None


def load_squad_dataset(path) -> dict:
    """Load and check a SQuAD dataset JSON file; returns the whole JSON object.

    Raises MetricInputError naming the file and the first problem found.
    """
    obj = _load_json(path)
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        raise MetricInputError(
            f"{path}: not a SQuAD dataset: expected a JSON object with a \"data\" list")
    problem = _dataset_problem(obj["data"])
    if problem:
        raise MetricInputError(f"{path}: not a SQuAD dataset: {problem}")
    return obj


def load_squad_predictions(path) -> dict[str, str]:
    """Load and check a predictions JSON file ``{question id: answer text}``.

    Raises MetricInputError naming the file and, where it applies, the key.
    """
    obj = _load_json(path)
    problem = _predictions_problem(obj)
    if problem:
        raise MetricInputError(f"{path}: bad SQuAD predictions: {problem}")
    return obj


def squad_eval_files(dataset_path, predictions_path) -> dict[str, float]:
    """Evaluate a predictions file against an official SQuAD dataset file.

    Returns ``{"exact_match": x, "f1": y}`` in percent, like the official
    v1.1 script. Bad inputs raise MetricInputError.
    """
    dataset_json = load_squad_dataset(dataset_path)
    predictions = load_squad_predictions(predictions_path)
    return squad_evaluate(dataset_json["data"], predictions)


def _load_json(path) -> Any:
    kind = path_kind(path)      # before it is opened: opening a FIFO blocks, reading a device never ends
    if kind not in (None, "a file"):
        raise MetricInputError(f"{path}: is {kind}, not a file")
    try:
        # utf-8-sig: tolerate a byte-order mark, which editors on Windows add.
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise MetricInputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise MetricInputError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError as e:
        raise MetricInputError(
            f"{path}: not UTF-8 text (bad byte at offset {e.start})") from None
    except OSError as e:
        raise MetricInputError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise MetricInputError(
            f"{path}: not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}"
        ) from None


def _dataset_problem(data: Any) -> str | None:
    """Describe the first structural problem of a SQuAD ``data`` list, or None."""
    if not isinstance(data, list):
        return f"\"data\" must be a list of articles, not {type(data).__name__}"
    questions = 0
    for i, article in enumerate(data):
        where = f"data[{i}]"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            return f"{where} has no \"paragraphs\" list"
        for j, paragraph in enumerate(article["paragraphs"]):
            where = f"data[{i}].paragraphs[{j}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                return f"{where} has no \"qas\" list"
            for q, qa in enumerate(paragraph["qas"]):
                where = f"data[{i}].paragraphs[{j}].qas[{q}]"
                if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
                    return f"{where} has no string \"id\""
                answers = qa.get("answers")
                # The official script takes max() over the answers, so an
                # empty list would crash it: every question needs one.
                if not isinstance(answers, list) or not answers:
                    return f"{where} (id {qa['id']!r}) has no \"answers\""
                for a, answer in enumerate(answers):
                    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
                        return (f"{where}.answers[{a}] (id {qa['id']!r}) "
                                f"has no string \"text\"")
                questions += 1
    if questions == 0:
        return "it contains no questions"
    return None


def _predictions_problem(predictions: Any) -> str | None:
    """Describe the first problem of a {question id: answer text} mapping, or None."""
    if not isinstance(predictions, dict):
        return ("expected an object mapping question id to answer text, "
                f"got {_json_type(predictions)}")
    for key, value in predictions.items():
        if not isinstance(key, str):
            return f"question id {key!r} is not a string"
        if not isinstance(value, str):
            return (f"answer for question id {key!r} must be a string, "
                    f"got {_json_type(value)}")
    return None


def _json_type(value: Any) -> str:
    # Name types as they appear in the JSON file, which is what the user edits.
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"
