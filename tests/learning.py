"""Train a reference's own code on a learnable fixture and score it as a run does: the helper of the
tests/test_learns_*.py modules (issue 24, "each family learns, on the CPU, in seconds").

`learn` drives the reference through the contract the harness drives: a trainer set up on the
trainer's view of the data (the training files only), its own `train_epoch` for a few epochs, its
own `save`; a predictor set up on the predictor's view (the eval inputs only, without labels), its
own `load` and `predict`; then the task's own metric (`Task.score`, what the harness logs) against
the eval labels the harness reads itself, from the checksummed files. Hyperparameters are the
reference.toml's, with overrides resolved as `--set key=value` is (registry.resolve_hyperparameters:
an unknown key or a wrong type is refused), so a test can narrow a network or shorten a schedule
but never reach past the recipe's code.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import eval_labels, registry
from harness.reference import Context


@dataclass
class Learned:
    scores: dict[str, float]                 # Task.score: {"top1": ...} or {"f1": ..., "exact_match": ...}
    epochs: list[dict] = field(default_factory=list)    # what each train_epoch returned
    seconds: float = 0.0                     # setup to predictions, both roles

    @property
    def losses(self) -> list[float]:
        return [float(stats["loss"]) for stats in self.epochs]


def context(spec, config: dict, data_root: Path, role: str, seed: int, work_dir: Path) -> Context:
    return Context(config=config, data_root=Path(data_root), seed=seed, task=spec.task, work_dir=work_dir,
                   show_progress=False, role=role)


@contextlib.contextmanager
def one_torch_thread(framework: str):
    """One intra-op thread for a PyTorch reference: on a small shared CPU two spinning OpenMP threads
    make steps many times slower (Fashion-MNIST's first epoch here: 4 s with two, 0.15 s with one)."""
    if framework != "pytorch":
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def learn(name: str, views: dict[str, Path], data_root: Path, overrides: list[str], epochs: int, tmp_path: Path,
          seed: int = 0) -> Learned:
    """Train reference `name` for `epochs` epochs and score its predictions. `views`: the data root
    each role sees (conftest.role_views); `data_root`: the whole dataset, where the harness reads
    the eval labels; `overrides`: "key=value" strings, as on the command line."""
    spec = registry.load_spec(name)
    with one_torch_thread(spec.framework):
        return _learn(spec, views, data_root, registry.resolve_hyperparameters(spec, overrides), epochs, tmp_path, seed)


def _learn(spec, views, data_root, config, epochs, tmp_path, seed) -> Learned:
    cls = spec.load_entry_class()
    start = time.perf_counter()
    trainer = cls()
    trainer.setup(context(spec, config, views["train"], "train", seed, tmp_path))
    stats = [trainer.train_epoch(epoch) for epoch in range(1, epochs + 1)]
    model = tmp_path / "model"
    trainer.save(model)
    trainer.close()
    predictor = cls()
    predictor.setup(context(spec, config, views["predict"], "predict", seed, tmp_path))
    predictor.load(model)
    predictions = predictor.predict()
    predictor.close()
    seconds = time.perf_counter() - start
    labels = eval_labels.load_eval_labels(spec.task.dataset, data_root)
    assert spec.task.count(predictions) == len(labels), "a prediction for every eval example"
    return Learned(scores=spec.task.score(predictions, labels), epochs=stats, seconds=seconds)
