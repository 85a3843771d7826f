"""The BiDAF twins against their anchor tables, and against each other.

Each row of references/squad-bidaf-{pytorch,tensorflow}/anchor.toml (the DAWNBench seed's code,
stanford-futuredata/dawn-bench-models tensorflow/SQuAD at faacf04) is checked here or by the test
it names: the parameter count and the layer sizes by building the network; the config rows;
two optimizer steps through each reference's own train step against Adam and the 0.999 weight
average computed by hand. Then the twins are run side by side from the same weights on the same
batch of the SQuAD fixture (test_the_twins_agree_step_for_step).

Adam's epsilon is where the twins differ by design: PyTorch adds its 1e-8 to the bias-corrected
sqrt(v), Keras adds its 1e-7 to sqrt(v) before the correction (as the seed's TensorFlow 1 did,
with 1e-8). The hand computations below use each framework's own placement.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from anchor_checks import anchor_rows, every_row_is_checked
from conftest import role_views
from squad_fixture import install_fixture

from common import squad
from harness import datasets, registry
from harness.reference import Context

TORCH, KERAS = "squad-bidaf-pytorch", "squad-bidaf-tensorflow"
CHECKED_HERE = {"parameters", "config", "optimizer", "test"}
SMALL = {"hidden": 16, "char_filters": 8, "batch_size": 8, "char_min_count": 1, "eval_batch_size": 8}
LR, BETA1, BETA2, EMA = 0.001, 0.9, 0.999, 0.999          # the tables' Adam and weight average
EPSILON = {TORCH: 1e-8, KERAS: 1e-7}                       # each framework's default (the tables' optimizer rows)
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


@pytest.fixture(scope="module", autouse=True)
def quiet_single_threaded():
    """TensorFlow with its oneDNN kernels off, where this module imports it first (they reorder
    sums; TensorFlow reads the variable once, so it is put back at once), and PyTorch on one
    thread (two spin-waiting OpenMP threads on a small shared CPU make LSTM steps much slower)."""
    import torch
    if "tensorflow" not in sys.modules:
        before = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
        try:
            import tensorflow  # noqa: F401
        finally:
            if before is None:
                del os.environ["TF_ENABLE_ONEDNN_OPTS"]
            else:
                os.environ["TF_ENABLE_ONEDNN_OPTS"] = before
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("squad")
    installed = install_fixture(tmp)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(datasets.MANIFEST_ENV, str(installed["manifest"]))
        yield role_views("squad", installed["root"], tmp / "views")


def trainer(name: str, data, **overrides):
    spec = registry.load_spec(name)
    ref = spec.load_entry_class()()
    ref.setup(Context(config={**spec.hyperparameters, **SMALL, **overrides}, data_root=data["train"], seed=0,
                      task=spec.task, show_progress=False, role="train"))
    return ref


def module_of(name: str):
    return sys.modules[registry.load_spec(name).load_entry_class().__module__]


def first_batch(ref, rows=4) -> dict:
    """The first `rows` trainable questions of the fixture, as common.squad pads them."""
    questions = ref.train if hasattr(ref, "train") and isinstance(ref.train, list) else ref.train_questions
    return squad.make_batch(ref.encoder, ref.paragraphs, questions[:rows])


@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_every_row_is_checked_here(name):
    every_row_is_checked(name, CHECKED_HERE, __file__)


# ---- parameters ----------------------------------------------------------------------------------

def parameter_rows(name: str) -> int:
    (count,) = [r["ours"] for r in anchor_rows(name, "parameters") if isinstance(r["ours"], int)]
    return count


def test_the_pytorch_network():
    import torch
    train, cfg = module_of(TORCH), registry.load_spec(TORCH).hyperparameters
    net = train.BiDAF(torch.zeros(3, cfg["word_dim"]), 94 + 2, cfg)        # 94 characters, no learned word
    assert train.count_parameters(net) == parameter_rows(TORCH)
    h = cfg["hidden"]
    assert [m.lstm.hidden_size for m in (net.context, net.modeling, net.end_lstm)] == [h] * 3 == [100] * 3
    assert (net.char_emb.embedding_dim, net.char_conv.out_channels, net.char_conv.kernel_size) == (8, 100, (5,))
    assert cfg["max_word_chars"] == 16 and len(net.highway) == 2 and net.modeling.lstm.num_layers == 2
    assert net.similarity.weight.shape == (1, 6 * h) and net.similarity.bias is None     # S: no bias
    assert net.start.bias is None and net.end.bias is None and net.start.in_features == net.end.in_features == 10 * h
    assert net.end_lstm.lstm.input_size == 14 * h                                          # [G; M; a; M a]


def test_the_keras_network():
    train, cfg = module_of(KERAS), registry.load_spec(KERAS).hyperparameters
    model = train.build_model(cfg, np.zeros((3, cfg["word_dim"]), np.float32), 94 + 2)
    assert train.count_parameters(model) == parameter_rows(KERAS)
    h = cfg["hidden"]
    lstms = (model.contextual, model.modeling1, model.modeling2, model.end_lstm)
    assert [b.forward_layer.units for b in lstms] == [100] * 4
    assert (model.char_embedding.output_dim, model.char_conv.filters, model.char_conv.kernel_size) == (8, 100, (5,))
    assert cfg["max_word_chars"] == 16 and len(model.transforms) == len(model.gates) == 2
    assert model.similarity.kernel.shape == (6 * h, 1)
    assert not model.start.use_bias and not model.end.use_bias and model.start.kernel.shape == (10 * h, 1)
    assert model.end_lstm.forward_layer.cell.kernel.shape == (14 * h, 4 * h)


# ---- config --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_the_config_rows(name):
    config = registry.load_spec(name).hyperparameters
    for row in anchor_rows(name, "config"):
        expect = row["expect"] if isinstance(row["expect"], dict) else {row["expect"]: row["ours"]}
        assert {key: config[key] for key in expect} == expect, row["item"]


# ---- the optimizer step, by hand -----------------------------------------------------------------

@pytest.mark.parametrize("name", [TORCH, KERAS])
def test_the_tables_adam_and_average_are_the_config(name):
    config = registry.load_spec(name).hyperparameters
    assert (config["lr"], config["ema_decay"]) == (LR, EMA)
    (row,) = [r for r in anchor_rows(name, "optimizer") if r["item"] == "optimizer"]
    assert f"lr {LR}" in row["ours"] and f"epsilon ({EPSILON[name]:.0e}".replace("e-0", "e-") in row["ours"]


def adam_by_hand(w, m, v, g, t, eps, corrected_epsilon, square=None):
    """One Adam step in float64. corrected_epsilon: PyTorch's placement, eps added to the
    bias-corrected sqrt(v); else Keras's (and TensorFlow 1's), eps added to sqrt(v). square: what
    enters v in place of g * g. Keras 3's Adam, given an embedding's gradient as IndexedSlices (one
    slice per occurrence of a row in the batch), squares each slice and sums the squares, where
    PyTorch's dense Adam, and the seed's TensorFlow 1 Adam (which sums duplicate indices first),
    square the summed gradient: the Keras twin's embedding rows take other steps (its table says so)."""
    m = BETA1 * m + (1 - BETA1) * g
    v = BETA2 * v + (1 - BETA2) * (g * g if square is None else square)
    if corrected_epsilon:
        step = LR * (m / (1 - BETA1 ** t)) / (np.sqrt(v / (1 - BETA2 ** t)) + eps)
    else:
        step = LR * np.sqrt(1 - BETA2 ** t) / (1 - BETA1 ** t) * m / (np.sqrt(v) + eps)
    return w - step, m, v


