"""A language model of reply "next" (a large vocabulary, FineWeb's GPT-2 tokens), unit by unit: predict()
gives the next token's log-probability alone, the audit's fresh predictor next_distribution() the whole
distribution at the drawn positions. The three cheats of issue 50 are each caught, the honest model passes
(tests/test_fineweb_llmc_reference.py runs it through the harness)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness import lm_audit, lm_eval

pytestmark = pytest.mark.harness

V = 8
SETTINGS = lm_eval.LMSettings(window=4, vocab=V, audit_positions=6, sum_tolerance=1e-3, agree_tolerance=1e-3,
                              reply="next")
TABLE = np.log(np.random.default_rng(7).dirichlet(np.ones(V), size=V)).astype(np.float32)


def windows(n: int = 41) -> lm_eval.Windows:
    return lm_eval.Windows.of(lm_eval.TokenStream(np.random.default_rng(0).integers(0, V, size=n).astype(np.uint16)), 4)


class Honest:
    """A causal bigram: the distribution after a token depends on that token alone."""

    def predict(self, chunks):
        chunks = np.asarray(chunks)
        return TABLE[chunks[:, :-1], chunks[:, 1:]]

    def next_distribution(self, rows, lengths):
        return TABLE[np.asarray(rows)[np.arange(len(rows)), np.asarray(lengths) - 1]]


class LooksAhead(Honest):
    """Reads the next token from its chunk and claims it certain (nearly)."""

    def predict(self, chunks):
        return np.full(np.asarray(chunks)[:, 1:].shape, np.log(0.99), np.float32)


class Unnormalized(Honest):
    """Claims probability 1 for every token: its first pass's values are 0, its distributions sum to V."""

    def predict(self, chunks):
        return np.zeros(np.asarray(chunks)[:, 1:].shape, np.float32)

    def next_distribution(self, rows, lengths):
        return np.zeros((len(rows), V), np.float32)


class KeepsState(LooksAhead):
    """Looks ahead in the first pass and keeps each chunk it saw; asked for a distribution, it answers as its
    first pass did from the seen chunk sharing the prefix. Only the state of the same object helps it."""

    def __init__(self):
        self.seen = []

    def predict(self, chunks):
        self.seen.append(np.asarray(chunks))
        return super().predict(chunks)

    def next_distribution(self, rows, lengths):
        out = super().next_distribution(rows, lengths)
        if self.seen:
            record = np.concatenate(self.seen)
            for j, (row, n) in enumerate(zip(rows, lengths)):
                match = np.flatnonzero((record[:, :n] == row[:n]).all(axis=1))
                if len(match):
                    out[j] = np.log(0.01 / (V - 1))
                    out[j, record[match[0], n]] = np.log(0.99)
        return out


def audit(first_pass_model, fresh_model, seed: int = 3, settings=SETTINGS) -> dict:
    w = windows()
    draw = lm_audit.Draw.of(w, settings, np.random.default_rng(seed))
    _, kept = lm_eval.first_pass(first_pass_model.predict, w, settings, draw.positions)
    return lm_audit.audit_next(fresh_model.next_distribution, draw, w, kept, settings)


def test_the_first_pass_gets_chunks_of_t_plus_1_and_keeps_the_next_token_s_log_probability():
    w = windows(11)
    asked = []
    logp, kept = lm_eval.first_pass(lambda x: asked.append(x) or Honest().predict(x), w, SETTINGS, np.array([0, 9]))
    chunk = np.concatenate(asked)
    tokens = np.random.default_rng(0).integers(0, V, size=11)
    assert chunk.shape == (3, 5) and chunk.dtype == np.int64
    for i in range(3):      # chunk i = stream[i*T : i*T + T + 1], zeros past the stream
        part = tokens[4 * i:4 * i + 5]
        assert chunk[i, :len(part)].tolist() == part.tolist()
    assert logp.tolist() == TABLE[tokens[:-1], tokens[1:]].tolist() and kept.tolist() == logp[[0, 9]].tolist()


@pytest.mark.parametrize("reply, said", [
    (lambda x: np.zeros((len(x), 5, V), np.float32), "returned float32 (3, 5, 8): a language-model predictor returns "
                                                     "float log-probabilities of shape (windows, T) = (3, 4)"),
    (lambda x: np.full((len(x), 4), 0.5, np.float32), "gave the next token the log-probability 0.5 at window 0, "
                                                       "position 0"),
    (lambda x: np.where(np.arange(4) == 2, np.nan, Honest().predict(x)), "log-probability nan at window 0, position 2"),
    (lambda x: np.where(np.arange(4) == 1, -np.inf, Honest().predict(x)), "log-probability -inf at window 0, position 1"),
])
def test_the_first_pass_refuses_what_is_not_a_log_probability_in_one_line(reply, said):
    with pytest.raises(lm_eval.LMRefused) as e:
        lm_eval.first_pass(reply, windows(11), SETTINGS, np.array([0]))
    assert said in str(e.value) and "\n" not in str(e.value)


