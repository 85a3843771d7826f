"""The BiDAF twins against their anchor tables, and against each other.

Each row of references/squad-bidaf-{pytorch,tensorflow}/anchor.toml (the DAWNBench seed's code,
stanford-futuredata/dawn-bench-models tensorflow/SQuAD at faacf04) is checked here or by the test
it names: the parameter count and the layer sizes by building the network; the config rows;
two optimizer steps through each reference's own train step against Adam and the 0.999 weight
average computed by hand. Then the twins are run side by side from the same weights on the same
batch of the SQuAD fixture (test_the_twins_agree_step_for_step), which proves the shared forward
pass; and each on its own recipe, compared on the mean loss of their first 48 steps, with seeded
recipe bugs that the comparison must catch (test_the_twins_agree_on_their_own_recipes, the note above it).

Adam's epsilon is where the twins differ by design: PyTorch adds its 1e-8 to the bias-corrected
sqrt(v), Keras adds its 1e-7 to sqrt(v) before the correction (as the seed's TensorFlow 1 did,
with 1e-8). The hand computations below use each framework's own placement.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
from anchor_checks import anchor_rows, every_row_is_checked, import_tensorflow_without_onednn
from conftest import role_views
from squad_fixture import QUESTION_CASES, install_fixture, question_cases_json, write_squad_files

from common import squad
from harness import datasets, registry
from harness.reference import Context

TORCH, KERAS = "squad-bidaf-pytorch", "squad-bidaf-tensorflow"
CHECKED_HERE = {"parameters", "config", "optimizer", "test"}
SMALL = {"hidden": 16, "char_filters": 8, "batch_size": 8, "char_min_count": 1, "eval_batch_size": 8}
LR, BETA1, BETA2, EMA = 0.001, 0.9, 0.999, 0.999          # the tables' Adam and weight average
EPSILON = {TORCH: 1e-8, KERAS: 1e-7}                       # each framework's default (the tables' optimizer rows)


@pytest.fixture(scope="module", autouse=True)
def quiet_single_threaded():
    """TensorFlow with its oneDNN kernels off, where this module imports it first (they reorder
    sums; TensorFlow reads the variable once, so it is put back at once), and PyTorch on one
    thread (two spin-waiting OpenMP threads on a small shared CPU make LSTM steps much slower)."""
    import torch
    import_tensorflow_without_onednn()
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


def trainer(name: str, data, role="train", **overrides):
    spec = registry.load_spec(name)
    ref = spec.load_entry_class()()
    ref.setup(Context(config={**spec.hyperparameters, **SMALL, **overrides}, data_root=data[role], seed=0,
                      task=spec.task, show_progress=False, role=role))
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


# ---- tokens ---------------------------------------------------------------------------------------

def test_both_frameworks_cut_questions_as_the_seed(tmp_path, monkeypatch):
    """The tokens row: real-format questions holding `1939–1945`, `and/or`, `2–1`, `mid-1990s`, `1/2`,
    a curly apostrophe and quotes (squad_fixture.QUESTION_CASES), set up in each framework as a run
    sets it up. Both trainers read the seed's pieces (squad/prepro.py:169-170) and batch the same word,
    character and answer ids; both predictors send the same tokens with each timed request."""
    fixture = write_squad_files(tmp_path / "files", question_cases_json(1), question_cases_json(3))
    installed = install_fixture(tmp_path, fixture)
    monkeypatch.setenv(datasets.MANIFEST_ENV, str(installed["manifest"]))
    views = role_views("squad", installed["root"], tmp_path / "views")
    seeds = [pieces for *_, pieces in QUESTION_CASES]
    batches, requests = {}, {}
    for name in (TORCH, KERAS):
        batches[name] = first_batch(trainer(name, views), rows=len(seeds) + 1)
        requests[name] = [(r["tokens"], r["context_tokens"], r["spans"])
                          for r in trainer(name, views, role="predict").eval_inputs()]
        assert [tokens for tokens, _, _ in requests[name]] == seeds, name
    assert batches[TORCH].keys() == batches[KERAS].keys()
    for key, torch_ids in batches[TORCH].items():
        np.testing.assert_array_equal(torch_ids, batches[KERAS][key], err_msg=key)
    assert len(batches[TORCH]["qw"]) == len(seeds)           # every question trains: none too long, none lost
    assert requests[TORCH] == requests[KERAS]


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
    lstms = (net.context, net.modeling1, net.modeling2, net.end_lstm)
    assert [(m.fw.hidden_size, m.bw.hidden_size) for m in lstms] == [(h, h)] * 4 == [(100, 100)] * 4
    assert (net.char_emb.embedding_dim, net.char_conv.out_channels, net.char_conv.kernel_size) == (8, 100, (5,))
    assert cfg["max_word_chars"] == 16 and len(net.highway) == 2 and net.modeling2.fw.input_size == 2 * h
    assert net.similarity.weight.shape == (1, 6 * h) and net.similarity.bias is None     # S: no bias
    assert net.start.bias is None and net.end.bias is None and net.start.in_features == net.end.in_features == 10 * h
    assert net.end_lstm.fw.input_size == 14 * h                                            # [G; M; a; M a]


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
        np.testing.assert_allclose(p.detach().numpy(), w[i], rtol=1e-5, atol=1e-6, err_msg=name)  # as below
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
        # atol 1e-6: Adam divides by sqrt(v), so where a gradient is float32 noise the step still moves
        # the weight by up to ~lr; a fresh-clone CI run (oneDNN as the worker imported TF) saw 2.9e-7 on
        # one LSTM weight of 6,912. A doubled rate or a 0.99 average moves every weight by ~1e-3.
        np.testing.assert_allclose(x.numpy(), w[i], rtol=1e-5, atol=1e-6, err_msg=x.path)
        assert_average_moved_as_by_hand(ref.ema[i].numpy(), w0[i], avg[i], x.path)


# ---- the twins, step for step --------------------------------------------------------------------

def torch_lstm_weights(bilstm):
    """(kernel, recurrent kernel, bias) of the forward and the backward nn.LSTM of a BiLSTM, in
    Keras's layout: (in, 4h), (h, 4h), (4h,). Both order the gates input, forget, cell, output
    (PyTorch's i, f, g, o is Keras's i, f, c, o); Keras has one bias where PyTorch adds b_ih and b_hh."""
    out = []
    for lstm in (bilstm.fw, bilstm.bw):
        w_ih, w_hh, b_ih, b_hh = (getattr(lstm, f"{kind}_l0").detach().numpy()
                                  for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        out.append((w_ih.T, w_hh.T, b_ih + b_hh))
    return out


def torch_weights_in_keras_layout(net) -> dict[str, np.ndarray]:
    """Every trained PyTorch tensor under the name and in the layout of its Keras twin's."""
    d = lambda t: t.detach().numpy()                                    # noqa: E731
    out = {"word_embedding": d(net.word_emb.weight), "char_embedding": d(net.char_emb.weight),
           "char_conv kernel": d(net.char_conv.weight).transpose(2, 1, 0), "char_conv bias": d(net.char_conv.bias),
           "similarity": d(net.similarity.weight).T, "start": d(net.start.weight).T, "end": d(net.end.weight).T}
    for i, hw in enumerate(net.highway):
        out.update({f"highway{i}_transform kernel": d(hw.transform.weight).T, f"highway{i}_transform bias": d(hw.transform.bias),
                    f"highway{i}_gate kernel": d(hw.gate.weight).T, f"highway{i}_gate bias": d(hw.gate.bias)})
    for name, bilstm in (("contextual", net.context), ("modeling1", net.modeling1), ("modeling2", net.modeling2),
                         ("end_lstm", net.end_lstm)):
        for direction, (kernel, recurrent, bias) in zip(("forward", "backward"), torch_lstm_weights(bilstm)):
            out.update({f"{name} {direction} kernel": kernel, f"{name} {direction} recurrent": recurrent,
                        f"{name} {direction} bias": bias})
    return out


