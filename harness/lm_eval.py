"""The language-model eval's first pass: the harness's validation stream, cut into windows by the harness,
and the log-probability of each next token, which the harness keeps and scores (issue 50).

    tokens     the validation stream (a utf8-text file's bytes), read by the harness after its sha256
    windows    chunk i = tokens[i*T : i*T + T + 1]: the predictor gets inputs[i] = chunk[:T], the harness
               keeps targets[i] = chunk[1:]; every token but the first is scored once, in stream order;
               the last window's positions past the stream are padded with 0 and not scored
    predict    the task's `reply` (harness.lm_settings) says which contract:
               "full"  inputs [n, T] (int64 token ids) -> log-probabilities [n, T, V]: row i, position t is
                       the distribution of the token that follows inputs[i, :t+1]
               "next"  inputs [n, T + 1] (chunk i whole) -> float [n, T]: entry [i, t] is
                       log p(inputs[i, t+1] | inputs[i, :t+1]), the next token's alone (a large vocabulary:
                       the full reply over FineWeb's 10.5M scored tokens at V = 50257 would be 2 TB)

The stream, the windows and the positions scored are the harness's (the stream's sha256 is checked, the
windows' is logged), never the reference's. A predictor could read the next token from its input (it is
inputs[i, t+1], or inputs[i+1, 0]): harness.lm_audit asks a fresh predictor for the prefix alone.
numpy only.
"""
from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.lm_settings import LMRefused, LMSettings

RULES = 'docs/RULES.md, "Language-model tasks"'
REPLY_BYTES = 16 << 20      # one predict() reply's log-probabilities: the windows per call follow from it




class TokenStream:
    """The validation stream as the harness read it (a utf8-text file's bytes as token ids 0..255). Its
    length is the positions scored: every token but the first is the next token of the one before it."""

    def __init__(self, tokens: np.ndarray):
        self.tokens = np.ascontiguousarray(tokens)

    @functools.cached_property
    def sha256(self) -> str:
        """Of the tokens as they are held (bytes: uint8; FineWeb's GPT-2 ids: uint16), for the log."""
        return hashlib.sha256(self.tokens.tobytes()).hexdigest()

    def __len__(self) -> int:
        return max(len(self.tokens) - 1, 0)

    def first(self, scored: int | None) -> TokenStream:
        """The stream cut to its first `scored` next tokens (a task's `scored_tokens`; None or a stream
        shorter than that: the stream whole, whose eval set is then not the task's and the run unofficial)."""
        if scored is None or len(self) <= scored:
            return self
        return TokenStream(self.tokens[:scored + 1])

    @classmethod
    def of_text_file(cls, path) -> TokenStream:
        with open(path, "rb") as f:
            return cls(np.frombuffer(f.read(), dtype=np.uint8))


@dataclass(frozen=True)
class Windows:
    """The stream cut for the predictor: inputs [N, T] int64, the kept next tokens targets [N, T], and
    how many positions (in row-major order, from the first) are scored."""
    inputs: np.ndarray
    targets: np.ndarray
    scored: int

    @classmethod
    def of(cls, stream: TokenStream, window: int) -> Windows:
        tokens, scored = stream.tokens, len(stream)
        count = max(math.ceil(scored / window), 1)
        padded = np.zeros(count * window + 1, dtype=np.int64)
        padded[:len(tokens)] = tokens
        return cls(padded[:-1].reshape(count, window), padded[1:].reshape(count, window), scored)

    @property
    def sha256(self) -> str:
        """What the predictor was given, for the log: the windows' bytes (int64, row-major)."""
        return hashlib.sha256(self.inputs.tobytes()).hexdigest()

    @property
    def chunks(self) -> np.ndarray:
        """What a predictor of reply "next" gets: chunk i = stream[i*T : i*T + T + 1], [N, T + 1] int64."""
        return np.concatenate([self.inputs, self.targets[:, -1:]], axis=1)

    def where(self, flat: int) -> tuple[int, int]:
        """(window, position) of a scored position counted in row-major order."""
        return divmod(int(flat), self.inputs.shape[1])


def checked(reply: object, shape: tuple[int, ...], who: str, named: str = "(windows, T, V)") -> np.ndarray:
    """The predictor's log-probabilities (float32 or float64), or LMRefused naming what is wrong: anything but a
    float array of `shape` (`named` says its axes)."""
    array = np.asarray(reply) if reply is not None else None
    if array is None or array.dtype.kind != "f" or array.shape != tuple(shape):
        got = "nothing" if array is None else f"{array.dtype} {tuple(array.shape)}"
        raise LMRefused(f"{who} returned {got}: a language-model predictor returns float log-probabilities of shape "
                        f"{named} = {tuple(shape)} for the {'rows' if 'K' in named else 'windows'} it was given "
                        f"({RULES})")
    return array if array.dtype.itemsize >= 4 else array.astype(np.float32)     # float32 sums 256 terms to ~1e-7