def assert_average_moved_as_by_hand(got, start, expected, what):
    """The average moves by 1e-3 of the steps from the initial weights, ~1e-6, near float32's
    rounding of weights of order 1 (2 ulps: 2.4e-7 of the weights, over the two updates), so the
    move itself is compared, within 2% plus that rounding: a decay of 0.99 would move it 10 times
    as far."""
    moved, want = got - start, expected - start
    assert np.linalg.norm(moved - want) <= 0.02 * np.linalg.norm(want) + 2.4e-7 * np.linalg.norm(start), what


def test_two_pytorch_steps_by_hand(data):
    import torch
    train = module_of(TORCH)
    ref = trainer(TORCH, data, dropout=0.0)
    assert ref.opt.defaults["eps"] == EPSILON[TORCH] and ref.opt.defaults["betas"] == (BETA1, BETA2)
    batch = first_batch(ref)
    params = [p for p in ref.net.parameters() if p.requires_grad]
    w0 = [p.detach().double().numpy().copy() for p in params]
    w, m, v, avg = list(w0), [0.0] * len(w0), [0.0] * len(w0), list(w0)
    for t in (1, 2):
        start, end = ref.net(*train.to_device(batch, torch.device("cpu")))
        loss = (torch.nn.functional.cross_entropy(start, torch.from_numpy(batch["y1"]))
                + torch.nn.functional.cross_entropy(end, torch.from_numpy(batch["y2"])))   # the loss row
        grads = torch.autograd.grad(loss, params)
        got = train.train_step(ref.model, ref.opt, ref.ema, batch, torch.device("cpu"))
        loss = loss.detach()
        assert float(got) == pytest.approx(float(loss), rel=1e-6)
        for i, g in enumerate(grads):
            w[i], m[i], v[i] = adam_by_hand(w[i], m[i], v[i], g.double().numpy(), t, EPSILON[TORCH], True)
            avg[i] = EMA * avg[i] + (1 - EMA) * w[i]
    for i, (name, p) in enumerate(zip(ref.ema.names, params)):
        np.testing.assert_allclose(p.detach().numpy(), w[i], rtol=1e-5, atol=2e-7, err_msg=name)
        assert_average_moved_as_by_hand(ref.ema.shadow[i].numpy(), w0[i], avg[i], name)


