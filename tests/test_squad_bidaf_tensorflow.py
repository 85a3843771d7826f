"""squad-bidaf-tensorflow on CPU: the parameter count (by hand, and against squad-bidaf-pytorch's
network), a falling loss on a repeated batch, span extraction, the moving average that save()
writes, and smoke runs as a run drives them on the tiny SQuAD and GloVe of tests/squad_fixture.py:
a trainer on the training view (setup -> one epoch -> save), a predictor on the predict view
(setup -> load -> predict -> eval_inputs / infer).

Speed: the fixture's networks are small (hidden 16, 8 character filters); the trainer is set up
and its step traced once for the module; only the parameter-count tests build default-size
networks (once each framework)."""
from __future__ import annotations

import importlib.util
import json
import math
import string
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, check_roles_see_only_their_files, check_served, role_views

from common import squad
from harness import datasets, registry
from harness.reference import Context

NAME = "squad-bidaf-tensorflow"
SMALL = {"hidden": 16, "char_filters": 8, "batch_size": 8, "char_min_count": 1, "eval_batch_size": 8}
CHARS = list(string.printable.strip())            # 94 characters: a fixed list for the counts


def recipe():
    return sys.modules[registry.load_spec(NAME).load_entry_class().__module__]


def context(data_root, role="train", **overrides):
    spec = registry.load_spec(NAME)
    config = dict(spec.hyperparameters, **SMALL)
    config.update(overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, show_progress=False, role=role)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The fixture installed as `dawnbench data fetch squad` and `... glove` leave it, its manifest
    in force for the module, and the role views: {"fixture", "root", "train", "predict"}."""
    from squad_fixture import install_fixture

    tmp = tmp_path_factory.mktemp("squad")
    installed = install_fixture(tmp)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(datasets.MANIFEST_ENV, str(installed["manifest"]))
        yield {"fixture": installed["fixture"], "root": installed["root"],
               **role_views("squad", installed["root"], tmp / "views")}


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    """A trainer on the training view, one epoch, saved: (the trainer, its raw weights after the
    epoch, the model folder)."""
    trainer = recipe().BiDAFKeras()
    trainer.setup(context(data["train"]))
    stats = trainer.train_epoch(1)
    n = data["fixture"]["train_questions"]
    assert math.isfinite(stats["loss"]) and stats["samples"] == n and stats["lr"] == 0.001
    raw = [v.numpy() for v in trainer.model.trainable_variables]
    model = tmp_path_factory.mktemp("bidaf") / "model"
    trainer.save(model)
    return trainer, raw, model


# ------------------------------------------------------------------------------- the network

def test_spec():
    spec = registry.load_spec(NAME)
    cfg = spec.hyperparameters
    assert spec.task.name == "squad" and spec.framework == "tensorflow" and spec.gpus and spec.max_epochs == 20
    assert cfg == {"glove": "glove.6B.100d", "word_dim": 100, "char_dim": 8, "char_filters": 100, "char_width": 5,
                   "char_min_count": 51, "word_min_count": 11, "max_word_chars": 16, "highway_layers": 2,
                   "hidden": 100, "dropout": 0.2, "batch_size": 60, "lr": 0.001, "ema_decay": 0.999,
                   "max_context": 400, "max_question": 30, "max_span": 0, "eval_batch_size": 100}
    assert "2,571,668 with 94 characters and no learned word" in spec.model


@pytest.fixture(scope="module")
def default_count():
    """The default-size network's trainable parameters with the 94 fixed characters (and a
    3-word table: frozen, so it does not count)."""
    cfg = registry.load_spec(NAME).hyperparameters
    model = recipe().build_model(cfg, np.zeros((3, cfg["word_dim"]), np.float32), len(CHARS) + 2)
    return recipe().count_parameters(model)


def test_parameter_count_by_hand(default_count):
    h, d0, c = 100, 100 + 100, len(CHARS) + 2       # hidden; char_filters + word_dim; +2: padding, unknown

    def keras_bilstm(d_in):                          # two directions, each 4 gates: kernel, recurrent kernel, ONE bias
        return 2 * (4 * h * d_in + 4 * h * h + 4 * h)

    expected = (c * 8                                # character embedding (C + 2) x char_dim
                + 5 * 8 * 100 + 100                  # Conv1D width 5, 8 -> 100, bias
                + 2 * 2 * (d0 * d0 + d0)             # 2 highway layers: transform and gate, each d0 x d0 + bias
                + keras_bilstm(d0)                   # contextual: 200 -> 100 a direction
                + 6 * h                              # similarity w_s, no bias
                + keras_bilstm(8 * h)                # modeling layer 1: 800 -> 100
                + keras_bilstm(2 * h)                # modeling layer 2: 200 -> 100
                + 10 * h                             # start: w_p1 . [G; M]
                + keras_bilstm(14 * h)               # end LSTM: [G; M; a; M * a], 1400 -> 100
                + 10 * h                             # end: w_p2 . [G; M2]
                + (0 + 2) * 100)                     # trained word rows: padding, unknown, no learned word
    assert expected == 2_570_700 + 8 * c + 100 * 2 == 2_571_668
    assert default_count == expected


def test_parameter_count_against_pytorch(default_count):
    """squad-bidaf-pytorch builds the same network from the same spec. PyTorch's nn.LSTM has two
    bias vectors per gate (b_ih and b_hh), Keras's LSTM one: 4 x hidden more per direction, and
    the four bidirectional LSTMs (contextual 1, modeling 2, end 1) have 8 directions, so PyTorch
    counts exactly 8 x 4 x hidden = 3,200 more. Everything else is the same size."""
    path = REPO / "references" / "squad-bidaf-pytorch" / "train.py"
    if not path.is_file():
        pytest.skip("references/squad-bidaf-pytorch/train.py does not exist yet")
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("squad_bidaf_pytorch_train_for_count", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = registry.load_spec(NAME).hyperparameters
    net = module.BiDAF(torch.zeros(3, cfg["word_dim"]), len(CHARS) + 2, cfg)
    torch_count = module.count_parameters(net)
    assert torch_count - default_count == 8 * 4 * cfg["hidden"] == 3_200
    # The same trained word table: 100 a learned word in both.
    learned = module.count_parameters(module.BiDAF(torch.zeros(3, cfg["word_dim"]), len(CHARS) + 2, cfg, 5))
    assert learned - torch_count == 5 * cfg["word_dim"]


def small_model(n_learned=0, **overrides):
    keras.utils.set_random_seed(0)
    cfg = {**registry.load_spec(NAME).hyperparameters, **SMALL, **overrides}
    words = np.random.default_rng(0).normal(0, 0.5, (50, cfg["word_dim"])).astype(np.float32)
    return recipe().build_model(cfg, words, 30, n_learned), cfg, words


def small_batch(rows=3):
    batch = squad.synthetic_batch(rows, 12, 5, 16, 50, 30, np.random.default_rng(0))
    batch["cw"], batch["qw"] = np.maximum(batch["cw"], 5), np.maximum(batch["qw"], 5)   # GloVe words only
    return batch


def test_the_end_pointer_reads_the_start_pointer():
    """The seed's end pointer (dawn-bench-models basic/model.py:213-217): its LSTM reads
    [G; M; a; M * a] (14h), a = softmax(start logits) M; so the end logits move when only the start
    weights do."""
    model, cfg, _ = small_model()
    assert model.end_lstm.forward_layer.cell.kernel.shape == (14 * cfg["hidden"], 4 * cfg["hidden"])
    inputs = recipe().tensors(small_batch())
    start, end = model(*inputs, training=False)
    model.start.kernel.assign(-model.start.kernel)
    start2, end2 = model(*inputs, training=False)
    assert not np.allclose(start2, start) and not np.allclose(end2, end)


def test_dropout_is_where_the_seed_has_it():
    """The seed (basic/model.py) drops: the character embedding (multi_conv1d keep_prob), the
    question's contextual LSTM input and not the context's (:174-178), both modeling layers'
    inputs, the end LSTM's input and the inputs of the start and end logits (get_logits
    input_keep_prob, :211, :219); not the highway or the similarity. Each LSTM input is dropped by
    its direction's own wrapper (test_each_direction_draws_its_own_mask)."""
    model, cfg, _ = small_model()
    h, d0 = cfg["hidden"], cfg["char_filters"] + cfg["word_dim"]
    dropped, lstm_dropped = [], []

    def record(into):
        def drop(x, training=False):
            into.append(tuple(x.shape[1:]))
            return x
        return drop

    model.dropout = record(dropped)
    for name in ("contextual", "modeling1", "modeling2", "end_lstm"):
        getattr(model, name).drop = record(lstm_dropped)
    model(*recipe().tensors(small_batch(2)), training=True)
    width = cfg["max_word_chars"]      # character embeddings: (tokens, characters, char_dim), context then question
    assert dropped == [(width, 8), (width, 8), (12, 10 * h), (12, 10 * h)]
    # One mask per direction: each dropped LSTM input twice.
    assert lstm_dropped == [(5, d0)] * 2 + [(12, 8 * h)] * 2 + [(12, 2 * h)] * 2 + [(12, 14 * h)] * 2


