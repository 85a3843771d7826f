"""The leaderboard's static site: an index with each task's four ranked tables, its invalid entries
and analysis plots, and a page per entry (its accuracy-vs-time curve, hardware, framework, code,
commit, cost, its verification and its reproduction).

The pages are rendered from the jinja2 templates in dawnbench/templates/ with autoescaping, so every
string from an entry is escaped wherever it lands (text or attribute); only http(s) URLs become
links (the `http_url` test), and file names come from `ranking.safe_stem`, never from the entry. No
network resource. The index's one script is the site's own site.js (sorting and filtering, plain
JavaScript: why no library is said in it), a file beside the pages: its Content-Security-Policy
allows that file and nothing else, no inline script; the entry pages have none. It works from
file://, with no server. The site is built in a temporary folder next to the target and swapped in
whole.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

from dawnbench import analyze, entries, hardware_class, ranking
from dawnbench.entries import Entry, is_http_url, number
from dawnbench.entry_status import (
    ACCURACY_ONLY,
    MODEL_UNVERIFIED,
    MODEL_VERIFIED,
    NOT_REPRODUCED,
    NOT_TRIED,
    OLD_ACCURACY_ONLY,
    VERIFIED,
    Judged,
    is_reproduced,
)
from harness import load, safe_read, safe_write
from harness.errors import DawnbenchError
from harness.tasks import RULES_VERSION

MARKER = ".dawnbench-site"     # says a folder is a site this module built, so it may replace it
# The one script is the site's own site.js, a file beside the pages: no inline script, nothing from
# elsewhere, so no string of an entry's can ever run, even one that got past the escaping.
CSP = "default-src 'none'; img-src 'self'; style-src 'self'; script-src 'self'"
ASSETS = ("style.css", "site.js")
TABLE_TITLES = {"train_time": "Training time (the judge's measurement)",
                "train_cost": "Training cost (the judge's time, prices table)",
                "train_cost_given": "Training cost (the judge's time, submitter-given price)",
                "inference_latency": "Inference latency",
                "inference_cost": "Inference cost (10,000 items, prices table)",
                "inference_cost_given": "Inference cost (10,000 items, submitter-given price)",
                "inference_latency_unverified_model": "Inference latency (model provenance unverified)",
                "train_submitted": "Training time, submitted (claimed, not reproduced)",
                "train_time_archive": "Training time (DAWNBench v1 archive)",
                "train_cost_archive": "Training cost (DAWNBench v1 archive, submitter-given price)",
                "inference_latency_archive": "Inference latency (DAWNBench v1 archive)",
                "inference_cost_archive": "Inference cost (10,000 items, DAWNBench v1 archive)",
                "train_mean": "Training time, mean rule (the series' mean time, its 95% interval)"}
MAIN_TABLES = ("train_time", "train_cost", "inference_latency", "inference_cost")   # shown even when empty
# Each tier's heading and what it says, above its tables: the tiers are never mixed (dawnbench.ranking.tier).
TIER_HEADINGS = {
    ranking.VERIFIED_TIER: ("Verified", "Training entries whose run verifies here and that the judge reproduced "
                                        "(dawnbench reproduce), ranked by the judge's own measurement: the median "
                                        "time of its reproduction runs on the hardware named (a series: its rule "
                                        "applied to the judge's runs of its seeds), the 95% interval of their mean "
                                        "under it (two runs or more): entries whose intervals overlap are tied; the "
                                        "claimed time beside it. Inference entries with the record dawnbench infer "
                                        "wrote."),
    ranking.SUBMITTED_TIER: ("Submitted, not reproduced", "Entries with a run that the judge has not reproduced "
                                                          "(or did not reproduce): ranked by their claimed time, "
                                                          "apart from the verified tier, never with it."),
    ranking.SERIES_TIER: ("Series, mean rule", "Entries submitted from a series of runs that the mean rule accepts, "
                                               "whatever rule the task ranks by: the series' mean final metric past "
                                               "the threshold at a one-sided p below the task's alpha (docs/RULES.md), "
                                               "ranked by the series' mean time-to-accuracy over every run, its 95% "
                                               "interval beside it: entries "
                                               "whose intervals overlap are tied. The series' own runs, as its entry "
                                               "carries them (entry runs.acceptance)."),
    ranking.ARCHIVE_TIER: ("DAWNBench v1 archive", "The published DAWNBench v1 entries (matched by their files' "
                                                   "sha256): no run behind them, their figures as published."),
}


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


def seconds(value: float | None) -> str:
    """A train time: seconds to the hundredth under 100 s (a record's few seconds), else h:mm:ss."""
    if value is None:
        return ""
    return f"{value:.2f} s" if value < 100 else entries.hms(value / 3600.0)


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

# Each table's own columns, before the ones all tables share: (heading, the row's number it sorts by,
# the number as shown). The page sorts by the number itself, never by the text ("$1,234.50", "0:45:00").
# FIGURE heads the task's ranked figure's column with the figure's name ("Top-1 accuracy", "F1",
# "Error rate"); it sorts best first as the task's kind says, every other number (time, cost,
# latency) lowest first.
FIGURE = None
_CLAIMED = ("Claimed", "claimed_hours", lambda v, t: entries.hms(v))          # beside the judge's, never ranked
_JUDGE_RUNS = ("Judge's runs", "judge_runs", lambda v, t: f"{v:g}")
COLUMNS = {
    "train_time": [("Time to threshold", "hours", lambda v, t: entries.hms(v)), _CLAIMED, _JUDGE_RUNS,
                   ("Cost", "cost_usd", lambda v, t: usd(v)),
                   ("Train time", "train_seconds", lambda v, t: seconds(v))],      # shown beside it, never ranked
    "train_cost": [("Cost", "cost_usd", lambda v, t: usd(v)), ("Time to threshold", "hours", lambda v, t: entries.hms(v)),
                   _CLAIMED],
    "train_submitted": [("Claimed time to threshold", "hours", lambda v, t: entries.hms(v)),
                        ("Cost", "cost_usd", lambda v, t: usd(v)), ("Train time", "train_seconds", lambda v, t: seconds(v))],
    "train_time_archive": [("Time to threshold", "hours", lambda v, t: entries.hms(v)),
                           ("Cost", "cost_usd", lambda v, t: usd(v)), ("Train time", "train_seconds", lambda v, t: seconds(v))],
    "train_cost_archive": [("Cost", "cost_usd", lambda v, t: usd(v)),
                           ("Time to threshold", "hours", lambda v, t: entries.hms(v))],
    "inference_latency": [("Latency", "latency_ms", lambda v, t: ms(v)),
                          (FIGURE, "accuracy", lambda v, t: ranking.metric_label(t, v))],
    "inference_cost": [("Cost per 10,000 items", "cost_per_10000_usd", lambda v, t: usd(v)),
                       ("Latency", "latency_ms", lambda v, t: ms(v))],
}
COLUMNS["train_mean"] = [("Mean time to threshold", "hours", lambda v, t: entries.hms(v)),
                         ("p", "p_value", lambda v, t: f"{v:.2g}"), ("Runs", "runs_n", lambda v, t: f"{v:g}"),
                         ("Cost", "cost_usd", lambda v, t: usd(v))]
COLUMNS["train_cost_given"] = COLUMNS["train_cost"]
COLUMNS["inference_cost_given"] = COLUMNS["inference_cost_archive"] = COLUMNS["inference_cost"]
COLUMNS["inference_latency_archive"] = COLUMNS["inference_latency"]
COLUMNS["inference_latency_unverified_model"] = COLUMNS["inference_latency"] + [
    ("Cost per 10,000 items", "cost_per_10000_usd", lambda v, t: usd(v))]
LOWER, HIGHER = "lower", "higher"     # a number column's data-better: which values are better (site.js sorts those first)

# A status as a row shows it: (the filter's value, symbol, short words, style). The full words go in
# the badge's title (hover) and on the entry's page: one sentence repeated on every row hid the table.
BADGE_OK, BADGE_PART, BADGE_BAD, BADGE_NONE = "ok", "part", "bad", "none"


def verification_badge(status: str) -> tuple[str, str, str, str]:
    if status == VERIFIED:
        return "verified", "\u2713", "verified", BADGE_OK
    if status.startswith("failed"):        # never ranked (ranking.drop_failed); shown right if it ever is
        return "failed", "\u2717", "failed", BADGE_BAD
    return "not-verified", "\u2013", "not verified", BADGE_NONE


def reproduction_badge(words: str) -> tuple[str, str, str, str]:
    if is_reproduced(words):
        return "reproduced", "\u2713", "reproduced", BADGE_OK
    if words in (ACCURACY_ONLY, OLD_ACCURACY_ONLY):
        return "accuracy-only", "\u2248", "accuracy only", BADGE_PART
    if words.startswith(NOT_REPRODUCED):
        return "not-reproduced", "\u2717", "not reproduced", BADGE_BAD
    return "not-tried", "\u2013", "not tried", BADGE_NONE


def model_badge(words: str) -> tuple[str, str, str, str]:
    if words == MODEL_VERIFIED:
        return "verified", "\u2713", "verified run", BADGE_OK
    return "unverified", "\u2013", "unverified", BADGE_NONE


FILTERS = {     # the select filters: (the row's attribute, its label, [(value, words)])
    "verification": ("Verification", [("verified", "verified"), ("not-verified", "not verified")]),
    "reproduction": ("Reproduction (training)", [("reproduced", "reproduced"), ("accuracy-only", "accuracy only"),
                                                 ("not-reproduced", "not reproduced"), ("not-tried", "not tried")]),
}
HARDWARE_CLASS = "hardwareclass"    # its select's values are the classes a task's rows have (dawnbench.hardware_class)


def _badge(kind: tuple[str, str, str, str], detail: str, column: str) -> dict:
    value, symbol, words, style = kind
    return {"kind": "status", "class": column, "style": style, "text": f"{symbol} {words}", "title": detail,
            "sort": value}


MODEL_CHARS = 40     # a longer model is a name and a description: a row and a heading show the name


def model_name(model: str) -> str:
    """An entry's model as a row and a heading name it: a long one's name before its description in
    parentheses ("ResNet-56 (basic blocks, 0.85M parameters)" -> "ResNet-56"; a short one whole, as
    "ResNet 164 (with bottleneck)"), the whole of it on hover and on the entry's page."""
    name = model.split(" (", 1)[0].strip()
    return name if name and len(model) > MODEL_CHARS else model


def entry_title(entry: Entry) -> str:
    """An entry's readable name: its model's name and its team ("ResNet-56 by Ann"), never the file name
    its four parts were mangled into (which is on the page beside it); the file name for an entry with neither."""
    model, author = model_name(entries.text(entry.fields.get("model")).strip()), entries.text(entry.fields.get("author"))
    if not model:
        return entry.name
    return f"{model} by {author.strip()}" if author.strip() else model


def interval_text(span: list[float] | None, shown) -> str:
    """A series figure's 95% interval as a row shows it under the figure: "95%: 0:01:05-0:01:20"."""
    return f"95%: {shown(span[0])} \u2013 {shown(span[1])}" if span else ""


def _details(r: dict, key: str) -> dict:
    """The line under a number: the interval of a series figure (its method on hover)."""
    spans = {"hours": ("interval_hours", entries.hms), "claimed_hours": ("claimed_interval_hours", entries.hms),
             "cost_usd": ("cost_interval_usd", usd)}
    if key not in spans or not r.get(spans[key][0]):
        return {}
    # the verified tier's interval is the judge's runs' (ranking.judged_words), the claim's the series'
    said = r.get("interval_words") if key in ("hours", "cost_usd") else None
    return {"detail": interval_text(r[spans[key][0]], spans[key][1]), "title": said or r.get("series") or ""}


def _row(r: dict, table: str, task) -> dict:
    tied = r.get("tied_with") or []
    cells = [{"kind": "num", "class": "rank", "text": str(r["rank"]), "sort": r["rank"],
              **({"detail": "tied with " + ", ".join(map(str, tied)),
                  "title": "the 95% intervals overlap: the order between these rows is not shown to be real"}
                 if tied else {})}]
    for _, key, shown in COLUMNS[table]:
        value = r.get(key)
        cells.append({"kind": "num", "text": shown(value, task) if value is not None else "",
                      "sort": value if value is not None else "", **_details(r, key)})
        if key == "judge_runs" and value is not None:
            cells[-1]["title"] = f"the median of {value:g} reproduction run{'s' * (value != 1)} on {r['judge_hardware']}"
    model = r["model"] or r["entry"]
    inference = table.startswith("inference")
    ran = r.get("runtime") if inference else r["framework"]
    cells += [{"kind": "entry", "text": model_name(model), "href": r["page"], "title": model if model != model_name(model)
               else r["entry"], "reference": r["reference"], "sort": model},
              {"kind": "text", "class": "team", "text": r["author"]},
              {"kind": "text", "class": "hardware", "text": r["hardware_class"], "sort": r["hardware_class"],
               "detail": r["hardware"] if r["hardware"] != r["hardware_class"] else ""},
              {"kind": "text", "class": "framework", "text": ran,
               "detail": r["framework"] if inference and r["framework"] not in ran else ""}]
    if not inference:
        cells.append({"kind": "text", "class": "precision", "text": r["precision"],
                      "muted": r["precision"] == ranking.NOT_RECORDED})
    cells += [{"kind": "text", "class": "date", "text": r["timestamp"]},
              {"kind": "code", "text": r["code_url"], "sort": r["code_url"]}]
    filters = {"hardware": r["hardware"], HARDWARE_CLASS: r["hardware_class"],
               "framework": f"{ran} {r['framework']}" if inference else r["framework"]}
    if "verification" in r:
        cells.append(_badge(verification_badge(r["verification"]), r["verification"], "verification"))
        filters["verification"] = cells[-1]["sort"]
    if "reproduction" in r:
        cells.append(_badge(reproduction_badge(r["reproduction"]), r["reproduction"], "reproduction"))
        filters["reproduction"] = cells[-1]["sort"]
    if "model_provenance" in r:
        cells.append(_badge(model_badge(r["model_provenance"]), r["model_provenance"], "model-provenance"))
    return {"entry": r["entry"], "cells": cells, "filters": filters, "tied": bool(tied)}


def _headings(table: str, task) -> list[dict]:
    figure_better = LOWER if task.lower_is_better else HIGHER
    own = [{"text": task.figure.heading, "type": "num", "better": figure_better} if heading is FIGURE
           else {"text": heading, "type": "num", "better": LOWER} for heading, _, _ in COLUMNS[table]]
    inference = table.startswith("inference")
    shared = [{"text": t, "type": "text"} for t in
              ("Model", "Team", "Hardware", "Runtime" if inference else "Framework",
               *(() if inference else ("Precision",)), "Date", "Code")]
    extra = [{"text": "Verification", "type": "text"}]
    if table.startswith("train"):
        extra.append({"text": "Reproduction", "type": "text"})
    if table.startswith("inference"):
        extra.append({"text": "Model provenance", "type": "text"})
    return [{"text": "Rank", "type": "num", "better": LOWER, "sorted": "ascending"}] + own + shared + extra


def empty_reason(table: str, tables: dict[str, list]) -> str:
    """Why one of the verified tier's four tables, shown even when empty, has no row: one line."""
    kind = "train" if table.startswith("train") else "inference"
    base = "train_time" if kind == "train" else "inference_latency"
    if not tables[base]:
        elsewhere = [f"{n} in {TABLE_TITLES[t][:1].lower()}{TABLE_TITLES[t][1:]}" for t in tables
                     if t.startswith(kind) and t != base and "cost" not in t and (n := len(tables[t]))]
        why = ("no entry the judge reproduced (dawnbench reproduce)" if kind == "train" else
               "no inference entry with a dawnbench infer record of a verified run's model")
        return f"no ranked entries: {why}" + (f"; ranked apart below: {', '.join(elsewhere)}" if elsewhere else "")
    given, above = len(tables.get(table + "_given", [])), len(tables[base])
    return (f"no priced entries: {'the one entry' if above == 1 else f'none of the {above} entries'} above "
            f"{'has no' if above == 1 else 'has a'} price from the prices table (the instance of a verified run: "
            f"dawnbench run --instance)" + (f"; {given} with a price the submitter gave rank below" if given else ""))


def index_page(rankings: dict, plots: dict[str, str], n_entries: int) -> str:
    tasks, empty = [], []
    for task_name, tables in rankings["tasks"].items():
        task = entries.TASK_BY_DIR[task_name]
        unranked = [u for u in rankings["unranked"] if u["task"] == task_name]
        invalid = [u for u in rankings.get("invalid", []) if u["task"] == task_name]
        ranked = any(tables.values())
        if not (ranked or unranked or invalid):
            # a task nobody entered is a name on the last line, not a section before the ones people use
            empty.append({"name": task_name, "threshold": ranking.threshold_label(task)})
            continue
        shown = [(table, rows) for table, rows in tables.items() if rows or table in MAIN_TABLES] if ranked else []
        every = [r for _, rows in shown for r in rows]
        tasks.append({
            "ranked": ranked, "n_rows": sum(len(rows) for _, rows in shown),
            "name": task_name, "threshold": ranking.threshold_label(task),
            "plot": plots.get(task_name),
            # the text filters suggest the values there are (a datalist), and match any part of them
            "choices": {key: sorted({r[key] for r in every if r[key]}) for key in ("hardware", "framework")},
            "filters": {HARDWARE_CLASS: ("Hardware class", [(c, c) for c in sorted({r["hardware_class"] for r in every})]),
                        **{key: (label, [(v, w) for v, w in values if any(
                            (verification_badge if key == "verification" else reproduction_badge)(r[key])[0] == v
                            for r in every if key in r)]) for key, (label, values) in FILTERS.items()}},
            "tables": [{"name": table, "title": TABLE_TITLES[table], "headings": _headings(table, task),
                        "tier": ranking.TABLE_TIERS[table], "tier_heading": TIER_HEADINGS[ranking.TABLE_TIERS[table]],
                        "rows": [_row(r, table, task) for r in rows],
                        "empty": "" if rows else empty_reason(table, tables)} for table, rows in shown],
            "unranked": unranked, "invalid": invalid})
    # tasks with ranked rows first, then those with only unranked or invalid entries (registry order within)
    tasks.sort(key=lambda t: not t["ranked"])
    return templates().get_template("index.html").render(csp=CSP, root="", tasks=tasks, empty=empty,
                                                         n_entries=n_entries, rules_version=RULES_VERSION)


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


def energy_line(entry: Entry) -> str | None:
    """The entry page's "Energy" row: what the run's devices reported over its train spans, as the run
    folder's result.json records it (harness.energy); None where the entry has no run folder.
    Information beside the entry, never ranked."""
    result_file = entries.run_folder(entry.path) / "result.json"
    if not result_file.is_file():
        return None
    try:
        result = safe_read.read_json(result_file, entry.path.parent)
    except (DawnbenchError, OSError, ValueError):
        return "not shown: the run folder's result.json cannot be read"
    record = result.get("energy") if isinstance(result, dict) else None
    if not isinstance(record, dict):
        return "not recorded (a run from before the harness read energy)"
    if record.get("available") is not True:
        return f"not available: {entries.text(record.get('reason'))}"
    joules = number(record.get("joules"))
    if joules is None:
        return "not shown: the record has no number 'joules'"
    return (f"{joules:,.1f} J ({joules / 3.6e6:.3g} kWh) over {entries.text(record.get('train_spans'))} train spans: "
            f"{entries.text(record.get('how'))} (informative, never ranked)")


def utilization_lines(numbers: dict) -> dict[str, str]:
    """The "Utilization" row of each run `dawnbench analyze roofline` analysed (its roofline.json),
    by the run folder's resolved path."""
    lines = {}
    for item in numbers.get("inputs") or []:
        if not isinstance(item, dict) or not isinstance(item.get("source"), str):
            continue
        flops = item.get("flops") if isinstance(item.get("flops"), dict) else {}
        achieved, mfu, peak = number(item.get("achieved_flops_per_s")), number(item.get("mfu")), item.get("peak") or {}
        if achieved is None:
            line = f"not counted: {entries.text(flops.get('not_counted') or 'no achieved FLOP/s')}"
        elif mfu is None:
            line = f"{achieved / 1e12:.3g} TFLOP/s achieved; no peak: {entries.text(peak.get('why_none'))}"
        else:
            line = (f"MFU {100 * mfu:.2f}%: {achieved / 1e12:.3g} of {number(peak.get('flops_per_s')) / 1e12:.3g} "
                    f"TFLOP/s ({entries.text(peak.get('method'))})")
        if achieved is not None:
            line += (f"; {number(flops.get('flops_per_example')) / 1e9:.4g} GFLOP per training example, counted by "
                     f"{entries.text(flops.get('counter'))}")
        lines[str(Path(item["source"]).resolve())] = line + " (dawnbench analyze roofline; informative, never ranked)"
    return lines


def generalization_lines(numbers: dict) -> dict[str, str]:
    """The "Generalization" row of each run `dawnbench analyze generalization` analysed (its
    generalization.json), by the run folder's resolved path."""
    lines = {}
    for item in numbers.get("inputs") or []:
        if not isinstance(item, dict) or not isinstance(item.get("source"), str):
            continue
        original, fresh = item.get("original") or {}, item.get("fresh") or {}
        gap, span = number(item.get("gap_points")), item.get("gap_interval_95_points")
        a, b = number(original.get("accuracy")), number(fresh.get("accuracy"))
        if item.get("fresh_set") is None or None in (gap, a, b) or not isinstance(span, list) or len(span) != 2:
            line = entries.text(item.get("note") or "no generalization gap")
        else:
            line = (f"gap {gap:.1f} points (95% interval {number(span[0]):.1f} to {number(span[1]):.1f}): "
                    f"{entries.text(item.get('metric'))} {100 * a:.2f}% on {entries.text(original.get('dataset'))}, "
                    f"{100 * b:.2f}% on {entries.text(fresh.get('dataset'))} ({fresh.get('examples')} images)")
            published = item.get("published_gap_points") or {}
            low, high = number(published.get("low_points")), number(published.get("high_points"))
            if low is not None and high is not None:
                line += f"; published for standard models: {low:g} to {high:g} points"
        lines[str(Path(item["source"]).resolve())] = line + " (dawnbench analyze generalization; informative, never ranked)"
    return lines


def generalization_missing(entry: Entry) -> str:
    """The row of an entry whose run was not analysed: how to, or that its task has no fresh set."""
    from dawnbench import analyze_generalization
    from harness import fresh_eval
    if fresh_eval.fresh_set_of(entry.task.dataset) is None:
        return analyze_generalization.no_fresh_set(entry.task.name, entry.task.display_name)
    return ("not analysed (dawnbench analyze generalization RUN_FOLDER --out DIR, then leaderboard "
            "--generalization DIR/generalization.json)")


def entry_page(entry: Entry, ranks: list[tuple[str, int]], image: str | None, sibling: str | None,
               verification: str | None = None, reproduction: str | None = None, model: str | None = None,
               utilization: dict[str, str] | None = None, generalization: dict[str, str] | None = None,
               judged: Judged | None = None, challenges: list[str] | None = None) -> str:
    f = entry.fields
    task = entry.task.display_name
    rows: list[tuple[str, str]] = [
        ("Task", f"{task} ({entry.kind}), threshold {ranking.threshold_label(entry.task)}"),
        ("Rank", ", ".join(f"{_ordinal(r)} in {TABLE_TITLES[t][:1].lower()}{TABLE_TITLES[t][1:]}" for t, r in ranks)
         or "not ranked"),
        ("Official", official_line(entry)),
        ("Author", entries.text(f.get("author"))), ("Model", entries.text(f.get("model"))),
        ("Hardware", entries.text(f.get("hardware"))), ("Hardware class", hardware_class.of_entry(entry)),
        ("Framework", entries.text(f.get("framework"))),
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
            claimed = (f"{entries.hms(row['hours'])} ({row['hours']:.4g} hours"
                       + (f", epoch {epoch:g}" if epoch is not None else "") + ")")
            # the verified tier ranks the judge's measurement (dawnbench.ranking.tier); any other, the claim
            hours, basis = ranking.ranked_time(entry, verification or "", judged)
            if basis == "judge":
                span = ranking.judged_interval_hours(judged)
                rows.append(("Time to threshold", f"{entries.hms(hours)} ({hours:.4g} hours): "
                                                  f"{ranking.judged_words(judged)}" + (
                                                      f" ({entries.hms(span[0])} to {entries.hms(span[1])})"
                                                      if span else "")))
                rows.append(("Claimed time", f"{claimed}: the entry's own, not ranked"))
            else:
                rows.append(("Time to threshold", f"{claimed}: claimed" + (
                    ", not reproduced by the judge" if ranking.has_run(entry) else "")))
            rows.append(("Training cost", usd(hours * price) if price is not None else "no price given"))
            train = number(f.get("train_seconds"))
            rows.append(("Train time", f"{seconds(train)}: the train spans only, through the converging epoch "
                                       f"(no init, eval or harness time; not ranked)" if train is not None
                         else "not recorded (a run before the train time, or not a dawnbench run)"))
        else:
            rows.append(("Time to threshold", "the log never reaches the threshold"))
        rows.append(("Training precision", precision_line(entry)))
        if ranking.acceptance(entry) is not None:
            rows.append(("Series", series_line(entry)))
        rows.append(("Verification", verification or "not checked"))
        rows.append(("Reproduction", reproduction or NOT_TRIED))
        measured = machine_load(entry)
        if measured is not None:
            rows.append(("Machine load", measured))
        if entries.run_folder(entry.path).is_dir():
            run = str(entries.run_folder(entry.path).resolve())
            rows.append(("Utilization", (utilization or {}).get(run) or
                         "not analysed (dawnbench analyze roofline RUN_FOLDER --out DIR, then leaderboard "
                         "--roofline DIR/roofline.json)"))
            rows.append(("Energy", energy_line(entry)))
            rows.append(("Generalization", (generalization or {}).get(run) or generalization_missing(entry)))
    else:
        accuracy = entries.inference_accuracy(entry)
        rows += [("Latency", ms(entries.latency_ms(entry)) or "not given"),
                 ("Runtime", entries.runtime(entry) or "not given"),
                 (entry.task.figure.heading, ranking.metric_label(entry.task, accuracy)
                  if accuracy is not None else "not given"),
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
        csp=CSP, root="../../", task=task, kind=entry.kind, name=entry_title(entry), file=entry.path.name,
        image=image, fields=rows,
        figure=entry.task.figure.label,
        sibling=other, columns=columns, log=log, notes=[_note(entry, n) for n in entry.notes], challenges=challenges,
        entry_json=json.dumps(written, indent=2, ensure_ascii=False))


def official_line(entry: Entry) -> str:
    """The entry page's "Official" row: whether the run was an official one (the task's threshold, a
    committed reference, the judge's harness...: harness.provenance), and if not, why."""
    f = entry.fields
    reasons = [r for r in f.get("unofficial_reasons") or [] if isinstance(r, str)] \
        if isinstance(f.get("unofficial_reasons"), list) else []
    if f.get("official") is True and f.get("official_threshold") is not False:
        return "official: run under the rules, at the task's threshold (docs/RULES.md)"
    if f.get("official") is False or f.get("official_threshold") is False:
        why = reasons or (["run at a lowered threshold"] if f.get("official_threshold") is False else [])
        return "unofficial" + (f": {'; '.join(why)}" if why else "")
    if ranking.has_run(entry):
        return "not recorded: the entry says neither official nor not (a run from before the record)"
    return "not recorded: no run behind it (a DAWNBench v1 entry, or one typed by hand)"


def precision_line(entry: Entry) -> str:
    """The entry page's "Training precision" row: what the run trained in, as the harness recorded it
    (the run folder's result.json `precision`, with its reason), or the entry's; "not recorded" without."""
    record = (entries.run_record(entry) or {}).get("precision")
    shown = ranking.precision(entry)
    if isinstance(record, dict) and isinstance(record.get("train"), str):
        reason = entries.text(record.get("reason"))
        return f"{record['train']}" + (f": {reason}" if reason else "") + " (the harness's record of the run)"
    if shown == ranking.NOT_RECORDED:
        return "not recorded (an entry from before the harness recorded what a run trained in)"
    return f"{shown} (as the entry says)"


def series_line(entry: Entry) -> str:
    """The entry page's "Series" row: the acceptance statistics of the series it was submitted from."""
    a = ranking.acceptance(entry) or {}
    said = [f"{entries.text(a.get('rule'))} rule, {entries.text(a.get('n'))} runs: "
            f"{entries.text(a.get('verdict'))}" + (f" ({entries.text(a.get('reason'))})" if a.get("reason") else "")]
    judged = ranking.mean_rule(entry)
    if judged is not None and judged is not a:      # the task ranks by single: why the mean rule's table has it or not
        said.append(f"mean rule: {entries.text(judged.get('verdict'))}"
                    + (f" ({entries.text(judged.get('reason'))})" if judged.get("reason") else ""))
    mean, sd, p = number(a.get("metric_mean")), number(a.get("metric_stdev")), number(a.get("p_value"))
    if mean is not None:
        said.append(f"final {entry.task.figure.label} mean {entry.task.figure.shown(entry.task.figure.to_log(mean))}"
                    + (f" \u00b1 {entry.task.figure.shown(entry.task.figure.to_log(sd))}" if sd is not None else "")
                    + (f", one-sided p = {p:.2g} against the threshold" if p is not None else ""))
    times = [(w, number(a.get(k))) for w, k in (("mean", "tta_mean_seconds"), ("median", "tta_median_seconds"))]
    span = ranking.interval_hours(entry)
    if any(v is not None for _, v in times) or span:
        every = [v for _, v in times if v is not None] + [h * 3600 for h in span or []]
        shown = seconds if max(every) < 100 else (lambda v: entries.hms(v / 3600))     # one unit for all of them
        said.append("time-to-accuracy " + ", ".join(f"{w} {shown(v)}" for w, v in times if v is not None)
                    + (f", 95% interval {shown(span[0] * 3600)} to {shown(span[1] * 3600)} "
                       f"({'bootstrap' if a.get('ci_method') == 'bootstrap' else 't'})" if span else ""))
    return "; ".join(said) + " (the series' own runs, as its entry carries them)"


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
          reproduction: dict[str, str] | None = None, models: dict[str, str] | None = None,
          utilization: dict[str, str] | None = None, generalization: dict[str, str] | None = None,
          judged: dict[str, Judged] | None = None, challenges: dict[str, list[str]] | None = None) -> Path:
    """Write the site for `loaded` (ranked as `rankings`; entries' `verification` statuses, training
    entries' `reproduction` words and the judge's measurement of the reproduced ones (`judged`), and
    inference entries' model provenance (`models`), by path) into `out`; returns the index's path."""
    try:
        return _build(loaded, rankings, Path(out), verification or {}, reproduction or {}, models or {},
                      utilization or {}, generalization or {}, judged or {}, challenges or {})
    except OSError as e:
        raise SiteError(safe_write.write_problem(out, e, "--out")) from None


def _build(loaded: list[Entry], rankings: dict, out: Path, verification: dict[str, str],
           reproduction: dict[str, str], models: dict[str, str], utilization: dict[str, str],
           generalization: dict[str, str], judged: dict[str, Judged], challenges: dict[str, list[str]]) -> Path:
    _prepare(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
    try:
        os.chmod(tmp, 0o755)
        w = _Writer(tmp)
        w.text(MARKER, "built by `dawnbench leaderboard`; the command replaces this folder whole\n")
        for asset in ASSETS:
            w.text(asset, templates().loader.get_source(templates(), asset)[0])

        # the prices and times the tables rank by, not the entries' own: the verified tier's time is the
        # judge's measurement, the claim drawn beside it
        numbers = analyze.cost_vs_time_numbers(
            loaded, lambda e: ranking.price_of(e, verification.get(str(e.path), ""))[0],
            lambda e: ranking.ranked_time(e, verification.get(str(e.path), ""), judged.get(str(e.path))))
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
                                        title=f"{entry_title(entry)}: {entry.task.figure.label} vs time")
            other_kind = "inference" if entry.kind == "train" else "train"
            sibling = pages.get((entry.task.display_name, other_kind, entry.name))
            sibling = f"../{other_kind}/{Path(sibling).name}" if sibling else None
            w.text(relative, entry_page(entry, ranks.get(relative, []), image, sibling,
                                        verification.get(str(entry.path)), reproduction.get(str(entry.path)),
                                        models.get(str(entry.path)), utilization, generalization,
                                        judged.get(str(entry.path)), challenges.get(str(entry.path))))

        w.text("index.html", index_page(rankings, plots, len(loaded)))
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "index.html"