def test_two_keras_steps_by_hand(data):
    import tensorflow as tf
    train = module_of(KERAS)
    ref = trainer(KERAS, data, dropout=0.0)
    assert ref.opt.epsilon == EPSILON[KERAS] and (ref.opt.beta_1, ref.opt.beta_2) == (BETA1, BETA2)
    batch = first_batch(ref)
    inputs = train.tensors(batch, ("cw", "cc", "qw", "qc", "y1", "y2"))
    variables = ref.model.trainable_variables
    w0 = [x.numpy().astype(np.float64) for x in variables]
    w, m, v, avg = list(w0), [0.0] * len(w0), [0.0] * len(w0), list(w0)
    for t in (1, 2):
        with tf.GradientTape() as tape:
            p1, p2 = ref.model(*inputs[:4], training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(inputs[4], p1)
                                  + tf.nn.sparse_softmax_cross_entropy_with_logits(inputs[5], p2))
        grads = tape.gradient(loss, variables)
        got = ref.train_step(*inputs)
        assert float(got) == pytest.approx(float(loss), rel=1e-6)
        for i, g in enumerate(grads):
            dense = tf.convert_to_tensor(g).numpy().astype(np.float64)
            square = None
            if isinstance(g, tf.IndexedSlices):       # the embedding tables' gradients: one slice per occurrence
                square = np.zeros_like(dense)
                np.add.at(square, g.indices.numpy(), g.values.numpy().astype(np.float64) ** 2)
            w[i], m[i], v[i] = adam_by_hand(w[i], m[i], v[i], dense, t, EPSILON[KERAS], False, square)
            avg[i] = EMA * avg[i] + (1 - EMA) * w[i]
    for i, x in enumerate(variables):
        np.testing.assert_allclose(x.numpy(), w[i], rtol=1e-5, atol=2e-7, err_msg=x.path)
        assert_average_moved_as_by_hand(ref.ema[i].numpy(), w0[i], avg[i], x.path)
