"""The leaderboard's static site: an index with each task's four ranked tables and analysis plots,
and a page per entry (its accuracy-vs-time curve, hardware, framework, code, commit, cost).

Every string from an entry is untrusted: it goes through `esc` (text and attributes alike), only
http(s) URLs become links, and file names come from `leaderboard.safe_stem`, never from the
entry. No script, no network resource; a Content-Security-Policy forbids both. The site is
built in a temporary folder next to the target and swapped in whole.
"""
from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from dawnbench import analyze, entries, leaderboard
from dawnbench.entries import Entry, number
from dawnbench.leaderboard import text
from harness.tasks import RULES_VERSION

MARKER = ".dawnbench-site"     # says a folder is a site this module built, so it may replace it
CSP = "default-src 'none'; img-src 'self'; style-src 'self'"
TABLE_TITLES = {"train_time": "Training time", "train_cost": "Training cost",
                "inference_latency": "Inference latency", "inference_cost": "Inference cost (10,000 items)"}
STYLE = """\
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
h2 { border-bottom: 2px solid #8c1515; padding-bottom: 0.2em; margin-top: 2em; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; width: 100%; font-size: 0.92em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.fields th { width: 12em; }
table.log { width: auto; }
img.plot { max-width: 100%; border: 1px solid #eee; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
.muted { color: #777; }
"""


class SiteError(ValueError):
    """The site cannot be written where asked; the message says why and what to do."""


def esc(value) -> str:
    return html.escape(text(value), quote=True)


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


