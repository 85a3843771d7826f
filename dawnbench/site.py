"""The leaderboard's static site: an index with each task's four ranked tables, its invalid entries
and analysis plots, and a page per entry (its accuracy-vs-time curve, hardware, framework, code,
commit, cost,
its verification and its reproduction).

The pages are rendered from the jinja2 templates in dawnbench/templates/ with autoescaping, so every
string from an entry is escaped wherever it lands (text or attribute); only http(s) URLs become
links (the `http_url` test), and file names come from `ranking.safe_stem`, never from the entry. No
script, no network resource; a Content-Security-Policy forbids both. The site is built in a
temporary folder next to the target and swapped in whole.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from dawnbench import analyze, entries, ranking
from dawnbench.entries import Entry, number
from dawnbench.reproduction import NOT_TRIED
from dawnbench.verification import MODEL_UNVERIFIED
from harness import load, outputs, safe_read
from harness.errors import DawnbenchError
from harness.tasks import RULES_VERSION

MARKER = ".dawnbench-site"     # says a folder is a site this module built, so it may replace it
CSP = "default-src 'none'; img-src 'self'; style-src 'self'"
TABLE_TITLES = {"train_time": "Training time", "train_cost": "Training cost (prices table)",
                "train_cost_given": "Training cost (submitter-given price)",
                "inference_latency": "Inference latency",
                "inference_cost": "Inference cost (10,000 items, prices table)",
                "inference_cost_given": "Inference cost (10,000 items, submitter-given price)",
                "inference_latency_unverified_model": "Inference latency (model provenance unverified)"}
MAIN_TABLES = ("train_time", "train_cost", "inference_latency", "inference_cost")   # shown even when empty


class SiteError(DawnbenchError):
    """The site cannot be written where asked; the message says why and what to do."""


def usd(value: float | None) -> str:
    """Dollars: cents above $1, else two significant digits ($0.0012)."""
    if value is None:
        return ""
    if value >= 1 or value == 0:
        return f"${value:,.2f}"
    digits = 2
    while value < 10 ** -(digits - 1) and digits < 8:
        digits += 1
    return f"${value:.{digits}f}"


def ms(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.2f} ms" if value >= 1 else f"{value:.3g} ms"


def is_http_url(url) -> bool:
    """Whether a code URL may be a link: http(s), a host, no whitespace (javascript:, data:,
    relative and protocol-relative URLs stay text)."""
    url = entries.text(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc) and not any(c.isspace() for c in url)


@cache
def templates():
    """The pages' templates. jinja2 is imported here, on first use: dawnbench.cli builds every
    subcommand's options (leaderboard's among them) in environments without it."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.PackageLoader("dawnbench", "templates"),
                             autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.tests["http_url"] = is_http_url
    return env


def link(url) -> str:
    """An entry's code URL as the pages show it: a link when `is_http_url`, else text."""
    return str(templates().get_template("macros.html").module.code_link(entries.text(url)))


def commit(fields: dict) -> str:
    for key in ("commitHash", "git_commit"):
        if fields.get(key):
            return entries.text(fields[key])
    return ""


def price_source(fields: dict) -> str | None:
    """Where the entry's price came from: the prices table's record of the run, or what `dawnbench
    submit` added after the run (--instance or --cost-per-hour, and when); None for no record."""
    price, added = fields.get("price"), fields.get("price_added")
    said = []
    if isinstance(price, dict):
        said.append(f"{entries.text(price.get('instance'))}: {entries.text(price.get('source'))}, "
                    f"published {entries.text(price.get('date'))}")
    if isinstance(added, dict) and said:
        said.append(f"added by `dawnbench submit {entries.text(added.get('option'))}` on "
                    f"{entries.text(added.get('date'))}, after the run")
    elif isinstance(added, dict):
        said.append(f"{entries.text(added.get('source'))} on {entries.text(added.get('date'))}, after the run")
    return "; ".join(said) or None


# ---------------------------------------------------------------- the index

COLUMNS = {      # each table's own columns, before the ones all tables share
    "train_time": [("Time to threshold", lambda r: r["hms"]), ("Cost", lambda r: usd(r["cost_usd"]))],
    "train_cost": [("Cost", lambda r: usd(r["cost_usd"])), ("Time to threshold", lambda r: r["hms"])],
    "inference_latency": [("Latency", lambda r: ms(r["latency_ms"])), ("Accuracy", lambda r: f"{r['accuracy']:g}")],
    "inference_cost": [("Cost per 10,000 items", lambda r: usd(r["cost_per_10000_usd"])),
                       ("Latency", lambda r: ms(r["latency_ms"]))],
}
COLUMNS["train_cost_given"] = COLUMNS["train_cost"]
COLUMNS["inference_cost_given"] = COLUMNS["inference_cost"]
COLUMNS["inference_latency_unverified_model"] = COLUMNS["inference_latency"] + [
    ("Cost per 10,000 items", lambda r: usd(r["cost_per_10000_usd"]))]