def test_each_direction_draws_its_own_mask():
    """The seed wraps each direction's cell in its own dropout (basic/model.py:154-169, cell_fw and
    cell_bw each in a SwitchableDropoutWrapper): the forward and the backward LSTM of a dropped
    input read different masks; the context's contextual input (not dropped) reads the same."""
    model, cfg, _ = small_model(dropout=0.5)
    seen = []
    for name in ("contextual", "modeling1", "modeling2", "end_lstm"):
        bi = getattr(model, name)
        for direction, layer in (("forward", bi.forward_layer), ("backward", bi.backward_layer)):
            def call(x, *args, _call=layer.call, _key=(name, direction), **kwargs):
                seen.append((_key, x.numpy()))
                return _call(x, *args, **kwargs)
            object.__setattr__(layer, "call", call)
    model(*recipe().tensors(small_batch(2)), training=True)
    keys = [key for key, _ in seen]
    assert keys == [(n, d) for n in ("contextual", "contextual", "modeling1", "modeling2", "end_lstm")
                    for d in ("forward", "backward")], keys
    for k in range(0, len(seen), 2):
        (name, _), fw = seen[k]
        _, bw = seen[k + 1]
        if k == 0:                     # the context's contextual input: not dropped
            np.testing.assert_array_equal(fw, bw)
        else:
            assert not np.array_equal(fw == 0, bw == 0), f"{name}: one mask for both directions"
            assert (fw == 0).mean() > 0.3 and (bw == 0).mean() > 0.3, name


