"""The framework base classes declare what a reference's `setup` must set (SETUP_SETS), and the worker
checks it after setup: a fork that forgets `self.net` or `self.eval_x` stops there with one line
naming the attribute, not with an AttributeError deep inside predict or int8 calibration."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from common.torch_base import TorchReference
from harness.errors import UsageError
from harness.reference import Context
from harness.tasks import get_task


def _ctx(role: str) -> Context:
    return Context(config={}, data_root=Path("."), seed=0,
                   task=get_task("cifar10"), role=role)


class Complete(TorchReference):
    def setup(self, ctx):
        self.ctx = ctx
        self.net = torch.nn.Linear(2, 2)
        if ctx.trains:
            self.train_x = torch.zeros(4, 2)
        else:
            self.eval_x = torch.zeros(4, 2)

    def train_epoch(self, epoch):
        return {"loss": 0.0, "samples": 4}

    def calibration_batch(self, indices):
        return self.train_x[indices]


class NoNet(Complete):
    def setup(self, ctx):
        super().setup(ctx)
        del self.net


class NoEvalX(Complete):
    def setup(self, ctx):
        super().setup(ctx)
        self.__dict__.pop("eval_x", None)


class OwnEvalReaders(NoEvalX):
    """Overrides every reader of eval_x, so it need not set it (the ImageNet references decode on demand)."""
    def predict(self):
        return torch.zeros(4, 2).numpy()

    def eval_inputs(self):
        return [torch.zeros(2)] * 4


class NoTrainX(Complete):
    def setup(self, ctx):
        super().setup(ctx)
        self.__dict__.pop("train_x", None)


class NoInt8(NoTrainX):
    """Defines no calibration_batch: int8 is not supported, so train_x is not required."""
    calibration_batch = TorchReference.calibration_batch


@pytest.mark.parametrize("cls", [Complete, OwnEvalReaders, NoInt8])
@pytest.mark.parametrize("role", ["train", "predict"])
def test_a_reference_that_sets_what_its_base_reads_passes(cls, role):
    ref = cls()
    ctx = _ctx(role)
    ref.setup(ctx)
    ref.check_setup(ctx)


@pytest.mark.parametrize("cls, role, name", [(NoNet, "train", "net"),
                                             (NoEvalX, "predict", "eval_x"), (NoTrainX, "train", "train_x")])
def test_a_missing_attribute_is_named_in_one_line(cls, role, name):
    ref = cls()
    ctx = _ctx(role)
    ref.setup(ctx)
    with pytest.raises(UsageError) as err:
        ref.check_setup(ctx)
    message = str(err.value)
    assert "\n" not in message
    assert f"left self.{name} unset in the {role} role" in message
    assert f"set self.{name} = " in message


def test_the_worker_checks_the_contract_after_setup():
    """The check runs where setup runs: the worker's setup handler, before the first epoch."""
    import inspect

    from harness import worker
    source = inspect.getsource(worker)
    assert "self.ref.setup(ctx)\n        self.ref.check_setup(ctx)" in source


def test_the_keras_contract_follows_what_the_subclass_overrides():
    """squad-bidaf-tensorflow overrides predict, eval_inputs and infer (its own answers), the ImageNet
    references predict, eval_inputs and example_spec (images decoded on demand): neither keeps
    self.eval_x, and neither is refused; a subclass that keeps the default infer and example_spec is."""
    pytest.importorskip("tensorflow")
    from common.tf_base import KerasReference

    class Base(KerasReference):
        def __init__(self):     # no CUDA check: nothing here runs on a device
            pass

        def setup(self, ctx):
            self.ctx, self.model = ctx, object()

        def train_epoch(self, epoch):
            return {"loss": 0.0, "samples": 1}

    own = {"predict": lambda self: None, "eval_inputs": lambda self: []}
    squad_like = type("SquadLike", (Base,), {**own, "infer": lambda self, x: x})
    imagenet_like = type("ImageNetLike", (Base,), {**own, "example_spec": lambda self: None})
    default_infer = type("DefaultInfer", (Base,), own)
    ctx = _ctx("predict")
    for cls in (squad_like, imagenet_like):
        ref = cls()
        ref.setup(ctx)
        ref.check_setup(ctx)
    ref = default_infer()
    ref.setup(ctx)
    with pytest.raises(UsageError, match=r"left self.eval_x unset in the predict role \(KerasReference.*infer\+example_spec"):
        ref.check_setup(ctx)
