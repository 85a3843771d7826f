"""fineweb-gpt2-llmc-pytorch, the language-model task's GPU tier (issue 50), on a CPU: the reply "next"
contract's shapes; causality (a prefix's answer is the whole row's, whatever follows it); and it learns,
through the real harness, on token shards in the exact `.bin` format (tests/fineweb_fixture.py) at a tiny
size. The network at full size (124,439,808 parameters) is tests/test_anchor_fineweb_llmc.py's.

The tiny size (TINY): 2 layers, 2 heads, width 32, rows of 64 tokens, 4 rows a step; the context stays
the task's 1,024 (the harness's windows), and the vocabulary GPT-2's 50,257. The synthetic stream is a
cycle of 16 token ids spread over the vocabulary (50256, the end of a document, among them): its next
token is a function of the one before, so a model that learns goes from ln 50257 = 10.8 nats a token to
0.89 in the run's 30 steps (measured, seed 0), under the test's bar of 2.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from cheats import events, harness_run, needs_isolation
from conftest import REPO
from fineweb_fixture import VAL, fixture_manifest, shard_bytes, train_name

import dawnbench.fetch as fetcher
from harness.errors import UsageError
from harness.reference import Context

NAME = "fineweb-gpt2-llmc-pytorch"
FOLDER = REPO / "references" / NAME
TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "sequence_length": 64, "micro_batch": 4, "total_batch_tokens": 256,
        "steps_per_epoch": 30, "warmup_steps": 5, "lr": 2e-2, "eval_batch_size": 4, "compile": "false"}
CYCLE = np.array([7, 50256, 1200, 33, 49000, 5, 9001, 250, 17000, 42, 31337, 64, 2048, 40000, 11, 300])


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("fineweb_gpt2_llmc_train", FOLDER / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config(**overrides) -> dict:
    with open(FOLDER / "reference.toml", "rb") as f:
        defaults = tomllib.load(f)["hyperparameters"]
    assert set(TINY) | set(overrides) <= set(defaults)     # overrides only narrow the recipe's own keys
    return {**defaults, **TINY, **overrides}


def predictor(train, seed: int = 0):
    """A predictor as each eval starts one (no data), its network freshly initialized from the seed."""
    ref = train.FineWebGPT2()
    ref.setup(Context(config=config(), data_root=REPO / "nonexistent", seed=seed,
                      task=SimpleNamespace(name="fineweb-gpt2", dataset="fineweb10B"), show_progress=False,
                      role="predict"))
    return ref


def test_the_contract_s_shapes_and_causality(train):
    """predict: chunks [N, T + 1] -> [N, T] log-probabilities of the next tokens; next_distribution: rows
    [K, T] and lengths -> [K, V], normalized, agreeing with predict at the true next token, and unmoved by
    the tokens after the prefix (the audit's random tokens)."""
    torch.manual_seed(0)
    ref = predictor(train)
    chunks = np.random.default_rng(0).integers(0, 50257, size=(3, 41))
    first = ref.predict(chunks)
    assert first.shape == (3, 40) and first.dtype == np.float32 and (first < 0).all()
    lengths = np.array([1, 17, 40])
    rows = chunks[:, :40].copy()
    dist = predictor(train).next_distribution(rows, lengths)
    assert dist.shape == (3, 50257) and dist.dtype == np.float32
    np.testing.assert_allclose(np.exp(dist.astype(np.float64)).sum(-1), 1.0, atol=1e-5)
    at_next = dist[np.arange(3), chunks[np.arange(3), lengths]]
    np.testing.assert_allclose(at_next, first[np.arange(3), lengths - 1], atol=1e-5)
    changed = rows.copy()
    for j, n in enumerate(lengths):
        changed[j, n:] = (changed[j, n:] + 1) % 50257
    np.testing.assert_allclose(predictor(train).next_distribution(changed, lengths), dist, atol=1e-5)


@pytest.mark.parametrize("call, said", [
    (lambda ref: ref.predict(np.full((1, 5), 50257)), "GPT-2 token ids 0..50256 in an array [N, T]; got ids from"),
    (lambda ref: ref.predict(np.zeros((1, 1026), dtype=np.int64)), "reads 1024 tokens of context; the task's windows"),
    (lambda ref: ref.next_distribution(np.zeros((2, 8), dtype=np.int64), np.array([1])), "got 2 rows for 1 lengths"),
    (lambda ref: ref.next_distribution(np.zeros((1, 8), dtype=np.int64), np.array([9])), "lengths must be 1..8"),
])
def test_what_is_not_the_contract_is_one_line(train, call, said):
    with pytest.raises(UsageError) as caught:
        call(predictor(train))
    assert said in str(caught.value) and "\n" not in str(caught.value)


def cycle_shard(tokens: int, offset: int = 0) -> bytes:
    return shard_bytes(np.resize(np.roll(CYCLE, -offset), tokens))


@(lambda test: needs_isolation()(test) if needs_isolation() else test)
def test_it_learns_through_the_harness_on_the_exact_shard_format(tmp_path, monkeypatch):
    """One run of the harness (30 steps, then the eval: the reply "next" first pass and the audit's fresh
    next_distribution over the fixture's 99 scored tokens) on a val shard and two train shards written as
    llm.c writes them: it converges under a threshold of 2 nats (chance is 10.8), passes the audit, and is
    unofficial, saying why (the fixture's stream is not the task's 10,485,760 tokens); `verify` takes it.
    One torch thread:
    on this 2-core machine under load, two threads' spin-waits made each small op 20 ms (the audit 90x
    slower, training 3x)."""
    published = tmp_path / "published"
    published.mkdir()
    shards = {VAL: cycle_shard(100, 3), train_name(1): cycle_shard(20_000), train_name(2): cycle_shard(20_000, 5)}
    for name, raw in shards.items():
        (published / name).write_bytes(raw)
    manifest = fixture_manifest(tmp_path / "manifest.toml", shards, train=2)
    monkeypatch.setenv("DAWNBENCH_DATASETS_MANIFEST", str(manifest))
    fetcher.fetch("fineweb10B", tmp_path / "data", url_base=published.as_uri() + "/", progress=False)
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    proc, result, run_dir = harness_run(REPO / "references", NAME, tmp_path / "data", tmp_path / "results", *sets,
                                        "--threshold", "2.0", "--no-save",
                                        env={"OMP_NUM_THREADS": "1"},
                                        timeout=600)
    assert proc.returncode == 0 and result["status"] == "converged", proc.stderr[-3000:]
    assert result["metric"] == "ce" and result["metric_value"] < 2.0
    assert f"ce {result['metric_value']:.4g} nats/token" in proc.stderr
    (stop,) = [e for e in events(run_dir) if e["key"] == "eval_stop"]
    audit = stop["metadata"]["lm"]["audit"]
    assert len(audit["positions"]) == 99 and audit["max_logprob_difference"] <= 1e-3
    assert "the eval set has 99 examples, not the 10485760 of the fineweb-gpt2 task" in " ".join(
        result.get("unofficial_reasons") or [str(result)])
    # verify recomputes the figure from the stored next-token log-probabilities and holds the logged audit to
    # the task's numbers (the windows' sha256 from the stream as the task cuts it)
    verified = subprocess.run([sys.executable, "-m", "harness", "verify", str(run_dir), "--data", str(tmp_path / "data")],
                              capture_output=True, text=True, timeout=300, env=os.environ)
    assert verified.returncode == 0, verified.stdout[-3000:]
    assert "ce recomputed from the stored predictions" in verified.stdout and "look-ahead audit of 99" in verified.stdout
