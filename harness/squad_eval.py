"""`dawnbench eval squad DATASET.json PREDICTIONS.json` -- official SQuAD v1.1 scores.

A drop-in for the official ``evaluate-v1.1.py``: same arguments, same JSON on
stdout (``{"exact_match": ..., "f1": ...}``), so existing scripts that parse its
output keep working. Also runs as ``python -m harness.squad_eval``.
"""

from __future__ import annotations

import json
import sys

from harness.arguments import Parser, regular_file
from harness.errors import DawnbenchError, report
from harness.metrics import (
    SQUAD_EXPECTED_VERSION,
    MetricInputError,
    load_squad_dataset,
    load_squad_predictions,
    squad_evaluate,
    squad_version_warning,
)

PROG = "dawnbench eval squad"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    parser = Parser(
        prog=prog,
        description=f"Evaluation for SQuAD v{SQUAD_EXPECTED_VERSION} "
                    "(exact match and F1, in percent).",
    )
    # A FIFO or a device is refused unopened: opening a FIFO blocks until a writer comes
    parser.add_argument("dataset_file", type=regular_file("", "give the SQuAD dataset file, e.g. dev-v1.1.json"),
                        metavar="DATASET.json", help="SQuAD dataset file")
    parser.add_argument("prediction_file", type=regular_file("", "give the predictions file, a JSON object "
                                                                 "{question id: answer text}"),
                        metavar="PREDICTIONS.json",
                        help="predictions file: a JSON object {question id: answer text}")
    try:
        args = parser.parse_args(argv)
    except DawnbenchError as e:
        return report(prog, e)

    try:
        dataset_json = load_squad_dataset(args.dataset_file)
        warning = squad_version_warning(dataset_json)
        if warning:
            print(f"{prog}: warning: {warning}", file=sys.stderr)
        predictions = load_squad_predictions(args.prediction_file)
    except MetricInputError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2

    missing: list[str] = []
    result = squad_evaluate(dataset_json["data"], predictions, missing=missing)
    if missing:
        # One summary line rather than the official script's line per question:
        # an empty predictions file would otherwise print 10,570 lines.
        total = sum(len(p["qas"]) for a in dataset_json["data"] for p in a["paragraphs"])
        print(f"{prog}: warning: {len(missing)} of {total} questions have no "
              f"prediction and score 0 (first: {missing[0]})", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
