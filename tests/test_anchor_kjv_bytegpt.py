"""kjv-bytegpt-pytorch against nanoGPT's baby GPT (references/kjv-bytegpt-pytorch/anchor.toml): the
network's parts and parameter count built by the reference's own code, the initialization, one AdamW
step through the reference's own train_step against the same step computed by hand (decay groups,
betas, bias correction, clipping), the schedule at its points, and the config rows."""
from __future__ import annotations

import copy
import math
import sys

import pytest
import torch
from anchor_checks import anchor_rows, every_row_is_checked

from harness import registry
from harness.reference import Context

NAME = "kjv-bytegpt-pytorch"
CHECKED_HERE = {"parameters", "schedule", "config", "optimizer", "test"}


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    return sys.modules[spec.load_entry_class().__module__]


def network(train, cfg: dict):
    return train.ByteGPT(cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["block_size"])


def trainer(spec, tmp_path, **overrides):
    (tmp_path / spec.task.dataset).mkdir(parents=True, exist_ok=True)
    (tmp_path / spec.task.dataset / "kjv-train.txt").write_bytes(b"And God said, Let there be light. " * 20)
    ref = spec.load_entry_class()()
    ref.setup(Context(config={**spec.hyperparameters, **overrides}, data_root=tmp_path, seed=0, task=spec.task,
                      show_progress=False, role="train"))
    return ref


def test_every_row_is_checked_here():
    every_row_is_checked(NAME, CHECKED_HERE, __file__)


def test_the_network_and_its_parameters(train, spec):
    rows = {r["item"]: r["ours"] for r in anchor_rows(NAME, "parameters")}
    cfg = spec.hyperparameters
    net = network(train, cfg)
    assert sum(p.numel() for p in net.parameters()) == rows["parameters"]       # the tied table counted once
    # vocabulary: bytes in, bytes out, one table
    assert net.embed.num_embeddings == net.head.out_features == 256 and rows["vocabulary"].startswith("256 byte")
    assert net.head.weight is net.embed.weight
    # depth, heads, width, as the row says them
    assert rows["depth, heads, width"] == f"{cfg['n_layer']} layers, {cfg['n_head']} heads, width {cfg['n_embd']}"
    assert len(net.blocks) == cfg["n_layer"] and all(b.attn.heads == cfg["n_head"] for b in net.blocks)
    # no biases, LayerNorms without a shift, a GELU MLP 4x wide, no dropout anywhere
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.bias is None for m in linears)
    norms = [m for m in net.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * cfg["n_layer"] + 1 and all(m.bias is None for m in norms)
    for block in net.blocks:
        fc, act, proj = block.mlp
        assert isinstance(act, torch.nn.GELU) and fc.out_features == proj.in_features == 4 * cfg["n_embd"]
    assert rows["dropout"] == 0.0 and not [m for m in net.modules() if isinstance(m, torch.nn.Dropout)]
    # pre-norm: a block whose attention and MLP give zeros passes its input through unchanged
    block = copy.deepcopy(net.blocks[0])
    with torch.no_grad():
        block.attn.proj.weight.zero_()
        block.mlp[2].weight.zero_()
        x = torch.randn(2, 5, cfg["n_embd"])
        assert torch.equal(block(x), x)


def test_the_initialization(train, spec):
    cfg = spec.hyperparameters
    torch.manual_seed(0)
    net = network(train, cfg)
    residual = 0.02 / math.sqrt(2 * cfg["n_layer"])
    for name, p in net.named_parameters():
        if p.dim() < 2:
            assert torch.equal(p, torch.ones_like(p)), name          # the norms' scales
            continue
        want = residual if name.endswith(("attn.proj.weight", "mlp.2.weight")) else 0.02
        assert abs(p.std().item() - want) < 0.1 * want and abs(p.mean().item()) < 0.1 * want, name


def test_one_optimizer_step_by_hand(spec, tmp_path):
    """train_step against AdamW's first step written out: the clip scales every gradient by
    grad_clip / norm; decay multiplies the matrices by 1 - lr x 0.1, never the norms' scales; the
    bias-corrected first step moves each weight by lr x g / (|g| + eps)."""
    (row,) = anchor_rows(NAME, "optimizer")
    cfg = spec.hyperparameters
    assert (cfg["beta1"], cfg["beta2"], cfg["weight_decay"], cfg["grad_clip"]) == (0.9, 0.99, 0.1, 1.0)
    assert "betas (0.9, 0.99), weight decay 0.1" in row["ours"] and "norm 1.0" in row["ours"]
    # a clip small enough to bite, and a rate that moves the weights visibly
    ref = trainer(spec, tmp_path, grad_clip=0.05, lr=0.05, lr_start_fraction=1.0)
    x, y = ref.text[:64].long().view(2, 32), ref.text[1:65].long().view(2, 32)
    before = {n: p.detach().clone() for n, p in ref.net.named_parameters()}
    shadow = copy.deepcopy(ref.net)
    loss = torch.nn.functional.cross_entropy(shadow(x).view(-1, 256), y.reshape(-1))
    grads = dict(zip([n for n, _ in shadow.named_parameters()], torch.autograd.grad(loss, list(shadow.parameters()))))
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    assert norm > 0.05
    scale = 0.05 / (norm + 1e-6)
    lr = ref.lr_at(0)
    assert lr == pytest.approx(0.05)
    ref.train_step(x, y)
    for name, p in ref.net.named_parameters():
        g = grads[name] * scale
        decay = 0.1 if p.dim() >= 2 else 0.0
        want = before[name] * (1 - lr * decay) - lr * g / (g.abs() + 1e-8)
        torch.testing.assert_close(p.detach(), want, rtol=1e-4, atol=1e-6, msg=name)


def test_the_schedule(spec, tmp_path):
    (row,) = anchor_rows(NAME, "schedule")
    ref = trainer(spec, tmp_path)
    assert spec.hyperparameters["epochs"] * spec.hyperparameters["steps_per_epoch"] == 1827 and "1,827" in row["ours"]
    for step, lr in row["expect"]:
        assert ref.lr_at(step) == pytest.approx(lr, rel=1e-6), step


def test_the_config_rows(spec):
    rows = anchor_rows(NAME, "config")
    assert rows
    for row in rows:
        assert spec.hyperparameters[row["expect"]] == row["ours"], row["item"]