def keras_weights(model) -> dict[str, object]:
    """The Keras model's trained variables under the names torch_weights_in_keras_layout gives."""
    out = {"word_embedding": model.word_embedding.embeddings, "char_embedding": model.char_embedding.embeddings,
           "char_conv kernel": model.char_conv.kernel, "char_conv bias": model.char_conv.bias,
           "similarity": model.similarity.kernel, "start": model.start.kernel, "end": model.end.kernel}
    for i, (transform, gate) in enumerate(zip(model.transforms, model.gates)):
        out.update({f"highway{i}_transform kernel": transform.kernel, f"highway{i}_transform bias": transform.bias,
                    f"highway{i}_gate kernel": gate.kernel, f"highway{i}_gate bias": gate.bias})
    for name in ("contextual", "modeling1", "modeling2", "end_lstm"):
        bi = getattr(model, name)
        for direction, layer in (("forward", bi.forward_layer), ("backward", bi.backward_layer)):
            out.update({f"{name} {direction} kernel": layer.cell.kernel,
                        f"{name} {direction} recurrent": layer.cell.recurrent_kernel,
                        f"{name} {direction} bias": layer.cell.bias})
    return out


def test_the_twins_agree_step_for_step(data):
    """Same weights, the same 4 questions of the SQuAD fixture, three steps each: the losses, the
    weights and the eval start/end logits agree. What differs by design, and how it is neutralised:
    - dropout: 0 in both (config dropout = 0.0);
    - the LSTM gates: PyTorch orders them i, f, g, o and Keras i, f, c, o, the same order: the
      kernels are transposed, not permuted (a mapping with f and g swapped fails the loss check);
    - PyTorch's two LSTM biases: Keras's bias is b_ih + b_hh. Under Adam each of PyTorch's two
      takes a full step, so their sum would move twice as fast as Keras's one bias: b_hh is set to
      zero and frozen, b_ih carries the sum;
    - Adam's epsilon: PyTorch adds its 1e-8 after the bias correction, Keras its 1e-7 before; the
      PyTorch twin's epsilon is set at each step t to 1e-7 / sqrt(1 - 0.999^t), the same update;
    - Keras's Adam on the embedding tables (IndexedSlices: the squares of each occurrence's slice
      summed into v; test_two_keras_steps_by_hand): both embedding tables are frozen in both twins;
    - oneDNN's reordered sums: TF_ENABLE_ONEDNN_OPTS=0 where this module first imports TensorFlow.
    The rate is the recipe's constant 0.001. Tolerances, against what was measured (hidden 16, 4
    questions; the test prints them): the first loss is equal to float32, the next two 6.3e-8
    apart: within 1e-6 relative. Adam scales each element's step to about the rate whatever the
    gradient's size, so an element whose gradient is float32 noise can step differently in the
    twins: the start kernel (160 weights) ends 2.5e-5 of its norm apart, the end kernel 4.0e-6, the
    rest below 7e-7: within 1e-4. The eval start logits are at most 6.1e-6 apart, the end 5.6e-7:
    within 5e-5. A wrong rate or a doubled LSTM bias step moves a weight tensor by ~1e-3 of its
    norm a step, far outside."""
    import tensorflow as tf
    import torch
    ttrain, ktrain = module_of(TORCH), module_of(KERAS)
    tref, kref = trainer(TORCH, data, dropout=0.0), trainer(KERAS, data, dropout=0.0)
    batch = first_batch(tref)
    kbatch = first_batch(kref)
    assert all(np.array_equal(batch[k], kbatch[k]) for k in batch)      # the same ids: same encoders
    assert np.array_equal(tref.net.word_vectors.numpy(), kref.word_vectors)
    net, model = tref.net, kref.model
    with torch.no_grad():                   # one bias in b_ih, b_hh zero and frozen
        for lstm in (m for b in (net.context, net.modeling1, net.modeling2, net.end_lstm) for m in (b.fw, b.bw)):
            for name, p in lstm.named_parameters():
                if name.startswith("bias_hh"):
                    getattr(lstm, name.replace("bias_hh", "bias_ih")).add_(p)
                    p.zero_()
                    p.requires_grad_(False)
    frozen = {"word_embedding", "char_embedding"}
    net.word_emb.weight.requires_grad_(False)
    net.char_emb.weight.requires_grad_(False)
    model.word_embedding.trainable = model.char_embedding.trainable = False
    variables = model.trainable_variables
    kref.train_step = ktrain.make_train_step(model, kref.opt, [tf.Variable(v) for v in variables], EMA)
    for name, value in torch_weights_in_keras_layout(net).items():
        keras_weights(model)[name].assign(value)
    inputs = ktrain.tensors(batch, ("cw", "cc", "qw", "qc", "y1", "y2"))
    for t in (1, 2, 3):
        for group in tref.opt.param_groups:
            group["eps"] = EPSILON[KERAS] / np.sqrt(1 - BETA2 ** t)
        t_loss = float(ttrain.train_step(tref.model, tref.opt, tref.ema, batch, torch.device("cpu")))
        k_loss = float(kref.train_step(*inputs))
        print(f"step {t}: loss {t_loss:.7f} (PyTorch) {k_loss:.7f} (Keras), apart {abs(t_loss - k_loss) / k_loss:.1e}")
        assert t_loss == pytest.approx(k_loss, rel=1e-6), t
    theirs = keras_weights(model)
    apart = {}
    for name, want in torch_weights_in_keras_layout(net).items():
        got = theirs[name].numpy()
        apart[name] = np.linalg.norm(got - want) / np.linalg.norm(want)
    print("weights apart (norm of the difference over the norm):",
          {k: f"{v:.1e}" for k, v in sorted(apart.items(), key=lambda kv: -kv[1])[:6]})
    assert all(apart[name] == 0 for name in frozen)
    assert max(apart.values()) < 1e-4, apart
    net.eval()
    with torch.no_grad():
        t_start, t_end = (x.numpy() for x in net(*ttrain.to_device(batch, torch.device("cpu"))))
    k_start, k_end = (x.numpy() for x in model(*inputs[:4], training=False))
    mask = batch["cw"] != squad.PAD
    for what, a, b in (("start", t_start, k_start), ("end", t_end, k_end)):
        diff = np.abs(a[mask] - b[mask]).max()
        print(f"{what} logits apart: at most {diff:.1e}")
        np.testing.assert_allclose(a[mask], b[mask], rtol=0, atol=5e-5, err_msg=what)


