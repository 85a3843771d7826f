"""The contract between the harness and a reference: one small class the harness drives.

The harness owns the loop, the clock, the eval labels, the metric and the logs. A reference
builds its model and the data of its role in `setup`; as the trainer it trains one epoch per
`train_epoch` call and saves the model, as the predictor it loads that model and returns
predictions for every eval example from `predict`; it never times itself and never writes
a result.
"""
from __future__ import annotations

import abc
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from harness.errors import UsageError
from harness.tasks import Task


@dataclass
class Context:
    """What the harness hands a reference in `setup`."""
    config: dict[str, Any]      # hyperparameters: reference.toml defaults + command-line overrides
    data_root: Path             # datasets live in data_root/<dataset>
    seed: int
    task: Task                  # name, eval-set size; never the eval labels
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    work_dir: Path | None = None  # scratch space the reference may use
    show_progress: bool = True
    # "train": the data root holds the training files only; "predict": the eval inputs only (no
    # training data, no labels); "serve": none of the task's files (the server of `dawnbench infer`'s
    # timed requests, each of which carries its example). A reference builds its model in every role
    # and loads the data of its role.
    role: str = "train"
    _progress_factory: Callable[..., Iterable] | None = field(default=None, repr=False)

    @property
    def dataset_dir(self) -> Path:
        return self.data_root / self.task.dataset

    @property
    def trains(self) -> bool:
        return self.role == "train"

    @property
    def serves(self) -> bool:
        """The timed server of `dawnbench infer`: build the model (load() brings the weights) and no data."""
        return self.role == "serve"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def progress(self, iterable: Iterable, total: int | None = None, desc: str = "", unit: str = "batch"):
        """Wrap a loop in the run's progress bar (shown on rank 0 only)."""
        if not (self.show_progress and self.is_main):
            return iterable
        from tqdm import tqdm
        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, file=sys.stderr,
                    dynamic_ncols=True, mininterval=0.5)


@dataclass(frozen=True)
class SetupSets:
    """An attribute that a framework base class (common/) reads and the reference's `setup` must set.

    Required in `roles` ("train", "predict") unless the subclass overrides a method of every reader in
    `read_by` (then no base reader runs); a reader is a method, or a tuple of methods that reads the
    attribute only when the subclass overrides none of them; with `only_with`, only where the subclass defines that method
    (int8 calibration reads the training examples only where the reference says how to prepare them)."""
    name: str
    roles: tuple[str, ...]
    read_by: tuple[str | tuple[str, ...], ...] = ()
    only_with: str | None = None
    what: str = ""


