"""The task registry: thresholds, eval sets and DAWNBench log rows, as the v1 entries wrote them."""
import numpy as np
import pytest

from harness.tasks import TASKS, UnknownTaskError, get_task

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too


def test_registry_holds_the_benchmark_tasks():
    assert {n: (t.metric, t.threshold, t.eval_examples) for n, t in TASKS.items()} == {
        "cifar10": ("top1", 0.94, 10000),
        "imagenet": ("top5", 0.93, 50000),
        "squad": ("f1", 0.75, 10570),
        "fashion-mnist": ("top1", 0.92, 10000),
    }


def test_unknown_task_lists_known_ones():
    with pytest.raises(UnknownTaskError, match="cifar10, fashion-mnist, imagenet, squad"):
        get_task("mnist")


def test_imagenet_scores_and_row_carry_top1_and_top5_in_percent():
    task = get_task("imagenet")
    labels = np.array([0, 1, 2, 3])
    scores = np.zeros((4, 10))
    scores[0, 0] = 1                     # right at top-1
    scores[1, [5, 1]] = [2, 1]           # right at top-2
    scores[2, [4, 5, 6, 7, 8]] = 1       # label 2 is outside the top 5
    scores[3, 3] = 1
    s = task.score(scores, labels)
    assert s == {"top1": 0.5, "top5": 0.75}
    assert task.tsv_columns == ("epoch", "hours", "top1Accuracy", "top5Accuracy")
    assert task.tsv_row(3, 1.5, s) == ["3", "1.500000", "50.00", "75.00"]


def test_squad_row_writes_f1_as_a_fraction():
    task = get_task("squad")
    data = [{"paragraphs": [{"context": "x", "qas": [
        {"id": "a", "answers": [{"text": "the red fox"}]},
        {"id": "b", "answers": [{"text": "blue"}]}]}]}]
    s = task.score({"a": "red fox", "b": "green"}, data)
    assert s["f1"] == pytest.approx(0.5) and s["exact_match"] == pytest.approx(0.5)
    assert task.tsv_columns == ("epoch", "hours", "f1Score")
    assert task.tsv_row(1, 0.25, s) == ["1", "0.250000", "0.5000"]
    assert task.count({"a": "x", "b": "y"}) == 2


def test_classification_rows_have_exact_dawnbench_columns():
    for name in ("cifar10", "fashion-mnist"):
        task = get_task(name)
        assert task.tsv_columns == ("epoch", "hours", "top1Accuracy")
        assert task.tsv_row(2, 0.001, {"top1": 0.9412}) == ["2", "0.001000", "94.12"]