def link(url) -> str:
    """An http(s) URL as a link; anything else (javascript:, data:, relative...) as plain text."""
    url = text(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts and parts.scheme.lower() in ("http", "https") and parts.netloc and not any(c.isspace() for c in url):
        return f'<a href="{esc(url)}" rel="nofollow noopener noreferrer">{esc(url)}</a>'
    return f'<span class="url">{esc(url)}</span>'


def commit(fields: dict) -> str:
    for key in ("commitHash", "git_commit"):
        if fields.get(key):
            return text(fields[key])
    return ""


def _page(title: str, body: str, root: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<title>{esc(title)}</title>\n<link rel="stylesheet" href="{root}style.css">\n</head>\n'
            f'<body>\n{body}\n</body>\n</html>\n')


# ---------------------------------------------------------------- the index

COLUMNS = {      # each table's own columns, before the ones all tables share
    "train_time": [("Time to threshold", lambda r: r["hms"]), ("Cost", lambda r: usd(r["cost_usd"]))],
    "train_cost": [("Cost", lambda r: usd(r["cost_usd"])), ("Time to threshold", lambda r: r["hms"])],
    "inference_latency": [("Latency", lambda r: ms(r["latency_ms"])), ("Accuracy", lambda r: f"{r['accuracy']:g}")],
    "inference_cost": [("Cost per 10,000 items", lambda r: usd(r["cost_per_10000_usd"])),
                       ("Latency", lambda r: ms(r["latency_ms"]))],
}


def ranking_table(task: str, table: str, rows: list[dict]) -> str:
    head = ["Rank", *(c[0] for c in COLUMNS[table]), "Model", "Team", "Hardware", "Framework", "Date"]
    out = [f'<table id="{task}-{table}" class="ranking" data-table="{table}">',
           "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead>", "<tbody>"]
    for r in rows:
        cells = [f'<td class="num">{r["rank"]}</td>']
        cells += [f'<td class="num">{esc(fn(r))}</td>' for _, fn in COLUMNS[table]]
        cells.append(f'<td><a class="entry-link" href="{esc(r["page"])}" title="{esc(r["entry"])}">'
                     f'{esc(r["model"] or r["entry"])}</a></td>')
        cells += [f"<td>{esc(r[k])}</td>" for k in ("author", "hardware", "framework", "timestamp")]
        out.append(f'<tr data-entry="{esc(r["entry"])}">' + "".join(cells) + "</tr>")
    if not rows:
        out.append(f'<tr><td colspan="{len(head)}" class="muted">no ranked entries</td></tr>')
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


def index_page(rankings: dict, plots: dict[str, str], n_entries: int) -> str:
    tasks = rankings["tasks"]
    body = ["<header>", "<h1>dawnbench leaderboard</h1>",
            f'<p class="muted">{n_entries} entries; rules version {esc(RULES_VERSION)}. Training time is the '
            f"hours of the first log row at or over the task's threshold; ties go to the earlier entry.</p>",
            "<nav>" + "".join(f'<a href="#{t}">{t}</a>' for t in tasks) + "</nav>", "</header>"]
    for task_name, tables in tasks.items():
        task = entries.TASK_BY_DIR[task_name]
        body.append(f'<section id="{task_name}">')
        body.append(f"<h2>{task_name} <small class=\"muted\">threshold: "
                    f"{esc(leaderboard.threshold_label(task))}</small></h2>")
        if task_name in plots:
            body.append(f'<figure><img class="plot analysis" src="{esc(plots[task_name])}" '
                        f'alt="{task_name}: training cost vs time; training time vs inference latency">'
                        f"<figcaption>Training cost vs time (DAWNBench figure 7) and training time vs "
                        f"inference latency (figure 5).</figcaption></figure>")
        for table, rows in tables.items():
            body.append(f"<h3>{TABLE_TITLES[table]}</h3>")
            body.append(ranking_table(task_name, table, rows))
        unranked = [u for u in rankings["unranked"] if u["task"] == task_name]
        if unranked:
            body.append("<h3>Not ranked</h3>\n<ul class=\"unranked\">")
            body += [f'<li><a href="{esc(u["page"])}">{esc(u["entry"])}</a> ({esc(u["kind"])}): '
                     f"{esc(u['reason'])}</li>" for u in unranked]
            body.append("</ul>")
        body.append("</section>")
    return _page("dawnbench leaderboard", "\n".join(body), "")


# ---------------------------------------------------------------- entry pages

def _ordinal(n: int) -> str:
    return f"{n}{'th' if 11 <= n % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def entry_page(entry: Entry, ranks: list[tuple[str, int]], image: str | None, sibling: str | None) -> str:
    f = entry.fields
    task = entry.task.display_name
    rows: list[tuple[str, str]] = [
        ("Task", f"{task} ({esc(entry.kind)}), threshold {esc(leaderboard.threshold_label(entry.task))}"),
        ("Rank", ", ".join(f"{_ordinal(r)} in {TABLE_TITLES[t].lower()}" for t, r in ranks) or "not ranked"),
        ("Author", esc(f.get("author"))), ("Model", esc(f.get("model"))), ("Hardware", esc(f.get("hardware"))),
        ("Framework", esc(f.get("framework"))), ("Code", link(f.get("codeURL"))), ("Commit", esc(commit(f))),
        ("Timestamp", esc(f.get("timestamp"))),
        ("Cost per hour", usd(leaderboard.cost_per_hour(entry)) or "not given"),
    ]
    if entry.kind == "train":
        row = leaderboard.training_row(entry)
        price = leaderboard.cost_per_hour(entry)
        if row:
            epoch = number(row.get("epoch"))
            rows.append(("Time to threshold", f"{entries.hms(row['hours'])} ({row['hours']:.4g} hours"
                         + (f", epoch {epoch:g}" if epoch is not None else "") + ")"))
            rows.append(("Training cost", usd(row["hours"] * price) if price is not None else "no price given"))
        else:
            rows.append(("Time to threshold", "the log never reaches the threshold"))
    else:
        accuracy = leaderboard.inference_accuracy(entry)
        rows += [("Latency", esc(ms(leaderboard.latency_ms(entry))) or "not given"),
                 ("Accuracy", f"{entry.metric_column} {accuracy:g}" if accuracy is not None else "not given"),
                 ("Cost per 10,000 items", usd(leaderboard.inference_cost(entry)) or "not given")]
    if sibling:
        other = "inference" if entry.kind == "train" else "training"
        rows.append((f"The {other} entry", f'<a href="{esc(sibling)}">{esc(entry.name)}</a>'))

    body = [f'<p><a href="../../index.html#{task}">&larr; {task} leaderboard</a></p>',
            f"<h1>{esc(entry.name)}</h1>"]
    if image:
        body.append(f'<img class="plot curve" src="{esc(image)}" alt="accuracy vs time for {esc(entry.name)}">')
    body.append('<table class="fields">' + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
                + "</table>")
    if entry.rows:
        columns = list(entry.rows[0])
        body.append("<h2>Log</h2>\n<table class=\"log\"><thead><tr>"
                    + "".join(f"<th>{esc(c)}</th>" for c in columns) + "</tr></thead><tbody>")
        body += ["<tr>" + "".join(f'<td class="num">{esc(format(r.get(c, float("nan")), "g"))}</td>'
                                  for c in columns) + "</tr>" for r in entry.rows]
        body.append("</tbody></table>")
    body.append("<h2>Entry</h2>\n<pre>" + esc(json.dumps(f, indent=2, ensure_ascii=False)) + "</pre>")
    return _page(f"{entry.name} ({task} {entry.kind})", "\n".join(body), "../../")


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


def build(loaded: list[Entry], rankings: dict, out: Path) -> Path:
    """Write the site for `loaded` (ranked as `rankings`) into `out`; returns the index's path."""
    out = Path(out)
    _prepare(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
    try:
        os.chmod(tmp, 0o755)
        w = _Writer(tmp)
        w.text(MARKER, "built by `dawnbench leaderboard`; the command replaces this folder whole\n")
        w.text("style.css", STYLE)

        numbers = analyze.cost_vs_time_numbers(loaded)
        plots = {}
        for task in numbers["tasks"]:
            plots[task] = f"{task}/cost-vs-time.png"
            analyze.plot_cost_vs_time(numbers, w.path(plots[task]), tasks=[task])

        ranks: dict[str, list[tuple[str, int]]] = {}
        for tables in rankings["tasks"].values():
            for table, rows in tables.items():
                for r in rows:
                    ranks.setdefault(r["page"], []).append((table, r["rank"]))
        pages = {(e.task.display_name, e.kind, e.name): leaderboard.page(e) for e in loaded}
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
            w.text(relative, entry_page(entry, ranks.get(relative, []), image, sibling))

        w.text("index.html", index_page(rankings, plots, len(loaded)))
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out / "index.html"
