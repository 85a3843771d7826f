"""How many SQuAD answers the BiDAF references' tokens can produce: before and after the seed's
context splits (common.squad.SEED_SPLIT, allenai/bi-att-flow squad/utils.py process_tokens).

`python -m bench.squad_tokens [FILE.json ...]`. For every (question, answer) pair of each official
SQuAD v1.1 file (every crowd answer of a dev question counts), an answer is unreachable when its
characters [answer_start, answer_start + len(text)) do not begin at a token's start and end at a
token's end (common.squad.aligned): no span of tokens is the answer, so predicting it cannot score
an exact match. Counted with spaCy's blank English tokens alone ("before") and with the seed's
splits on them ("after", what common.squad.read_squad gives a context now).

Without a FILE: the official dev set where this machine has it (harness.datasets' data root:
squad/dev-v1.1.json), else the tests' fixtures, said so in the output: tests/squad_fixture.py's dev
set and its TOKEN_CASES (contexts written for the split's test, not SQuAD's).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import squad


def count(dataset: dict) -> dict:
    contexts, answers = [], []
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            contexts.append(paragraph["context"])
            answers += [(len(contexts) - 1, int(a["answer_start"]), a["text"])
                        for qa in paragraph["qas"] for a in qa["answers"]]
    before = [[(s, e) for _, s, e in toks] for toks in squad.tokenize_many(contexts)]
    after = [[(s, e) for _, s, e in toks] for toks in squad.tokenize_many(contexts, split=True)]
    out = {"contexts": len(contexts), "answers": len(answers), "unreachable_before": 0, "unreachable_after": 0,
           "examples": []}
    for p, start, text in answers:
        lost_before, lost_after = not squad.aligned(before[p], start, text), not squad.aligned(after[p], start, text)
        out["unreachable_before"] += lost_before
        out["unreachable_after"] += lost_after
        if (lost_before or lost_after) and len(out["examples"]) < 8:
            token = contexts[p][max(0, start - 12): start + len(text) + 12].replace("\n", " ")
            out["examples"].append(f"{text!r} in ...{token}... before {'lost' if lost_before else 'ok'}, "
                                   f"after {'lost' if lost_after else 'ok'}")
    return out


def default_sources() -> list[tuple[str, dict]]:
    from harness import datasets

    try:
        dev = Path(datasets.default_data_root()) / datasets.manifest("squad")["dir"] / "dev-v1.1.json"
    except Exception:                                     # no data root, no manifest: the fixtures
        dev = None
    if dev is not None and dev.is_file():
        return [(f"official SQuAD v1.1 dev ({dev})", json.loads(dev.read_text(encoding="utf-8")))]
    from tests import squad_fixture

    return [("NOT SQuAD: the official dev set is not on this machine; tests/squad_fixture.py's dev set",
             squad_fixture.squad_json(2, 2, 3, 1)),
            ("NOT SQuAD: tests/squad_fixture.py TOKEN_CASES (written for the split's test)",
             squad_fixture.token_cases_json())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.squad_tokens", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="official SQuAD v1.1 JSON files")
    args = parser.parse_args(argv)
    sources = ([(str(f), json.loads(f.read_text(encoding="utf-8"))) for f in args.files] if args.files
               else default_sources())
    for name, dataset in sources:
        c = count(dataset)
        print(f"{name}: {c['contexts']} contexts, {c['answers']} (question, answer) pairs; unreachable answers: "
              f"{c['unreachable_before']} with spaCy's tokens alone, {c['unreachable_after']} with the seed's splits")
        for line in c["examples"]:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
