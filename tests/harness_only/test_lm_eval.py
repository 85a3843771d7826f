"""The language-model eval's parts, unit by unit (numpy only): the harness's windows, the first pass's
checks, and the look-ahead audit's verdicts (tests/test_cheats_lm.py runs them end to end)."""
from __future__ import annotations

import numpy as np
import pytest

from harness import lm_audit, lm_eval

pytestmark = pytest.mark.harness

SETTINGS = lm_eval.LMSettings(window=4, vocab=8, audit_positions=5, sum_tolerance=1e-3, agree_tolerance=0.01)


def stream(n: int = 11, seed: int = 0) -> lm_eval.TokenStream:
    return lm_eval.TokenStream(np.random.default_rng(seed).integers(0, 8, size=n).astype(np.uint8))


def honest(inputs):
    """A causal model: the distribution after each token depends on that token alone."""
    table = np.log(np.random.default_rng(7).dirichlet(np.ones(8), size=8)).astype(np.float32)
    return table[np.asarray(inputs)]


def test_the_windows_score_every_token_but_the_first_once_in_order():
    s = stream(11)
    w = lm_eval.Windows.of(s, 4)
    assert len(s) == 10 and w.scored == 10 and w.inputs.shape == (3, 4)
    assert w.inputs.reshape(-1)[:11].tolist() == s.tokens.tolist()
    assert w.targets.reshape(-1)[:10].tolist() == s.tokens[1:].tolist()
    assert w.where(9) == (2, 1) and w.inputs.dtype == np.int64


def test_the_first_pass_keeps_each_next_token_and_the_drawn_distributions():
    w = lm_eval.Windows.of(stream(11), 4)
    keep = np.array([0, 9])
    logp, kept = lm_eval.first_pass(honest, w, SETTINGS, keep)
    full = honest(w.inputs).reshape(-1, 8)
    assert logp.dtype == np.float32 and logp.tolist() == full[np.arange(10), w.targets.reshape(-1)[:10]].tolist()
    assert np.array_equal(kept, full[[0, 9]])


@pytest.mark.parametrize("reply, said", [
    (lambda x: honest(x)[:, :2], "returned float32 (3, 2, 8): a language-model predictor returns float"),
    (lambda x: honest(x).astype(np.int64), "returned int64"),
    (lambda x: None, "returned nothing"),
    (lambda x: honest(x) + 0.5, "predict() gave probabilities that sum to 1.64872, not 1 within 0.001, at window 0, "
                                "position 0"),
    (lambda x: np.where(np.arange(4)[None, :, None] == 3, np.nan, honest(x)), "not a number at window 0, position 3"),
    # all the probability on a token that is not the next one: the next one's is 0, an infinite loss
    (lambda x: np.where(np.arange(8) == (np.roll(x, -1, axis=1)[:, :, None] + 1) % 8, 0.0, -np.inf),
     "predict() gave the next token probability 0 (log-probability -inf) at window 0, position "),
])
def test_the_first_pass_refuses_what_is_not_a_distribution_in_one_line(reply, said):
    w = lm_eval.Windows.of(stream(11), 4)
    with pytest.raises(lm_eval.LMRefused) as e:
        lm_eval.first_pass(reply, w, SETTINGS, np.array([0]))
    assert said in str(e.value) and "\n" not in str(e.value)


def test_the_padding_past_the_stream_is_not_checked():
    w = lm_eval.Windows.of(stream(10), 4)       # 9 scored: the last window's last 3 positions are padding

    def padded_nonsense(x):
        out = honest(x)
        if len(x) == 3:
            out[2, 1:] = 5.0
        return out
    logp, _ = lm_eval.first_pass(padded_nonsense, w, SETTINGS, np.array([8]))
    assert len(logp) == 9


def test_the_audit_rows_hold_the_prefix_and_random_tokens_after_it():
    w = lm_eval.Windows.of(stream(41), 4)
    draw = lm_audit.Draw.of(w, SETTINGS, np.random.default_rng(3))
    assert len(draw.positions) == 5 and np.all(np.diff(draw.positions) > 0)
    for row, flat in zip(draw.inputs, draw.positions):
        i, t = w.where(flat)
        assert row[:t + 1].tolist() == w.inputs[i, :t + 1].tolist()


