"""The task registry: thresholds, eval sets and DAWNBench log rows, as the v1 entries wrote them."""
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from harness import tasks
from harness.tasks import TASKS, UnknownTaskError, get_task

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too


RULES = Path(__file__).resolve().parents[2] / "docs" / "RULES.md"


def rules_table() -> dict[str, tuple[int, str]]:
    """{task: (eval examples, threshold as written)} of docs/RULES.md's table under "## Tasks"."""
    text = RULES.read_text(encoding="utf-8")
    table = text[text.index("\n## Tasks\n"):].split("\n\n")[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    # the eval set's size: the first number written with thousands' commas ("SQuAD v1.1 dev, 10,570 questions")
    return {row[0]: (int(re.search(r"\d{1,3}(?:,\d{3})+", row[1]).group().replace(",", "")), row[3]) for row in rows}


def test_the_rules_table_states_every_task_as_tasks_toml_defines_it():
    """docs/RULES.md's task table and harness/data/tasks.toml agree: the same tasks, each with its eval-set
    size and its threshold in its figure's unit (no list kept by hand here: a task added to tasks.toml
    without its row, or a threshold changed in one only, fails)."""
    assert rules_table() == {name: (task.eval_examples, f"{task.figure.to_log(task.threshold):g}"
                                    + ("%" if task.figure.percent else ""))
                             for name, task in TASKS.items()}


def test_unknown_task_lists_known_ones():
    with pytest.raises(UnknownTaskError, match=", ".join(sorted(TASKS))):
        get_task("mnist")


def test_eval_on_clock_is_the_language_model_tasks_and_a_non_bool_is_one_line():
    """tasks.toml's eval_on_clock (docs/RULES.md, "The eval span"): the two language-model tasks put their eval on
    the clock (MLPerf's rule), every other task keeps DAWNBench's (false, the default); anything but true or false
    fails at import in one line."""
    assert {name for name, task in TASKS.items() if task.eval_on_clock} == {"kjv-bytes", "fineweb-gpt2"}
    with open(tasks._TASKS_FILE, "rb") as f:
        raw = tomllib.load(f)["tasks"]
    assert "eval_on_clock" not in raw["cifar10"] and not tasks._task("cifar10", raw["cifar10"]).eval_on_clock
    assert tasks._task("toy", {**raw["cifar10"], "eval_on_clock": True}).eval_on_clock
    for value in ("true", 1, 0, None):
        with pytest.raises(UnknownTaskError) as raised:
            tasks._task("toy", {**raw["cifar10"], "eval_on_clock": value})
        message = str(raised.value)
        assert message.startswith(f"tasks.toml [tasks.toy]: eval_on_clock {value!r} must be true or false")
        assert "\n" not in message


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
