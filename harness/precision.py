"""The training precision a run records: what the reference says it trained in, checked for form.

A switch such as `bf16 = "native"` or `mixed_precision = "auto"` is recorded with the hyperparameters,
but what it chose depends on the machine (a CPU with or without bf16 in hardware, a GPU or none). The
trainer's `Reference.train_precision()` says what it chose, once its `setup` has run; the harness
records that report in the log (`dawnbench_precision`) and in result.json (`precision`), and `submit`
carries its word into the entry. It is the reference's report: the harness cannot see which
arithmetic the reference's code ran, so it checks only that the report is one word of PRECISIONS and
one line of reason (docs/RULES.md, "The trust boundary").
"""
from __future__ import annotations

from harness.errors import UsageError

# fp32 counts float32 with TF32 matrix units (the frameworks' default on recent GPUs); "tf32" is for a
# reference that turns TF32 on everywhere and says so.
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
MAX_REASON = 300
DEFAULT = {"train": "fp32", "reason": "the reference reports no precision (Reference.train_precision): fp32, "
                                      "the frameworks' default"}
# A run that ended before its trainer's setup returned: nothing was chosen yet.
NOT_REPORTED = {"train": None, "reason": "not reported: the run ended before the trainer's setup returned"}


def recorded(reported: object) -> dict:
    """{"train": word, "reason": line} from what the trainer's init answered (None: DEFAULT); a report
    of another form is the reference's mistake, said in one line (the run ends DNC)."""
    if reported is None:
        return dict(DEFAULT)
    word, reason = reported if isinstance(reported, (list, tuple)) and len(reported) == 2 else (None, None)
    if word not in PRECISIONS or not isinstance(reason, str) or not reason.strip() \
            or len(reason) > MAX_REASON or not reason.isprintable():
        shown = repr(reported)
        raise UsageError(f"train_precision() returned {shown[:80] + '...' if len(shown) > 80 else shown}: return "
                         f"(one of {', '.join(PRECISIONS)}, a one-line reason of at most {MAX_REASON} characters), "
                         f"e.g. (\"bf16\", 'bf16 = \"native\": bf16 autocast, the CPU has it')")
    return {"train": word, "reason": reason.strip()}