def audited(predict, positions=None, seed=3):
    w = lm_eval.Windows.of(stream(41), 4)
    draw = lm_audit.Draw.of(w, SETTINGS, np.random.default_rng(seed))
    if positions is not None:
        draw = lm_audit.Draw.of(w, SETTINGS, _FixedChoice(positions))
    _, kept = lm_eval.first_pass(predict, w, SETTINGS, draw.positions)
    return lm_audit.check(draw, w, kept, honest(draw.inputs), SETTINGS)


class _FixedChoice:
    """An rng whose draw is the positions given (and whose filler tokens are zeros)."""

    def __init__(self, positions):
        self.positions = np.array(positions)

    def choice(self, n, size, replace):
        return self.positions[:size]

    def integers(self, low, high, size, dtype):
        return np.zeros(size, dtype=dtype)


def look_ahead(inputs):
    """Reads the next token: inputs[i, t+1], and the next window's first for the last position."""
    inputs = np.asarray(inputs)
    nxt = np.concatenate([inputs[:, 1:], np.roll(inputs[:, :1], -1, axis=0)], axis=1)
    out = np.full(inputs.shape + (8,), np.log(0.01 / 7), np.float32)
    rows, cols = np.indices(inputs.shape)
    out[rows, cols, nxt] = np.log(0.99)
    return out


def test_the_audit_passes_an_honest_model_and_records_it():
    record = audited(honest)
    assert record["max_logprob_difference"] == 0 and record["max_sum_error"] < 1e-6 and len(record["positions"]) == 5


def test_the_audit_catches_a_look_ahead_inside_a_window_and_across_windows():
    with pytest.raises(lm_audit.AuditFailed, match=r"^the look-ahead audit: at window \d+, position [0-2] a fresh predictor"):
        audited(look_ahead, positions=[1, 2, 5, 6, 9])
    # the last position of a window reads the next window's first token: caught there too
    with pytest.raises(lm_audit.AuditFailed, match=r"at window \d+, position 3 "):
        audited(look_ahead, positions=[3, 7, 11, 15, 19])


def test_the_audit_refuses_an_unnormalized_fresh_answer():
    w = lm_eval.Windows.of(stream(41), 4)
    draw = lm_audit.Draw.of(w, SETTINGS, np.random.default_rng(3))
    _, kept = lm_eval.first_pass(honest, w, SETTINGS, draw.positions)
    with pytest.raises(lm_audit.AuditFailed, match=r"^the look-ahead audit: a fresh predictor given only the prefix "
                                                   r"gave probabilities that sum to 2\.71828"):
        lm_audit.check(draw, w, kept, honest(draw.inputs) + 1.0, SETTINGS)


@pytest.mark.parametrize("table, said", [
    (None, "tasks.toml [tasks.toy.lm] is missing"),
    ({"window": 4}, "missing 'vocab'"),
    ({**SETTINGS.__dict__, "extra": 1}, "unknown key 'extra'"),
    ({**SETTINGS.__dict__, "window": 0}, "window 0 must be a whole number, 1 or more"),
    ({**SETTINGS.__dict__, "agree_tolerance": 2}, "agree_tolerance 2 must be a number between 0 and 1"),
])
def test_a_task_s_lm_table_is_checked_in_one_line(table, said):
    with pytest.raises(lm_eval.LMRefused, match=said.replace("[", r"\[").replace("]", r"\]")):
        lm_eval.LMSettings.of("toy", table)


def test_verify_holds_a_logged_audit_to_the_task_s_numbers():
    s = stream(41)
    w = lm_eval.Windows.of(s, 4)
    logged = {"windows": [10, 4], "windows_sha256": w.sha256, "audit": audited(honest)}
    assert lm_audit.logged_problem(logged, SETTINGS, 40, w.sha256) is None
    forged = [({**logged, "windows": [5, 8]}, "windows [5, 8], not the task's [10, 4]"),
              ({**logged, "windows_sha256": "0" * 64}, "the windows' sha256 is not that of the eval stream"),
              ({**logged, "audit": {**logged["audit"], "positions": [1]}}, "logs 1 positions, not the task's 5"),
              ({**logged, "audit": {**logged["audit"], "max_logprob_difference": 0.5}},
               "max_logprob_difference 0.5 is not within the task's 0.01"),
              ({"windows": [10, 4]}, "no look-ahead audit logged")]
    for record, said in forged:
        assert said in lm_audit.logged_problem(record, SETTINGS, 40, w.sha256)
