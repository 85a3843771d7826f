"""Unit tests for harness.metrics and the `dawnbench eval squad` CLI.

Expected values are computed by hand in the tests (never with the library), so
a regression in the metric itself shows up here.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

from harness import metrics
from harness.metrics import (
    MetricInputError,
    exact_match_score,
    f1_score,
    metric_max_over_ground_truths,
    normalize_answer,
    squad_eval_files,
    squad_evaluate,
    squad_version_warning,
    topk_accuracy,
)
from harness.squad_eval import main as squad_main

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too

REPO_ROOT = REPO


# --------------------------------------------------------------------------
# top-k accuracy
# --------------------------------------------------------------------------

# 4 examples, 5 classes. Per row, classes ranked best first:
#   row 0: 2 4 0 1 3     label 2 -> top-1 hit
#   row 1: 0 1 2 3 4     label 3 -> top-1 miss, top-4 hit
#   row 2: 4 3 2 1 0     label 3 -> top-1 miss, top-2 hit
#   row 3: 1 0 3 2 4     label 4 -> miss until top-5
SCORES = np.array([
    [0.3, 0.2, 0.9, 0.1, 0.5],
    [5.0, 4.0, 3.0, 2.0, 1.0],
    [-5.0, -4.0, -3.0, -2.0, -1.0],
    [0.7, 0.8, 0.1, 0.2, 0.0],
])
LABELS = np.array([2, 3, 3, 4])


@pytest.mark.parametrize("k, expected", [(1, 1 / 4), (2, 2 / 4), (3, 2 / 4), (4, 3 / 4), (5, 1.0)])
def test_topk_from_scores(k, expected):
    assert topk_accuracy(SCORES, LABELS, k) == pytest.approx(expected)


def test_topk_accepts_float32_and_lists():
    assert topk_accuracy(SCORES.astype(np.float32), LABELS, 2) == pytest.approx(0.5)
    assert topk_accuracy(SCORES.tolist(), LABELS.tolist(), 2) == pytest.approx(0.5)


def test_topk_from_ranked_ids():
    ranked = np.array([[2, 4, 0], [0, 1, 2], [4, 3, 2], [1, 0, 3]])
    assert topk_accuracy(ranked, LABELS, 1) == pytest.approx(1 / 4)
    assert topk_accuracy(ranked, LABELS, 2) == pytest.approx(2 / 4)
    # Only the first k columns count: label 3 of row 1 is not in this list at all,
    # and row 3's label 4 is absent too.
    assert topk_accuracy(ranked, LABELS, 3) == pytest.approx(2 / 4)


def test_topk_from_1d_ids():
    preds = np.array([2, 0, 3, 4, 1])
    labels = np.array([2, 1, 3, 4, 0])
    assert topk_accuracy(preds, labels, 1) == pytest.approx(3 / 5)


def test_top5_right_where_top1_wrong():
    # 10 classes; the label is always the 3rd best, so top-1 is 0 and top-5 is 1.
    rng = np.random.default_rng(0)
    n, c = 6, 10
    scores = rng.random((n, c))
    order = np.argsort(-scores, axis=1)
    labels = order[:, 2]
    assert topk_accuracy(scores, labels, 1) == 0.0
    assert topk_accuracy(scores, labels, 2) == 0.0
    assert topk_accuracy(scores, labels, 3) == 1.0
    assert topk_accuracy(scores, labels, 5) == 1.0
    assert topk_accuracy(order[:, :5], labels, 5) == 1.0


def test_topk_ties_lower_class_id_ranks_first():
    scores = np.zeros((4, 5))
    labels = np.array([0, 1, 1, 4])
    # All classes tie, so the ranking is 0 1 2 3 4 for every row.
    assert topk_accuracy(scores, labels, 1) == pytest.approx(1 / 4)
    assert topk_accuracy(scores, labels, 2) == pytest.approx(3 / 4)
    assert topk_accuracy(scores, labels, 5) == 1.0


def test_topk_nan_scores_rank_last():
    scores = np.array([[np.nan, 0.1, 0.2], [np.nan, np.nan, np.nan]])
    # Row 0 ranks 2 1 0; row 1 is all NaN, so the tie rule gives 0 1 2.
    assert topk_accuracy(scores, np.array([0, 0]), 1) == pytest.approx(1 / 2)
    assert topk_accuracy(scores, np.array([2, 0]), 1) == pytest.approx(1.0)
    assert topk_accuracy(scores, np.array([0, 2]), 2) == 0.0


def test_topk_matches_stable_sort_with_ties_across_blocks(monkeypatch):
    # Few distinct score values force many ties at the k-th position; a small
    # block size makes the scoring loop cross block boundaries.
    monkeypatch.setattr(metrics, "_TOPK_BLOCK_ELEMENTS", 64)
    rng = np.random.default_rng(1)
    n, c = 997, 13
    scores = rng.integers(0, 4, size=(n, c)).astype(np.float64)
    labels = rng.integers(0, c, size=n)
    ranked = np.argsort(-scores, axis=1, kind="stable")
    for k in (1, 2, 5, 13):
        expected = np.mean([labels[i] in ranked[i, :k] for i in range(n)])
        assert topk_accuracy(scores, labels, k) == pytest.approx(expected), k


def test_topk_mismatched_n_raises():
    with pytest.raises(ValueError, match="4 examples but labels have 3"):
        topk_accuracy(SCORES, LABELS[:3], 1)
    with pytest.raises(ValueError, match="examples"):
        topk_accuracy(np.array([1, 2]), np.array([1, 2, 3]), 1)


def test_topk_ids_with_too_few_columns_raise():
    ranked = np.array([[1, 2, 3], [0, 1, 2]])
    with pytest.raises(ValueError, match="3 columns, fewer than k=5"):
        topk_accuracy(ranked, np.array([1, 0]), 5)


def test_topk_1d_ids_with_k_above_1_raise():
    with pytest.raises(ValueError, match="only top-1"):
        topk_accuracy(np.array([1, 2]), np.array([1, 2]), 5)


@pytest.mark.parametrize("preds, labels, k, match", [
    (np.zeros((2, 3, 4)), np.array([0, 1]), 1, "3-D"),
    (np.float64(0.5), np.array([0]), 1, "0-D"),
    (SCORES, LABELS[:, None], 1, "labels must be a 1-D"),
    (np.array([0.0, 1.0]), np.array([0, 1]), 1, "integer class ids"),
    (SCORES, LABELS.astype(float), 1, "labels must be integer"),
    (SCORES, LABELS, 6, "exceeds the number of classes"),
    (SCORES, np.array([2, 3, 3, 5]), 1, "< 5"),
    (SCORES, np.array([2, 3, -1, 4]), 1, ">= 0"),
    (SCORES, LABELS, 0, "positive integer"),
    (SCORES, LABELS, 1.5, "positive integer"),
    (np.zeros((0, 5)), np.zeros(0, dtype=int), 1, "no examples"),
])
def test_topk_bad_input_raises(preds, labels, k, match):
    with pytest.raises(ValueError, match=match):
        topk_accuracy(preds, labels, k)


# --------------------------------------------------------------------------
# SQuAD normalization, EM and F1
# --------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("Hello, World!", "hello world"),
    ("\"Levi's\" (stadium) -- 50%", "levis stadium 50"),
    ("The Cat", "cat"),
    ("a cat and an owl sat on the mat", "cat and owl sat on mat"),
    ("banana theory another anthem", "banana theory another anthem"),
    ("  lots \t of\n  space  ", "lots of space"),
    ("THE END", "end"),
    # Punctuation goes before articles: "the-end" becomes "theend", not "end".
    ("the-end", "theend"),
    # ... and an article glued to punctuation is freed and then removed.
    ("(the) end", "end"),
    ("", ""),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_exact_match():
    assert exact_match_score("The Denver Broncos!", "denver broncos") is True
    assert exact_match_score("Denver", "Denver Broncos") is False
    # Both normalize to the empty string.
    assert exact_match_score("the", "a") is True


def test_f1_partial_overlap():
    # "cat sat" vs "cat sat on mat": precision 2/2, recall 2/4.
    expected = 2 * 1.0 * 0.5 / 1.5
    assert f1_score("the cat sat", "a cat sat on the mat") == pytest.approx(expected)


def test_f1_counts_repeated_tokens_once_per_match():
    # "x x y" vs "x y y": the Counter intersection is {x: 1, y: 1}, so 2 common
    # tokens (not 3 or 4); precision 2/3, recall 2/3.
    assert f1_score("x x y", "x y y") == pytest.approx(2 / 3)


def test_f1_no_overlap_is_zero():
    assert f1_score("red apple", "green pear") == 0.0
    # Empty after normalization: 0, even though this is an exact match.
    assert f1_score("the", "a") == 0.0


def test_best_over_ground_truths():
    truths = ["Santa Clara, California", "Levi's Stadium", "the stadium"]
    pred = "Levi's Stadium in Santa Clara"  # -> levis stadium in santa clara (5 tokens)
    # vs "santa clara california": 2 common, p 2/5 r 2/3 -> 0.5
    # vs "levis stadium": 2 common, p 2/5 r 1 -> 4/7
    # vs "stadium": 1 common, p 1/5 r 1 -> 1/3
    assert metric_max_over_ground_truths(f1_score, pred, truths) == pytest.approx(4 / 7)
    assert metric_max_over_ground_truths(exact_match_score, pred, truths) is False
    assert metric_max_over_ground_truths(exact_match_score, "levis stadium", truths) is True


# --------------------------------------------------------------------------
# SQuAD end to end: files, library and CLI
# --------------------------------------------------------------------------

def _qa(qid, *answers):
    return {"id": qid, "question": "?", "answers": [{"answer_start": 0, "text": t} for t in answers]}


DATASET = {
    "version": "1.1",
    "data": [
        {"title": "Super_Bowl_50", "paragraphs": [
            {"context": "...", "qas": [
                _qa("q1", "Denver Broncos", "Denver Broncos", "The Denver Broncos"),
                _qa("q2", "Santa Clara, California", "Levi's Stadium",
                    "Levi's Stadium in the San Francisco Bay Area"),
            ]},
        ]},
        {"title": "Cats", "paragraphs": [
            {"context": "...", "qas": [_qa("q3", "gold", "golden", "gold medal")]},
            {"context": "...", "qas": [_qa("q4", "the cat sat on the mat", "a dog", "cat")]},
        ]},
    ],
}

PREDICTIONS = {
    "q1": "the Denver Broncos!",            # EM 1, F1 1
    "q2": "Levi's Stadium in Santa Clara",  # EM 0, F1 4/7 (see test_best_over_ground_truths;
                                            # vs the long answer: 3 common, p 3/5 r 3/7 -> 0.5)
    "q3": "silver",                         # EM 0, F1 0
    "q4": "cat sat",                        # EM 0, F1 max(2/3, 0, 2/3) = 2/3
    "not-a-question": "ignored",
}
EXPECTED_EM = 100.0 * 1 / 4
EXPECTED_F1 = 100.0 * (1 + 4 / 7 + 0 + 2 / 3) / 4


def _write(path, obj):
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


@pytest.fixture
def squad_files(tmp_path):
    return _write(tmp_path / "dev-v1.1.json", DATASET), _write(tmp_path / "pred.json", PREDICTIONS)


def test_squad_evaluate_in_memory():
    result = squad_evaluate(DATASET["data"], PREDICTIONS)
    assert set(result) == {"exact_match", "f1"}
    assert result["exact_match"] == pytest.approx(EXPECTED_EM)
    assert result["f1"] == pytest.approx(EXPECTED_F1)


def test_squad_eval_files(squad_files):
    result = squad_eval_files(*squad_files)
    assert result == {"exact_match": pytest.approx(EXPECTED_EM), "f1": pytest.approx(EXPECTED_F1)}


def test_squad_cli_prints_official_json(squad_files, capsys):
    assert squad_main([str(p) for p in squad_files]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert list(printed) == ["exact_match", "f1"]
    assert printed["exact_match"] == pytest.approx(EXPECTED_EM)
    assert printed["f1"] == pytest.approx(EXPECTED_F1)
    assert err == ""


def test_squad_cli_runs_as_module(squad_files):
    proc = subprocess.run(
        [sys.executable, "-m", "harness.squad_eval", *map(str, squad_files)],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["f1"] == pytest.approx(EXPECTED_F1)


def test_missing_prediction_counts_zero(tmp_path, capsys):
    preds = {k: v for k, v in PREDICTIONS.items() if k != "q4"}
    missing = []
    result = squad_evaluate(DATASET["data"], preds, missing=missing)
    assert missing == ["q4"]
    # Still divided by all 4 questions.
    assert result["exact_match"] == pytest.approx(100.0 * 1 / 4)
    assert result["f1"] == pytest.approx(100.0 * (1 + 4 / 7) / 4)

    dataset = _write(tmp_path / "d.json", DATASET)
    pred = _write(tmp_path / "p.json", preds)
    assert squad_main([str(dataset), str(pred)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["f1"] == pytest.approx(100.0 * (1 + 4 / 7) / 4)
    assert "1 of 4 questions" in err and "q4" in err


def test_empty_predictions_score_zero():
    assert squad_evaluate(DATASET["data"], {}) == {"exact_match": 0.0, "f1": 0.0}


def test_version_warning(tmp_path, capsys):
    assert squad_version_warning(DATASET) is None
    assert "2.0" in squad_version_warning({**DATASET, "version": "2.0"})
    assert "version" in squad_version_warning({"data": []})

    dataset = _write(tmp_path / "d.json", {**DATASET, "version": "2.0"})
    pred = _write(tmp_path / "p.json", PREDICTIONS)
    assert squad_main([str(dataset), str(pred)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["exact_match"] == pytest.approx(EXPECTED_EM)
    assert "warning" in err and "'2.0'" in err


def _bad_inputs(tmp_path):
    good_dataset = _write(tmp_path / "dataset.json", DATASET)
    good_pred = _write(tmp_path / "pred.json", PREDICTIONS)
    invalid = tmp_path / "invalid.json"
    invalid.write_text('{"q1": "x",\n "q2": }', encoding="utf-8")
    return {
        "missing dataset": (tmp_path / "nope.json", good_pred, "nope.json", "not found"),
        "missing predictions": (good_dataset, tmp_path / "gone.json", "gone.json", "not found"),
        "invalid JSON": (good_dataset, invalid, "invalid.json", "line 2, column"),
        "predictions list": (good_dataset, _write(tmp_path / "list.json", ["a", "b"]),
                             "list.json", "got a list"),
        "non-string answer": (good_dataset, _write(tmp_path / "num.json", {"q1": "x", "q2": 42}),
                              "num.json", "'q2'"),
        "null answer": (good_dataset, _write(tmp_path / "null.json", {"q3": None}),
                        "null.json", "'q3'"),
        "no data list": (_write(tmp_path / "nodata.json", {"version": "1.1"}), good_pred,
                         "nodata.json", '"data" list'),
        "no answers": (_write(tmp_path / "noans.json",
                              {"version": "1.1", "data": [{"paragraphs": [{"qas": [_qa("z")]}]}]}),
                       good_pred, "noans.json", "'z'"),
        "no questions": (_write(tmp_path / "empty.json", {"version": "1.1", "data": []}),
                         good_pred, "empty.json", "no questions"),
    }


BAD_CASES = ["missing dataset", "missing predictions", "invalid JSON", "predictions list",
             "non-string answer", "null answer", "no data list", "no answers", "no questions"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_raises_metric_input_error(tmp_path, case):
    dataset, pred, names, detail = _bad_inputs(tmp_path)[case]
    with pytest.raises(MetricInputError) as info:
        squad_eval_files(dataset, pred)
    message = str(info.value)
    assert names in message and detail in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("case", BAD_CASES)
def test_cli_reports_bad_input_and_returns_2(tmp_path, capsys, case):
    dataset, pred, names, detail = _bad_inputs(tmp_path)[case]
    assert squad_main([str(dataset), str(pred)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("dawnbench eval squad: error: ")
    assert names in err and detail in err
    assert err.count("\n") == 1


def test_squad_evaluate_rejects_bad_predictions_in_memory():
    with pytest.raises(ValueError, match="'q1'"):
        squad_evaluate(DATASET["data"], {"q1": ["Denver"]})
