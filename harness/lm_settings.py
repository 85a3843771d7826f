"""A language-model task's own numbers (tasks.toml's [tasks.<name>.lm]), read without numpy: the task
table is loaded wherever harness.tasks is, the launcher's bare interpreter included (harness.lm_eval, which
needs numpy, does the rest)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DawnbenchError


class LMRefused(DawnbenchError):
    """The predictor's log-probabilities break the contract: the run is DNC, with the reason in one line."""


@dataclass(frozen=True)
class LMSettings:
    """A language-model task's own numbers (tasks.toml's [tasks.<name>.lm])."""
    window: int                 # T: tokens per window the predictor gets
    vocab: int                  # V: token ids are 0 .. V-1 (256 for bytes)
    audit_positions: int        # positions the look-ahead audit draws per eval
    sum_tolerance: float        # |sum of the probabilities - 1| allowed at every position
    agree_tolerance: float      # max |log p - log p'| (nats, over the vocabulary) between the passes
    # What predict() returns (docs/RULES.md, "Language-model tasks"): "full", the distribution at every
    # position [N, T, V]; "next", the log-probability of the next token only [N, T + 1 -> N, T], the audit
    # asking next_distribution() for the drawn positions' distributions (a large vocabulary: [N, T, V]
    # over FineWeb's 10.5M scored tokens at V = 50257 would be 2 TB).
    reply: str = "full"
    scored_tokens: int | None = None    # the stream's first scored tokens, None: all (the speedrun: 10,485,760)

    KEYS = ("window", "vocab", "audit_positions", "sum_tolerance", "agree_tolerance")
    OPTIONAL = ("reply", "scored_tokens")
    REPLIES = ("full", "next")

    @classmethod
    def of(cls, task: str, table: object) -> LMSettings:
        where = f"tasks.toml [tasks.{task}.lm]"
        if not isinstance(table, dict):
            raise LMRefused(f"{where} is missing: a language-model task names {', '.join(cls.KEYS)}")
        unknown = sorted(set(table) - set(cls.KEYS) - set(cls.OPTIONAL))
        missing = [k for k in cls.KEYS if k not in table]
        if unknown or missing:
            raise LMRefused(f"{where}: " + (f"unknown key {unknown[0]!r}" if unknown else f"missing {missing[0]!r}")
                            + f"; the keys are {', '.join(cls.KEYS)} (and optionally {', '.join(cls.OPTIONAL)})")
        if table.get("reply", "full") not in cls.REPLIES:
            raise LMRefused(f"{where}: reply {table['reply']!r} must be one of {', '.join(map(repr, cls.REPLIES))}")
        for key in ("window", "vocab", "audit_positions", "scored_tokens"):
            value = 1 if key == "scored_tokens" and table.get(key) is None else table[key]     # optional
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LMRefused(f"{where}: {key} {value!r} must be a whole number, 1 or more")
        for key in ("sum_tolerance", "agree_tolerance"):
            value = table[key]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1:
                raise LMRefused(f"{where}: {key} {value!r} must be a number between 0 and 1")
        return cls(**{k: table[k] for k in cls.KEYS + cls.OPTIONAL if k in table})
