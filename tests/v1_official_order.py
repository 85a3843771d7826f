"""The official DAWNBench v1 order of the published entries, derived from the entries alone.

The entries: tests/data/dawn-bench-entries/, the 187 JSON and TSV files of
stanford-futuredata/dawn-bench-entries at fb27b827bd83 (2020-03-26), copied byte for byte, tree kept.

Written apart from dawnbench/ on purpose (it imports nothing of it): it applies the rules as the
README of stanford-futuredata/dawn-bench-entries states them, so the leaderboard's order can be
checked against it.

- training time: the `hours` of the first TSV row (in file order) whose metric is at or over the
  threshold: CIFAR10 top1Accuracy 94, ImageNet top5Accuracy 93, SQuAD f1Score 0.75 (docs/RULES.md);
  columns are found by name (v1's own test reads them with pandas);
- training cost: those hours x costPerHour, for entries that give a price;
- inference latency: `latency` (ms per item), for entries whose metric field reaches the threshold
  as v1's test compared it (the value as written, >= the threshold);
- inference cost: `cost` (USD per item) x 10,000, for entries that give one.
Ties: the earlier timestamp (read with v1's own `%Y-%m-%d`), then the file's stem.

`python tests/v1_official_order.py` writes the expected result the test compares against:
tests/data/dawn-bench-entries-expected.json, {task: {table: [[stem, value], ...]}}.
"""
from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENTRIES = HERE / "data" / "dawn-bench-entries"
EXPECTED = HERE / "data" / "dawn-bench-entries-expected.json"
METRIC = {"CIFAR10": ("top1Accuracy", 94.0), "ImageNet": ("top5Accuracy", 93.0), "SQuAD": ("f1Score", 0.75)}
TABLES = ("train_time", "train_cost", "inference_latency", "inference_cost")


def _price(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _hours_to_threshold(tsv: Path, column: str, threshold: float) -> float | None:
    with open(tsv, newline="", encoding="utf-8-sig") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
            if row.get(column) and float(row[column]) >= threshold:
                return float(row["hours"])
    return None


def derive(root: Path = ENTRIES) -> dict[str, dict[str, list[list]]]:
    result = {}
    for task, (column, threshold) in METRIC.items():
        tables: dict[str, list[tuple]] = {name: [] for name in TABLES}
        for kind in ("train", "inference"):
            for path in sorted((root / task / kind).glob("*.json")):
                fields = json.loads(path.read_text(encoding="utf-8-sig"))
                tie = (datetime.strptime(fields["timestamp"], "%Y-%m-%d").date().isoformat(), path.stem)
                if kind == "train":
                    hours = _hours_to_threshold(path.with_suffix(".tsv"), column, threshold)
                    if hours is None:
                        continue
                    tables["train_time"].append((hours, tie))
                    price = _price(fields.get("costPerHour"))
                    if price is not None:
                        tables["train_cost"].append((hours * price, tie))
                elif fields[column] >= threshold:
                    tables["inference_latency"].append((float(fields["latency"]), tie))
                    cost = _price(fields.get("cost"))
                    if cost is not None:
                        tables["inference_cost"].append((cost * 10_000, tie))
        result[task] = {name: [[tie[1], value] for value, tie in sorted(rows)] for name, rows in tables.items()}
    return result


def main() -> int:
    EXPECTED.write_text(json.dumps(derive(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {EXPECTED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
