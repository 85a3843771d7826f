"""The rankings: entries ranked per task, as DAWNBench ranked them (the rules in words:
docs/LEADERBOARD.md).

Per task the tables DAWNBench had: training time (the hours of the first log row that reaches the
threshold: at or over it, or at or under it where the task's kind says lower is better), training
cost (those hours x the price), inference latency (ms per item, among inference entries whose
accuracy reaches the threshold) and inference cost per 10,000 items. Ties go to the earlier
timestamp, then to the name. Only an entry that `dawnbench validate` accepts is ranked, at the level
asked (the leaderboard's default: v1, so every published DAWNBench v1 entry ranks, read as v1 read
it, its quirks listed as warnings): any other is listed as invalid with validate's first problem
line, and is never read past that.

A training entry ranks in one of three tiers, never two (`tier`): **verified**, when its run
verifies here and the judge reproduced it, ranked by the judge's own measurement (the median time
of its reproduction runs, dawnbench.entry_status.Judged) with the claimed time beside it; **submitted**,
any other entry with a run folder, ranked by its claim in a table of its own; the **DAWNBench v1
archive**, an entry with no run folder whose files are the published v1 entries' (dawnbench.archive).
An entry with no run folder that is not the archive's ranks nowhere.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from dawnbench import archive, entries, hardware_class, validate_entries
from dawnbench.entries import Entry, number
from dawnbench.entry_status import MODEL_UNVERIFIED, NO_RECORD, NO_RUN, NOT_TRIED, VERIFIED, Judged, is_reproduced
from harness.tasks import TASKS, Task

VERIFIED_TIER, SUBMITTED_TIER, SERIES_TIER, ARCHIVE_TIER = "verified", "submitted", "series", "archive"
# {table: its tier}, in the order the site shows them: the verified tier first, the others apart after it
TABLE_TIERS = {"train_time": VERIFIED_TIER, "train_cost": VERIFIED_TIER, "train_cost_given": VERIFIED_TIER,
               "inference_latency": VERIFIED_TIER, "inference_cost": VERIFIED_TIER,
               "inference_cost_given": VERIFIED_TIER, "inference_latency_unverified_model": VERIFIED_TIER,
               "train_submitted": SUBMITTED_TIER,
               "train_mean": SERIES_TIER,
               "train_time_archive": ARCHIVE_TIER, "train_cost_archive": ARCHIVE_TIER,
               "inference_latency_archive": ARCHIVE_TIER, "inference_cost_archive": ARCHIVE_TIER}
TABLES = tuple(TABLE_TIERS)
NOT_RECORDED = "not recorded"      # an entry's training precision where it has none (one from before the record)
NOT_ARCHIVED = ("no run folder, and not a published DAWNBench v1 entry (its files are not the archive's): only a "
                "run's entry ranks; submit the run with `dawnbench submit RUN_FOLDER`")


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
            "timestamp": entries.text(f.get("timestamp")), "code_url": entries.text(f.get("codeURL")),
            # the reference a run came from (a fork's own folder name): on the board beside the model, so a
            # fork's row never reads as its original's
            "reference": entries.text(f.get("reference")),
            # like with like: the accelerator model and count, or the CPU model and cores (a filter)
            "hardware_class": hardware_class.of_entry(entry),
            # what the reference trained in, as the harness recorded it per run (entry["precision"])
            "precision": precision(entry)}


def precision(entry: Entry) -> str:
    """The precision a training entry's run trained in (entry["precision"], from the run's record);
    "not recorded" for an entry from before the record, and for an inference entry (its runtime's
    precision is its own, in its row's runtime)."""
    value = entry.fields.get("precision")
    return value if entry.kind == "train" and isinstance(value, str) and value else NOT_RECORDED


def acceptance(entry: Entry) -> dict | None:
    """The series statistics an entry submitted from a series carries (entry["runs"]["acceptance"],
    dawnbench.evidence), or None: a single run's entry, or one from before the record."""
    runs = entry.fields.get("runs")
    found = runs.get("acceptance") if isinstance(runs, dict) else None
    return found if isinstance(found, dict) else None


def mean_rule(entry: Entry) -> dict | None:
    """The mean rule's verdict and times of a series entry whatever its task's rule (dawnbench.evidence):
    the acceptance itself where the task ranks by `mean`, else its `by_rule` entry for `mean`; None for a
    single run's entry."""
    found = acceptance(entry)
    if found is None or found.get("rule") == "mean":
        return found
    by_rule = found.get("by_rule")
    mean = by_rule.get("mean") if isinstance(by_rule, dict) else None
    return mean if isinstance(mean, dict) else None


def interval_hours(entry: Entry, figures: dict | None = None) -> list[float] | None:
    """The 95% interval of a series entry's time-to-accuracy, in hours ([lo, hi]), under its acceptance's
    rule (or of `figures`, e.g. mean_rule's); None without one."""
    found = ((acceptance(entry) if figures is None else figures) or {}).get("tta_ci95_seconds")
    if not isinstance(found, list) or len(found) != 2:
        return None
    lo, hi = number(found[0]), number(found[1])
    return [lo / 3600, hi / 3600] if lo is not None and hi is not None and 0 <= lo <= hi else None


def judged_interval_hours(judged: Judged | None) -> list[float] | None:
    """The 95% interval of the judge's measurement, in hours ([lo, hi]): of its reproduction runs' mean
    time (Student's t); None under two runs, which measure no spread."""
    if judged is None or judged.interval is None:
        return None
    lo, hi = judged.interval
    return [lo / 3600, hi / 3600]


def judged_words(judged: Judged | None) -> str | None:
    """How the verified tier's figure and its interval were had, for the row's hover and the entry's page."""
    if judged is None:
        return None
    runs = f"{judged.runs} reproduction run{'s' * (judged.runs != 1)} on {judged.hardware}"
    return (f"the judge's measurement: the {judged.statistic} of {runs}"
            + (", 95% interval of their mean time-to-accuracy (t)" if judged.interval is not None else
               " (no interval: one run measures no spread)"))


def series_words(entry: Entry, rule: str | None = None) -> str | None:
    """How a series entry's interval was had (under `rule`, default its acceptance's), for the row's hover
    and the entry's page; None for a single run."""
    found = acceptance(entry)
    if found is None:
        return None
    n, method, rule = found.get("n"), found.get("ci_method"), rule or found.get("rule")
    return (f"{rule} rule, a series of {entry.fields['runs'].get('n', n)} runs: 95% interval of the time-to-accuracy "
            f"({'bootstrap' if method == 'bootstrap' else 't'})")


def _ordered(rows: list[tuple], interval_key: str | None = None) -> list[dict]:
    """The rows ranked: by value; equal values to the earlier timestamp (a missing one last), then the
    name. A row whose figure has an interval (`interval_key`: a series') and whose interval overlaps
    another's is tied with it: `tied_with` lists the other rows' ranks (the order between them is not
    shown to be real)."""
    def key(item):
        value, entry, _ = item
        stamp = entry.fields.get("timestamp")
        return (value, not isinstance(stamp, str), stamp if isinstance(stamp, str) else "", entry.name)
    ranked = []
    for rank, (_, entry, row) in enumerate(sorted(rows, key=key), start=1):
        ranked.append({"rank": rank, **_common(entry), **row})
    for row in ranked:
        span = row.get(interval_key) if interval_key else None
        row["tied_with"] = [] if span is None else [
            other["rank"] for other in ranked if other is not row and other.get(interval_key) is not None
            and other[interval_key][0] <= span[1] and span[0] <= other[interval_key][1]]
    return ranked


def price_of(entry: Entry, status: str) -> tuple[float | None, str | None]:
    """(USD per hour for all nodes, where the price comes from). The prices table's price of the
    instance the entry's run recorded, for its nodes, when the run verifies (`prices table`); else the
    entry's own costPerHour (`submitter-given price`: typed, given at submit, or of a run not verified
    here), ranked in tables of its own, never mixed with the table's."""
    listed = entries.table_price(entry) if status == VERIFIED else None
    if listed is not None:
        return listed, entries.TABLE_PRICE
    given = entries.cost_per_hour(entry)
    return given, (entries.GIVEN_PRICE if given is not None else None)


def has_run(entry: Entry) -> bool:
    """Whether the entry has its run folder (a training run, an inference record) beside it."""
    run = entries.run_folder(entry.path)
    return run.exists() or run.is_symlink()


def tier(entry: Entry, status: str, judged: Judged | None, archived: frozenset[tuple[str, str]]) -> str | None:
    """The tier an entry ranks in (None: none). Whether it has a run folder, its verification
    `status` (dawnbench.entry_status), the judge's measurement of it (`judged`, a reproduced training
    run's) and, without a run, whether its files are the v1 archive's (`archived`, the list) decide;
    the one place that does, so a new status takes its tier here."""
    if status in (NO_RUN, NO_RECORD) or not has_run(entry):
        return ARCHIVE_TIER if archive.archived(entry, archived) else None
    if entry.kind == "train":
        return VERIFIED_TIER if status == VERIFIED and judged is not None else SUBMITTED_TIER
    return VERIFIED_TIER        # an inference record's latency is the harness's; its model's provenance says more


def ranked_time(entry: Entry, status: str, judged: Judged | None) -> tuple[float, str] | None:
    """The training hours `entry` ranks by and whose they are: the judge's median ("judge") where the
    verified tier ranks it, else the entry's claim ("claimed"); None where its log never reaches the
    threshold. What the board's pages and plots show beside the tables."""
    row = entries.training_row(entry)
    if row is None:
        return None
    if judged is not None and tier(entry, status, judged, frozenset()) == VERIFIED_TIER:
        return judged.seconds / 3600, "judge"
    return row["hours"], "claimed"


def rank_task(task_entries: list[Entry], verification: dict[str, str] | None = None,
              reproduction: dict[str, str] | None = None,
              models: dict[str, str] | None = None, judged: dict[str, Judged] | None = None,
              archived: frozenset[tuple[str, str]] | None = None) -> tuple[dict[str, list[dict]], list[dict]]:
    """The tables of one task, and the entries that rank in none of them (with the reason).
    Rows carry their `verification` status ({entry path: status}, dawnbench.entry_status), training
    rows their `reproduction` ({entry path: words}, dawnbench.entry_status; "not tried" when absent)
    and inference rows their model's provenance (`models`, dawnbench.entry_status.model_provenances).
    `judged` ({entry path: Judged}) is what the judge measured of each reproduced entry: the verified
    tier's time. `archived` is the archive list (dawnbench.archive.load; default the published v1
    entries'). Costs priced from the prices table and costs at a price the entrant gave rank in
    separate tables; an inference entry whose record says its model is no verified run's ranks apart."""
    verification = verification or {}
    reproduction = reproduction or {}
    models = models or {}
    judged = judged or {}
    archived = archive.load() if archived is None else archived
    tables: dict[str, list] = {name: [] for name in TABLES}
    unranked = []
    threshold = entries.log_threshold(task_entries[0].task) if task_entries else None
    for entry in task_entries:
        status = verification.get(str(entry.path), "not checked")
        price, basis = price_of(entry, status)
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
        measured = judged.get(str(entry.path))
        where = tier(entry, status, measured, archived)
        if where is None:
            unranked.append({**_common(entry), "kind": entry.kind, "reason": NOT_ARCHIVED})
            continue
        if entry.kind == "train":
            row = entries.training_row(entry)
            if row is None:
                unranked.append({**_common(entry), "kind": entry.kind,
                                 "reason": f"the log never reaches {entry.metric_column} {threshold:g}"})
                continue
            claimed = row["hours"]
            # the verified tier ranks the judge's measurement; the others, the claim (said in the row)
            hours = measured.seconds / 3600 if where == VERIFIED_TIER else claimed
            base = {"hours": hours, "hms": entries.hms(hours), "epoch": number(row.get("epoch")),
                    "accuracy": row[entry.metric_column], "costPerHour": price, "price_basis": basis,
                    "train_seconds": number(entry.fields.get("train_seconds")),    # shown, never ranked
                    "cost_usd": hours * price if price is not None else None,
                    "tier": where, "time_basis": "judge" if where == VERIFIED_TIER else "claimed",
                    "claimed_hours": claimed, "claimed_hms": entries.hms(claimed),
                    "judge_runs": measured.runs if where == VERIFIED_TIER else None,
                    "judge_hardware": measured.hardware if where == VERIFIED_TIER else None,
                    "verification": status, "reproduction": reproduction.get(str(entry.path), NOT_TRIED)}
            base["reproduced"] = is_reproduced(base["reproduction"])     # "accuracy ... time not compared": no
            # a series' interval is of its own times: beside the figure it ranks by where that is the claim,
            # beside the claim where the judge's time ranks; the verified tier's is of the judge's own runs
            # (entry_status.Judged), so that rows whose intervals overlap are tied there too
            span = interval_hours(entry)
            ranked_span = judged_interval_hours(measured) if where == VERIFIED_TIER else span
            base.update(interval_hours=ranked_span, claimed_interval_hours=span, series=series_words(entry),
                        interval_words=judged_words(measured) if where == VERIFIED_TIER else None)
            base["cost_interval_usd"] = ([ranked_span[0] * price, ranked_span[1] * price]
                                         if ranked_span is not None and price is not None else None)
            series, by_mean = acceptance(entry) or {}, mean_rule(entry) or {}
            mean = number(by_mean.get("tta_mean_seconds"))
            if by_mean.get("verdict") == "accepted" and mean is not None and where != ARCHIVE_TIER:
                # a series' statistics are of its runs: no run, no series. The mean rule ranks the series'
                # mean time (every run's), its interval beside it, whatever rule the task ranks by (docs/RULES.md)
                mean_span = interval_hours(entry, by_mean)
                tables["train_mean"].append((mean / 3600, entry, {
                    **base, "hours": mean / 3600, "hms": entries.hms(mean / 3600), "interval_hours": mean_span,
                    "interval_words": None,
                    "series": series_words(entry, "mean"), "cost_usd": mean / 3600 * price if price is not None else None,
                    "cost_interval_usd": ([mean_span[0] * price, mean_span[1] * price] if mean_span and price is not None
                                          else None),
                    "time_basis": "series mean", "p_value": number(series.get("p_value")),
                    "metric_mean": number(series.get("metric_mean")), "runs_n": series.get("n")}))
            if where == SUBMITTED_TIER:
                tables["train_submitted"].append((hours, entry, base))
                continue
            tables["train_time" if where == VERIFIED_TIER else "train_time_archive"].append((hours, entry, base))
            if price is not None:
                table = ("train_cost_archive" if where == ARCHIVE_TIER else
                         "train_cost" if basis == entries.TABLE_PRICE else "train_cost_given")
                tables[table].append((hours * price, entry, base))
        else:
            accuracy, latency = entries.inference_accuracy(entry), entries.latency_ms(entry)
            reached = accuracy is not None and entry.task.reaches(accuracy, threshold)
            if not reached or latency is None:
                reason = (f"no {entry.metric_column}" if accuracy is None else
                          f"{entry.metric_column} {accuracy:g} is {entry.task.kind.short_side} the threshold "
                          f"{threshold:g}" if not reached else "no latency")
                unranked.append({**_common(entry), "kind": entry.kind, "reason": reason})
                continue
            if basis == entries.TABLE_PRICE:
                cost = price * latency / 3.6e6 * entries.ITEMS
            else:
                cost = entries.inference_cost(entry)
                basis = entries.GIVEN_PRICE if cost is not None else None
            model = models.get(str(entry.path), MODEL_UNVERIFIED)
            base = {"latency_ms": latency, "accuracy": accuracy, "costPerHour": price, "price_basis": basis,
                    "cost_per_10000_usd": cost, "verification": status, "model_provenance": model, "tier": where,
                    "runtime": entries.runtime(entry)}     # what ran the timed calls: ONNX Runtime is not "PyTorch"
            if where == ARCHIVE_TIER:
                tables["inference_latency_archive"].append((latency, entry, base))
                if cost is not None:
                    tables["inference_cost_archive"].append((cost, entry, base))
                continue
            if status == VERIFIED and model == MODEL_UNVERIFIED:
                # its own record says the model is no verified run's (`infer --model FILE`): apart
                tables["inference_latency_unverified_model"].append((latency, entry, base))
                continue
            tables["inference_latency"].append((latency, entry, base))
            if cost is not None:
                table = "inference_cost" if basis == entries.TABLE_PRICE else "inference_cost_given"
                tables[table].append((cost, entry, base))
    return {name: _ordered(rows, "cost_interval_usd" if "cost" in name else "interval_hours")
            for name, rows in tables.items()}, unranked


def load_all(root: Path, report=None, level: str = "v1", warn=None) -> tuple[list[Entry], list[dict]]:
    """Every entry under `root` that `dawnbench validate` accepts at `level`, read once through the
    safe reader (its warnings in entry.notes, each also passed to `warn`); the others as {"task",
    "kind", "entry", "file", "reason"}, the reason validate's first problem line (also passed to
    `report`)."""
    root = Path(root)
    loaded, invalid = [], []
    for path in entries.find(root):
        entry, problems = validate_entries.load_entry(path, root if root.is_dir() else None, level)
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


def drop_failed(loaded: list[Entry], invalid: list[dict], statuses: dict[str, str] | None,
                report=None) -> tuple[list[Entry], list[dict]]:
    """(the entries whose run or record does not fail verification, `invalid` with the others added):
    an entry whose files disagree with themselves is not ranked, it is invalid, the reason listed."""
    statuses = statuses or {}
    kept, invalid = [], list(invalid)
    for entry in loaded:
        status = statuses.get(str(entry.path), "")
        if not status.startswith("failed"):
            kept.append(entry)
            continue
        invalid.append({"task": entry.task.display_name, "kind": entry.kind, "entry": entry.name,
                        "file": str(entry.path),
                        "reason": f"{entry.path}:1: {entries.run_folder(entry.path).name}: verification {status} "
                                  f"(only an entry whose files verify is ranked)"})
        if report:
            report(invalid[-1]["reason"])
    return kept, invalid


def rank(loaded: list[Entry], invalid: list[dict] = (), verification: dict[str, str] | None = None,
         reproduction: dict[str, str] | None = None, models: dict[str, str] | None = None,
         judged: dict[str, Judged] | None = None, archived: frozenset[tuple[str, str]] | None = None) -> dict:
    """The rankings of every task: {"tasks": {display name: {table: [rows]}}, "unranked": [...],
    "invalid": [...], "warnings": [...]} (`invalid` as load_all lists them; `warnings` the ranked
    entries' v1 quirks, one line each; `verification` as dawnbench.entry_status.verification_statuses gives it,
    `reproduction` as dawnbench.entry_status.reproduction_statuses does, shown on training rows, and `judged`
    as dawnbench.entry_status.judged_times does, the verified tier's times)."""
    archived = archive.load() if archived is None else archived
    loaded, invalid = drop_failed(loaded, list(invalid), verification)
    result: dict = {"tasks": {}, "unranked": [], "invalid": invalid,
                    "warnings": [{"task": e.task.display_name, "kind": e.kind, "entry": e.name, "file": str(e.path),
                                  "warning": note} for e in loaded for note in e.notes]}
    for task in TASKS.values():
        tables, unranked = rank_task([e for e in loaded if e.task is task], verification, reproduction, models,
                                     judged, archived)
        result["tasks"][task.display_name] = tables
        result["unranked"] += [{"task": task.display_name, **u} for u in unranked]
    return result


def metric_label(task: Task, value: float) -> str:
    """A metric value in the logs' units as the pages show it: accuracies are percent ("94.2%"),
    F1 a fraction ("0.76")."""
    return task.figure.shown(value)


def threshold_label(task: Task) -> str:
    """The target as the pages say it, with the way it is met: "top1Accuracy at least 94%", "errorRate
    at most 0.08" (a task where lower is better)."""
    return f"{task.accuracy_field} {task.kind.goal} {metric_label(task, entries.log_threshold(task))}"
