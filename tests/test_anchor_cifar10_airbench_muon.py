"""cifar10-airbench-muon-pytorch against its anchor table (references/cifar10-airbench-muon-pytorch/
anchor.toml): airbench94_muon, KellerJordan/cifar10-airbench airbench94_muon.py.

Most rows are checked by tests/test_cifar10_airbench_muon_pytorch.py, which restates the anchor's
own definitions (the network, Muon and its Newton-Schulz iteration, the optimizers' groups, the
augmentation, TTA) and names them row by row. This module checks the rest: the parameter counts by
building the network, Muon's learning rate at twelve points of the full-size plan (200 steps at
batch 2,000) through the reference's own `set_rates`, the config rows and the normalization.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from anchor_checks import anchor_rows, every_row_is_checked
from conftest import REPO

from harness import registry
from harness.reference import Context

NAME = "cifar10-airbench-muon-pytorch"
CHECKED_HERE = {"parameters", "schedule", "config", "eval_preprocessing", "test"}
SMALL = {"widths": [16, 32, 32], "batch_size": 20}     # for the instance the full-size plan is patched into


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    return sys.modules[spec.load_entry_class().__module__]


def test_every_row_is_checked_here():
    every_row_is_checked(NAME, CHECKED_HERE, __file__)


def test_the_parameter_counts(train, spec):
    rows = {r["item"]: r["ours"] for r in anchor_rows(NAME, "parameters")}
    net = train.net_from_config(spec.hyperparameters)
    params = list(net.parameters())
    assert sum(p.numel() for p in params if p.requires_grad) == rows["trainable parameters"]
    assert sum(p.numel() for p in params if not p.requires_grad) == rows["fixed parameters: whitening filters, BN scales"]
    # the network row: 64/256/256, two 3x3 convs a block, a bias-free head over 256 features, a 2x2 stem
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [24, 64, 64, 256, 256, 256, 256]
    assert convs[0].kernel_size == (2, 2) and convs[0].bias is not None and all(c.bias is None for c in convs[1:])
    (head,) = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert head.bias is None and (head.in_features, head.out_features) == (256, 10)
    # logits / 256: a head input of ones gives the head's row sums over 256
    with torch.no_grad():
        features = torch.ones(1, 256)
        assert torch.allclose(head(features) / 256, head.weight.sum(1) / 256)
    assert "logits / 256" in rows["network"]


def test_the_config_rows(spec):
    for row in anchor_rows(NAME, "config"):
        assert spec.hyperparameters[row["expect"]] == row["ours"], row["item"]


def test_the_schedule_at_full_size(spec, cifar10_views, tmp_path):
    """The reference's own set_rates, with the plan it makes for the 50,000 real images at batch
    2,000 (25 steps an epoch, 200 in all, 75 for the whitening bias) put in place of the fixture's."""
    (row,) = anchor_rows(NAME, "schedule")
    ref = spec.load_entry_class()()
    ref.setup(Context(config=dict(spec.hyperparameters, **SMALL), data_root=cifar10_views["train"], seed=0,
                      task=spec.task, work_dir=tmp_path, show_progress=False, role="train"))
    per_epoch = 50_000 // spec.hyperparameters["batch_size"]
    ref.steps_per_epoch, ref.total_steps = per_epoch, int(np.ceil(spec.hyperparameters["epochs"] * per_epoch))
    ref.whiten_bias_steps = int(np.ceil(spec.hyperparameters["whiten_bias_epochs"] * per_epoch))
    assert (ref.steps_per_epoch, ref.total_steps, ref.whiten_bias_steps) == (25, 200, 75)
    for epoch, lr in row["expect"]:
        ref.set_rates(round(epoch * per_epoch))
        assert ref.muon.param_groups[0]["lr"] == pytest.approx(lr, rel=1e-9, abs=1e-12), epoch


def test_the_normalization(train):
    (row,) = anchor_rows(NAME, "eval_preprocessing")
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    assert f"mean {mean}, std ({', '.join(f'{s:.4f}' for s in std)})" in row["ours"]
    assert (train.MEAN, train.STD) == (mean, std)
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    got = train.to_device_images(images, torch.device("cpu")).numpy()
    expected = ((images / 255 - np.array(mean)) / np.array(std)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# The parts this recipe shares with cifar10-fast-pytorch word for word (airbench94_muon's own file
# repeats airbench94's the same way): each reference stays one readable file a fork copies whole,
# and this test keeps the copies equal, so a fix to one is made to both.
SHARED_WITH_CIFAR10_FAST = ("conv3x3", "batch_norm", "ConvGroup", "to_device_images", "tta_views")


def test_the_parts_shared_with_cifar10_fast_stay_equal():
    import ast

    def definitions(reference: str) -> dict[str, str]:
        tree = ast.parse((REPO / "references" / reference / "train.py").read_text(encoding="utf-8"))
        return {n.name: ast.dump(n) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    muon, fast = definitions("cifar10-airbench-muon-pytorch"), definitions("cifar10-fast-pytorch")
    differ = [name for name in SHARED_WITH_CIFAR10_FAST if muon.get(name) is None or muon.get(name) != fast.get(name)]
    assert not differ, f"edit both references' train.py alike: {differ} differ (or are missing)"
