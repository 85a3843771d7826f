"""The task registry: metric, threshold, eval-set size and log columns of each task.

The numbers live in data/tasks.toml; this module only reads them and scores predictions.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import DawnbenchError

_TASKS_FILE = Path(__file__).parent / "data" / "tasks.toml"


class UnknownTaskError(DawnbenchError, ValueError):
    pass


@dataclass(frozen=True)
class Task:
    name: str
    display_name: str
    dataset: str
    metric: str            # "top1" | "top5" | "f1"
    threshold: float       # as a fraction, for every metric
    eval_examples: int
    tsv_columns: tuple[str, ...]
    train_examples: int = 0         # the official training set's size (the eval bound's denominator)
    max_snapshot_mib: float = 0.0   # the cap on a snapshot, the task's alone (docs/RULES.md, "Snapshots ...")
    eval_passes: float = 1.0        # what an eval example may cost in the eval bound, the task's alone

    def score(self, predictions, labels, drop=None) -> dict[str, float]:
        """Every metric the task logs, as fractions; the harness calls this, never a reference.
        `drop`: indices of eval examples left out of the score (ImageNet's blacklist); the
        predictions still cover every example."""
        # numpy here, not at the top: `dawnbench list` reads the tasks from a bare Python (dawnbench.launcher)
        import numpy as np

        from harness import metrics
        if drop is not None and len(drop):
            keep = np.ones(len(labels), dtype=bool)
            keep[np.asarray(drop)] = False
            if np.shape(predictions)[0] != len(labels):
                raise ValueError(f"{np.shape(predictions)[0]} predictions for {len(labels)} labels")
            predictions, labels = np.asarray(predictions)[keep], np.asarray(labels)[keep]
        if self.metric == "f1":
            # labels: the official dataset's `data` list (as SquadLabels); predictions: {question id: text}
            data = labels.data if isinstance(labels, metrics.SquadLabels) else labels
            result = metrics.squad_evaluate(data, predictions)
            return {"f1": result["f1"] / 100.0, "exact_match": result["exact_match"] / 100.0}
        scores = {"top1": metrics.topk_accuracy(predictions, labels, 1)}
        if "top5Accuracy" in self.tsv_columns or self.metric == "top5":
            scores["top5"] = metrics.topk_accuracy(predictions, labels, 5)
        return scores

    def count(self, predictions) -> int:
        import numpy as np

        return len(predictions) if isinstance(predictions, dict) else int(np.shape(predictions)[0])

    def tsv_row(self, epoch: int, hours: float, scores: dict[str, float]) -> list[str]:
        """One DAWNBench log row: accuracies in percent, F1 as a fraction, as the v1 entries."""
        cells = {
            "epoch": str(epoch),
            "hours": f"{hours:.6f}",
            "top1Accuracy": f"{100 * scores.get('top1', float('nan')):.2f}",
            "top5Accuracy": f"{100 * scores.get('top5', float('nan')):.2f}",
            "f1Score": f"{scores.get('f1', float('nan')):.4f}",
        }
        return [cells[c] for c in self.tsv_columns]


def _load() -> tuple[str, dict[str, Task]]:
    with open(_TASKS_FILE, "rb") as f:
        raw = tomllib.load(f)
    tasks = {
        name: Task(
            name=name,
            display_name=t["display_name"],
            dataset=t["dataset"],
            metric=t["metric"],
            threshold=float(t["threshold"]),
            eval_examples=int(t["eval_examples"]),
            tsv_columns=tuple(t["tsv_columns"]),
            train_examples=int(t["train_examples"]),
            max_snapshot_mib=float(t["max_snapshot_mib"]),
            eval_passes=float(t.get("eval_passes", 1.0)),
        )
        for name, t in raw["tasks"].items()
    }
    return raw["rules_version"], tasks


RULES_VERSION, TASKS = _load()


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}") from None
