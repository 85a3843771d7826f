"""fineweb-gpt2-modded-pytorch against modded-nanogpt's record #11 (references/fineweb-gpt2-modded-pytorch/
anchor.toml): the network at full size built by the reference's own code (on the meta device: no memory)
against the record's shapes and parameter count, the initialization, the four optimizers and one step's
momentum warm-up and warm-down share through the reference's own train_step, the schedule at its points,
and the config rows. "log:N" is line N of the record's log, which holds its train_gpt2.py."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from anchor_checks import anchor_rows, every_row_is_checked
from fineweb_fixture import shard_bytes, train_name

from harness import registry
from harness.reference import Context

NAME = "fineweb-gpt2-modded-pytorch"
CHECKED_HERE = {"parameters", "schedule", "config", "optimizer", "test"}


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    return sys.modules[spec.load_entry_class().__module__]


def network(train, cfg: dict, **size):
    cfg = {**cfg, **size}
    return train.GPT(cfg["vocab_size"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"])


def record_parameters(vocab: int, layers: int, width: int) -> int:
    """The record's GPT counted from its shapes (log:158-247): an embedding and an untied head of vocab x width;
    a block's c_q, c_k, c_v, c_proj (width x width each), c_fc and the MLP's c_proj (4 width x width each),
    its attention's lamb (1) and its lambdas (2); one skip weight for each of the decoder's layers - layers // 2."""
    block = 4 * width * width + 2 * 4 * width * width + 1 + 2
    return 2 * vocab * width + layers * block + (layers - layers // 2)


def test_every_row_is_checked_here():
    every_row_is_checked(NAME, CHECKED_HERE, __file__)


def test_the_network_and_its_parameters(train, spec):
    rows = {r["item"]: r["ours"] for r in anchor_rows(NAME, "parameters")}
    cfg = spec.hyperparameters
    with torch.device("meta"):
        net = network(train, cfg)
    count = sum(p.numel() for p in net.parameters())
    assert count == rows["parameters"] == record_parameters(50304, 12, 768) == 162_201_642
    assert rows["depth, heads, width"] == f"{cfg['n_layer']} layers, {cfg['n_head']} heads, width {cfg['n_embd']}"
    assert len(net.blocks) == 12 and all(b.attn.heads == 6 and b.attn.head_dim == 128 for b in net.blocks)
    # the vocabulary: 50,304 outputs, 50,257 scored; an untied head
    assert net.embed.num_embeddings == net.lm_head.out_features == 50304 and train.VOCAB == 50257
    assert net.lm_head.weight is not net.embed.weight and "50,304 outputs" in rows["vocabulary"]
    # no biases, no dropout, no LayerNorm (the norms are parameter-free RMS norms); the U-net's 6 skip weights
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 12 * 6 + 1 and all(m.bias is None for m in linears)
    assert not [m for m in net.modules() if isinstance(m, (torch.nn.Dropout, torch.nn.LayerNorm))]
    assert net.skip_weights.shape == (6,) and net.encoder_layers == 6
    for block in net.blocks:
        assert block.mlp.c_fc.out_features == block.mlp.c_proj.in_features == 4 * 768


def test_its_snapshot_fits_the_task_s_cap(train, spec, tmp_path):
    """The snapshot the harness takes after each epoch (the reference's own save: the weights alone) at full
    size, in float32 (a CPU's, the largest form; the GPU's cast is smaller), is under the task's cap: a
    cap of 512 MiB stopped the record's first snapshot at 545 MiB."""
    from harness import tasks
    cfg = spec.hyperparameters
    net = network(train, cfg)       # real memory: 162M float32 parameters, 619 MiB
    torch.save(net.state_dict(), tmp_path / "model.pt")
    size = (tmp_path / "model.pt").stat().st_size
    cap = tasks.get_task(spec.task.name).max_snapshot_mib * 2**20
    assert 600 * 2**20 < size <= cap, (size / 2**20, cap / 2**20)


def test_the_network_computes_the_records_forward(train):
    """A small network with every weight drawn at random against the record's forward restated (log:178-276):
    the x0 mix, pre-norm attention with QK-norm, rotary and the value residual, ReLU^2, the U-net skips, the
    final norm and the soft cap. Equal in float32 to rounding, so a missing or reordered part fails."""
    torch.manual_seed(0)
    net = train.GPT(101, 4, 2, 16)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    idx = torch.randint(0, 101, (2, 9))
    F = torch.nn.functional

    def rope(x):
        d = x.shape[3] // 2
        inv = 1.0 / (10000 ** (torch.arange(0, 2 * d, 2).float() / (2 * d)))
        f = torch.outer(torch.arange(x.shape[1]).float(), inv)
        cos, sin = f.cos()[None, :, None, :], f.sin()[None, :, None, :]
        return torch.cat([x[..., :d] * cos + x[..., d:] * sin, x[..., :d] * (-sin) + x[..., d:] * cos], 3)

    def block(b, x, v1, x0):
        x = b.lambdas[0] * x + b.lambdas[1] * x0
        h = F.rms_norm(x, (x.size(-1),))
        B, T, C = h.shape
        q, k, v = (lin(h).view(B, T, 2, C // 2) for lin in (b.attn.c_q, b.attn.c_k, b.attn.c_v))
        v1 = v if v1 is None else v1
        v = (1 - b.attn.lamb) * v + b.attn.lamb * v1
        q, k = rope(F.rms_norm(q, (q.size(-1),))), rope(F.rms_norm(k, (k.size(-1),)))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + b.attn.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + b.mlp.c_proj(F.relu(b.mlp.c_fc(F.rms_norm(x, (x.size(-1),)))).square()), v1

    with torch.no_grad():
        x = x0 = F.rms_norm(net.embed(idx), (16,))
        v1, skips = None, []
        for i in range(2):
            x, v1 = block(net.blocks[i], x, v1, x0)
            skips.append(x)
        for i in range(2):
            x, v1 = block(net.blocks[2 + i], x + net.skip_weights[i] * skips.pop(), v1, x0)
        want = 30 * torch.tanh(net.lm_head(F.rms_norm(x, (16,))) / 30)
        got = net(idx)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.abs().max() > 1.0


def test_the_initialization(train):
    torch.manual_seed(0)
    net = train.GPT(500, 2, 2, 64)
    assert net.embed.weight.std().item() == pytest.approx(1.0, abs=0.02)           # nn.Embedding's N(0, 1)
    assert not net.lm_head.weight.any()
    for b in net.blocks:
        assert not b.attn.c_proj.weight.any() and not b.mlp.c_proj.weight.any()
        assert b.attn.lamb.item() == 0.5 and b.lambdas.tolist() == [1.0, 0.0]
        for lin in (b.attn.c_q, b.attn.c_k, b.attn.c_v, b.mlp.c_fc):                  # kaiming-uniform, a = sqrt(5)
            bound = 1 / lin.in_features ** 0.5
            assert lin.weight.abs().max() <= bound and lin.weight.abs().max() > 0.9 * bound
    assert net.skip_weights.tolist() == [1.0]


def trainer(train, spec, tmp_path, **overrides):
    folder = tmp_path / spec.task.dataset
    folder.mkdir(parents=True, exist_ok=True)
    folder.joinpath(train_name(1)).write_bytes(shard_bytes(np.arange(2000) * 37 % 50257))
    tiny = {"n_layer": 2, "n_head": 2, "n_embd": 32, "sequence_length": 16, "batch_size": 4, "device_batch_size": 2,
            "bf16": "false", "compile": "false"}
    ref = spec.load_entry_class()()
    ref.setup(Context(config={**spec.hyperparameters, **tiny, **overrides}, data_root=tmp_path, seed=0,
                      task=spec.task, show_progress=False, role="train"))
    return ref


def test_the_optimizers(train, spec, tmp_path):
    """The four optimizers and what each trains (log:428-434), then one step through the reference's own
    train_step at step 250 of a plan of 1,000 with 900 of warm-down: Muon's momentum is 0.85 + 0.1 x 250/500
    = 0.90 (log:546-547) and every rate is its peak x 750/900 (get_lr)."""
    (row,) = anchor_rows(NAME, "optimizer")
    ref = trainer(train, spec, tmp_path, steps_per_epoch=1000, warmdown_steps=900)
    embed, head, muon, scalars = ref.optimizers
    net = ref.net
    assert [type(o).__name__ for o in ref.optimizers] == ["Adam", "Adam", "Muon", "Adam"]
    assert embed.param_groups[0]["params"] == [net.embed.weight] and head.param_groups[0]["params"] == [net.lm_head.weight]
    matrices = {id(p) for b in net.blocks for p in b.parameters() if p.ndim == 2}
    assert {id(p) for p in muon.param_groups[0]["params"]} == matrices and len(matrices) == 2 * 6
    assert {id(p) for p in scalars.param_groups[0]["params"]} == {
        id(p) for p in [*net.blocks.parameters(), net.skip_weights] if p.ndim < 2}
    assert [o.param_groups[0]["lr"] for o in ref.optimizers] == [0.6, 0.008, 0.04, 0.04]
    assert all(o.param_groups[0]["betas"] == (0.9, 0.95) and o.param_groups[0]["weight_decay"] == 0
               for o in (embed, head, scalars))
    assert muon.param_groups[0]["nesterov"] and muon.param_groups[0]["ns_steps"] == 5
    assert "momentum 0.85 rising linearly to 0.95 over 500 steps, 5 Newton-Schulz steps" in row["ours"]
    ref.step = 250
    before = net.lm_head.weight.detach().clone()
    ref.train_step()
    assert muon.param_groups[0]["momentum"] == pytest.approx(0.90)
    for o, peak in zip(ref.optimizers, (0.6, 0.008, 0.04, 0.04)):
        assert o.param_groups[0]["lr"] == pytest.approx(peak * 750 / 900)
    assert not torch.equal(net.lm_head.weight, before) and ref.step == 251


def test_the_schedule(train, spec):
    (row,) = anchor_rows(NAME, "schedule")
    cfg = spec.hyperparameters
    plan = cfg["epochs"] * cfg["steps_per_epoch"]
    assert plan == 3000 and cfg["warmdown_steps"] == 900
    for step, share in row["expect"]:
        assert train.warmdown(step, plan, cfg["warmdown_steps"]) == pytest.approx(share, abs=1e-9), step


def test_the_config_rows(spec):
    rows = anchor_rows(NAME, "config")
    assert rows
    for row in rows:
        assert spec.hyperparameters[row["expect"]] == row["ours"], row["item"]
