"""cifar10-fast-pytorch against its anchor table (references/cifar10-fast-pytorch/anchor.toml):
airbench94, KellerJordan/cifar10-airbench legacy/airbench94.py at f1c599c.

Most rows are checked by tests/test_cifar10_fast_pytorch.py, which restates airbench's own
definitions (the optimizer's groups, Lookahead, the augmentation, TTA) and names them row by row.
This module checks the rest: the parameter counts by building the network, the learning rate at
fifteen points of the full-size plan (476 steps at batch 1,024) through the reference's own
`lr_at`, the config rows, the normalization, and the precision under bf16 autocast.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from anchor_checks import anchor_rows, every_row_is_checked

from harness import registry
from harness.reference import Context

NAME = "cifar10-fast-pytorch"
CHECKED_HERE = {"parameters", "schedule", "config", "eval_preprocessing", "test"}
SMALL = {"widths": [16, 32, 32], "batch_size": 20}     # for the instances the full-size plan is patched into


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    return sys.modules[spec.load_entry_class().__module__]


def make(spec, data_root, tmp_path, **overrides):
    ref = spec.load_entry_class()()
    ref.setup(Context(config=dict(spec.hyperparameters, **SMALL, **overrides), data_root=data_root, seed=0,
                      task=spec.task, work_dir=tmp_path, show_progress=False, role="train"))
    return ref


def test_every_row_is_checked_here():
    every_row_is_checked(NAME, CHECKED_HERE, __file__)


def test_the_parameter_counts(train, spec):
    rows = {r["item"]: r["ours"] for r in anchor_rows(NAME, "parameters")}
    cfg = spec.hyperparameters
    net = train.net_from_config(cfg)
    params = list(net.parameters())
    assert sum(p.numel() for p in params if p.requires_grad) == rows["trainable parameters"]
    assert sum(p.numel() for p in params if not p.requires_grad) == rows["fixed parameters: whitening filters, BN scales"]
    # the network row: 64/256/256, two 3x3 convs a block, a bias-free head scaled by 1/9, a 2x2 whitening
    # stem (its function, GELUs and pools included, is test_network_is_airbench94s's)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [24, 64, 64, 256, 256, 256, 256]
    assert convs[0].kernel_size == (2, 2) and convs[0].bias is not None and all(c.bias is None for c in convs[1:])
    (head,) = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert head.bias is None and (head.in_features, head.out_features) == (256, 10)
    assert cfg["head_scale"] == pytest.approx(1 / 9)


def test_the_config_rows(spec):
    for row in anchor_rows(NAME, "config"):
        assert spec.hyperparameters[row["expect"]] == row["ours"], row["item"]


def test_the_schedule_at_full_size(spec, train, cifar10_views, tmp_path):
    """The reference's own lr_at, with the plan it makes for the 50,000 real images at batch 1,024
    (plan_steps, sgd_settings) put in place of the tiny fixture's."""
    (row,) = anchor_rows(NAME, "schedule")
    ref = make(spec, cifar10_views["train"], tmp_path)
    ref.steps_per_epoch, ref.total_steps = train.plan_steps(50_000, spec.hyperparameters["batch_size"],
                                                            spec.hyperparameters["epochs"])
    ref.base_lr, _ = train.sgd_settings(spec.hyperparameters, spec.hyperparameters["batch_size"])
    assert (ref.steps_per_epoch, ref.total_steps) == (48, 476)
    for epoch, lr in row["expect"]:
        assert ref.lr_at(round(epoch * ref.steps_per_epoch)) == pytest.approx(lr, rel=1e-5, abs=1e-9), epoch


def test_the_normalization(train):
    (row,) = anchor_rows(NAME, "eval_preprocessing")
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    assert f"mean {mean}, std ({', '.join(f'{s:.4f}' for s in std)})" in row["ours"]
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    got = train.to_device_images(images, torch.device("cpu")).numpy()
    expected = ((images / 255 - np.array(mean)) / np.array(std)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def one_step(ref):
    """One train_step on 20 training images: (the weights before, the dtypes the network output, the
    loss, the batch, its labels)."""
    before = [p.detach().clone() for p in ref.net.parameters()]
    seen = []
    hook = ref.net.register_forward_hook(lambda m, args, out: seen.append(out.dtype))
    x, y = ref.augment(torch.arange(20), torch.full((2, 20), 2), epoch=1), ref.train_y[:20]
    loss = ref.train_step(x, y)
    hook.remove()
    return before, seen, loss, x, y


def test_bf16_autocast_keeps_float32_weights(spec, cifar10_views, tmp_path):
    """The precision row: with bf16 on (as "auto" resolves on CUDA), the forward pass runs in bf16
    under autocast, the loss and the weights stay float32, and a step changes the weights."""
    ref = make(spec, cifar10_views["train"], tmp_path, bf16="true", tta_level=1)
    assert ref.use_bf16 and spec.hyperparameters["bf16"] == "auto" and ref.train_precision()[0] == "bf16"
    before, seen, loss, x, y = one_step(ref)
    assert seen == [torch.bfloat16] and loss.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in ref.net.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, ref.net.parameters()))


def test_fp16_autocasts_to_float16_with_a_loss_scale(spec, cifar10_views, tmp_path):
    """The precision row's other setting (`fp16 = "true"`, measured against bf16 on a GPU in the
    README): the forward pass runs in float16, the loss is scaled before backward (GradScaler,
    starting at 2^16), weights stay float32, a step changes them; bf16 is off whatever its switch;
    a step whose gradients overflow is skipped and lowers the scale."""
    ref = make(spec, cifar10_views["train"], tmp_path, bf16="true", fp16="true", tta_level=1)
    assert ref.use_fp16 and not ref.use_bf16 and spec.hyperparameters["fp16"] == "false"
    assert ref.train_precision()[0] == "fp16"                       # what the run records it trained in
    assert ref.scaler.is_enabled() and ref.scaler.get_scale() == 2.0 ** 16
    before, seen, loss, x, y = one_step(ref)
    assert seen == [torch.float16] and loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(p.dtype == torch.float32 for p in ref.net.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, ref.net.parameters()))
    # an overflow: inf in the input makes every gradient non-finite; the weights stay, the scale halves
    after = [p.detach().clone() for p in ref.net.parameters()]
    ref.train_step(torch.full_like(x, float("inf")), y)
    assert all(torch.equal(a, p) for a, p in zip(after, ref.net.parameters()))
    assert ref.scaler.get_scale() == 2.0 ** 15
    # the default trains without a scaler: the scale is never consulted
    assert not make(spec, cifar10_views["train"], tmp_path, tta_level=1).scaler.is_enabled()
