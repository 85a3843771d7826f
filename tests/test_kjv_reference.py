"""kjv-bytegpt-pytorch, the language-model task's CPU tier (issue 50), against the predictor contract:
`predict(inputs)` takes byte ids [N, T] and returns float32 log-probabilities [N, T, 256], row i,
position t the distribution of the byte after inputs[i, :t + 1]; normalized, and causal, so that a
fresh predictor given only a prefix gives the same distribution (the harness's look-ahead audit). And it
learns: its own setup, train_epoch, save, load and predict on a tiny text lower the loss in a few steps.

The module is loaded from its file and driven through the contract as a run drives it (a trainer that
sees the training text only; a fresh predictor that sees none and loads what the trainer saved), at a
tiny size: one layer of width 16 and a block of 8 bytes, so that rows of 20 bytes go through the
sliding windows a longer row needs.
"""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import REPO

from harness.errors import UsageError
from harness.reference import Context

NAME = "kjv-bytegpt-pytorch"
FOLDER = REPO / "references" / NAME
TINY = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "batch_size": 8, "steps_per_epoch": 15,
        "epochs": 2, "eval_batch_size": 2, "lr": 1e-2}     # the rate fits the schedule into 30 steps
TASK = SimpleNamespace(name="kjv-bytes", dataset="kjv")      # what the reference reads of its task: the dataset folder
TEXT = b"In the beginning God created the heaven and the earth. " * 40


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("kjv_bytegpt_pytorch_train", FOLDER / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config(**overrides) -> dict:
    with open(FOLDER / "reference.toml", "rb") as f:
        defaults = tomllib.load(f)["hyperparameters"]
    assert set(TINY) | set(overrides) <= set(defaults)     # overrides only narrow the recipe's own keys
    return {**defaults, **TINY, **overrides}


def make(train, role: str, data_root: Path, cfg: dict, seed: int = 0):
    ref = train.KJVByteGPT()
    ref.setup(Context(config=cfg, data_root=data_root, seed=seed, task=TASK, show_progress=False, role=role))
    return ref


@pytest.fixture(scope="module")
def trained(train, tmp_path_factory):
    """A trainer on a tiny text (the trainer's view: kjv/kjv-train.txt only), two epochs, saved; the
    losses of its epochs and the model folder."""
    root = tmp_path_factory.mktemp("kjv-train-view")
    (root / "kjv").mkdir()
    (root / "kjv" / "kjv-train.txt").write_bytes(TEXT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = make(train, "train", root, config())
        stats = [trainer.train_epoch(epoch) for epoch in (1, 2)]
    finally:
        torch.set_num_threads(threads)
    model = tmp_path_factory.mktemp("kjv-model")
    trainer.save(model)
    return stats, model


def test_an_epoch_is_only_where_the_harness_scores(train, tmp_path):
    """The same 30 steps cut into two epochs of 15 or one of 30 train the same weights: the batches are
    drawn in sequence from the seed and the rate is a function of the step and the plan's length alone.
    So the measured curve (bench/measured/2026-11-28-cpu-2core/issue50-kjv-seeds.py, 7 x 261 steps)
    ends where a run of the recipe's one epoch of 1,827 steps ends."""
    (tmp_path / "kjv").mkdir()
    (tmp_path / "kjv" / "kjv-train.txt").write_bytes(TEXT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        two = make(train, "train", tmp_path, config(steps_per_epoch=15, epochs=2))
        two.train_epoch(1), two.train_epoch(2)
        one = make(train, "train", tmp_path, config(steps_per_epoch=30, epochs=1))
        one.train_epoch(1)
    finally:
        torch.set_num_threads(threads)
    for (name, a), b in zip(two.net.state_dict().items(), one.net.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def fresh_predictor(train, model: Path, tmp_path: Path):
    """A predictor as each eval starts one: no data at all (the harness gives the windows), the saved model."""
    predictor = make(train, "predict", tmp_path / "nothing", config())
    predictor.load(model)
    return predictor


def test_the_loss_falls_in_a_few_steps(trained):
    """30 steps on a repeated sentence: from about ln 256 = 5.55 nats a byte to well under it."""
    stats, _ = trained
    first, second = (s["loss"] for s in stats)
    assert first < 5.0 and second < first - 0.5, stats
    assert stats[1]["samples"] == TINY["steps_per_epoch"] * TINY["batch_size"]


def test_predict_is_shaped_normalized_and_causal(train, trained, tmp_path):
    _, model = trained
    rows = np.frombuffer(TEXT[:60], dtype=np.uint8).reshape(3, 20).astype(np.int64)
    out = fresh_predictor(train, model, tmp_path).predict(rows)
    assert out.shape == (3, 20, 256) and out.dtype == np.float32
    np.testing.assert_allclose(np.exp(out.astype(np.float64)).sum(-1), 1.0, atol=1e-5)
    # It learned the sentence: the next byte of the sentence is likelier than a uniform guess.
    assert np.take_along_axis(out[:, :-1], rows[:, 1:, None], -1).mean() > np.log(1 / 256) + 1.0
    # The look-ahead audit: a fresh predictor given only the prefix gives each position's distribution,
    # inside the first window and past it (block 8: the sliding windows).
    for t in (0, 5, 7, 8, 11, 12, 19):
        prefix = fresh_predictor(train, model, tmp_path).predict(rows[:, :t + 1])
        np.testing.assert_allclose(prefix[:, t], out[:, t], atol=1e-5, err_msg=f"position {t}")
    # And no byte after a position moves it: every later byte changed, the earlier rows stay as they were.
    changed = rows.copy()
    changed[:, 10:] = 255 - changed[:, 10:]
    np.testing.assert_allclose(fresh_predictor(train, model, tmp_path).predict(changed)[:, :10], out[:, :10], atol=1e-5)


def test_every_window_reads_only_bytes_before_and_at_its_position(train):
    """window_start(t) is a function of t alone, t is inside its window, and after the first block every
    position has at least half a block of context."""
    block = 8
    for t in range(200):
        start = train.window_start(t, block)
        assert start <= t < start + block
        assert t < block or t - start >= block // 2


def test_infer_is_predict_of_one_row(train, trained, tmp_path):
    _, model = trained
    predictor = fresh_predictor(train, model, tmp_path)
    row = np.frombuffer(TEXT[:12], dtype=np.uint8).astype(np.int64)
    np.testing.assert_array_equal(predictor.infer(row), predictor.predict(row[None])[0])


@pytest.mark.parametrize("inputs", [np.full((2, 5), 256), np.full((2, 5), -1), np.zeros(5, dtype=np.int64),
                                    np.zeros((2, 5), dtype=np.float32)])
def test_inputs_that_are_not_byte_rows_are_one_line(train, trained, tmp_path, inputs):
    _, model = trained
    with pytest.raises(UsageError) as caught:
        fresh_predictor(train, model, tmp_path).predict(inputs)
    assert "byte ids 0..255 in an array [N, T]" in str(caught.value) and "\n" not in str(caught.value)


def test_the_predictor_has_no_eval_inputs_of_its_own(train, trained, tmp_path):
    _, model = trained
    with pytest.raises(UsageError, match="the harness owns the validation text"):
        fresh_predictor(train, model, tmp_path).eval_inputs()