def test_the_padding_character_is_trained():
    """The seed's char_emb_mat trains every row, the padding character's too (basic/model.py:102, :105-106):
    each word shorter than max_word_chars is padded to it, and the padding row enters the
    convolution and its max, so it takes a gradient."""
    model, cfg, _ = small_model()
    batch = small_batch(2)
    batch["cc"][:, :, 6:], batch["qc"][:, :, 6:] = 0, 0                  # words of 6 characters, padded to 16
    inputs = recipe().tensors(batch, ("cw", "cc", "qw", "qc", "y1", "y2"))
    table = model.char_embedding.embeddings
    with tf.GradientTape() as tape:
        p1, p2 = model(*inputs[:4], training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(inputs[4], p1)
                              + tf.nn.sparse_softmax_cross_entropy_with_logits(inputs[5], p2))
    grad = tf.convert_to_tensor(tape.gradient(loss, table)).numpy()
    assert np.abs(grad[squad.PAD]).sum() > 0


def test_learned_word_vectors_train_and_glove_stays_frozen():
    """The seed trains a row for the unknown word and each learned word (word_emb_mat, basic/
    model.py:126) and feeds GloVe as a constant (new_emb_mat, :130)."""
    model, cfg, words = small_model(n_learned=3)
    table = model.word_embedding.embeddings
    ids = tf.constant([[0, 1, 2, 4, 5, 9]], tf.int64)       # padding, unknown, learned 2 and 4, GloVe 5, 9
    vectors = model.words(ids)[0].numpy()
    np.testing.assert_array_equal(vectors[0], 0.0)
    np.testing.assert_allclose(vectors[1:4], table.numpy()[[1, 2, 4]])
    np.testing.assert_allclose(vectors[4:], words[[5 - 3, 9 - 3]])          # GloVe ids sit above the 3 + 2 trained rows
    assert any(v is table for v in model.trainable_variables)
    assert table.shape == (3 + 2, cfg["word_dim"]) and np.std(table.numpy()) > 0.5   # N(0, 1), as the seed's

    batch = small_batch(2)
    batch["cw"][0, :4] = [1, 2, 4, 7]
    cw, cc, qw, qc, y1, y2 = recipe().tensors(batch, ("cw", "cc", "qw", "qc", "y1", "y2"))
    with tf.GradientTape() as tape:
        p1, p2 = model(cw, cc, qw, qc, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y1, p1)
                              + tf.nn.sparse_softmax_cross_entropy_with_logits(y2, p2))
    grad = tf.convert_to_tensor(tape.gradient(loss, table)).numpy()
    assert (np.abs(grad[[1, 2, 4]]).sum(1) > 0).all() and not grad[[0, 3]].any()   # unused and padding rows: none
    assert len(model.trainable_variables) == len(model.weights)              # GloVe is no variable at all