def probability_sums(logp: np.ndarray) -> np.ndarray:
    """sum over the vocabulary of exp(log p), per position (float64); inf where it overflows, NaN where a
    value is NaN or +inf: never taken as 1."""
    with np.errstate(over="ignore", invalid="ignore"):
        top = logp.max(axis=-1, keepdims=True)
        scaled = np.exp(logp - top).sum(axis=-1, dtype=np.float64)
        return np.exp(top[..., 0].astype(np.float64)) * scaled


def check_distributions(logp: np.ndarray, valid: np.ndarray, tolerance: float, who: str, where) -> None:
    """Every scored position's log-probabilities sum to one in probability within `tolerance` (a NaN or
    +inf anywhere makes the sum no number: refused too; -inf is a probability of 0); else LMRefused at the
    first that does not. `where(k)` names the k-th position. One pass over the values: ~100M of them per eval
    of the KJV tier."""
    with np.errstate(invalid="ignore"):
        sums = probability_sums(logp)
        bad = np.flatnonzero(valid & ~(np.abs(sums - 1.0) <= tolerance))
    if len(bad) and not np.isfinite(logp[bad[0]]).all() and np.isnan(sums[bad[0]]):
        raise LMRefused(f"{who} gave a log-probability that is not a number at {where(bad[0])}: give every token a "
                        f"log-probability below +inf (a log_softmax does) ({RULES})")
    if len(bad):
        raise LMRefused(f"{who} gave probabilities that sum to {sums[bad[0]]:.6g}, not 1 within {tolerance:g}, at "
                        f"{where(bad[0])}: return normalized log-probabilities (a log_softmax over the vocabulary) "
                        f"({RULES})")


def first_pass(ask: Callable[[np.ndarray], object], windows: Windows, settings: LMSettings,
               keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every window through the predictor (`ask(inputs)` returns its reply's array), a few at a time: the
    log-probability of each scored next token (float32 [scored], stream order), every scored position's
    distribution checked, and the full distributions at the scored positions `keep` (row-major indices,
    the audit's: float32 [len(keep), V]), which the predictor never learns. Under reply "next" the kept
    entries are the first pass's own log-probabilities there (float32 [len(keep)]): first_pass_next."""
    if settings.reply == "next":
        return first_pass_next(ask, windows, settings, keep)
    count, window = windows.inputs.shape
    per = max(1, REPLY_BYTES // (window * settings.vocab * 4))
    target_logp = np.empty(windows.scored, dtype=np.float32)
    kept = np.empty((len(keep), settings.vocab), dtype=np.float32)
    for start in range(0, count, per):
        stop = min(start + per, count)
        logp = checked(ask(windows.inputs[start:stop]), (stop - start, window, settings.vocab), "predict()")
        flat = logp.reshape(-1, settings.vocab)
        first = start * window
        valid = np.arange(first, first + len(flat)) < windows.scored
        check_distributions(flat, valid, settings.sum_tolerance, "predict()",
                            lambda k, first=first: "window {}, position {}".format(*windows.where(first + k)))
        n = int(valid.sum())
        targets = windows.targets[start:stop].reshape(-1)[:n]
        target_logp[first:first + n] = flat[np.arange(n), targets]
        zero = np.flatnonzero(~np.isfinite(target_logp[first:first + n]))
        if len(zero):
            raise LMRefused("predict() gave the next token probability 0 (log-probability -inf) at window {}, position "
                            "{}: give every token some probability, as a log_softmax does ({})".format(
                                *windows.where(first + zero[0]), RULES))
        inside = (keep >= first) & (keep < first + n)
        kept[inside] = flat[keep[inside] - first]
    return target_logp, kept


def first_pass_next(ask: Callable[[np.ndarray], object], windows: Windows, settings: LMSettings,
                    keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reply "next": every chunk [T + 1] through the predictor, a few at a time; its entry [i, t] is the
    log-probability of the next token, which must be a number at or under 0 (within sum_tolerance: a
    probability of 1 in float32) at every scored position. Returns the scored tokens' log-probabilities and
    those at `keep`, which the audit holds the fresh predictor's distributions to."""
    count, window = windows.inputs.shape
    per = max(1, REPLY_BYTES // ((window + 1) * 8))     # the request's int64 tokens: ~16 MB a call
    target_logp = np.empty(windows.scored, dtype=np.float32)
    chunks = windows.chunks
    for start in range(0, count, per):
        stop = min(start + per, count)
        logp = checked(ask(chunks[start:stop]), (stop - start, window), "predict()", "(windows, T)")
        first = start * window
        n = min(windows.scored - first, logp.size)
        flat = logp.reshape(-1)[:n]
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~(flat <= settings.sum_tolerance) | ~np.isfinite(flat))
        if len(bad):
            raise LMRefused("predict() gave the next token the log-probability {:.6g} at window {}, position {}: under "
                            "reply \"next\" entry [i, t] is log p(inputs[i, t+1] | inputs[i, :t+1]), a number at or "
                            "under 0 (a probability above 0 and at most 1) ({})".format(
                                float(flat[bad[0]]), *windows.where(first + bad[0]), RULES))
        target_logp[first:first + n] = flat
    return target_logp, target_logp[keep].copy()
