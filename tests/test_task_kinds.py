"""A task is one object: its kind (harness/task_kinds.py), chosen by harness/data/tasks.toml.

No code outside the kinds branches on a task's or metric's name; the schema's enums, the MLPerf rules'
task list and the CLI's help follow tasks.toml; and a new task (a metric where lower is better) is
added through its tasks.toml definition and one kind class, then run, verified, submitted and ranked
without another harness or dawnbench file edited."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SCRIPTED, SCRIPTED_TOML
from project_copy import commit_all, copy_project

from harness import cli, eval_labels, stop_rules, task_kinds
from harness.tasks import FIGURES, SCORE_NAMES, TASKS

REPO = Path(__file__).resolve().parent.parent
# Where a task's name may be written: the kinds; the official scoring functions, whose return keys
# are the official scripts' (metrics.py, squad_eval.py); the ImageNet preparation tool, whose one job
# is that dataset (dawnbench/prepare_imagenet.py).
ALLOWED = {"harness/task_kinds.py", "harness/metrics.py", "harness/squad_eval.py", "dawnbench/prepare_imagenet.py"}


def named_by_tasks() -> set[str]:
    """Every name that says which task or metric: task and display names, metrics, score names, fields."""
    return ({t.name for t in TASKS.values()} | {t.display_name for t in TASKS.values()}
            | {t.metric for t in TASKS.values()} | set(SCORE_NAMES) | set(FIGURES))


def task_names_in(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every string constant that is exactly a task's or metric's name: a branch
    (`metric == "f1"`), a table keyed by one ({"top1": ...}) or a list of them."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]


def test_the_scan_finds_a_branch_on_the_metric():
    names = named_by_tasks()
    assert task_names_in('if task.metric == "f1":\n    pass\n', names) == [(1, "f1")]
    assert task_names_in('COLUMNS = {"top1": "top1Accuracy"}\n', names) == [(1, "top1"), (1, "top1Accuracy")]
    assert task_names_in('print(f"{task.metric} reached")\n', names) == []


def test_no_code_outside_the_kinds_names_a_task_or_metric():
    names = named_by_tasks()
    found = [f"{path.relative_to(REPO)}:{line}: {name!r}"
             for folder in ("harness", "dawnbench") for path in sorted((REPO / folder).rglob("*.py"))
             if str(path.relative_to(REPO)) not in ALLOWED
             for line, name in task_names_in(path.read_text(encoding="utf-8"), names)]
    assert found == [], "a branch on the task or metric outside harness/task_kinds.py:\n" + "\n".join(found)


def test_the_schema_rules_and_help_follow_tasks_toml():
    schema = json.loads((REPO / "harness/data/result.schema.json").read_text())["properties"]
    assert schema["task"]["enum"] == list(TASKS)
    assert schema["metric"]["enum"] == list(dict.fromkeys(t.metric for t in TASKS.values()))
    fields = json.loads((REPO / "dawnbench/data/schemas/entry-fields.dawnbench-1.0.schema.json").read_text())
    for name, figure in FIGURES.items():
        assert fields["properties"][name]["description"].endswith("(percent)" if figure.percent else "(a fraction)")
    rules = REPO / "dawnbench/data/mlperf"
    listed = re.search(r"v\['value'\] in (\[.*?\])", (rules / "open_common.yaml").read_text()).group(1)
    assert sorted(ast.literal_eval(listed)) == sorted(TASKS)
    for task in TASKS.values():
        text = (rules / f"open_{task.name}.yaml").read_text()
        assert f"v['metadata']['metric'] == '{task.metric}'" in text
        sizes = ast.literal_eval(re.search(r"\"v\['value'\] in (\[[0-9, ]*\])\"", text).group(1))
        assert sizes[0] == task.eval_examples, task.name
        assert (f"ATLEAST_ONE_CHECK: \"v['value'] {'<=' if task.lower_is_better else '>='} s['threshold']\""
                in text), task.name
    import argparse
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    data, evaluate = sub.add_parser("data"), sub.add_parser("eval")
    cli.add_data_options(data)
    cli.add_eval_options(evaluate)
    help_text = " ".join(data.format_help().split())
    assert all(t.dataset in help_text for t in TASKS.values())
    (what,) = [a for a in evaluate._actions if a.dest == "what"]
    assert list(what.choices) == sorted(task_kinds.EVALUATORS)



@pytest.mark.parametrize("spec", ["os:system", "references.mine.train:Kind", "harness.tasks:Task",
                                  "harness.nothing_here:Kind", "image-classifier", "harness..x:Y"])
def test_a_kind_is_the_harness_own(spec):
    with pytest.raises(task_kinds.UnknownKindError, match=r"^tasks\.toml \[tasks\.toy\]: kind "):
        task_kinds.resolve(spec, "toy")


def test_lower_is_better_reaches_at_or_under():
    class Loss(task_kinds.ImageClassification):
        lower_is_better = True
    assert Loss().reaches(0.08, 0.08) and Loss().reaches(0.05, 0.08) and not Loss().reaches(0.5, 0.08)
    assert not Loss().reaches(float("nan"), 0.08) and Loss().short_side == "above"
    assert task_kinds.ImageClassification().reaches(0.5, 0.08)
    budget = stop_rules.Budget(max_epochs=2, max_seconds=60.0, threshold=0.08, metric="error", lower_is_better=True)
    assert stop_rules.decide(budget, 2, 0.1, 1.0, False).reason == "budget: max_epochs=2 reached without error <= 0.08"


TOY_KIND = '''"""A toy kind: the error rate of a classifier, where lower is better (tests/test_task_kinds.py)."""
from harness.task_kinds import Figure, ImageClassification


class ErrorRate(ImageClassification):
    name = "error-rate"
    figures = (Figure("error", "errorRate", 1, "error rate"),)
    score_names = ("error",)
    lower_is_better = True

    def score(self, task, predictions, labels, drop=None):
        from harness import metrics
        predictions, labels = self.kept(predictions, labels, drop)
        return {"error": 1.0 - metrics.topk_accuracy(predictions, labels, 1)}
'''

TOY_TASK = '''
[tasks.fashion-error]
display_name = "FashionError"
dataset = "fashion-mnist"
kind = "harness.toy_error_kind:ErrorRate"
metric = "error"
threshold = 0.08
eval_examples = 10000
train_examples = 60000
max_snapshot_mib = 16
tsv_columns = ["epoch", "hours", "errorRate"]
'''


def test_a_toy_task_where_lower_is_better_runs_verifies_submits_and_ranks(fashion_root, tmp_path, capsys):
    project = copy_project(tmp_path / "project")
    (project / "harness" / "toy_error_kind.py").write_text(TOY_KIND)
    with open(project / "harness" / "data" / "tasks.toml", "a", encoding="utf-8") as f:
        f.write(TOY_TASK)
    ref = project / "references" / "scripted-test"
    ref.mkdir()
    (ref / "scripted.py").write_text(SCRIPTED)
    (ref / "reference.toml").write_text(SCRIPTED_TOML.replace('task = "fashion-mnist"', 'task = "fashion-error"'))
    np.save(ref / "labels.npy", eval_labels.load_eval_labels("fashion-mnist", fashion_root))
    commit_all(project)
    # nothing but tasks.toml and the kind's own module differs from this checkout's harness and host tools
    differ = sorted(str(p.relative_to(project)) for folder in ("harness", "dawnbench")
                    for p in (project / folder).rglob("*") if p.is_file()
                    and not (REPO / p.relative_to(project)).is_file()
                    or p.is_file() and (REPO / p.relative_to(project)).read_bytes() != p.read_bytes())
    assert differ == ["harness/data/tasks.toml", "harness/toy_error_kind.py"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAWNBENCH_")}    # official: no override
    env["PYTHONPATH"] = str(project)

    def dawnbench(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dawnbench", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=600)

    results, tree = tmp_path / "results", tmp_path / "entries"
    # error 0.5, 0.2, 0.05 by epoch: 0.5 would "reach" 0.08 were higher better; it converges at epoch 3
    proc = dawnbench("run", "scripted-test", "--data", str(fashion_root), "--results", str(results),
                     "--no-progress", "--instance", "aws:p3.2xlarge")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (results / "scripted-test").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert (result["task"], result["metric"], result["status"], result["epochs"]) == ("fashion-error", "error",
                                                                                    "converged", 3)
    assert result["metric_value"] == pytest.approx(0.05, abs=1e-4) and result["official"] is True, result
    tsv = (run_dir / "scripted-test.tsv").read_text().splitlines()
    assert tsv[0] == "epoch\thours\terrorRate" and [r.split("\t")[2] for r in tsv[1:]] == ["0.5000", "0.2000", "0.0500"]

    proc = dawnbench("verify", str(run_dir), "--data", str(fashion_root))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "error recomputed from the stored predictions" in proc.stdout

    env["DAWNBENCH_DATA"] = str(fashion_root)     # the entry tools re-verify the run against the labels
    proc = dawnbench("submit", str(run_dir), "--out", str(tree), "--author", "Toy Test")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (entry_json,) = (tree / "FashionError" / "train").glob("*.json")
    proc = dawnbench("validate", str(tree))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = dawnbench("leaderboard", str(tree), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    tables = json.loads(proc.stdout)["tasks"]["FashionError"]
    (row,) = tables["train_time"]
    hours = float(tsv[3].split("\t")[1])
    assert row["entry"] == entry_json.stem and row["hours"] == pytest.approx(hours)
    assert row["accuracy"] == pytest.approx(0.05)
