"""The leaderboard: entries ranked per task, as DAWNBench ranked them, as a static site or JSON.

    dawnbench leaderboard ENTRIES_DIR --out SITE_DIR [--format html|json]

Per task four tables: training time (the hours of the first log row at or over the threshold),
training cost (those hours x costPerHour), inference latency (ms per item, among inference
entries whose accuracy reaches the threshold) and inference cost per 10,000 items. Ties go to
the earlier timestamp, then to the name. Entries that do not load are reported on stderr, one
line each, and not ranked. The rules in words: docs/LEADERBOARD.md.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

from dawnbench import entries
from dawnbench.entries import Entry, EntryError, number
from harness.tasks import TASKS, Task

PROG = "dawnbench leaderboard"
TABLES = ("train_time", "train_cost", "inference_latency", "inference_cost")
ITEMS = 10_000   # inference cost is quoted per 10,000 items, as DAWNBench did


def text(value) -> str:
    """An entry field as display text (untrusted: the caller escapes it for HTML)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def cost_per_hour(entry: Entry) -> float | None:
    price = number(entry.fields.get("costPerHour"))
    return price if price is not None and price >= 0 else None


def training_row(entry: Entry) -> dict | None:
    """The log row a training entry ranks by: the first at or over the threshold, with finite hours."""
    row = entry.first_at_threshold()
    return row if row is not None and number(row.get("hours")) is not None else None


def training_hours(entry: Entry) -> float | None:
    row = training_row(entry)
    return row["hours"] if row else None


def inference_accuracy(entry: Entry) -> float | None:
    """The accuracy an inference entry reports, in log units (percent, or a fraction for F1)."""
    return number(entry.fields.get(entry.metric_column))


def reaches_threshold(entry: Entry) -> bool:
    accuracy = inference_accuracy(entry)
    return accuracy is not None and accuracy >= entries.log_threshold(entry.task)


def latency_ms(entry: Entry) -> float | None:
    """Mean ms per item: the v1 `latency`, or the mean of a new entry's `latency_ms`."""
    value = number(entry.fields.get("latency"))
    if value is None and isinstance(entry.fields.get("latency_ms"), dict):
        value = number(entry.fields["latency_ms"].get("mean"))
    return value if value is not None and value >= 0 else None


def inference_cost(entry: Entry) -> float | None:
    """USD per 10,000 items: the entry's own per-item `cost`, else costPerHour x latency."""
    per_item = number(entry.fields.get("cost"))
    if per_item is None:
        price, latency = cost_per_hour(entry), latency_ms(entry)
        if price is None or latency is None:
            return None
        per_item = price * latency / 3.6e6
    return per_item * ITEMS if per_item >= 0 else None


def safe_stem(stem: str) -> str:
    """A file name for an entry's pages: only [A-Za-z0-9._-], never starting with a dot; a stem
    that had to change gets a short hash of the original, so two stems never share a page."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", stem)[:120]
    if clean != stem or clean.startswith(".") or not clean:
        clean = "_" + clean.lstrip(".") + "-" + hashlib.sha256(stem.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return clean


def page(entry: Entry) -> str:
    """The entry's page in the site, relative to its root."""
    return f"{entry.task.display_name}/{entry.kind}/{safe_stem(entry.name)}.html"


def _common(entry: Entry) -> dict:
    f = entry.fields
    return {"entry": entry.name, "file": str(entry.path), "page": page(entry),
            "author": text(f.get("author")), "model": text(f.get("model")),
            "hardware": text(f.get("hardware")), "framework": text(f.get("framework")),
            "timestamp": text(f.get("timestamp"))}


def _ordered(rows: list[tuple[float, Entry, dict]]) -> list[dict]:
    # Ties: the earlier timestamp first (a missing one last), then the name.
    def key(item):
        value, entry, _ = item
        stamp = entry.fields.get("timestamp")
        return (value, not isinstance(stamp, str), stamp if isinstance(stamp, str) else "", entry.name)
    ranked = []
    for rank, (_, entry, row) in enumerate(sorted(rows, key=key), start=1):
        ranked.append({"rank": rank, **_common(entry), **row})
    return ranked


