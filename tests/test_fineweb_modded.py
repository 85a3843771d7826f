"""fineweb-gpt2-modded-pytorch (issue 50, item 4) on a CPU: the predictor contract of the fineweb-gpt2 task
(`predict(inputs)`: windows [N, T + 1] -> [N, T] log-probabilities of each next token;
`next_distribution(rows, lengths)`: [K, 50257] log-distributions after each prefix), causality, Muon's
orthogonalization against the singular-value computation it approximates, the rank striding of the
record's loader, and learning on a stream in the exact `.bin` format.

The module is loaded from its file (no task table needed) and driven as a run drives it, at a tiny size:
2 layers of width 32, windows of 16 tokens. The vocabulary stays GPT-2's (50,304 outputs, 50,257
scored): the contract is over it. Weights are drawn at random where a test needs the network to say
something (the recipe's zero-initialized head predicts the uniform distribution at every position, which
no causality test could tell from a cheating one).
"""
from __future__ import annotations

import importlib.util
import math
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from cheats import events, harness_run, needs_isolation
from conftest import REPO
from fineweb_fixture import VAL, fixture_manifest, shard_bytes, train_name

import dawnbench.fetch as fetcher
from harness import datasets as hds
from harness.errors import UsageError
from harness.reference import Context

NAME = "fineweb-gpt2-modded-pytorch"
FOLDER = REPO / "references" / NAME
TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "sequence_length": 16, "batch_size": 8, "device_batch_size": 4,
        "steps_per_epoch": 24, "warmdown_steps": 8, "muon_momentum_warmup_steps": 8, "eval_batch_size": 3,
        "bf16": "false", "compile": "false"}