class Reference(abc.ABC):
    """One benchmark entry. Subclass it in references/<name>/ and name it in reference.toml."""

    # What `setup` must set, declared by the framework base classes in common/; checked after setup.
    SETUP_SETS: ClassVar[tuple[SetupSets, ...]] = ()

    def check_setup(self, ctx: Context) -> None:
        """After `setup`: one line naming the first attribute a base class reads that setup left unset."""
        cls = type(self)
        for owner in reversed(cls.__mro__):
            for need in vars(owner).get("SETUP_SETS", ()):
                if ctx.role not in need.roles or hasattr(self, need.name):
                    continue
                groups = [(r,) if isinstance(r, str) else tuple(r) for r in need.read_by]
                if groups and not any(all(getattr(cls, m) is getattr(owner, m) for m in g) for g in groups):
                    continue
                if need.only_with and getattr(cls, need.only_with) is getattr(owner, need.only_with):
                    continue
                readers = f" ({owner.__name__}.{', '.join('+'.join(g) for g in groups)} read it)" if groups else ""
                raise UsageError(f"{cls.__name__}.setup left self.{need.name} unset in the {ctx.role} role{readers}: "
                                 f"set self.{need.name} = {need.what} in setup")

    @abc.abstractmethod
    def setup(self, ctx: Context) -> None:
        """Build the model, and the data of the instance's role. On the clock in the trainer: init
        and data loading count.

        A run makes a trainer for the run and a predictor for each eval, each in its own process.
        The trainer (`ctx.trains`, role "train") sees the training files only, not the eval images: it loads them and builds what
        training needs (optimizer, schedule, augmentation); the harness then calls `train_epoch`
        and, after each epoch, `save`. The predictor (role "predict") sees the eval inputs only, no
        training data and no labels: it loads the eval images; the harness then calls `load` with
        what the trainer saved at that epoch and `predict`, and kills it: no state of one eval
        reaches the next. `dawnbench infer` starts a predictor without the model for `eval_inputs`
        and a server (`ctx.serves`: no data at all; build the model only) that `load`s the model and
        gets each example with its timed `infer` request."""

    @abc.abstractmethod
    def train_epoch(self, epoch: int) -> dict[str, float]:
        """One pass over the training data (epochs count from 1). On the clock.

        Returns at least {"loss": mean training loss, "samples": examples seen on this rank};
        "lr" and anything else numeric are logged too, as information: no bound, time or score is
        read from them. A return without a numeric "loss", or with a name of a figure the harness
        writes (run_record.HARNESS_KEYS: "tta_seconds", "top1", ...), is refused as a mistake; a
        NaN or infinite loss ends the run as diverged.
        """

    @abc.abstractmethod
    def predict(self) -> Any:
        """Predictions for every eval example in the task's canonical order: class scores
        (N, C), ranked class ids (N, k), or {question id: answer text}. Off the clock (on it for a task whose
        tasks.toml says eval_on_clock: the language-model tasks).

        A language-model task (kind `lm`) calls `predict(inputs)` instead, several times: `inputs` is an
        int64 array [N, T] of token ids, windows of the validation stream the harness cut (the predictor's
        view holds no file of the task), and the answer is float32 log-probabilities [N, T, V], row i,
        position t the log-distribution of the token that follows inputs[i, :t+1]: causal, normalized
        (a log_softmax), and the same whatever the batch and the tokens after t, for a fresh predictor
        asks again at positions the harness draws (docs/RULES.md, "Language-model tasks"). Where the task's
        reply is "next" (a large vocabulary: FineWeb's GPT-2 tokens), `inputs` is [N, T + 1] and the answer
        float [N, T], entry [i, t] = log p(inputs[i, t+1] | inputs[i, :t+1]); the fresh predictor of the
        audit is asked `next_distribution` instead."""

    def next_distribution(self, rows: Any, lengths: Any) -> Any:
        """A language-model task of reply "next", in the audit's fresh predictor (after `load`): `rows` int64
        [K, T], `lengths` int64 [K] in 1..T; the answer is float [K, V], row j the log-distribution of the
        token that follows rows[j, :lengths[j]] (the tokens after it are random: the same answer whatever they
        are), normalized, and giving the true next token what predict() gave it (docs/RULES.md,
        "Language-model tasks")."""
        raise UsageError(f"{type(self).__name__} has no next_distribution(rows, lengths): a language-model task whose "
                         f"reply is \"next\" asks it in its look-ahead audit (docs/RULES.md, \"Language-model tasks\")")

    @abc.abstractmethod
    def save(self, path: Path) -> None:
        """Write the trained model under the directory `path` (in the trainer, after each epoch):
        what a predictor's `load` needs. On the clock: it is the reference's code, in the train span."""

    @abc.abstractmethod
    def load(self, path: Path) -> None:
        """Read back what `save` wrote (after `setup`, in the predictor): everything `predict` and
        `infer` need that the eval images do not give (weights, averaged weights, statistics)."""

    @abc.abstractmethod
    def eval_inputs(self) -> Sequence[Any]:
        """The eval examples, unlabeled, in canonical order: what `infer` is timed on. In the
        predictor, which never gets the model for inference: each example goes to the timed server
        with its request, as an array (a tensor's values), bytes or a JSON value. Not asked where the
        eval set is image files (ImageNet): each request then carries the file's bytes, read by the
        harness, and `example_from_wire` decodes them inside the timed call (harness.inference)."""

    @abc.abstractmethod
    def infer(self, example: Any) -> Any:
        """One example -> one prediction (scores or ids for one item, or answer text). In the server
        (role "serve": the model, none of the task's files), on an example it has not seen before."""

    def example_from_wire(self, example: Any) -> Any:
        """One example as it came with its timed request (a numpy array, bytes or a JSON value, from
        what `eval_inputs` gave; an ImageNet image file's bytes) -> what `infer` takes. Part of the
        timed call. The framework adapters in common/ put an array on the model's device; an ImageNet
        reference decodes and prepares the image here, as its predictor does."""
        return example

    # Optional hooks of `dawnbench infer --runtime onnxruntime|openvino` (common/torch_base.py
    # implements them for PyTorch references). The harness runs the exported network in a process
    # of its own, which never imports the reference's code, and times each call there.
    def export_onnx(self, path: Path) -> None:
        """In the predictor, after `load`: write the evaluated network (what `infer` computes) as an
        ONNX file at `path`, input = a batch of examples as `export_inputs` gives them."""
        raise UsageError(f"{type(self).__name__} has no export_onnx(): it runs only with --runtime reference")

    def export_inputs(self, start: int = 0, stop: int | None = None) -> Any:
        """In the predictor: the eval examples `start` to `stop` (default: to the end) as the
        exported network takes them, in canonical order, as one array (stop - start, ...). The
        harness asks for the eval set a slice at a time (ImageNet's 50,000 crops are 7.5 GB)."""
        raise UsageError(f"{type(self).__name__} has no export_inputs(): it runs only with --runtime reference")

    def calibration_inputs(self, n: int) -> Any:
        """In the trainer (training files only): `n` training examples prepared as `export_inputs`
        prepares the eval examples, for int8 calibration."""
        raise UsageError(f"{type(self).__name__} has no calibration_inputs(): --precision int8 needs it")

    # Hooks with single-process defaults; framework helpers in common/ override them.
    def synchronize(self) -> None:
        """Wait for queued device work. The clock calls it before every reading."""
        return None

    def all_max(self, values: Sequence[float]) -> list[float]:
        """Element-wise max across ranks (one clock: the slowest rank's time counts)."""
        return [float(v) for v in values]

    def close(self) -> None:
        """Release what setup acquired (a process group, say); called once the run is logged."""
        return None

    def framework_versions(self) -> dict[str, str]:
        """Versions worth recording beyond installed packages (e.g. CUDA, cuDNN)."""
        return {}

    def train_precision(self) -> tuple[str, str] | None:
        """In the trainer, after `setup`: (the precision training runs in, why), the word one of
        harness.precision.PRECISIONS ("fp32", "bf16", "fp16", ...) and the reason one line, e.g.
        ("bf16", 'bf16 = "native" on cpu: bf16 autocast, the CPU multiplies bf16 in hardware'): what a
        switch such as "native" or "auto" chose on this machine. The harness records it per run as
        the reference's report (result.json `precision`); None, the default, records fp32."""
        return None


class InferenceReference(Reference):
    """An entry that only infers (reference.toml: [inference] only = true). It never trains: its
    model comes from another run (a run's model folder) or from a published file, and `dawnbench
    infer --model PATH` records which, with the sha256 of every file. The harness starts it in the
    predictor role (eval inputs, no model) and the server role (the model, no data); `load` gets a
    folder holding a copy of what --model named (a run's model folder, or the one file). For int8
    the harness also starts it in the trainer role, whose view holds the training files, to give
    `calibration_inputs`."""

    def train_epoch(self, epoch: int) -> dict[str, float]:
        raise UsageError(f"{type(self).__name__} only infers: it has no training epoch")

    def save(self, path: Path) -> None:
        raise UsageError(f"{type(self).__name__} only infers: it saves no model")
