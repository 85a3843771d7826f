"""squad-bidaf-pytorch on the tiny SQuAD and GloVe of tests/squad_fixture.py, on CPU: the parameter
count (derived by hand below), span extraction to the exact context text, a falling loss, the
weight average, and a smoke run as a run drives it: a trainer on the training view only (setup ->
one epoch -> save), then a predictor on the answer-free dev view only (setup -> load -> predict ->
eval_inputs / infer).

Small sizes (hidden 16, 8 character filters, batches of 8) except for the count, and one thread:
on a small shared CPU, two OpenMP threads spin-waiting for a busy core make steps up to ten
times slower."""
from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np
import pytest
import torch
from conftest import check_roles_see_only_their_files, check_served, role_views
from squad_fixture import install_fixture

from common import squad
from harness import datasets, registry
from harness.reference import Context

NAME = "squad-bidaf-pytorch"
SMALL = {"hidden": 16, "char_filters": 8, "batch_size": 8, "char_min_count": 1, "eval_batch_size": 8}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def spec():
    return registry.load_spec(NAME)


@pytest.fixture(scope="module")
def train(spec):
    """The reference's module (train.py)."""
    return sys.modules[spec.load_entry_class().__module__]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """{"fixture": what write_squad_fixture returned, "train"/"predict": each role's view}."""
    tmp = tmp_path_factory.mktemp("squad")
    installed = install_fixture(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(datasets.MANIFEST_ENV, str(installed["manifest"]))
        views = role_views("squad", installed["root"], tmp)
    return {"fixture": installed["fixture"], **views}


def context(spec, data_root, role="train", **overrides):
    config = dict(spec.hyperparameters, **SMALL)
    config.update(overrides)
    return Context(config=config, data_root=data_root, seed=0, task=spec.task, show_progress=False, role=role)


def make(spec, data, role="train", **overrides):
    ref = spec.load_entry_class()()
    ref.setup(context(spec, data[role], role, **overrides))
    return ref


@pytest.fixture(scope="module")
def trained(spec, data, tmp_path_factory):
    """(trainer after one epoch, its stats, the folder save() wrote)."""
    torch.manual_seed(0)
    trainer = make(spec, data)
    stats = trainer.train_epoch(1)
    folder = tmp_path_factory.mktemp("model")
    trainer.save(folder)
    return trainer, stats, folder


# ------------------------------------------------------------------------------------ the network

def test_spec_and_parameter_count(spec, train):
    assert spec.task.name == "squad" and spec.framework == "pytorch" and spec.gpus
    cfg = spec.hyperparameters
    assert spec.max_epochs == 20 and cfg["hidden"] == 100 and cfg["batch_size"] == 60
    chars = 94                                        # a fixed character list: ids 2..95, plus PAD and OOV
    h, d0 = 100, 100 + 100                            # hidden; char_filters + word_dim
    embedding = (chars + 2) * 8                       # n_chars x char_dim                      768
    conv = 100 * 8 * 5 + 100                          # filters x char_dim x width + bias       4,100
    highway = 2 * 2 * (d0 * d0 + d0)                  # 2 layers x (transform, gate)            160,800

    def bilstm(d_in):                                 # 2 directions x 4 gates x (W_ih, W_hh, b_ih, b_hh)
        return 2 * (4 * h * d_in + 4 * h * h + 4 * h + 4 * h)

    # contextual, modeling x2, end: the end LSTM reads [G; M; a; M * a] = 8h + 2h + 2h + 2h
    lstms = bilstm(d0) + bilstm(8 * h) + bilstm(2 * h) + bilstm(14 * h)
    assert lstms == 241_600 + 721_600 + 241_600 + 1_201_600
    attention = 6 * h                                 # w_s, no bias                            600
    output = 10 * h + 10 * h                          # w_p1, w_p2, no bias                     2,000
    words = (0 + 2) * 100                             # trained rows: padding, unknown, no learned word
    expected = embedding + conv + highway + lstms + attention + output + words
    assert expected == 2_574_868 == 2_573_900 + 8 * (chars + 2) + 100 * (0 + 2)

    net = train.BiDAF(torch.zeros(400, 100), chars + 2, cfg)
    assert train.count_parameters(net) == sum(p.numel() for p in net.parameters()) == expected
    assert train.count_parameters(train.BiDAF(torch.zeros(400, 100), chars + 2, cfg, 7)) == expected + 7 * 100
    # The frozen GloVe table is a buffer outside the state dict: never saved, never counted.
    assert "word_vectors" not in net.state_dict() and not any(p is net.word_vectors for p in net.parameters())
    assert "2,574,868 with 94 characters and no learned word" in spec.model
    # The TensorFlow reference's count is this minus PyTorch's second LSTM bias: 8 directions x 4h.
    assert expected - 8 * 4 * h == 2_571_668


def small_net(train, spec, n_learned=0, **overrides):
    torch.manual_seed(0)
    cfg = dict(spec.hyperparameters, **SMALL, **overrides)
    return train.BiDAF(torch.randn(50, 100), 30, cfg, n_learned), cfg


def test_the_end_pointer_reads_G_M_and_the_start_attended_M(spec, train):
    """The seed's end pointer (dawn-bench-models basic/model.py:213-217): its LSTM reads
    [G; M; a; M * a], a = softmax(start logits) M tiled over the context; so the end logits move
    when only the start weights do."""
    net, cfg = small_net(train, spec)
    net.eval()
    h = cfg["hidden"]
    assert net.end_lstm.fw.input_size == net.end_lstm.bw.input_size == 14 * h
    seen = {}
    net.modeling1.register_forward_hook(lambda m, args, out: seen.update(G=args[0]))
    net.modeling2.register_forward_hook(lambda m, args, out: seen.update(M=out))
    net.end_lstm.register_forward_hook(lambda m, args, out: seen.update(x=args[0]))
    batch = squad.synthetic_batch(3, 12, 5, 16, 50, 30, np.random.default_rng(0))
    batch["cw"][1, 7:], batch["cc"][1, 7:] = 0, 0
    with torch.no_grad():
        start, end = net(*train.to_device(batch, torch.device("cpu")))
        G, M = seen["G"], seen["M"]
        a = torch.einsum("bt,btd->bd", torch.softmax(start, dim=1), M)[:, None, :].expand_as(M)
        torch.testing.assert_close(seen["x"], torch.cat([G, M, a, M * a], dim=2))
        assert float(torch.softmax(start, 1)[1, 7:].sum()) == 0.0      # padding takes no share of a
        net.start.weight.mul_(-1.0)
        start2, end2 = net(*train.to_device(batch, torch.device("cpu")))
    assert not torch.allclose(start2, start) and not torch.allclose(end2, end)


def test_dropout_is_where_the_seed_has_it(spec, train):
    """The seed (basic/model.py) drops: the character embedding (multi_conv1d keep_prob), the
    question's contextual LSTM input and not the context's (d_cell vs cell, :174-178), both
    modeling layers' inputs, the end LSTM's input (d_cell4) and the inputs of the start and end
    logits (get_logits input_keep_prob, :211, :219); not the highway or the similarity. Each LSTM
    input is dropped by its direction's own wrapper (test_each_direction_draws_its_own_mask)."""
    net, cfg = small_net(train, spec)
    net.train()
    h, d0 = cfg["hidden"], cfg["char_filters"] + cfg["word_dim"]
    dropped, lstms = [], []
    net.drop = lambda x: dropped.append(tuple(x.shape[1:])) or x        # the context has 12 tokens, the question 5
    for name in ("context", "modeling1", "modeling2", "end_lstm"):
        getattr(net, name).register_forward_hook(
            lambda m, args, kwargs, out, name=name: lstms.append((name, tuple(args[0].shape[1:]), kwargs.get("drop", False))),
            with_kwargs=True)
    batch = squad.synthetic_batch(2, 12, 5, 16, 50, 30, np.random.default_rng(0))
    net(*train.to_device(batch, torch.device("cpu")))
    assert dropped == [(12, 10 * h), (12, 10 * h)]                      # the start and end logits' inputs
    assert lstms == [("context", (12, d0), False), ("context", (5, d0), True), ("modeling1", (12, 8 * h), True),
                     ("modeling2", (12, 2 * h), True), ("end_lstm", (12, 14 * h), True)]
    assert all(getattr(net, n).dropout == cfg["dropout"] == 0.2 for n in ("context", "modeling1", "modeling2", "end_lstm"))


def lstm_inputs(net, train, batch):
    """The input each nn.LSTM of the network reads in one training forward pass, in call order, as
    (module name, padded input): a packed sequence is unpacked."""
    from torch.nn.utils.rnn import PackedSequence, pad_packed_sequence

    seen = []
    for name, module in net.named_modules():
        if isinstance(module, torch.nn.LSTM):
            def hook(m, args, name=name):
                x = args[0]
                seen.append((name, pad_packed_sequence(x, batch_first=True)[0] if isinstance(x, PackedSequence) else x))
            module.register_forward_pre_hook(hook)
    net(*train.to_device(batch, torch.device("cpu")))
    return seen


def test_each_direction_draws_its_own_mask(spec, train):
    """The seed wraps each direction's cell in its own dropout (basic/model.py:154-169, cell_fw and
    cell_bw each in a SwitchableDropoutWrapper): the forward and the backward LSTM of a dropped
    input read different masks; an undropped input (the context's contextual LSTM) reads the same."""
    net, cfg = small_net(train, spec, dropout=0.5)
    net.train()
    batch = squad.synthetic_batch(2, 12, 5, 16, 50, 30, np.random.default_rng(0))
    batch["cw"][1, 9:], batch["cc"][1, 9:] = 0, 0                         # the second context is 9 tokens long
    seen = lstm_inputs(net, train, batch)
    by_module = {}
    for name, x in seen:
        by_module.setdefault(name.rsplit(".", 1)[0], []).append((name.rsplit(".", 1)[-1], x))
    # Each BiLSTM: its forward and backward LSTM, once (the contextual one twice: context, question).
    assert set(by_module) == {"context", "modeling1", "modeling2", "end_lstm"}, sorted(by_module)
    lengths = (batch["cw"] != 0).sum(1)
    for module, calls in by_module.items():
        for k in range(0, len(calls), 2):
            (fw_name, fw), (bw_name, bw) = calls[k], calls[k + 1]
            assert (fw_name, bw_name) == ("fw", "bw")
            # The backward LSTM reads each sequence reversed within its length: put it back.
            n = fw.shape[1]
            lens = lengths if n == batch["cw"].shape[1] else np.full(2, n)
            back = torch.stack([torch.cat([bw[b, :lens[b]].flip(0), bw[b, lens[b]:]]) for b in range(2)])
            dropped = not (module == "context" and k == 0)
            if dropped:
                assert not torch.equal(fw == 0, back == 0), f"{module}: one mask for both directions"
                assert (fw == 0).float().mean() > 0.3 and (back == 0).float().mean() > 0.3, module
            else:
                torch.testing.assert_close(fw, back)


def test_the_padding_character_is_trained(spec, train):
    """The seed's char_emb_mat trains every row, the padding character's too (basic/model.py:102, :105-106):
    each word shorter than max_word_chars is padded to it, and the padding row enters the
    convolution and its max, so it takes a gradient (not the padding word's row: masked, packed)."""
    net, cfg = small_net(train, spec)
    net.train()
    batch = squad.synthetic_batch(2, 12, 5, 16, 50, 30, np.random.default_rng(0))
    batch["cc"][:, :, 6:], batch["qc"][:, :, 6:] = 0, 0                   # words of 6 characters, padded to 16
    start, end = net(*train.to_device(batch, torch.device("cpu")))
    train.span_loss(start, end, torch.from_numpy(batch["y1"]), torch.from_numpy(batch["y2"])).backward()
    assert net.char_emb.padding_idx is None
    assert net.char_emb.weight.grad[squad.PAD].abs().sum() > 0
    assert net.char_emb.weight[squad.PAD].abs().sum() > 0               # drawn like every other row


def test_logits_are_masked_and_padding_does_not_change_them(spec, train):
    torch.manual_seed(0)
    cfg = dict(spec.hyperparameters, **SMALL)
    net = train.BiDAF(torch.randn(50, 100), 30, cfg).eval()
    batch = squad.synthetic_batch(3, 12, 5, 16, 50, 30, np.random.default_rng(0))
    batch["cw"][1, 7:], batch["cc"][1, 7:], batch["qw"][1, 3:], batch["qc"][1, 3:] = 0, 0, 0, 0
    with torch.no_grad():
        start, end = net(*train.to_device(batch, torch.device("cpu")))
    assert start.shape == end.shape == (3, 12)
    assert (start[1, 7:] <= -1e29).all() and (end[1, 7:] <= -1e29).all()
    # The second row alone, cut to its own lengths: the same logits (packing hides the padding).
    alone = {k: v[1:2, :7] if k in ("cw", "cc") else v[1:2, :3] if k in ("qw", "qc") else v[1:2] for k, v in batch.items()}
    with torch.no_grad():
        s1, e1 = net(*train.to_device(alone, torch.device("cpu")))
    torch.testing.assert_close(s1[0], start[1, :7], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(e1[0], end[1, :7], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------- span extraction

def test_spans_are_the_exact_context_characters():
    context = "Marie\u00a0Curie   won the “Nobel Prize”, twice!\n  In 1903 (physics)—and 1911."
    (text_tokens,) = [squad.tokenize(context)]
    paragraph = squad.Paragraph(context, [t for t, _, _ in text_tokens], [(s, e) for _, s, e in text_tokens])
    tokens = paragraph.tokens
    assert "\u00a0" not in tokens and not any(t.isspace() for t in tokens)
    assert all(context[s:e] == t for t, (s, e) in zip(tokens, paragraph.spans))

    def span(first: str, last: str, after: int = 0) -> tuple[int, int]:
        i = tokens.index(first, after)
        return i, tokens.index(last, i)

    cases = [
        (span("Marie", "Curie"), "Marie\u00a0Curie"),                  # a non-breaking space kept
        (span("Curie", "won"), "Curie   won"),                          # runs of spaces kept
        (span("“", "”"), "“Nobel Prize”"),                              # curly quotes glued to words
        (span("Prize", "twice"), "Prize”, twice"),
        (span("twice", "In"), "twice!\n  In"),                          # a newline inside the answer
        (span("1903", "1911"), "1903 (physics)—and 1911"),
    ]
    length = len(tokens)
    for (s, e), text in cases:
        p1, p2 = np.full((1, length), 0.01), np.full((1, length), 0.01)
        p1[0, s], p2[0, e] = 0.9, 0.9
        start, end = squad.best_spans(p1, p2, np.array([length]), max_span=30)
        assert (start[0], end[0]) == (s, e)
        assert squad.answer_text(paragraph, int(start[0]), int(end[0])) == text
        assert text in context


def seed_best_span(p1, p2):
    """The seed's get_best_span (dawn-bench-models squad/utils.py:83-100) for one paragraph, as written."""
    max_val, best, argmax_j1 = 0, (0, 0), 0
    for j in range(len(p1)):
        val1 = p1[argmax_j1]
        if val1 < p1[j]:
            val1, argmax_j1 = p1[j], j
        if val1 * p2[j] > max_val:
            best, max_val = (argmax_j1, j), val1 * p2[j]
    return best


def test_best_spans_without_a_cap_is_the_seeds():
    rng = np.random.default_rng(0)
    lengths = np.array([40, 1, 17, 33, 25, 40])
    p1, p2 = rng.random((6, 40)), rng.random((6, 40))
    p1[4], p2[4] = np.round(p1[4], 1), np.round(p2[4], 1)                # ties
    p1[5], p2[5] = 0.01, 0.01
    p1[5, 2], p2[5, 37] = 0.9, 0.9                                        # an answer of 36 tokens
    start, end = squad.best_spans(p1, p2, lengths)
    for row, n in enumerate(lengths):
        assert (start[row], end[row]) == seed_best_span(p1[row, :n], p2[row, :n])
    assert (start[5], end[5]) == (2, 37)
    capped = squad.best_spans(p1, p2, lengths, max_span=30)               # a cap would cut it
    assert capped[1][5] - capped[0][5] < 30


def test_the_seeds_vocabulary():
    """Counts as the seed's squad/prepro.py (a context's tokens once per question on it, lower
    case), trained vectors for the words counted at least word_min_count times that GloVe lacks
    (basic/read_data.py:190-194), looked up as the seed's _get_word (basic/model.py:426-436)."""
    def paragraph(text):
        tokens = text.split()
        return squad.Paragraph(text, tokens, [(0, 0)] * len(tokens))

    paragraphs = [paragraph("Zorb met Zorb in Qux"), paragraph("zorb Blick"), paragraph("Blick unasked zzz")]
    questions = [squad.Question(str(i), p, "", text.split()) for i, (p, text) in
                 enumerate([(0, "Who met ZORB"), (0, "where"), (0, "when"), (1, "Blick what")])]
    words, chars = squad.seed_counts(paragraphs, questions)
    # "zorb": 2 in paragraph 0 x 3 questions + 1 in paragraph 1 x 1 + 1 in a question; paragraph 2 has none
    assert words["zorb"] == 8 and words["blick"] == 2 and words["qux"] == 3 and "unasked" not in words
    assert chars["Z"] == 2 * 3 + 0 + 1 and chars["z"] == 1 + 0 and chars["R"] == 1
    assert squad.char_table(chars, 3) == [c for c, n in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 3]
    glove = {"met": 2, "Qux": 3, "in": 4}                                 # read_glove's table: data word -> id
    assert squad.learned_words(words, glove, 2) == ["blick", "zorb"]     # qux is in GloVe (as "Qux")
    assert squad.learned_words(words, glove, 3) == ["zorb"]
    encoder = squad.Encoder.build(glove, ["a"], 16, ["blick", "zorb"])
    ids = encoder.word_ids(["Zorb", "ZORB", "blick", "met", "Qux", "in", "nope"])
    assert ids.tolist() == [3, 3, 2, 2 + 2, 3 + 2, 4 + 2, squad.OOV]       # learned 2, 3; GloVe ids moved up by 2


def test_learned_word_vectors_train_and_glove_stays_frozen(spec, train):
    """The seed trains a row for the unknown word and each learned word (word_emb_mat, basic/
    model.py:126, in every trainable variable) and feeds GloVe as a constant (new_emb_mat, :130)."""
    net, cfg = small_net(train, spec, n_learned=3)
    glove = net.word_vectors.clone()
    ids = torch.tensor([[0, 1, 2, 4, 5, 9]])                             # padding, unknown, learned 2 and 4, GloVe 5, 9
    with torch.no_grad():
        vectors = net.words(ids)[0]
    torch.testing.assert_close(vectors[:4], net.word_emb.weight[[0, 1, 2, 4]])
    torch.testing.assert_close(vectors[4:], glove[[5 - 3, 9 - 3]])       # GloVe ids sit above the 3 + 2 trained rows
    assert not vectors[0].any() and net.word_emb.weight.requires_grad and "word_emb.weight" in net.state_dict()

    batch = squad.synthetic_batch(2, 12, 5, 16, 50, 30, np.random.default_rng(0))
    batch["cw"], batch["qw"] = np.maximum(batch["cw"], 5), np.maximum(batch["qw"], 5)   # GloVe words ...
    batch["cw"][0, :4] = [1, 2, 4, 7]                                    # ... and unknown, learned 2 and 4
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=0.01)
    before = net.word_emb.weight.detach().clone()
    train.train_step(net, opt, train.EMA(net, 0.9), batch, torch.device("cpu"))
    grad = net.word_emb.weight.grad
    assert grad[[1, 2, 4]].abs().sum(1).gt(0).all() and not grad[[0, 3]].any()   # unused and padding rows: none
    assert not torch.equal(net.word_emb.weight[[1, 2, 4]], before[[1, 2, 4]])
    assert torch.equal(net.word_vectors, glove)                          # GloVe: unchanged, not a parameter


def test_best_spans_keeps_order_length_and_max_span():
    p1 = np.array([[0.1, 0.1, 0.7, 0.1, 0.0], [0.0, 0.0, 0.0, 0.2, 0.8]])
    p2 = np.array([[0.6, 0.1, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1, 0.6]])
    # Row 0: the end must not come before the start; row 1: position 4 is padding (length 4).
    start, end = squad.best_spans(p1, p2, np.array([5, 4]), max_span=30)
    assert start[0] <= end[0] and (start[0], end[0]) == (2, 2)
    assert end[1] < 4 and (start[1], end[1]) == (3, 3)
    # The best pair (0, 2) is 3 tokens long: with max_span 2 the best of at most 2 tokens, (1, 2), wins.
    p1, p2 = np.array([[0.9, 0.06, 0.04]]), np.array([[0.04, 0.05, 0.91]])
    assert [int(x[0]) for x in squad.best_spans(p1, p2, np.array([3]), max_span=3)] == [0, 2]
    assert [int(x[0]) for x in squad.best_spans(p1, p2, np.array([3]), max_span=2)] == [1, 2]


# ------------------------------------------------------------------------------ training

def test_loss_falls_on_a_repeated_batch(spec, train, data):
    """30 Adam steps on one batch of the fixture's questions: the network can fit it."""
    torch.manual_seed(0)
    trainer = make(spec, data, lr=0.01)
    batch = squad.make_batch(trainer.encoder, trainer.paragraphs, trainer.train[:8])
    losses = [train.train_step(trainer.model, trainer.opt, trainer.ema, batch, trainer.device).item() for _ in range(30)]
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0] / 2, losses


def test_the_average_is_what_is_saved(trained, train):
    trainer, _, folder = trained
    saved = torch.load(folder / "model.pt")
    names = [n for n, p in trainer.net.named_parameters() if p.requires_grad]
    assert list(saved) == names                                      # every trainable weight, nothing else
    raw = dict(trainer.net.named_parameters())
    for name, shadow in zip(trainer.ema.names, trainer.ema.shadow):
        assert torch.equal(saved[name], shadow)
    assert any(not torch.equal(saved[n], raw[n].detach()) for n in names)   # the average, not the raw weights
    # One more step moves the average by (1 - decay) of the gap: shadow' = 0.999 shadow + 0.001 weight.
    before = [s.clone() for s in trainer.ema.shadow]
    batch = squad.make_batch(trainer.encoder, trainer.paragraphs, trainer.train[:8])
    train.train_step(trainer.model, trainer.opt, trainer.ema, batch, trainer.device)
    decay = trainer.ctx.config["ema_decay"]
    for old, new, p in zip(before, trainer.ema.shadow, trainer.ema.params):
        torch.testing.assert_close(new, decay * old + (1 - decay) * p.detach(), rtol=1e-6, atol=1e-7)
    chars = json.loads((folder / "chars.json").read_text(encoding="utf-8"))
    assert chars == trainer.chars and "“" in chars and "\u00a0" not in chars   # unicode kept, white space not
    # The fixture's GloVe lacks "born" (tests/squad_fixture.py): its trained row is saved, by name.
    assert json.loads((folder / "words.json").read_text(encoding="utf-8")) == trainer.learned == ["born"]
    assert saved["word_emb.weight"].shape == (1 + 2, 100)


def test_batches_cover_the_trainable_questions_and_split_across_ranks(trained, data):
    trainer, stats, _ = trained
    fx = data["fixture"]
    assert len(trainer.train) == fx["train_questions"] == 48          # every fixture question fits
    assert stats["samples"] == 48 and math.isfinite(stats["loss"]) and stats["lr"] == 0.001
    one = trainer.rank_batches(3)
    assert sorted(i for b in one for i in b) == list(range(48)) and trainer.rank_batches(3) == one
    assert trainer.rank_batches(4) != one                             # a new order every epoch
    ranks = [dataclasses.replace(trainer.ctx, rank=r, world_size=2) for r in (0, 1)]
    shares = []
    for ctx in ranks:
        trainer.ctx = ctx
        shares.append(trainer.rank_batches(3))
    trainer.ctx = dataclasses.replace(trainer.ctx, rank=0, world_size=1)
    assert len(shares[0]) == len(shares[1]) == len(one)               # the same steps on every rank
    assert all(sorted(a + b) == sorted(g) for a, b, g in zip(*shares, one))


# ------------------------------------------------------------------------------- end to end, CPU

def test_reference_smoke(spec, data, trained):
    trainer, _, folder = trained
    assert not hasattr(trainer, "questions")                         # the trainer never sees dev
    predictor = make(spec, data, "predict")
    assert not hasattr(predictor, "opt") and not hasattr(predictor, "train")
    predictor.load(folder)
    answers = predictor.predict()
    dev = data["fixture"]["dev"]
    contexts = {qa["id"]: p["context"] for a in dev["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert list(answers) == list(contexts) and len(answers) == data["fixture"]["dev_questions"]
    assert all(isinstance(a, str) and a and a in contexts[q] for q, a in answers.items())
    inputs = predictor.eval_inputs()
    assert [q["id"] for q in inputs] == list(contexts)
    for item in inputs[:5]:
        assert predictor.infer(item) == answers[item["id"]]
    # The timed server: no dev question before its request, every GloVe word, the same answers.
    server = make(spec, data, "serve")
    assert not hasattr(server, "questions")
    server.load(folder)
    check_served(predictor, server, items=len(inputs))
    # The predictor runs the averaged weights the trainer saved (its own dev-word GloVe table aside),
    # and reads "born" as the trainer's learned word, whatever its case.
    assert predictor.encoder.word_ids(["born", "Born"]).tolist() == [2, 2]
    saved = torch.load(folder / "model.pt")
    assert predictor.net.state_dict().keys() == saved.keys()
    assert all(torch.equal(p, saved[name]) for name, p in predictor.net.state_dict().items())


def test_roles_see_only_their_files(spec, data):
    check_roles_see_only_their_files(spec.load_entry_class(), lambda role, root: context(spec, root, role), data)


def test_missing_glove_names_the_fetch(spec, data, tmp_path):
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "train-v1.1.json").symlink_to((data["train"] / "squad" / "train-v1.1.json").resolve())
    with pytest.raises(datasets.DatasetError, match="glove.6B.100d.txt .*not found in .*dawnbench data fetch glove"):
        spec.load_entry_class()().setup(context(spec, tmp_path))
