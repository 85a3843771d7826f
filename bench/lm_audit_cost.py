"""What fineweb-gpt2's look-ahead audit costs the harness (issue 50, docs/RULES.md "Language-model tasks"):
its reply "next" audit (K = audit_positions rows, V = 50257) and the first pass's checks over the
10,485,760 scored tokens, timed on a random stream with a stand-in predictor (a fixed log-distribution), so
the figures are the harness's side alone: the model's is the reference's, measured where a GPU is.

`PYTHONPATH=. python -m bench.lm_audit_cost`
"""
from __future__ import annotations

import time

import numpy as np

from harness import lm_audit, lm_eval
from harness.tasks import get_task


def main() -> None:
    s = get_task("fineweb-gpt2").settings
    rng = np.random.default_rng(0)
    stream = lm_eval.TokenStream(rng.integers(0, s.vocab, size=s.scored_tokens + 1).astype(np.uint16))
    windows = lm_eval.Windows.of(stream, s.window)
    draw = lm_audit.Draw.of(windows, s)
    logits = rng.standard_normal(s.vocab)
    base = (logits - np.log(np.exp(logits).sum())).astype(np.float32)
    calls = []

    def ask_next(rows, lengths):
        calls.append(len(rows))
        return np.broadcast_to(base, (len(rows), s.vocab)).copy()
    began = time.perf_counter()
    first, kept = lm_eval.first_pass(lambda c: base[np.asarray(c)[:, 1:]], windows, s, draw.positions)
    first_s = time.perf_counter() - began
    began = time.perf_counter()
    lm_audit.audit_next(ask_next, draw, windows, kept, s)
    audit_s = time.perf_counter() - began
    print(f"first pass: {len(first):,} tokens checked in {first_s:.2f} s; audit: K = {len(draw.positions)} rows "
          f"of {s.window} ({len(draw.positions) * s.window / len(first):.0%} of the first pass's tokens), "
          f"{len(draw.positions) * s.vocab * 4 / 2**20:.0f} MiB of distributions in {len(calls)} calls, "
          f"checked in {audit_s:.2f} s")


if __name__ == "__main__":
    main()