def test_the_padding_past_the_stream_is_not_scored_or_checked():
    def padded_nonsense(x):
        out = Honest().predict(x)
        out[-1, 1:] = 5.0           # 10 tokens, 9 scored: the last chunk's last 3 positions are padding
        return out
    logp, _ = lm_eval.first_pass(padded_nonsense, windows(10), SETTINGS, np.array([8]))
    assert len(logp) == 9 and (logp <= 0).all()


def test_the_honest_model_passes_and_the_audit_asks_prefix_lengths():
    lengths = []
    honest = Honest()
    record = audit(honest, type("Spy", (Honest,), {"next_distribution": lambda s, r, n: lengths.extend(n) or
                                                    honest.next_distribution(r, n)})())
    assert record["max_logprob_difference"] == 0 and record["max_sum_error"] < 1e-6 and len(record["positions"]) == 6
    assert [n - 1 for n in lengths] == [p % 4 for p in record["positions"]]


def test_a_predictor_that_looks_ahead_is_caught():
    with pytest.raises(lm_audit.AuditFailed, match=r"^the look-ahead audit: at window \d+, position \d a fresh "
                                                   r"predictor given only the tokens up to it gives the next token"):
        audit(LooksAhead(), LooksAhead())


def test_a_predictor_whose_probabilities_do_not_sum_to_one_is_caught():
    with pytest.raises(lm_audit.AuditFailed, match=r"^the look-ahead audit: a fresh predictor given only the prefix "
                                                   r"gave probabilities that sum to 8, not 1"):
        audit(Unnormalized(), Unnormalized())


def test_a_predictor_that_keeps_state_is_caught_by_a_fresh_one():
    cheat = KeepsState()
    assert audit(cheat, cheat)["max_logprob_difference"] < 1e-6     # its own state would pass it: freshness catches it
    with pytest.raises(lm_audit.AuditFailed, match=r"^the look-ahead audit: at window "):
        audit(KeepsState(), KeepsState())


def test_the_audit_refuses_a_distribution_of_the_wrong_shape_in_one_line():
    with pytest.raises(lm_eval.LMRefused, match=r"next_distribution\(\) returned float32 \(6, 4, 8\): .* shape "
                                                r"\(K rows, V\) = \(6, 8\) for the rows"):
        audit(Honest(), type("Full", (Honest,), {"next_distribution": lambda s, r, n: TABLE[np.asarray(r)]})())


def test_the_task_s_scored_tokens_cut_the_stream_and_a_shorter_one_is_scored_whole():
    stream = lm_eval.TokenStream(np.arange(100, dtype=np.uint16))
    assert len(stream.first(10)) == 10 and stream.first(10).tokens.tolist() == list(range(11))
    assert stream.first(1000) is stream and stream.first(None) is stream


def test_the_fineweb_task_scores_the_speedrun_s_tokens_under_reply_next():
    from harness.eval_set import EvalSet
    from harness.tasks import get_task
    task = get_task("fineweb-gpt2")
    s = task.settings
    assert (task.metric, task.threshold, s.reply, s.window, s.vocab, s.scored_tokens) == ("ce", 3.28, "next", 1024,
                                                                                        50257, 10485760)
    assert task.eval_examples == s.scored_tokens and (1 - 0.01 / 3.28) ** s.audit_positions < 1e-3
    long = lm_eval.TokenStream(np.zeros(s.scored_tokens + 5, dtype=np.uint16))
    assert len(task.kind.scored_labels(task, long)) == task.eval_examples
    short = task.kind.scored_labels(task, lm_eval.TokenStream(np.zeros(1000, dtype=np.uint16)))
    assert "the eval set has 999 examples, not the 10485760" in EvalSet(task, len(short)).reasons()[0]
    assert get_task("kjv-bytes").settings.reply == "full"


@pytest.mark.parametrize("change, said", [
    ({"reply": "all"}, "reply 'all' must be one of 'full', 'next'"),
    ({"scored_tokens": 0}, "scored_tokens 0 must be a whole number, 1 or more"),
])
def test_the_new_settings_are_checked_in_one_line(change, said):
    table = {**dataclasses.asdict(SETTINGS), "scored_tokens": 100, **change}
    with pytest.raises(lm_eval.LMRefused, match=said):
        lm_eval.LMSettings.of("toy", table)
