"""The rankings: entries ranked per task, as DAWNBench ranked them (the rules in words:
docs/LEADERBOARD.md).

Per task four tables: training time (the hours of the first log row at or over the threshold),
training cost (those hours x costPerHour), inference latency (ms per item, among inference entries
whose accuracy reaches the threshold) and inference cost per 10,000 items. Ties go to the earlier
timestamp, then to the name. Only an entry that `dawnbench validate` accepts is ranked, at the level
asked (the leaderboard's default: v1, so every published DAWNBench v1 entry ranks, read as v1 read
it, its quirks listed as warnings): any other is listed as invalid with validate's first problem
line, and is never read past that.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from dawnbench import entries, validate
from dawnbench.entries import Entry, number
from dawnbench.reproduction import NOT_TRIED
from harness.tasks import TASKS, Task

TABLES = ("train_time", "train_cost", "inference_latency", "inference_cost")


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
            "author": entries.text(f.get("author")), "model": entries.text(f.get("model")),
            "hardware": entries.text(f.get("hardware")), "framework": entries.text(f.get("framework")),
            "timestamp": entries.text(f.get("timestamp"))}


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


def rank_task(task_entries: list[Entry], verification: dict[str, str] | None = None,
              reproduction: dict[str, str] | None = None) -> tuple[dict[str, list[dict]], list[dict]]:
    """The four tables of one task, and the entries that rank in none of them (with the reason).
    Valid entries all rank; the reasons are a second line of defence for entries built in code.
    Training rows carry their `verification` status ({entry path: status}, dawnbench.verification)
    and their `reproduction` ({entry path: words}, dawnbench.reproduction; "not tried" when absent)."""
    verification = verification or {}
    reproduction = reproduction or {}
    tables: dict[str, list] = {name: [] for name in TABLES}
    unranked = []
    threshold = entries.log_threshold(task_entries[0].task) if task_entries else None
    for entry in task_entries:
        price = entries.cost_per_hour(entry)
        if entry.fields.get("official_threshold") is False:
            # `dawnbench submit --allow-unofficial`: a smoke test at a lowered threshold, not an entry
            unranked.append({**_common(entry), "kind": entry.kind,
                             "reason": "run at a lowered threshold (official_threshold: false)"})
            continue
        if entry.fields.get("official") is False:
            reasons = entry.fields.get("unofficial_reasons")
            why = "; ".join(r for r in reasons if isinstance(r, str)) if isinstance(reasons, list) else ""
            unranked.append({**_common(entry), "kind": entry.kind,
                             "reason": f"not an official run (official: false){': ' + why if why else ''}"})
            continue
        if entry.kind == "train":
            row = entries.training_row(entry)
            if row is None:
                unranked.append({**_common(entry), "kind": entry.kind,
                                 "reason": f"the log never reaches {entry.metric_column} {threshold:g}"})
                continue
            hours = row["hours"]
            base = {"hours": hours, "hms": entries.hms(hours), "epoch": number(row.get("epoch")),
                    "accuracy": row[entry.metric_column], "costPerHour": price,
                    "cost_usd": hours * price if price is not None else None,
                    "verification": verification.get(str(entry.path), "not checked"),
                    "reproduction": reproduction.get(str(entry.path), NOT_TRIED)}
            tables["train_time"].append((hours, entry, base))
            if price is not None:
                tables["train_cost"].append((hours * price, entry, base))
        else:
            accuracy, latency = entries.inference_accuracy(entry), entries.latency_ms(entry)
            if accuracy is None or accuracy < threshold or latency is None:
                reason = (f"no {entry.metric_column}" if accuracy is None else
                          f"{entry.metric_column} {accuracy:g} is under the threshold {threshold:g}"
                          if accuracy < threshold else "no latency")
                unranked.append({**_common(entry), "kind": entry.kind, "reason": reason})
                continue
            cost = entries.inference_cost(entry)
            base = {"latency_ms": latency, "accuracy": accuracy, "costPerHour": price,
                    "cost_per_10000_usd": cost}
            tables["inference_latency"].append((latency, entry, base))
            if cost is not None:
                tables["inference_cost"].append((cost, entry, base))
    return {name: _ordered(rows) for name, rows in tables.items()}, unranked


def load_all(root: Path, report=None, level: str = "v1", warn=None) -> tuple[list[Entry], list[dict]]:
    """Every entry under `root` that `dawnbench validate` accepts at `level`, read once through the
    safe reader (its warnings in entry.notes, each also passed to `warn`); the others as {"task",
    "kind", "entry", "file", "reason"}, the reason validate's first problem line (also passed to
    `report`)."""
    root = Path(root)
    loaded, invalid = [], []
    for path in entries.find(root):
        entry, problems = validate.load_entry(path, root if root.is_dir() else None, level)
        if entry is not None:
            loaded.append(entry)
            for note in entry.notes if warn else ():
                warn(note)
            continue
        invalid.append({"task": path.parent.parent.name, "kind": path.parent.name, "entry": path.stem,
                        "file": str(path), "reason": str(problems[0])})
        if report:
            report(invalid[-1]["reason"])
    return loaded, invalid


def rank(loaded: list[Entry], invalid: list[dict] = (), verification: dict[str, str] | None = None,
         reproduction: dict[str, str] | None = None) -> dict:
    """The rankings of every task: {"tasks": {display name: {table: [rows]}}, "unranked": [...],
    "invalid": [...], "warnings": [...]} (`invalid` as load_all lists them; `warnings` the ranked
    entries' v1 quirks, one line each; `verification` as dawnbench.verification.statuses gives it, and
    `reproduction` as dawnbench.reproduction.statuses does, shown on training rows)."""
    result: dict = {"tasks": {}, "unranked": [], "invalid": list(invalid),
                    "warnings": [{"task": e.task.display_name, "kind": e.kind, "entry": e.name, "file": str(e.path),
                                  "warning": note} for e in loaded for note in e.notes]}
    for task in TASKS.values():
        tables, unranked = rank_task([e for e in loaded if e.task is task], verification, reproduction)
        result["tasks"][task.display_name] = tables
        result["unranked"] += [{"task": task.display_name, **u} for u in unranked]
    return result


def threshold_label(task: Task) -> str:
    column = entries.METRIC_COLUMNS[task.metric]
    value = entries.log_threshold(task)
    return f"{column} {value:g}" if task.metric == "f1" else f"{column} {value:g}%"