def index_page(rankings: dict, plots: dict[str, str], n_entries: int) -> str:
    tasks = []
    for task_name, tables in rankings["tasks"].items():
        ranked = any(tables.values())
        tasks.append({
            "ranked": ranked,      # a task with nothing ranked gets a line, not four empty tables
            "name": task_name, "threshold": ranking.threshold_label(entries.TASK_BY_DIR[task_name]),
            "plot": plots.get(task_name),
            "tables": [{"name": table, "title": TABLE_TITLES[table], "headings": [c[0] for c in COLUMNS[table]],
                        "verified": True, "reproduced": table.startswith("train"),
                        "model": table.startswith("inference"),
                        "rows": [{**r, "cells": [fn(r) for _, fn in COLUMNS[table]]} for r in rows]}
                       for table, rows in tables.items() if rows or table in MAIN_TABLES],
            "unranked": [u for u in rankings["unranked"] if u["task"] == task_name],
            "invalid": [u for u in rankings.get("invalid", []) if u["task"] == task_name]})
    return templates().get_template("index.html").render(csp=CSP, root="", tasks=tasks, n_entries=n_entries,
                                                 rules_version=RULES_VERSION)


# ---------------------------------------------------------------- entry pages

def _ordinal(n: int) -> str:
    return f"{n}{'th' if 11 <= n % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def machine_load(entry: Entry) -> str | None:
    """The entry page's "Machine load" row: how busy the machine was during the entry's run, from its
    run folder's env.json (harness.load); None where the entry has no run folder with an env.json.
    A measurement beside the entry, never a ranked figure."""
    env_file = entries.run_folder(entry.path) / "env.json"
    if not env_file.is_file():
        return None
    try:
        env = safe_read.read_json(env_file, entry.path.parent)
        busy, words = load.summary(env.get("load") if isinstance(env, dict) else None)
    except load.LoadError as e:
        return f"not shown: {e}"
    except (DawnbenchError, OSError, ValueError):
        return "not shown: the run folder's env.json cannot be read"
    return ("busy: " if busy else "") + words


def entry_page(entry: Entry, ranks: list[tuple[str, int]], image: str | None, sibling: str | None,
               verification: str | None = None, reproduction: str | None = None, model: str | None = None) -> str:
    f = entry.fields
    task = entry.task.display_name
    rows: list[tuple[str, str]] = [
        ("Task", f"{task} ({entry.kind}), threshold {ranking.threshold_label(entry.task)}"),
        ("Rank", ", ".join(f"{_ordinal(r)} in {TABLE_TITLES[t].lower()}" for t, r in ranks) or "not ranked"),
        ("Author", entries.text(f.get("author"))), ("Model", entries.text(f.get("model"))),
        ("Hardware", entries.text(f.get("hardware"))), ("Framework", entries.text(f.get("framework"))),
        ("Code", entries.text(f.get("codeURL"))), ("Commit", commit(f)),
        ("Timestamp", entries.text(f.get("timestamp"))),
    ]
    price, basis = ranking.price_of(entry, verification or "")
    rows.append(("Cost per hour", f"{usd(price)} ({basis})" if price is not None else "not given"))
    if price_source(f):
        rows.append(("Price source", price_source(f)))
    if entry.kind == "train":
        row = entries.training_row(entry)
        if row:
            epoch = number(row.get("epoch"))
            rows.append(("Time to threshold", f"{entries.hms(row['hours'])} ({row['hours']:.4g} hours"
                         + (f", epoch {epoch:g}" if epoch is not None else "") + ")"))
            rows.append(("Training cost", usd(row["hours"] * price) if price is not None else "no price given"))
        else:
            rows.append(("Time to threshold", "the log never reaches the threshold"))
        rows.append(("Verification", verification or "not checked"))
        rows.append(("Reproduction", reproduction or NOT_TRIED))
        measured = machine_load(entry)
        if measured is not None:
            rows.append(("Machine load", measured))
    else:
        accuracy = entries.inference_accuracy(entry)
        rows += [("Latency", ms(entries.latency_ms(entry)) or "not given"),
                 ("Accuracy", f"{entry.metric_column} {accuracy:g}" if accuracy is not None else "not given"),
                 ("Cost per 10,000 items", usd(price * entries.latency_ms(entry) / 3.6e6 * entries.ITEMS)
                  if basis == entries.TABLE_PRICE and entries.latency_ms(entry) is not None
                  else usd(entries.inference_cost(entry)) or "not given"),
                 ("Verification", verification or "not checked"),
                 ("Model provenance", model or MODEL_UNVERIFIED)]
    columns = list(entry.rows[0]) if entry.rows else []
    log = [[format(r.get(c, float("nan")), "g") for c in columns] for r in entry.rows]
    other = {"kind": "inference" if entry.kind == "train" else "training", "href": sibling} if sibling else None
    written = entry.written if entry.written is not None else f
    return templates().get_template("entry.html").render(
        csp=CSP, root="../../", task=task, kind=entry.kind, name=entry.name, image=image, fields=rows,
        sibling=other, columns=columns, log=log, notes=[_note(entry, n) for n in entry.notes],
        entry_json=json.dumps(written, indent=2, ensure_ascii=False))