# ---- the twins, each on its own recipe -----------------------------------------------------------
#
# The step-for-step test above neutralises every difference between the recipes, so it proves the
# shared forward pass and Adam's arithmetic, not the recipes. Here each twin trains as its
# reference.toml says (dropout 0.2 with its own masks, every embedding table trained as the recipe
# trains it, its own Adam epsilon and epsilon placement, PyTorch's two LSTM biases each stepped,
# Keras's Adam on the embeddings' IndexedSlices, its own shuffle through train_epoch), at the
# module's small sizes (SMALL), from the same initial weights (PyTorch's seed-0 draw, copied into
# the Keras model with b_ih + b_hh as its one bias).
#
# The statistic: the mean training loss over the first RECIPE_STEPS steps (eight epochs of the
# fixture's 48 questions at batch 8: the area under the loss curve, which falls from 7.51 to about
# 5.1 there), averaged over RECIPE_SEEDS; a seed sets the batch order (the same in both twins) and the
# dropout masks (each framework's own generator). Random draws move it little, every recipe
# difference above moves single steps but not the curve, and a wrong rate, dropout or optimizer
# bends the whole curve. Measured (`PYTHONPATH=$PWD .venv/test/bin/python -m pytest -q -s
# tests/test_anchor_squad_bidaf.py -k recipe`, CPU, 2 cores), per seed over seeds 0-3:
#   PyTorch 6.666 6.639 6.651 6.713 (sd 0.033), Keras 6.696 6.670 6.695 6.692 (sd 0.012).
# The mean of two seeds differs between the twins by sd sqrt(0.033^2/2 + 0.012^2/2) = 0.025; over
# seeds 0-1 they are 0.031 apart (0.021 over 0-3). RECIPE_TOLERANCE is 0.1, 4 of those sds.
# Each seeded bug, as the same two-seed mean against the other twin's (test_a_recipe_bug_*):
#   PyTorch dropout 0.5 for 0.2 +0.33; dropout off -0.34; lr x10 -4.2; Adadelta (lr 0.5, the
#   bi-att-flow original) for Adam +0.14 (the closest: its seeds give 6.87 and 6.78);
#   Keras lr x10 -4.25.
# Not caught at this length (strict xfails, so that they say when they start to be): a char-CNN
# width of 3 for 5 (-0.04: at hidden 16 the 8 character filters are 8 of the highway's 108 inputs;
# a width in the code rather than the config is caught by the parameter rows), and both embedding
# tables frozen (-0.03: Adam moves an element by at most lr a step, 0.05 in 48 steps, against N(0, 1)
# rows; test_the_padding_character_is_trained and test_learned_word_vectors_train_and_glove_stays_frozen
# in tests/test_squad_bidaf_{pytorch,tensorflow}.py check that the tables train).
RECIPE_STEPS, RECIPE_SEEDS, RECIPE_TOLERANCE = 48, (0, 1), 0.1