# ------------------------------------------------------------------------- smoke runs, CPU

@pytest.fixture(scope="module")
def predictor(data, trained):
    """A predictor on the predict view, set up and loaded with the trainer's saved model."""
    _, _, model = trained
    predictor = recipe().BiDAFKeras()
    predictor.setup(context(data["predict"], "predict"))
    assert not hasattr(predictor, "model") and all(not q.answers for q in predictor.questions)
    predictor.load(model)
    return predictor


def test_smoke_predict_and_infer(data, predictor):
    """A predictor on the predict view loads the saved model and answers every dev question with
    an exact substring of its context; infer() gives predict()'s answer, one question at a time."""
    answers = predictor.predict()
    dev = data["fixture"]["dev"]
    contexts = {qa["id"]: p["context"] for a in dev["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert isinstance(answers, dict) and list(answers) == list(contexts)        # every id, file order
    assert len(answers) == data["fixture"]["dev_questions"]
    assert all(isinstance(a, str) and a and a in contexts[i] for i, a in answers.items())
    items = predictor.eval_inputs()
    assert len(items) == len(answers) and [item["id"] for item in items] == list(answers)
    for item in (items[0], items[len(items) // 2], items[-1]):
        assert predictor.infer(item) == answers[item["id"]]


def test_the_timed_server_answers_as_the_predictor(data, trained, predictor):
    """`dawnbench infer`'s server: no dev question before its request (every GloVe word instead), each
    question with its request, and predict()'s answers."""
    server = recipe().BiDAFKeras()
    server.setup(context(data["serve"], "serve"))
    assert not hasattr(server, "questions")
    server.load(trained[2])
    check_served(predictor, server, items=len(predictor.eval_inputs()))


def test_span_extraction_recovers_the_answers(data):
    """Spans through the predictor's decoding path: probabilities peaked at each training answer's
    tokens give back the answer's exact text (offsets through the fixture's unicode and spacing)."""
    paragraphs, questions = squad.read_squad(data["train"] / "squad" / "train-v1.1.json")
    predictor = recipe().BiDAFKeras()
    predictor.paragraphs, predictor.ctx = paragraphs, context(data["train"])
    predictor.encoder = squad.Encoder.build({}, [], 16)

    def peaked(*ids):
        cw = ids[0].numpy()
        p1, p2 = np.full(cw.shape, 0.01), np.full(cw.shape, 0.01)
        for row, q in enumerate(batch_questions):
            p1[row, q.y1], p2[row, q.y2] = 1.0, 1.0
        return tf.constant(p1), tf.constant(p2)

    predictor.probabilities = peaked
    batch_questions = questions[:12]
    texts = predictor.answers(batch_questions)
    assert texts == [q.answers[0][1] for q in batch_questions]


def test_save_writes_the_moving_average(trained, predictor):
    """save() writes the EMA of the weights: not the raw weights after the epoch's steps, but what
    the average variables hold, and the predictor loads exactly that."""
    trainer, raw, model = trained
    with np.load(model / recipe().WEIGHTS_FILE) as saved:
        written = [saved[v.path] for v in trainer.model.trainable_variables]
    assert len(written) == len(raw) and all(w.shape == r.shape for w, r in zip(written, raw))
    assert all(not np.allclose(w, r) for w, r in zip(written, raw))
    for w, average in zip(written, trainer.ema):
        np.testing.assert_array_equal(w, average.numpy())
    for w, v in zip(written, predictor.model.trainable_variables):
        np.testing.assert_array_equal(w, v.numpy())
    # The fixture's GloVe lacks "born" (tests/squad_fixture.py): its trained row is saved, by name,
    # and the predictor reads it as the trainer's learned word, whatever its case.
    assert json.loads((model / recipe().WORDS_FILE).read_text()) == trainer.learned == predictor.learned == ["born"]
    assert trainer.model.word_embedding.embeddings.shape[0] == 1 + 2
    assert predictor.encoder.word_ids(["born", "Born"]).tolist() == [2, 2]


def test_roles_see_only_their_files(data):
    check_roles_see_only_their_files(recipe().BiDAFKeras, lambda role, root: context(root, role), data)


def test_missing_glove_names_its_fetch_command(data, tmp_path):
    view = tmp_path / "view"
    (view / "squad").mkdir(parents=True)
    (view / "squad" / "train-v1.1.json").symlink_to((data["train"] / "squad" / "train-v1.1.json").resolve())
    with pytest.raises(datasets.DatasetError, match="glove.6B.100d.txt .* not found in .*dawnbench data fetch glove"):
        recipe().BiDAFKeras().setup(context(view))


def test_loss_falls_on_a_repeated_batch(trained):
    """Through the compiled step the module traced (run last: it trains the module's trainer on)."""
    trainer, _, _ = trained
    batch = squad.make_batch(trainer.encoder, trainer.paragraphs, trainer.train_questions[:8])
    trainer.opt.learning_rate.assign(0.02)
    inputs = recipe().tensors(batch, ("cw", "cc", "qw", "qc", "y1", "y2"))
    losses = [float(trainer.train_step(*inputs)) for _ in range(12)]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.5 * losses[0], losses


def test_bench_step_seconds():
    """bench/bidaf_tensorflow.py at tiny sizes, eagerly (tracing its own step costs more than
    running it twice): a positive float."""
    from bench import bidaf_tensorflow

    tf.config.run_functions_eagerly(True)
    try:
        batch = squad.synthetic_batch(4, 20, 6, 16, vocab=50, chars=30, rng=np.random.default_rng(0))
        seconds = bidaf_tensorflow.step_seconds(batch, {**SMALL, "vocab": 50, "chars": 30}, steps=1, warmup=1)
    finally:
        tf.config.run_functions_eagerly(False)
    assert isinstance(seconds, float) and seconds > 0
