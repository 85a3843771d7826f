"""The measure of issue 50, item 1: a new task on a new format is its definition (a tasks.toml and a
datasets.toml entry), one kind class, one format class and its reference folder, and nothing else.

In a copy of this project the test adds a lower-is-better regression (figure: the mean squared error) on
a small float `.npy` set it makes, with a numpy reference that fits a line by gradient descent, then
runs it through the harness, verifies the run, submits it, validates the entry and ranks it, and checks
that no other file of the project differs (docs/TASKS.md, "Adding a task")."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from project_copy import commit_all, copy_project

from harness.tasks import get_task

REPO = Path(__file__).resolve().parent.parent

# One kind class: how the task's predictions are counted, scored, stored and shown (harness/task_kinds.py).
KIND = '''"""The toy regression's kind: one value per example, scored by the mean squared error, lower is better."""
import numpy as np

from harness import stored_predictions
from harness.task_kinds import Figure, TaskKind


class MeanSquaredError(TaskKind):
    name = "regression"
    figures = (Figure("mse", "mse", 1, "mean squared error", upper=None),)
    score_names = ("mse",)
    lower_is_better = True
    exportable = False

    def score(self, task, predictions, labels, drop=None):
        errors = np.asarray(predictions, dtype=np.float64).reshape(-1) - np.asarray(labels, dtype=np.float64)
        return {"mse": float(np.mean(errors ** 2))}

    def from_outputs(self, outputs, labels):
        return np.asarray(outputs, dtype=np.float32).reshape(-1)

    def codec(self):
        # float32 values, one per example, in the one-array npz every stored file is read through
        return stored_predictions.Codec(
            "npz", lambda p: stored_predictions.encode_array(np.asarray(p, dtype="<f4").reshape(-1)),
            lambda task, data, name: stored_predictions.decode_array(
                data, name, ("<f4",), lambda shape: shape == (task.eval_examples,), f"({task.eval_examples},) values"))
'''

# One format class: how the dataset's files are read and shown (harness/data_formats.py).
FORMAT = '''"""The toy regression's format: inputs and targets as float .npy arrays, the targets of the test
split its eval labels (the default views show the trainer both train arrays, the predictor the test inputs)."""
import numpy as np

from harness.data_formats import DataFormat
from harness.datasets import DatasetError


class FloatArrays(DataFormat):
    name = "float-npy"

    def eval_labels(self, ds):
        path = ds.verify(ds.entry["eval_labels"])
        labels = np.load(path, allow_pickle=False)
        if labels.ndim != 1 or labels.dtype.kind != "f":
            raise DatasetError(f"malformed targets {path}: expected 1-D floats, got {labels.dtype} {labels.shape}")
        return labels

    def count_train_examples(self, ds):
        return len(np.load(ds.files_dir / ds.split("train")["inputs"], mmap_mode="r", allow_pickle=False))
'''

TASK = '''
[tasks.toy-mse]
display_name = "ToyMSE"
dataset = "toy-regression"
kind = "harness.toy_mse_kind:MeanSquaredError"
metric = "mse"
threshold = 0.05
eval_examples = 200
train_examples = 800
max_snapshot_mib = 1
tsv_columns = ["epoch", "hours", "mse"]
'''

DATASET = '''
[toy-regression]
dir = "toy-regression"
format = "harness.toy_npy_format:FloatArrays"
fetch_command = "dawnbench data fetch toy-regression"
eval_labels = "test-y.npy"

[toy-regression.splits]
train = {{ inputs = "train-x.npy", targets = "train-y.npy" }}
test = {{ inputs = "test-x.npy", targets = "test-y.npy" }}

[toy-regression.files]
{files}
'''

# The reference: a line fitted by full-batch gradient descent, a few steps an epoch.
TRAIN = '''
from pathlib import Path
import numpy as np
from harness.reference import Reference


class Line(Reference):
    def setup(self, ctx):
        self.ctx, self.steps, self.lr = ctx, ctx.config["steps"], ctx.config["lr"]
        self.w = np.zeros(5)
        if ctx.trains:
            x = np.load(ctx.dataset_dir / "train-x.npy")
            self.x, self.y = np.hstack([x, np.ones((len(x), 1))]), np.load(ctx.dataset_dir / "train-y.npy")

    def train_epoch(self, epoch):
        for _ in range(self.steps):
            error = self.x @ self.w - self.y
            self.w -= self.lr * 2 * self.x.T @ error / len(error)
        return {"loss": float(np.mean(error ** 2)), "samples": len(self.y) * self.steps, "lr": self.lr}

    def _inputs(self):
        x = np.load(self.ctx.dataset_dir / "test-x.npy")
        return np.hstack([x, np.ones((len(x), 1))])

    def predict(self):
        return (self._inputs() @ self.w).astype(np.float32)

    def save(self, path):
        path.mkdir(parents=True, exist_ok=True)
        np.save(path / "w.npy", self.w)

    def load(self, path):
        self.w = np.load(Path(path) / "w.npy")

    def eval_inputs(self):
        return list(self._inputs())

    def infer(self, example):
        return float(np.asarray(example) @ self.w)
'''

REFERENCE_TOML = '''
task = "toy-mse"
framework = "numpy"
model = "a line by gradient descent"
entry = "train:Line"
author = "tests"

[hyperparameters]
steps = 1
lr = 0.2

