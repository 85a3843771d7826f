"""fineweb-gpt2-llmc-pytorch against llm.c's train_gpt2.py as scripts/pyrun_gpt2_124M.sh runs it
(references/fineweb-gpt2-llmc-pytorch/anchor.toml): the network and its parameter count built by the
reference's own code at full size (on the meta device: no 500 MB allocated), the initialization at a small
width, the optimizer's decay groups, the schedule at its points, the data order of llm.c's
DistributedDataLoader, and the config rows."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from anchor_checks import anchor_rows, every_row_is_checked
from fineweb_fixture import shard_bytes

from harness import registry
from harness.reference import Context

NAME = "fineweb-gpt2-llmc-pytorch"
CHECKED_HERE = {"parameters", "schedule", "config", "test"}


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    return sys.modules[spec.load_entry_class().__module__]


def test_every_row_is_checked_here():
    every_row_is_checked(NAME, CHECKED_HERE, __file__)


def test_the_network_and_its_parameters(train, spec):
    rows = {r["item"]: r["ours"] for r in anchor_rows(NAME, "parameters")}
    cfg = spec.hyperparameters
    with torch.device("meta"):
        net = train.GPT(cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["block_size"], None)
    assert sum(p.numel() for p in net.parameters()) == rows["parameters"] == 124_439_808
    assert rows["depth, heads, width"] == f"{cfg['n_layer']} layers, {cfg['n_head']} heads, width {cfg['n_embd']}"
    assert len(net.h) == 12 and all(b.attn.heads == 12 for b in net.h) and net.wte.embedding_dim == 768
    # tied, biases in every linear layer but the tied head and in every LayerNorm, the MLP 4x wide
    assert net.lm_head.weight is net.wte.weight and net.wte.num_embeddings == 50257
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear) and m is not net.lm_head]
    assert len(linears) == 4 * 12 and all(m.bias is not None for m in linears)
    norms = [m for m in net.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2 * 12 + 1 and all(m.bias is not None for m in norms)
    assert all(b.c_fc.out_features == b.c_proj.in_features == 4 * 768 for b in net.h)
    assert "tanh-GELU" in rows["network"] and not [m for m in net.modules() if isinstance(m, torch.nn.Dropout)]


def test_the_block_is_pre_norm_with_llm_c_s_tanh_gelu(train):
    """With its attention's output zeroed, a block is x + c_proj(NewGELU(c_fc(ln_2(x)))), llm.c's NewGELU being
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    block = train.Block(8, 2, 1)
    with torch.no_grad():
        block.attn.c_proj.weight.zero_()
        block.attn.c_proj.bias.zero_()
        x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(0))
        h = block.c_fc(block.ln_2(x))
        new_gelu = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
        torch.testing.assert_close(block(x), x + block.c_proj(new_gelu), rtol=1e-5, atol=1e-6)


def test_the_initialization(train):
    layers, width = 4, 96
    net = train.GPT(layers, 4, width, 64, torch.Generator().manual_seed(0))
    residual = 0.02 / math.sqrt(2 * layers)
    for name, p in net.named_parameters():
        if name.endswith("bias"):
            assert torch.equal(p, torch.zeros_like(p)), name           # the linear layers' and the LayerNorms'
            continue
        if p.dim() < 2:
            assert torch.equal(p, torch.ones_like(p)), name            # the LayerNorms' scales
            continue
        want = residual if name.endswith("c_proj.weight") else 0.02
        assert abs(p.std().item() - want) < 0.1 * want and abs(p.mean().item()) < 0.1 * want, name
    again = train.GPT(layers, 4, width, 64, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), again.parameters()))     # the seed decides


def trainer(train, spec, tmp_path, **overrides):
    folder = tmp_path / "fineweb10B"
    folder.mkdir(parents=True, exist_ok=True)
    for i in (1, 2):
        (folder / f"fineweb_train_{i:06d}.bin").write_bytes(shard_bytes(np.arange(i * 1000, i * 1000 + 300)))
    cfg = {**spec.hyperparameters, "n_layer": 1, "n_head": 2, "n_embd": 16, "sequence_length": 8, "micro_batch": 2,
           "total_batch_tokens": 32, "compile": "false", **overrides}
    ref = train.FineWebGPT2()
    ref.setup(Context(config=cfg, data_root=tmp_path, seed=0, task=spec.task, show_progress=False, role="train"))
    return ref


def test_the_optimizer_groups(train, spec, tmp_path):
    """Decay on every tensor of 2 or more dimensions (the tied table once, the positions), none on biases and
    LayerNorms; betas, eps and the clip as the row says."""
    (row,) = [r for r in anchor_rows(NAME, "test") if r["item"] == "optimizer"]
    cfg = spec.hyperparameters
    assert (cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"], cfg["grad_clip"]) == (0.9, 0.95, 1e-8, 0.1, 1.0)
    assert "betas (0.9, 0.95), eps 1e-8, weight decay 0.1" in row["ours"] and "norm 1.0" in row["ours"]
    ref = trainer(train, spec, tmp_path)
    decay, no_decay = ref.opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert decay["betas"] == (0.9, 0.95) and decay["eps"] == 1e-8
    names = {id(p): n for n, p in ref.net.named_parameters()}
    assert sorted(names[id(p)] for p in decay["params"]) == sorted(n for n, p in ref.net.named_parameters() if p.dim() >= 2)
    assert {"wte.weight", "wpe.weight"} <= {names[id(p)] for p in decay["params"]}
    assert all(names[id(p)].endswith("bias") or "ln_" in names[id(p)] for p in no_decay["params"])


def test_the_data_order(train, spec, tmp_path):
    """llm.c's DistributedDataLoader: rank r of 2 reads B*T + 1 tokens at r*B*T, moves 2*B*T on, and goes to the
    next shard when the next read would run past this one; the steps accumulate total / (B*T*ranks) rows."""
    ref = trainer(train, spec, tmp_path)
    assert ref.accumulate == 2                              # 32 tokens a step / (2 rows x 8 tokens x 1 rank)
    x, y = ref.stream.next_batch()
    assert x.flatten().tolist() == list(range(1000, 1016)) and y.flatten().tolist() == list(range(1001, 1017))
    paths = ref.stream.paths
    rank1 = train.ShardStream(paths, 2, 8, rank=1, world=2)
    reads = [rank1.next_batch()[0].flatten()[0].item() for _ in range(9)]
    # shard 1 holds 1000..1299: rank 1 reads at 16, 48, ..., 240; the next read (at 272) would need 33 tokens
    assert reads[:8] == [1016 + 32 * k for k in range(8)] and reads[8] == 2016


def test_the_schedule(train, spec):
    (row,) = anchor_rows(NAME, "schedule")
    cfg = spec.hyperparameters
    assert cfg["epochs"] * cfg["steps_per_epoch"] == 18865 and "18,865" in row["ours"]
    for step, lr in row["expect"]:
        assert train.learning_rate(step, cfg) == pytest.approx(lr, rel=1e-6, abs=1e-12), step


def test_the_config_rows(spec):
    rows = anchor_rows(NAME, "config")
    assert rows
    for row in rows:
        assert spec.hyperparameters[row["expect"]] == row["ours"], row["item"]
