"""The look-ahead audit of a language-model eval (issue 50): what keeps the predictor from reading the
next token out of its input.

The first pass hands the predictor whole windows, so the token it is scored on at position t is in front
of it (inputs[i, t+1], or the next window's first token). Before the first pass the harness draws
positions among those scored, from the operating system's entropy (`secrets`: nothing the reference or
an earlier eval could know), and keeps the first pass's full distribution there. Then a FRESH predictor
(a new worker, its own scratch, loaded from the same snapshot: nothing of the first pass reaches it) gets
one row per drawn position: the stream's prefix up to and including that position, the rest of the row
random tokens. Its distribution at the position must be a distribution (sum to one in probability) and
the first pass's (max |log p - log p'| over the vocabulary within the task's tolerance, log-probabilities
under FLOOR taken as FLOOR). Under the task's reply "next" the first pass gave the next token's
log-probability alone: the fresh predictor's next_distribution(rows, lengths) gives the distribution after
rows[j, :lengths[j]], which must sum to one and give the true next token the first pass's value within
the tolerance (audit_next). A predictor that looked ahead, kept state from the first pass, or answers
the audit otherwise than the eval fails it: the run is DNC with the reason in one line.

What it cannot see: a predictor that looks ahead at a fraction f of the positions passes k drawn
positions with probability (1 - f)^k (docs/RULES.md, "Language-model tasks"). numpy only.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from harness.lm_eval import (
    REPLY_BYTES,
    RULES,
    LMRefused,
    LMSettings,
    Windows,
    check_distributions,
    checked,
    probability_sums,
)

FLOOR = -20.0       # log-probabilities under e^-20 (2e-9) compare as equal: float32's noise there is no signal


class AuditFailed(LMRefused):
    """The fresh predictor's distribution is not the first pass's, or not a distribution: the run is DNC."""


@dataclass(frozen=True)
class Draw:
    """The positions one eval audits (row-major indices among the scored ones, sorted) and the rows the
    fresh predictor gets for them."""
    positions: np.ndarray
    inputs: np.ndarray

    @classmethod
    def of(cls, windows: Windows, settings: LMSettings, rng: np.random.Generator | None = None) -> Draw:
        """`audit_positions` positions drawn without replacement; row j holds the prefix of position j's
        window through that position, then random tokens (what follows is never the stream's)."""
        rng = rng or np.random.default_rng(secrets.randbits(128))
        count = min(settings.audit_positions, windows.scored)
        positions = np.sort(rng.choice(windows.scored, size=count, replace=False)).astype(np.int64)
        inputs = rng.integers(0, settings.vocab, size=(count, windows.inputs.shape[1]), dtype=np.int64)
        for j, flat in enumerate(positions):
            i, t = windows.where(flat)
            inputs[j, :t + 1] = windows.inputs[i, :t + 1]
        return cls(positions, inputs)

    def lengths(self, windows: Windows) -> np.ndarray:
        """Reply "next": how many tokens of each row are the stream's prefix (1..T), int64 [K]."""
        return np.array([windows.where(p)[1] + 1 for p in self.positions], dtype=np.int64)


def _disagrees(windows: Windows, position: int, fresh: float, first: float, difference: float, settings) -> AuditFailed:
    i, t = windows.where(position)
    return AuditFailed(
        f"the look-ahead audit: at window {i}, position {t} a fresh predictor given only the tokens up to it gives the "
        f"next token a log-probability of {fresh:.4f}, the first pass {first:.4f} (the distributions differ by "
        f"{difference:.4g} nats, over the tolerance of {settings.agree_tolerance:g}): the first pass's answer there "
        f"depends on more than the prefix, such as the tokens after it ({RULES})")


def audit_next(ask_next, draw: Draw, windows: Windows, first: np.ndarray, settings: LMSettings) -> dict:
    """Reply "next": the fresh predictor's `ask_next(rows, lengths)` (its next_distribution) for the drawn rows,
    a few at a time (~16 MB of reply a call), each a distribution over the vocabulary that gives the true next
    token the first pass's log-probability `first[j]` within agree_tolerance (both under FLOOR taken as
    FLOOR); AuditFailed at the first that does not. Returns the audit's record for the log, as check()."""
    count, vocab = len(draw.positions), settings.vocab
    lengths = draw.lengths(windows)
    per = max(1, REPLY_BYTES // (vocab * 4))
    sums_error, worst = 0.0, 0.0
    for start in range(0, count, per):
        stop = min(start + per, count)
        logp = checked(ask_next(draw.inputs[start:stop], lengths[start:stop]), (stop - start, vocab),
                       "the audit's next_distribution()", "(K rows, V)")

        def where(j, start=start) -> str:
            return "window {}, position {}".format(*windows.where(draw.positions[start + j]))
        try:
            check_distributions(logp, np.ones(stop - start, dtype=bool), settings.sum_tolerance,
                                "a fresh predictor given only the prefix", where)
        except LMRefused as e:
            raise AuditFailed(f"the look-ahead audit: {e}") from None
        targets = np.array([windows.targets[windows.where(p)] for p in draw.positions[start:stop]], dtype=np.int64)
        fresh = logp[np.arange(stop - start), targets]
        differences = np.abs(np.maximum(fresh, FLOOR) - np.maximum(first[start:stop], FLOOR))
        j = int(np.argmax(differences))
        if differences[j] > settings.agree_tolerance:
            raise _disagrees(windows, draw.positions[start + j], fresh[j], first[start + j], differences[j], settings)
        sums_error = max(sums_error, float(np.abs(probability_sums(logp) - 1.0).max()))
        worst = max(worst, float(differences[j]))
    return {"positions": [int(p) for p in draw.positions], "max_sum_error": round(sums_error, 9),
            "max_logprob_difference": round(worst, 9),
            "sum_tolerance": settings.sum_tolerance, "agree_tolerance": settings.agree_tolerance}


def check(draw: Draw, windows: Windows, first: np.ndarray, reply: object, settings: LMSettings) -> dict:
    """The fresh predictor's reply to the audit's rows against the first pass's distributions `first`
    ([positions, V], as lm_eval.first_pass kept them); AuditFailed at the first position that fails. Returns
    the audit's record for the log."""
    count, window = draw.inputs.shape
    logp = checked(reply, (count, window, settings.vocab), "the audit's predict()")
    at = logp[np.arange(count), [windows.where(p)[1] for p in draw.positions]]

    def where(j) -> str:
        return "window {}, position {}".format(*windows.where(draw.positions[j]))
    try:
        check_distributions(at, np.ones(count, dtype=bool), settings.sum_tolerance,
                            "a fresh predictor given only the prefix", where)
    except LMRefused as e:
        raise AuditFailed(f"the look-ahead audit: {e}") from None
    differences = np.abs(np.maximum(at, FLOOR) - np.maximum(first, FLOOR)).max(axis=-1)
    worst = int(np.argmax(differences)) if count else 0
    if count and differences[worst] > settings.agree_tolerance:
        target = int(windows.targets[windows.where(draw.positions[worst])])
        raise _disagrees(windows, draw.positions[worst], at[worst, target], first[worst, target], differences[worst],
                         settings)
    return {"positions": [int(p) for p in draw.positions],
            "max_sum_error": round(float(np.abs(probability_sums(at) - 1.0).max()) if count else 0.0, 9),
            "max_logprob_difference": round(float(differences.max()) if count else 0.0, 9),
            "sum_tolerance": settings.sum_tolerance, "agree_tolerance": settings.agree_tolerance}



def logged_problem(record: object, settings: LMSettings, scored: int, windows_sha256: str | None = None) -> str | None:
    """What is wrong with an eval's logged `lm` record (eval_stop's), held to the task's numbers, never the
    log's: the windows (their shape, and their sha256 where the stream is at hand), the positions audited
    and the audit's figures within the task's tolerances; None when nothing is. For `verify`."""
    if not isinstance(record, dict) or not isinstance(record.get("audit"), dict):
        return "no look-ahead audit logged (eval_stop's lm.audit)"
    audit, window = record["audit"], settings.window
    count = max(-(-scored // window), 1)
    if record.get("windows") != [count, window]:
        return f"windows {record.get('windows')!r}, not the task's [{count}, {window}]"
    if windows_sha256 is not None and record.get("windows_sha256") != windows_sha256:
        return "the windows' sha256 is not that of the eval stream cut as the task says"
    positions = audit.get("positions")
    if (not isinstance(positions, list) or len(positions) != min(settings.audit_positions, scored)
            or not all(isinstance(p, int) and 0 <= p < scored for p in positions)):
        return f"the audit logs {len(positions) if isinstance(positions, list) else 'no'} positions, not the task's " \
               f"{min(settings.audit_positions, scored)} scored ones"
    for key, bound in (("max_sum_error", settings.sum_tolerance), ("max_logprob_difference", settings.agree_tolerance)):
        value = audit.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= bound:
            return f"the audit's {key} {value!r} is not within the task's {bound:g}"
    return None