def _note(entry: Entry, note: str) -> str:
    """A v1 warning as the entry's page shows it: FILE:LINE relative to the entry's folder."""
    folder = str(entry.path.parent) + os.sep
    return note[len(folder):] if note.startswith(folder) else note


# ---------------------------------------------------------------- writing the site

class _Writer:
    """Writes files under one root and refuses any path that would land outside it."""

    def __init__(self, root: Path):
        self.root = root.resolve()

    def path(self, relative: str) -> Path:
        target = (self.root / relative).resolve()
        if self.root not in target.parents:
            raise SiteError(f"refusing to write {relative!r} outside the site")
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def text(self, relative: str, content: str) -> None:
        self.path(relative).write_text(content, encoding="utf-8")


def _prepare(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise SiteError(f"{out} is a file; give a folder for the site")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise SiteError(f"{out} is not empty and is not a site this command built; give a new or empty folder")


def _swap(tmp: Path, out: Path) -> None:
    """Put the new site in place of the old one; the old is removed only once the new is there."""
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
        os.replace(out, old / "site")
        os.replace(tmp, out)
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)


def build(loaded: list[Entry], rankings: dict, out: Path, verification: dict[str, str] | None = None,
          reproduction: dict[str, str] | None = None, models: dict[str, str] | None = None) -> Path:
    """Write the site for `loaded` (ranked as `rankings`; entries' `verification` statuses, training
    entries' `reproduction` words and inference entries' model provenance (`models`), by path) into
    `out`; returns the index's path."""
    try:
        return _build(loaded, rankings, Path(out), verification or {}, reproduction or {}, models or {})
    except OSError as e:
        raise SiteError(outputs.write_problem(out, e, "--out")) from None


def _build(loaded: list[Entry], rankings: dict, out: Path, verification: dict[str, str],
           reproduction: dict[str, str], models: dict[str, str]) -> Path:
    _prepare(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
    try:
        os.chmod(tmp, 0o755)
        w = _Writer(tmp)
        w.text(MARKER, "built by `dawnbench leaderboard`; the command replaces this folder whole\n")
        w.text("style.css", templates().loader.get_source(templates(), "style.css")[0])

        numbers = analyze.cost_vs_time_numbers(       # the prices the tables rank by, not the entries' own
            loaded, lambda e: ranking.price_of(e, verification.get(str(e.path), ""))[0])
        plots = {}
        for task in numbers["tasks"]:
            plots[task] = f"{task}/cost-vs-time.png"
            analyze.plot_cost_vs_time(numbers, w.path(plots[task]), tasks=[task])

        ranks: dict[str, list[tuple[str, int]]] = {}
        for tables in rankings["tasks"].values():
            for table, rows in tables.items():
                for r in rows:
                    ranks.setdefault(r["page"], []).append((table, r["rank"]))
        pages = {(e.task.display_name, e.kind, e.name): ranking.page(e) for e in loaded}
        for entry in loaded:
            relative = pages[(entry.task.display_name, entry.kind, entry.name)]
            image = None
            if entry.kind == "train":
                try:
                    curve = analyze.curve_from_entry(entry)
                except analyze.InputError:
                    curve = None           # no plottable log: the page says so in its table
                if curve:
                    image = Path(relative).with_suffix(".png").name
                    analyze.plot_curves(analyze.curves_numbers([curve]), w.path(str(Path(relative).parent / image)),
                                        title=f"{entry.name}: accuracy vs time")
            other_kind = "inference" if entry.kind == "train" else "train"
            sibling = pages.get((entry.task.display_name, other_kind, entry.name))
            sibling = f"../{other_kind}/{Path(sibling).name}" if sibling else None
            w.text(relative, entry_page(entry, ranks.get(relative, []), image, sibling,
                                        verification.get(str(entry.path)), reproduction.get(str(entry.path)),
                                        models.get(str(entry.path))))

        w.text("index.html", index_page(rankings, plots, len(loaded)))
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "index.html"