def rank_task(task_entries: list[Entry]) -> tuple[dict[str, list[dict]], list[dict]]:
    """The four tables of one task, and the entries that rank in none of them (with the reason)."""
    tables: dict[str, list] = {name: [] for name in TABLES}
    unranked = []
    threshold = entries.log_threshold(task_entries[0].task) if task_entries else None
    for entry in task_entries:
        price = cost_per_hour(entry)
        if entry.fields.get("official_threshold") is False:
            # `dawnbench submit --allow-unofficial`: a smoke test at a lowered threshold, not an entry
            unranked.append({**_common(entry), "kind": entry.kind,
                             "reason": "run at a lowered threshold (official_threshold: false)"})
            continue
        if entry.kind == "train":
            row = training_row(entry)
            if row is None:
                unranked.append({**_common(entry), "kind": entry.kind,
                                 "reason": f"the log never reaches {entry.metric_column} {threshold:g}"})
                continue
            hours = row["hours"]
            base = {"hours": hours, "hms": entries.hms(hours), "epoch": number(row.get("epoch")),
                    "accuracy": row[entry.metric_column], "costPerHour": price,
                    "cost_usd": hours * price if price is not None else None}
            tables["train_time"].append((hours, entry, base))
            if price is not None:
                tables["train_cost"].append((hours * price, entry, base))
        else:
            accuracy, latency = inference_accuracy(entry), latency_ms(entry)
            if accuracy is None or accuracy < threshold or latency is None:
                reason = (f"no {entry.metric_column}" if accuracy is None else
                          f"{entry.metric_column} {accuracy:g} is under the threshold {threshold:g}"
                          if accuracy < threshold else "no latency")
                unranked.append({**_common(entry), "kind": entry.kind, "reason": reason})
                continue
            cost = inference_cost(entry)
            base = {"latency_ms": latency, "accuracy": accuracy, "costPerHour": price,
                    "cost_per_10000_usd": cost}
            tables["inference_latency"].append((latency, entry, base))
            if cost is not None:
                tables["inference_cost"].append((cost, entry, base))
    return {name: _ordered(rows) for name, rows in tables.items()}, unranked


def load_all(root: Path, report=None) -> tuple[list[Entry], list[str]]:
    """Every entry under `root` that loads; the others as one line each (also passed to `report`)."""
    loaded, skipped = [], []
    for path in entries.find(root):
        try:
            loaded.append(entries.load(path))
        except EntryError as e:
            skipped.append(str(e))
        except (OSError, UnicodeError, ValueError) as e:   # e.g. an unreadable file: never a traceback
            skipped.append(f"{path}: {e}")
    if report:
        for line in skipped:
            report(line)
    return loaded, skipped


def rank(loaded: list[Entry]) -> dict:
    """The rankings of every task: {"tasks": {display name: {table: [rows]}}, "unranked": [...]}."""
    result: dict = {"tasks": {}, "unranked": []}
    for task in TASKS.values():
        tables, unranked = rank_task([e for e in loaded if e.task is task])
        result["tasks"][task.display_name] = tables
        result["unranked"] += [{"task": task.display_name, **u} for u in unranked]
    return result


def threshold_label(task: Task) -> str:
    column = entries.METRIC_COLUMNS[task.metric]
    value = entries.log_threshold(task)
    return f"{column} {value:g}" if task.metric == "f1" else f"{column} {value:g}%"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Rank entries per task; build the static site "
                                "(or print the rankings as JSON).")
    p.add_argument("entries", type=Path, help="an entry tree: <Task>/<train|inference>/<name>.json")
    p.add_argument("--out", type=Path, default=None, help="the site's folder (for --format html)")
    p.add_argument("--format", choices=["html", "json"], default="html")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def error(message: str) -> int:
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2

    if not args.entries.exists():
        return error(f"{args.entries} does not exist; give an entry tree (entries/<Task>/<train|inference>/*.json)")
    if args.format == "html" and args.out is None:
        return error("--out SITE_DIR is needed to build the site (or --format json to print the rankings)")
    if not entries.find(args.entries):
        return error(f"no entries under {args.entries}: expected {args.entries}/<"
                     f"{'|'.join(entries.TASK_BY_DIR)}>/<train|inference>/*.json")
    loaded, skipped = load_all(args.entries,
                               report=lambda line: print(f"{PROG}: skipped: {line}", file=sys.stderr))
    rankings = rank(loaded)
    if args.format == "json":
        json.dump(rankings, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from dawnbench import site  # the site draws with matplotlib and imports this module
    try:
        index = site.build(loaded, rankings, args.out)
    except site.SiteError as e:
        return error(str(e))
    ranked = sum(len(rows) for tables in rankings["tasks"].values() for rows in tables.values())
    print(f"site: {index} ({len(loaded)} entries, {ranked} table rows, {len(skipped)} skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