def recipe_losses(ref, name: str, seed: int, monkeypatch) -> np.ndarray:
    """The losses of RECIPE_STEPS steps of ref.train_epoch, the seed's shuffles and dropout masks."""
    import dataclasses

    import torch
    losses = []
    ref.ctx = dataclasses.replace(ref.ctx, seed=seed)        # the batch order: the same in both twins
    with monkeypatch.context() as patch:
        if name == TORCH:
            torch.manual_seed(seed)                          # the dropout masks
            scope = type(ref).train_epoch.__globals__
            step = scope["train_step"]
            patch.setitem(scope, "train_step", lambda *a: (loss := step(*a), losses.append(float(loss)))[0])
        else:                                                # the masks: Keras's seed generators, drawn on
            step = ref.train_step
            patch.setattr(ref, "train_step", lambda *a: (loss := step(*a), losses.append(float(loss)))[0])
        epoch = 0
        while len(losses) < RECIPE_STEPS:
            ref.train_epoch(epoch)
            epoch += 1
    return np.array(losses[:RECIPE_STEPS])


def torch_recipe(data, monkeypatch, bug=None, **overrides) -> float:
    """The statistic for the PyTorch twin (from its seed-0 initial weights), `bug` applied to each
    trainer after setup."""
    stats = []
    for seed in RECIPE_SEEDS:
        ref = trainer(TORCH, data, **overrides)
        if bug:
            bug(ref)
        stats.append(recipe_losses(ref, TORCH, seed, monkeypatch).mean())
    print(f"PyTorch {overrides or getattr(bug, '__name__', '')}: per seed {np.round(stats, 3)}")
    return float(np.mean(stats))


