"""A run as settled before any folder exists or any of the reference's code runs: its options, its
budget, its data (checked), the harness's eval labels, its eval set and whether it can be official."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from harness import data_formats, data_views, datasets, eval_labels, paths, worker_env
from harness.errors import UsageError
from harness.eval_set import EvalSet
from harness.official import official_verdict
from harness.registry import ReferenceSpec
from harness.sandbox import modes
from harness.stop_rules import Budget


@dataclass
class RunOptions:
    seed: int = 0
    max_epochs: int | None = None       # default: the reference's budget
    max_seconds: float | None = None    # on-clock seconds; default: the reference's budget
    threshold: float | None = None      # default: the task's; a lowered one is marked unofficial
    results_root: Path = field(default_factory=paths.results_root)     # default ./results
    data_root: Path | None = None
    run_id: str | None = None
    series_id: str | None = None        # the run folder is results/<REF>/<series id>/<run id>
    progress: bool = True
    cost_per_hour: float | None = None  # USD per hour for every node together (price x nodes)
    save_model: bool = True
    instance: str | None = None         # "provider:instance" the price came from (the host's prices table)
    nodes: int = 1
    price: dict | None = None           # {"instance", "usd_per_hour", "source", "date"} of one node


def dist_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun and other launchers set them."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


@dataclass(frozen=True)
class Plan:
    """A run as settled before any folder exists or any of the reference's code runs: its budget,
    its data (checked), the harness's eval labels, and whether it can be official."""
    spec: ReferenceSpec
    hyperparameters: dict
    opts: RunOptions
    budget: Budget
    data_root: Path
    dataset_files: list
    labels: object
    eval_set: EvalSet
    isolation: modes.Isolation
    prov: dict
    rank: int
    world_size: int
    local_rank: int
    worker_env: dict            # what the workers' environment holds (harness.worker_env), for env.json
    train_examples: int = 0     # the eval bound's training set: the task's, or counted on disk for unofficial data
    train_examples_source: str = "task"


def make_plan(spec: ReferenceSpec, hyperparameters: dict, opts: RunOptions) -> Plan:
    """The plan of a run; a missing or corrupt dataset fails here, before any folder is made, with
    the fetch command."""
    task = spec.task
    rank, world_size, local_rank = dist_env()
    threshold = task.target(opts.threshold)
    budget = Budget(max_epochs=opts.max_epochs or spec.max_epochs, max_seconds=opts.max_seconds or spec.max_seconds,
                    threshold=threshold, metric=task.metric, eval_from_epoch=spec.eval_from_epoch,
                    relation=task.kind.relation)
    if budget.max_epochs < budget.eval_from_epoch:      # the last epoch is always evaluated (docs/RULES.md)
        raise UsageError(f"--max-epochs {budget.max_epochs} is before {spec.name}'s first evaluated epoch "
                         f"(budget.eval_from_epoch = {budget.eval_from_epoch} in its reference.toml): the run would "
                         f"never evaluate its last epoch; give --max-epochs {budget.eval_from_epoch} or more")
    data_root = Path(opts.data_root or datasets.default_data_root())
    dataset_files, data_reasons = datasets.check_all(task.dataset, data_root)
    labels = eval_labels.load_task_labels(task, data_root)
    eval_set = EvalSet(task, len(labels), eval_labels.load_blacklist(task.dataset, data_root))
    isolation = modes.probe()
    data_views.check_workers_can_read(task.dataset, data_root, isolation)
    worker = worker_env.describe()
    prov = official_verdict(spec, threshold, data_reasons, eval_set, isolation, data_root=data_root, worker=worker)
    # The eval bound's denominator: the task's training set (tasks.toml) on the official data. Data that
    # are not (a fixture, a subset: the run is unofficial for it) have the size the harness counts on
    # disk, so their bound stays what training on them cost. Never the trainer's own count (issue 33).
    train_examples, source = task.train_examples, "task"
    if data_reasons or os.environ.get(datasets.MANIFEST_ENV):
        try:
            train_examples, source = max(data_formats.count_train_examples(task.dataset, data_root), 1), "counted on disk"
        except datasets.DatasetError:       # no training split to count: the task's, the stricter bound
            pass
    return Plan(spec, hyperparameters, opts, budget, data_root, list(dataset_files.values()), labels, eval_set,
                isolation, prov, rank, world_size, local_rank, worker, train_examples, source)