[budget]
max_epochs = 8
'''


def write_data(folder: Path) -> str:
    """The toy set (y = x . w + 0.5 + noise of sd 0.1), and its [toy-regression.files] lines (sha256 and size)."""
    rng = np.random.default_rng(0)
    w = np.array([1.0, -2.0, 0.5, 1.5])
    folder.mkdir(parents=True)
    lines = []
    for split, n in (("train", 800), ("test", 200)):
        x = rng.normal(size=(n, 4)).astype(np.float32)
        y = (x @ w + 0.5 + rng.normal(scale=0.1, size=n)).astype(np.float32)
        for name, array in ((f"{split}-x.npy", x), (f"{split}-y.npy", y)):
            np.save(folder / name, array, allow_pickle=False)
            data = (folder / name).read_bytes()
            lines.append(f'"{name}" = {{ sha256 = "{hashlib.sha256(data).hexdigest()}", size = {len(data)} }}')
    return "\n".join(lines)


def dawnbench(project: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dawnbench", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_new_task_on_a_new_format_is_its_definition_kind_format_and_reference(tmp_path):
    project = copy_project(tmp_path / "project")
    data = tmp_path / "data"
    (project / "harness" / "toy_mse_kind.py").write_text(KIND)
    (project / "harness" / "toy_npy_format.py").write_text(FORMAT)
    with open(project / "harness" / "data" / "tasks.toml", "a", encoding="utf-8") as f:
        f.write(TASK)
    with open(project / "harness" / "data" / "datasets.toml", "a", encoding="utf-8") as f:
        f.write(DATASET.format(files=write_data(data / "toy-regression")))
    ref = project / "references" / "toy-mse-numpy"
    ref.mkdir()
    (ref / "train.py").write_text(TRAIN)
    (ref / "reference.toml").write_text(REFERENCE_TOML)
    commit_all(project)
    differ = sorted(str(p.relative_to(project)) for p in project.rglob("*")
                    if p.is_file() and ".git" not in p.relative_to(project).parts
                    and not ((REPO / p.relative_to(project)).is_file()
                             and (REPO / p.relative_to(project)).read_bytes() == p.read_bytes()))
    assert differ == ["harness/data/datasets.toml", "harness/data/tasks.toml", "harness/toy_mse_kind.py",
                      "harness/toy_npy_format.py", "references/toy-mse-numpy/reference.toml",
                      "references/toy-mse-numpy/train.py"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAWNBENCH_")}    # official: no override
    env.update(PYTHONPATH=str(project), DAWNBENCH_DATA=str(data))

    results = tmp_path / "results"
    proc = dawnbench(project, env, "run", "toy-mse-numpy", "--results", str(results), "--no-progress",
                     "--instance", "aws:p3.2xlarge")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (results / "toy-mse-numpy").iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert (result["task"], result["metric"], result["status"], result["official"]) == ("toy-mse", "mse", "converged",
                                                                                      True), result
    rows = [line.split("\t") for line in (run_dir / "toy-mse-numpy.tsv").read_text().splitlines()]
    assert rows[0] == ["epoch", "hours", "mse"] and len(rows) > 2
    errors = [float(r[2]) for r in rows[1:]]
    # lower is better: the run goes on while the error is over 0.05 and stops at the first at or under it
    assert all(e > 0.05 for e in errors[:-1]) and errors[-1] <= 0.05 and errors[0] > 1
    assert result["metric_value"] == pytest.approx(errors[-1], abs=1e-4)
    # the runner says each figure in its own unit: the error as computed, never a percent
    said = [line for line in proc.stderr.splitlines() if line.startswith(("epoch ", "converged:"))]
    assert len(said) == len(errors) + 1 and not any("%" in line for line in said), said
    assert f"mse {errors[0]:.4g} (target 0.05)" in said[0].replace(f"{errors[0]:.4f}", f"{errors[0]:.4g}")
    # the predictions stored as the kind's codec writes them, re-scored by verify from the labels the format reads
    assert sorted(p.name for p in (run_dir / "predictions").iterdir())[0] == "epoch-001.npz"
    proc = dawnbench(project, env, "verify", str(run_dir), "--data", str(data))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "mse recomputed from the stored predictions" in proc.stdout
    assert "the first with mse <= 0.05" in proc.stdout

    tree = tmp_path / "entries"
    proc = dawnbench(project, env, "submit", str(run_dir), "--out", str(tree), "--author", "Toy Test",
                     "--code-url", "https://example.org/toy")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (entry,) = (tree / "ToyMSE" / "train").glob("*.json")
    proc = dawnbench(project, env, "validate", str(tree))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = dawnbench(project, env, "leaderboard", str(tree), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)["tasks"]["ToyMSE"]["train_submitted"]     # verified, not reproduced
    assert row["entry"] == entry.stem and row["accuracy"] == pytest.approx(errors[-1])
    assert row["hours"] == pytest.approx(float(rows[-1][1]))


@pytest.mark.parametrize("task, value, said", [("squad", 0.7523, "0.7523"), ("cifar10", 0.9412, "94.12%"),
                                              ("imagenet", 0.93, "93.00%")])
def test_every_figure_is_said_in_its_own_unit(task, value, said):
    """What the runner's epoch and converged lines and an inference's summary print: F1 as a fraction, as
    the task's log writes it, accuracies in percent (SQuAD's F1 was printed as a percent before)."""
    assert get_task(task).figure.said(value) == said