def keras_recipe(kref, start: dict[str, np.ndarray], monkeypatch) -> float:
    """The statistic for the Keras twin, each seed from `start` with Adam's state reset."""
    import tensorflow as tf
    stats = []
    for seed in RECIPE_SEEDS:
        for name, value in start.items():
            keras_weights(kref.model)[name].assign(value)
        for v in (kref.opt.iterations, *kref.opt._momentums, *kref.opt._velocities):
            v.assign(tf.zeros_like(v))
        stats.append(recipe_losses(kref, KERAS, seed, monkeypatch).mean())
    print(f"Keras: per seed {np.round(stats, 3)}")
    return float(np.mean(stats))


@pytest.fixture(scope="module")
def recipe_twins(data):
    """Both twins' statistic on their own recipes, and the Keras trainer (its step traced once)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        start = {k: np.array(v) for k, v in torch_weights_in_keras_layout(trainer(TORCH, data).net).items()}
        kref = trainer(KERAS, data)
        yield {"torch": torch_recipe(data, monkeypatch), "keras": keras_recipe(kref, start, monkeypatch),
               "kref": kref, "start": start}


def test_the_twins_agree_on_their_own_recipes(recipe_twins):
    t, k = recipe_twins["torch"], recipe_twins["keras"]
    print(f"mean loss over {RECIPE_STEPS} steps: PyTorch {t:.3f}, Keras {k:.3f}, apart {t - k:+.3f}")
    assert 6.0 < k < 7.0                                    # it learns: from 7.51 at the first step
    assert abs(t - k) <= RECIPE_TOLERANCE


def freeze_embeddings(ref):
    ref.net.word_emb.weight.requires_grad_(False)
    ref.net.char_emb.weight.requires_grad_(False)


def adadelta(ref):
    import torch
    ref.opt = torch.optim.Adadelta([p for p in ref.net.parameters() if p.requires_grad], lr=0.5)


NOT_CAUGHT = pytest.mark.xfail(strict=True, reason=(
    "a known blind spot of this twin: the bug moves the 48-step mean loss less than the 0.1 tolerance the seeds' "
    "spread sets (char-CNN width -0.036, frozen embeddings -0.027); the network-size and trained-embedding "
    "tests catch it instead. strict: a bug this statistic starts catching fails here, to be moved up"))


@pytest.mark.recipe_run
@pytest.mark.parametrize("overrides, bug", [
    pytest.param({"dropout": 0.5}, None, id="dropout-0.5"),
    pytest.param({"dropout": 0.0}, None, id="dropout-off"),
    pytest.param({"lr": 0.01}, None, id="lr-x10"),
    pytest.param({}, adadelta, id="adadelta"),
    pytest.param({"char_width": 3}, None, id="char-width-3", marks=NOT_CAUGHT),
    pytest.param({}, freeze_embeddings, id="embeddings-frozen", marks=NOT_CAUGHT),
])
def test_a_recipe_bug_in_the_pytorch_twin_is_caught(data, recipe_twins, monkeypatch, overrides, bug):
    t, k = torch_recipe(data, monkeypatch, bug, **overrides), recipe_twins["keras"]
    print(f"bugged PyTorch {t:.3f}, Keras {k:.3f}: apart {t - k:+.3f} (tolerance {RECIPE_TOLERANCE})")
    assert abs(t - k) > RECIPE_TOLERANCE


@pytest.mark.recipe_run
def test_a_recipe_bug_in_the_keras_twin_is_caught(recipe_twins, monkeypatch):
    kref = recipe_twins["kref"]
    lr = float(kref.opt.learning_rate)
    kref.opt.learning_rate.assign(10 * lr)                  # a variable: the traced step reads it
    try:
        k = keras_recipe(kref, recipe_twins["start"], monkeypatch)
    finally:
        kref.opt.learning_rate.assign(lr)
    t = recipe_twins["torch"]
    print(f"Keras at lr x10 {k:.3f}, PyTorch {t:.3f}: apart {k - t:+.3f} (tolerance {RECIPE_TOLERANCE})")
    assert abs(k - t) > RECIPE_TOLERANCE