TASK = SimpleNamespace(name="fineweb-gpt2", dataset="fineweb10B")
V = 50257
LEARN = {"steps_per_epoch": 40, "warmdown_steps": 12, "device_batch_size": 8}     # with TINY: 8 rows of 16 tokens a step


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("fineweb_gpt2_modded_pytorch_train", FOLDER / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config(**overrides) -> dict:
    with open(FOLDER / "reference.toml", "rb") as f:
        defaults = tomllib.load(f)["hyperparameters"]
    assert set(TINY) | set(overrides) <= set(defaults)     # overrides only narrow the recipe's own keys
    return {**defaults, **TINY, **overrides}


def cycle_stream(n: int) -> np.ndarray:
    """A learnable stream: 61 GPT-2 ids spread over the vocabulary, in a fixed cycle (each id's successor
    is determined), so a model that learns reaches a cross-entropy far below ln(50257) = 10.8."""
    return (np.arange(n) % 61 * 823 + 5) % V


def make(train, role: str, root: Path, cfg: dict, seed: int = 0, rank: int = 0, world: int = 1):
    ref = train.FineWebModdedGPT()
    ref.setup(Context(config=cfg, data_root=root, seed=seed, task=TASK, show_progress=False, role=role,
                      rank=rank, world_size=world))
    return ref


def randomized(ref, seed: int = 1):
    """The network's every weight drawn N(0, 0.3): a tiny network that says something at every position."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ref.net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return ref


@pytest.fixture(scope="module")
def predictor(train, tmp_path_factory):
    return randomized(make(train, "predict", tmp_path_factory.mktemp("fw-predict-view"), config()))


def windows(n: int, t: int, seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, size=(n, t + 1), dtype=np.int64)


# ------------------------------------------------------------------------------------------ contract

def test_predict_and_next_distribution_keep_the_contract(predictor):
    """predict: [N, T + 1] -> float32 [N, T], entry [i, t] the log-probability of inputs[i, t + 1]; the same
    number next_distribution gives that token after the prefix inputs[i, :t + 1], whose distribution over
    GPT-2's 50,257 tokens sums to 1 (the look-ahead audit compares exactly these)."""
    x = windows(4, 12)
    lp = predictor.predict(x)
    assert lp.shape == (4, 12) and lp.dtype == np.float32 and (lp < 0).all()
    rows, lengths = x[:, :12], np.array([1, 5, 11, 12])
    nd = predictor.next_distribution(rows, lengths)
    assert nd.shape == (4, V) and nd.dtype == np.float32
    np.testing.assert_allclose(np.exp(nd.astype(np.float64)).sum(1), 1.0, atol=1e-4)
    for j, n in enumerate(lengths):
        assert nd[j, x[j, n]] == pytest.approx(lp[j, n - 1], abs=2e-5)
    # randomized weights make the distribution far from uniform, so the agreement above could fail
    assert nd.max() > -math.log(V) + 1.0


@pytest.mark.parametrize("call, message", [
    (lambda p: p.predict(np.zeros((2, 5), np.float32)), "float32 values"),
    (lambda p: p.predict(np.full((2, 5), V)), f"ids from {V} to {V}"),
    (lambda p: p.predict(np.zeros(5, np.int64)), "shape (5,)"),
    (lambda p: p.predict(np.zeros((2, 1), np.int64)), "shape (2, 1)"),
    (lambda p: p.next_distribution(np.zeros((2, 5), np.int64), np.array([0, 5])), "one length in 1..5"),
    (lambda p: p.next_distribution(np.zeros((2, 5), np.int64), np.array([6, 5])), "one length in 1..5"),
    (lambda p: p.next_distribution(np.zeros((2, 5), np.int64), np.array([5])), "shape (1,)"),
    (lambda p: p.eval_inputs(), "the harness owns the validation stream"),
])
def test_bad_calls_are_refused_in_one_line(predictor, call, message):
    with pytest.raises(UsageError) as info:
        call(predictor)
    assert message in str(info.value) and "\n" not in str(info.value)


def causal_break(train, net, x: torch.Tensor, k: int) -> float:
    """How much the distributions at positions before k move when every token from k on is redrawn."""
    y = x.clone()
    y[:, k:] = torch.randint(0, V, y[:, k:].shape, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        return (train.log_distribution(net, x)[:, :k] - train.log_distribution(net, y)[:, :k]).abs().max().item()


def test_the_network_is_causal(train, predictor, monkeypatch):
    """Positions before k read nothing from k on: redrawing the tokens after them leaves their distributions
    as they were, at every k. The same check on the network with its attention's causal mask dropped finds
    the leak (the test can fail), and the redrawn tokens do move the positions after k."""
    x = torch.from_numpy(windows(2, 15)[:, :16])
    for k in (1, 7, 15):
        assert causal_break(train, predictor.net, x, k) == 0.0, k
    with torch.no_grad():
        y = x.clone()
        y[:, 7:] = (y[:, 7:] + 1) % V
        moved = train.log_distribution(predictor.net, x)[:, 7:] - train.log_distribution(predictor.net, y)[:, 7:]
        assert moved.abs().max() > 1e-2
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, is_causal=False: sdpa(q, k, v, is_causal=False))
    assert causal_break(train, predictor.net, x, 7) > 1e-3


# ------------------------------------------------------------------------------------------ Muon

def newton_schulz_by_svd(g: torch.Tensor, steps: int) -> torch.Tensor:
    """What the quintic iteration computes, from the singular values: g = U S V^T normalized by its
    Frobenius norm, each singular value s sent through p(s) = 3.4445 s - 4.7750 s^3 + 2.0315 s^5 `steps`
    times, U p(S) V^T (float64). The iteration is this polynomial of X X^T applied to X, so the two agree
    up to rounding; the record's docstring's 'US'V^T, S' ~ Uniform(0.5, 1.5)'."""
    u, s, vh = torch.linalg.svd(g.double(), full_matrices=False)
    s = s / (g.double().norm() + 1e-7)
    for _ in range(steps):
        s = 3.4445 * s - 4.7750 * s ** 3 + 2.0315 * s ** 5
    return u @ torch.diag(s) @ vh


def record_newton_schulz(G, steps=5, eps=1e-7):
    """The record's zeropower_via_newtonschulz5 (log lines 26-48), restated eagerly."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    X /= (X.norm() + eps)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


@pytest.mark.parametrize("shape", [(48, 192), (192, 48), (64, 64)])
def test_muon_orthogonalization_against_the_svd(train, shape):
    """float32 (the CPU's): equal to the singular-value computation; the singular values land in 0.5..1.5
    and the vectors are g's. bf16 (the GPU's): the record's own iteration, bit for bit."""
    g = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    ours = train.orthogonalize(g, 5, torch.float32)
    want = newton_schulz_by_svd(g, 5)
    assert ours.dtype == torch.float32 and ours.shape == g.shape
    torch.testing.assert_close(ours.double(), want, rtol=0, atol=2e-4)
    s = torch.linalg.svdvals(ours.double())
    assert 0.5 < s.min() and s.max() < 1.5, (s.min(), s.max())
    assert torch.linalg.svdvals(g / g.norm()).max() < 0.5      # far from orthogonal before: the test can fail
    assert torch.equal(train.orthogonalize(g, 5, torch.bfloat16), record_newton_schulz(g))


def test_muon_steps_equal_a_computation_by_hand(train):
    """Two steps of Muon on a wide and a tall matrix against the record's update (log lines 97-115):
    Nesterov momentum, the orthogonalized update scaled by max(1, rows / cols)^0.5, times -lr."""
    gen = torch.Generator().manual_seed(4)
    params = [torch.nn.Parameter(torch.randn(6, 10, generator=gen)), torch.nn.Parameter(torch.randn(10, 6, generator=gen))]
    theirs = [p.detach().clone() for p in params]
    bufs = [torch.zeros_like(p) for p in theirs]
    opt = train.Muon(params, lr=0.1, momentum=0.9, ns_steps=5, dtype=torch.float32)
    for _ in range(2):
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(grads):
            bufs[i] = 0.9 * bufs[i] + g
            u = newton_schulz_by_svd(g + 0.9 * bufs[i], 5).float() * max(1, g.shape[0] / g.shape[1]) ** 0.5
            theirs[i] = theirs[i] - 0.1 * u
    for p, want in zip(params, theirs):
        torch.testing.assert_close(p.detach(), want, rtol=0, atol=1e-4)
    assert not torch.allclose(params[1].detach() / math.sqrt(10 / 6), theirs[1], atol=1e-2)   # the tall scale shows


# ------------------------------------------------------------------------------------------ data and ranks

def record_loader(shards: list[np.ndarray], B: int, T: int, rank: int, world: int):
    """The record's DistributedDataLoader.next_batch (log lines 331-351), restated over arrays: the first
    token of each micro-batch this rank reads, forever."""
    shard, at = 0, rank * B * T
    while True:
        yield shards[shard][at]
        at += B * T * world
        if at + (B * T * world + 1) > len(shards[shard]):
            shard, at = (shard + 1) % len(shards), rank * B * T


def test_ranks_read_the_records_stride(train, tmp_path):
    """Each rank reads the micro-batches the record's loader gives it (rank r from r x B x T, each moving
    world x B x T, a shard left when the next would not fit, and after the last the first again), two
    ranks and one, across shard boundaries; within a pass of a shard the ranks never read a token twice."""
    shards = [np.arange(300) + 300 * i for i in range(3)]
    files = []
    for i, chunk in enumerate(shards, start=1):
        (tmp_path / train_name(i)).write_bytes(shard_bytes(chunk))
        files.append(tmp_path / train_name(i))
    b, t = 2, 8
    for world in (1, 2):
        seen = set()
        for rank in range(world):
            stream, want = train.TokenStream(files, b, t, rank, world), record_loader(shards, b, t, rank, world)
            for step in range(40):
                x, y = stream.next_batch()
                assert x[0, 0].item() == next(want), (world, rank, step)
                assert torch.equal(x.flatten()[1:], y.flatten()[:-1]) and x.flatten()[-1] + 1 == y.flatten()[-1]
                if step < 8:
                    assert not seen & set(x.flatten().tolist())
                    seen |= set(x.flatten().tolist())


def test_one_gpu_and_eight_make_the_same_batch(train):
    assert train.micro_batches(512, 64, 1) == 8 and train.micro_batches(512, 64, 8) == 1
    with pytest.raises(UsageError, match="batch_size 512 is not a multiple of device_batch_size 48 x 8") as info:
        train.micro_batches(512, 48, 8)
    assert "\n" not in str(info.value)


def test_a_missing_or_short_shard_is_refused_in_one_line(train, tmp_path):
    (tmp_path / "fineweb10B").mkdir()
    with pytest.raises(UsageError, match="no fineweb_train_.*dawnbench data fetch fineweb10B"):
        make(train, "train", tmp_path, config())
    (tmp_path / "fineweb10B" / train_name(1)).write_bytes(shard_bytes(np.arange(40)))
    with pytest.raises(UsageError, match="holds 40 tokens, fewer than one step's 1 x 4 x 16 \\+ 1"):
        make(train, "train", tmp_path, config())


# ------------------------------------------------------------------------------------------ learning

@pytest.mark.parametrize("_", [pytest.param(None, marks=needs_isolation())])    # skipped (one line) without isolation
def test_it_learns_through_the_harness_on_the_exact_shard_format(tmp_path, monkeypatch, _):
    """One run of the harness at the tiny size (LEARN: 40 steps of 8 rows of 16 tokens, one thread),
    then its eval: the reply "next" first pass and the audit's fresh next_distribution over the fixture's 299
    scored tokens, on a val shard and two train shards fetched as `dawnbench data fetch` does (written as
    llm.c writes them, sha256-pinned), each a cycle of 61 ids. It converges under 2 nats (chance is
    ln 50,257 = 10.8; the reference's own code on this data, one thread: 1.33 nats in 7.2 s of CPU), passes
    the audit within its 0.001 nats, and is unofficial, saying why (the stream is not the task's)."""
    shards = {VAL: shard_bytes(cycle_stream(303)[3:]), train_name(1): shard_bytes(cycle_stream(6000)),
              train_name(2): shard_bytes(cycle_stream(6005)[5:])}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name, raw in shards.items():
        (mirror / name).write_bytes(raw)
    manifest = fixture_manifest(tmp_path / "manifest.toml", shards, train=2)
    monkeypatch.setenv(hds.MANIFEST_ENV, str(manifest))       # the fixture's sha256s pinned, as the real ones will be
    fetcher.fetch("fineweb10B", tmp_path / "data", url_base=mirror.as_uri() + "/", shards=2, progress=False)
    sets = [a for k, v in {**TINY, **LEARN}.items() for a in ("--set", f"{k}={v}")]
    proc, result, run_dir = harness_run(REPO / "references", NAME, tmp_path / "data", tmp_path / "results", *sets,
                                        "--threshold", "2.0", "--no-save",
                                        env={"DAWNBENCH_DATASETS_MANIFEST": str(manifest), "OMP_NUM_THREADS": "1"},
                                        timeout=600)
    assert proc.returncode == 0 and result and result["status"] == "converged", proc.stderr[-3000:]
    assert result["metric"] == "ce" and result["metric_value"] < 2.0, f"ce {result['metric_value']:.4f} nats/token"
    (stop,) = [e for e in events(run_dir) if e["key"] == "eval_stop"]
    audit = stop["metadata"]["lm"]["audit"]
    assert len(audit["positions"]) == 299 and audit["max_logprob_difference"] <= 1e-3
    assert "the eval set has 299 examples, not the 10485760 of the fineweb-gpt2 task" in " ".join(
        result.get("unofficial_reasons") or [str(result)])
