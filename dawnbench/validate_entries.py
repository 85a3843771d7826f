"""`dawnbench validate PATH...`: check DAWNBench v1 entries (files or whole trees).

One line per problem, `FILE:LINE: FIELD: what is wrong (how to fix)`, then a count line; exit
status 0 only when everything is valid. The fields are checked against the entry's JSON Schema
(`dawnbench.schemas`), whose errors become those lines; what a schema cannot say (the log, the
threshold, costs and times that must agree, eval-set sizes) is checked here. An entry is untrusted
input: it is read through `harness.safe_read` and parsed as data only, its log is read only from
the entry's own folder, and no input makes this module raise.

Two levels. `strict` (the default here, and what `dawnbench submit` writes) is the project's rules
for new entries. `v1` (the leaderboard's default) admits every entry the DAWNBench v1 format
admitted (stanford-futuredata/dawn-bench-entries, its README and tests): each strict rule that v1
did not impose is a warning there, with its file:line, and the entry is read as v1 read it,
normalized only where the intent is unambiguous (columns by name, an F1 in percent divided by 100,
a date without its zeros padded). Each warning says how the entry was read.
"""
from __future__ import annotations

import bisect
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dawnbench import convergence, entries, judges, prices, schemas, series_record
from harness import safe_read
from harness.arguments import MAX_USD_PER_HOUR, Parser, file_or_folder, tool_main
from harness.errors import EXIT_FAILED, EXIT_OK, DawnbenchError, UsageError, command, report
from harness.tasks import FIGURES, Task

PROG = command("validate")
# Every figure field an entry may carry, and its unit, as the tasks' kinds name them (harness.task_kinds)
ACCURACY_FIELDS = FIGURES
REVIEW = "review_flags"          # the field of a convergence guard's note: a warning, never a problem
REL_TOL = 0.01                  # cost and time consistency: within 1%
HOURS_ULP = 1e-6                # the logs' hours have 6 decimals: tolerate their rounding
LEVELS = ("strict", "v1")
LEVEL_HELP = ("strict: the project's rules, for new entries (what `dawnbench submit` writes); "
              "v1: every entry the DAWNBench v1 format admitted (the published 2017-2020 entries): a strict rule "
              "v1 did not impose is a warning, and the entry is read as v1 read it")
# v1's own required fields (its tests/test_submissions.py; inference entries also need latency):
# the others strict requires (codeURL, misc) were optional in v1
V1_REQUIRED = ("version", "author", "authorEmail", "framework", "model", "hardware", "timestamp")
# fields of the v1 format itself: one in the other kind's entry is a v1 quirk (v1 checked no such thing)
V1_FIELDS = ("logFilename", "usedBlacklist", "latency", "cost")
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s]+")
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")      # C0, DEL and C1


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    field: str
    message: str
    warning: bool = False      # a v1 quirk, tolerated: the entry is valid at the v1 level

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}: {self.field}: {'warning: ' * self.warning}{self.message}"
        return text.replace("\r", "\\r").replace("\n", "\\n")


# ---------------------------------------------------------------- values, shown and checked

def show(value: object, limit: int = 60) -> str:
    """A value from a file, quoted and cut short for a one-line message."""
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def as_float(v: object) -> float:
    """A JSON number as a float; an int too large for a float is infinite."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


# ---------------------------------------------------------------- reading files

def _scan(text: str) -> tuple[dict[tuple, int], list[tuple[tuple | None, int]]]:
    """For a text that json.loads accepted: the line of every key reached through objects only,
    {("misc", "eval_samples"): 14, ...}, and (key path, line) of each NaN/Infinity literal.
    Iterative, so nesting depth costs no recursion."""
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line_at(pos: int) -> int:
        return bisect.bisect_left(newlines, pos) + 1

    keys: dict[tuple, int] = {}
    constants: list[tuple[tuple | None, int]] = []
    stack: list[list] = []     # [is_object, path of the container or None, expecting a key, current key]

    def value_path() -> tuple | None:
        if not stack:
            return ()
        is_obj, path, _, key = stack[-1]
        return path + (key,) if is_obj and path is not None and key is not None else None

    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n:":
            i += 1
        elif c == ",":
            if stack and stack[-1][0]:
                stack[-1][2] = True
            i += 1
        elif c == '"':
            s, end = json.decoder.scanstring(text, i + 1)
            if stack and stack[-1][0] and stack[-1][2]:
                stack[-1][2], stack[-1][3] = False, s
                if stack[-1][1] is not None:
                    keys[stack[-1][1] + (s,)] = line_at(i)
            i = end
        elif c in "{[":
            stack.append([c == "{", value_path(), True, None])
            i += 1
        elif c in "}]":
            if stack:
                stack.pop()
            i += 1
        else:
            j = i
            while j < n and text[j] not in ",]} \t\r\n":
                j += 1
            if text[i:j] in ("NaN", "Infinity", "-Infinity"):
                constants.append((value_path(), line_at(i)))
            i = max(j, i + 1)
    return keys, constants


UNREADABLE = object()     # read_json's value for a file that holds no JSON value


def field_label(path: tuple | None) -> str:
    """A key path as the FIELD of a problem line: dotted, each key reduced to [A-Za-z0-9_]."""
    if not path:
        return "json"
    return ".".join(re.sub(r"[^A-Za-z0-9_]+", "_", str(key)) or "_" for key in path)


def read_json(path: Path, root: Path | None = None) -> tuple[object, dict[tuple, int], list[Problem]]:
    """(value or UNREADABLE, key lines, problems) for a JSON file of the entries tree `root`
    (default: the tree the file's place names)."""
    root = entries.tree_root(path) if root is None else root
    try:
        text = safe_read.decode(safe_read.read_bytes(path, root, safe_read.MAX_JSON_BYTES))
        value = safe_read.parse_json(text)
    except safe_read.Refused as e:
        return UNREADABLE, {}, [Problem(str(path), e.line, "json", e.reason)]
    try:
        keys, constants = _scan(text)
    except (ValueError, IndexError, RecursionError):     # cannot happen for accepted JSON: lines fall back to 1
        keys, constants = {}, []
    problems = [Problem(str(path), line, field_label(keys_path),
                        "NaN/Infinity is not a JSON number (write a finite number or null)")
                for keys_path, line in constants]
    return value, keys, problems


# ---------------------------------------------------------------- one entry

class _Report:
    def __init__(self, path: Path, keys: dict[tuple, int], level: str = "strict"):
        self.file, self.keys, self.problems, self.level = str(path), keys, [], level
        self.fixes: dict[str, object] = {}      # v1: field -> the value it is read as

    def at(self, field: str, message: str, line: int | None = None, warning: bool = False) -> None:
        if line is None:
            line = self.keys.get(tuple(field.split(".")), self.keys.get((field.split(".")[0],), 1))
        self.problems.append(Problem(self.file, line, field, message, warning))

    def quirk(self, field: str, strict: str, v1: str, line: int | None = None) -> bool:
        """A strict rule that DAWNBench v1 did not impose: the `strict` problem at the strict level,
        the `v1` warning (how the entry is read) at the v1 level. True when it is only a warning."""
        tolerated = self.level == "v1"
        self.at(field, v1 if tolerated else strict, line, warning=tolerated)
        return tolerated


def _expected_eval(task: Task, fields: dict) -> tuple[int, str]:
    used = fields.get("usedBlacklist") is True
    size = entries.eval_set_size(task, used)
    if task.name in entries.BLACKLIST_EXAMPLES:
        other = entries.eval_set_size(task, not used)
        how = (f"{size:,} examples with usedBlacklist: true" if used else
               f"{size:,} examples ({other:,} with usedBlacklist: true)")
    else:
        how = f"{size:,} examples"
    return size, how


def _units_of_value(report: _Report, name: str, value: float, line: int | None = None) -> bool:
    """False (and a problem) when an accuracy is written in the other unit."""
    if value < 0:
        report.at(name, f"{value:g} is negative (an accuracy is at least 0)", line)
        return False
    figure = FIGURES[name]
    if not figure.percent and figure.upper is not None and value > figure.upper:
        report.at(name, f"{value:g} is above 1: a percent in a fraction column "
                        f"(write {figure.label} as a fraction, e.g. {value / 100:g})", line)
        return False
    if figure.percent and value > 100:
        report.at(name, f"{value:g} is above 100 (write the accuracy in percent, 0-100)", line)
        return False
    return True


def _close(a: float, b: float, abs_tol: float = 0.0) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=abs_tol)


def check_tsv(report: _Report, log: Path, task: Task, threshold: float,
              root: Path) -> list[tuple[int, dict[str, float]]] | None:
    """Problems of a training log (reported against the log's own file); its numeric rows, each
    with the task's columns in the task's order, or None when they cannot be read by column."""
    sub = _Report(log, {}, report.level)
    rows = _check_tsv(sub, log, task, threshold, root)
    report.problems.extend(sub.problems)
    return rows


def _check_tsv(report: _Report, log: Path, task: Task, threshold: float, root: Path):
    try:
        text = safe_read.read_text(log, root)
    except safe_read.Refused as e:
        report.problems.append(Problem(str(log), e.line, "tsv", e.reason))
        return None
    lines = entries.split_tsv(text)
    expected = list(task.tsv_columns)
    want = "\\t".join(expected)
    if not lines:
        report.at("header", f"empty log (write the header {want!r} and one row per epoch)", 1)
        return None
    header_line, header = lines[0]
    if header != expected:
        if sorted(header) == sorted(expected):
            report.quirk("header", f"columns in another order: {' '.join(header)}; {task.display_name} logs "
                                   f"have {', '.join(expected)} in this order (reorder the columns)",
                         f"columns in another order: {' '.join(header)}; read by name, as v1 read them "
                         f"(as {' '.join(expected)})", header_line)
        else:
            spaced = len(header) == 1 and header[0].split() == expected
            fix = "separate the columns with tabs" if spaced else f"write the header {want!r}"
            report.at("header", f"is {show(chr(9).join(header))}, not {want!r} for {task.display_name} ({fix})",
                      header_line)
            return None
    if len(lines) == 1:
        report.at("header", "no rows after the header (write one row per evaluated epoch)", header_line)
        return None
    rows: list[tuple[int, dict[str, float]]] = []
    number = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
    for line, cells in lines[1:]:
        if len(cells) != len(header):
            report.at("row", f"has {len(cells)} cells, the header {len(header)} "
                             f"(one tab-separated value per column)", line)
            continue
        row: dict[str, float] = {}
        for column, cell in zip(header, cells):
            value = float(cell) if number.fullmatch(cell) else math.nan
            if not math.isfinite(value):
                report.at(column, f"{show(cell)} is not a finite number (write a decimal number)", line)
            else:
                row[column] = value
        if len(row) == len(header):
            rows.append((line, {column: row[column] for column in expected} if header != expected else row))
    prev: tuple[float, float] | None = None
    for line, row in rows:
        if row["hours"] < 0:
            report.at("hours", f"{row['hours']:g} is negative (hours since the start of the run)", line)
        if prev is not None:
            if row["epoch"] <= prev[0]:
                report.quirk("epoch", f"{row['epoch']:g} does not increase (previous row: {prev[0]:g}) "
                                      f"(one row per epoch, in order)",
                             f"{row['epoch']:g} does not increase (previous row: {prev[0]:g}); the row is read "
                             f"in its place, as v1 read it (the first row at the threshold ranks)", line)
            if row["hours"] < prev[1]:
                report.at("hours", f"{row['hours']:g} goes backwards (previous row: {prev[1]:g}) "
                                   f"(hours are cumulative on-clock time, never decreasing)", line)
        prev = (row["epoch"], row["hours"])
    units_ok = True
    for column in expected[2:]:
        values = [(line, row[column]) for line, row in rows]
        bad = next(((line, v) for line, v in values if not _units_of_value(report, column, v, line)), None)
        if bad:
            units_ok = units_ok and column != task.accuracy_field
            continue
        if FIGURES[column].percent and values and all(0 < v <= 1 for _, v in values):
            report.at(column, f"every value is in (0, 1]: a fraction in a percent column "
                              f"(write {values[-1][1]:g} as {100 * values[-1][1]:g})", values[0][0])
            if column == task.accuracy_field:
                units_ok = False
    column = task.accuracy_field
    reached = next(((line, row) for line, row in rows if task.reaches(row[column], threshold)), None)
    if units_ok and reached is not None and reached[1]["hours"] == 0:
        report.at("hours", "0 is not positive on the row that reaches the threshold (it would rank in no time; "
                           "hours are on-clock time since the start of the run)", reached[0])
    if units_ok and rows and reached is None:
        best = task.kind.best(row[column] for _, row in rows)
        report.at(column, f"the threshold {threshold:g} is never reached (best {best:g}) "
                          f"(train until a logged epoch reaches it)", rows[-1][0])
    return rows


def _threshold(report: _Report, task: Task, fields: dict, allow_unofficial: bool) -> float:
    """The threshold the entry must reach, in the units of its log."""
    official = entries.log_threshold(task)
    marked = fields.get("official_threshold")
    recorded = fields.get("threshold")
    if marked is False:
        if not allow_unofficial:
            report.at("official_threshold", "false: a run to a lowered threshold is a smoke test, not an entry "
                                            "(rerun to the official threshold)")
        elif schemas.conforms(("threshold",), recorded) and task.figure.holds(as_float(recorded)):
            return round(task.figure.to_log(as_float(recorded)), 6)
        else:       # in its task's figure's range: at most 1 for a fraction, no bound for bits per byte
            written = "a fraction" if task.figure.upper == 1 else f"a number ({task.figure.unit_words})"
            report.at("threshold", f"missing or not {written} {task.figure.range_text} for an unofficial "
                                   f"entry (record the threshold it was run to)")
    elif schemas.conforms(("threshold",), recorded) and not math.isclose(as_float(recorded), task.threshold):
        report.at("threshold", f"{show(recorded)} is not {task.display_name}'s threshold {task.threshold:g} "
                               f"(write {task.threshold:g}, or mark the entry official_threshold: false)")
    return official


def _official(report: _Report, fields: dict, allow_unofficial: bool) -> None:
    """An entry of a run that was not official (harness/provenance.py) is not an entry; an entry
    without the field predates it (DAWNBench v1) and is judged by its other fields."""
    official, reasons = fields.get("official"), fields.get("unofficial_reasons")
    listed = [r for r in reasons if isinstance(r, str)] if isinstance(reasons, list) else []
    if official is False and not allow_unofficial:
        why = "; ".join(listed) if listed else "no reason recorded"
        report.at("official", f"false: the run was not official: {show(why, 400)[1:-1]} "
                              f"(rerun from committed code without overrides)")
    elif official is True and listed:
        report.at("unofficial_reasons", f"lists {len(listed)} reason{'s' * (len(listed) != 1)} the run is not "
                                        f"official, but official is true (an official run has none)")
    elif official is True and fields.get("official_threshold") is False:
        report.at("official", "true, but official_threshold is false (a run to a lowered threshold is not official)")


def _schema_problems(report: _Report, fields: dict, task: Task | None, kind: str | None) -> set[str]:
    """The entry's breaks of its kind's JSON Schema as problem lines, one per field, in the format's
    order (required fields, then each field and its subfields, then fields of the other kind); and
    the names of the fields whose own value is wrong (their subfields aside)."""
    order = {name: n for n, name in enumerate(schemas.FIELDS)}

    def position(path: tuple) -> tuple:
        subs = schemas.SUBFIELDS.get(path[0], ())
        return (2, order[path[0]], -1 if len(path) == 1 else subs.index(path[1]) if path[1] in subs else len(subs))

    # path -> (position, field, message, line, the v1 warning instead: None where v1 refused it too)
    found: dict[tuple, tuple[tuple, str, str, int | None, str | None]] = {}
    required = [*schemas.REQUIRED]
    if kind == "inference":
        # the accuracy field an inference entry needs depends on its task, which is its folder's, not a field
        column = task.accuracy_field
        if column not in fields:
            found[(column,)] = ((1, 1), column, f"required in a {task.display_name} inference entry "
                                                f'(add "{column}": {schemas.example((column,))})', 1, None)
    bad = set()
    for error in schemas.errors(fields, kind):
        path = tuple(error.path)
        if error.validator == "required" and isinstance(error.instance, dict):
            for name in (n for n in error.validator_value if n not in error.instance):
                where, add = path + (name,), f'(add "{name}": {schemas.example(path + (name,))})'
                if path:
                    found.setdefault(where, (position(where), field_label(where), f"missing {add}", None, None))
                elif name in required:
                    optional = None if name in V1_REQUIRED else "missing: optional in v1 (new entries must have it)"
                    found.setdefault(where, ((0, required.index(name)), name, f"required field missing {add}", 1,
                                             optional))
                else:
                    found.setdefault(where, ((1, 0), name, f"required in a {task.display_name} {kind} entry {add}",
                                             1, None))
        elif path and path[0] in order and error.validator == "not":     # a field of the other kind of entry
            other = "inference" if kind == "train" else "training"
            v1 = (f"belongs in a {other} entry; not read here (v1 did not check it)"
                  if len(path) == 1 and path[0] in V1_FIELDS else None)
            found.setdefault(path + (None,), ((4, order[path[0]]), path[0],
                                              f"belongs in a {other} entry (remove it from this {kind} entry)",
                                              None, v1))
        elif path and path[0] in order:
            spec = schemas.field(path) or {}
            found.setdefault(path, (position(path), field_label(path),
                                    f"must be {spec.get('description', 'as the format says')}, not "
                                    f"{show(error.instance)} (write e.g. {schemas.example(path)})", None,
                                    _v1_reading(report, path, error.instance)))
            if len(path) == 1:
                bad.add(path[0])
    for _, label, message, line, v1 in sorted(found.values(), key=lambda item: item[0]):
        if v1 is None:
            report.at(label, message, line)
        else:
            report.quirk(label, message, v1, line)
    return bad


def _v1_reading(report: _Report, path: tuple, value: object) -> str | None:
    """How v1 read a field value the strict schema refuses (and the value it is read as, in
    report.fixes), or None where v1 refused it too."""
    if path == ("timestamp",) and isinstance(value, str):
        try:
            date = datetime.strptime(value, "%Y-%m-%d")     # v1's own check: it takes 2019-7-22
        except ValueError:
            return None
        padded = date.date().isoformat()       # strftime's %Y drops the zeros of a year before 1000
        if report.level == "v1":
            report.fixes["timestamp"] = padded
        return f"{show(value)} is not zero-padded yyyy-mm-dd; read as {padded}, as v1 read it"
    if path == ("misc",):
        return f"is {show(value, 40)}, not an object; shown as written (v1 did not check it)"
    return None


def _inspect(path: Path, allow_unofficial: bool, root: Path | None, level: str = "strict"):
    """(problems, the log it names, its fields, its log's rows, task, kind, the fields as read: at the
    v1 level, normalized) of one entry JSON."""
    root = entries.tree_root(path) if root is None else root
    value, keys, problems = read_json(path, root)
    report = _Report(path, keys, level)
    report.problems.extend(problems)
    if CONTROL.search(Path(path).name):     # at both levels: a name is shown on every line and page
        report.at("path", f"the file name {show(Path(path).name)} holds a control character (a newline, a tab, "
                          f"an escape): rename the entry with letters, digits, '-', '.' and '_'", 1)
    try:
        task, kind = entries.locate(path)
    except entries.EntryError:
        task, kind = None, None
        report.at("path", f"not in an entry folder: entries live in <{'|'.join(entries.TASK_BY_DIR)}>/"
                          f"<{'|'.join(entries.KINDS)}>/ (move the file there)", 1)
    if value is UNREADABLE:
        return _finish(report, problems), None, None, None, task, kind, None
    if not isinstance(value, dict):
        report.at("json", f"the entry is a JSON {type(value).__name__ if value is not None else 'null'}, "
                          f"not an object (write {{\"version\": \"v1.0\", ...}})", 1)
        return _finish(report, problems), None, None, None, task, kind, None
    fields = value
    bad = _schema_problems(report, fields, task, kind)
    valid = {name: v for name, v in fields.items() if name in schemas.FIELDS and name not in bad}
    log, rows = None, None
    if task is not None:
        _check_eval_counts(report, task, fields)
        threshold = _threshold(report, task, fields, allow_unofficial)
        _official(report, fields, allow_unofficial)
        if fields.get("usedBlacklist") is True and task.name not in entries.BLACKLIST_EXAMPLES:
            report.at("usedBlacklist", f"only ImageNet has a blacklist (remove it from this "
                                       f"{task.display_name} entry)")
        if kind == "train":
            log, rows = _check_train(report, path, task, fields, valid, threshold, root)
        else:
            _check_inference(report, task, fields, valid, threshold)
    _check_runs(report, valid)
    _check_price_per_node(report, valid)
    _check_price_record(report, fields)
    if kind in entries.KINDS:
        _check_against_run(report, path, kind, fields, root, allow_unofficial)
    if kind == "train":
        _check_series(report, path, fields, root)
        for flag in review_flags(path, root):     # a note for the reviewer, never a refusal
            report.at(REVIEW, flag, warning=True)
    return _finish(report, problems), log, fields, rows, task, kind, {**fields, **report.fixes}


def check_entry(path: Path, allow_unofficial: bool = False, root: Path | None = None,
                level: str = "strict") -> tuple[list[Problem], Path | None]:
    """The problems of one entry JSON (and of its log) at `level`, warnings included, and the log it
    names (training entries). Files are read from the entries tree `root` only (default: the tree
    the entry's place names)."""
    problems, log, *_ = _inspect(path, allow_unofficial, root, level)
    return problems, log


def load_entry(path: Path, root: Path | None = None,
               level: str = "strict") -> tuple[entries.Entry | None, list[Problem]]:
    """An entry as the leaderboard ranks it, built from the very bytes validated, or None and the
    problems that make it invalid. At the v1 level its fields are read as v1 read them, its
    warnings are its notes (and the returned problems), and `written` keeps the fields as written
    when they were normalized."""
    problems, _, written, rows, task, kind, fields = _inspect(path, False, root, level)
    errors = [p for p in problems if not p.warning]
    if errors:
        return None, errors
    warnings = [p for p in problems if p.warning]
    return entries.Entry(path=Path(path), kind=kind, task=task, fields=fields,
                         rows=[row for _, row in rows or []], notes=[str(w) for w in warnings if w.field != REVIEW],
                         written=written if fields != written else None,
                         review_flags=[w.message for w in warnings if w.field == REVIEW]), warnings


def _finish(report: _Report, constants: list[Problem]) -> list[Problem]:
    # a NaN literal in a checked field is already reported by that field's check
    seen = {(p.line, p.field) for p in report.problems[len(constants):]}
    kept = [p for p in constants if (p.line, p.field) not in seen]
    ordered = kept + report.problems[len(constants):]
    return sorted(ordered, key=lambda p: (p.file, p.line))


def _check_eval_counts(report: _Report, task: Task, fields: dict) -> None:
    size, how = _expected_eval(task, fields)
    misc = fields.get("misc")
    recorded = [("eval_examples", fields.get("eval_examples"))]
    if isinstance(misc, dict) and "eval_samples" in misc:
        recorded.append(("misc.eval_samples", misc["eval_samples"]))
    for name, value in recorded:
        if value is None and name == "eval_examples":
            continue
        if not (isinstance(value, int) and not isinstance(value, bool)):
            if name != "eval_examples":     # eval_examples' type is checked with the other fields
                report.at(name, f"must be an integer, not {show(value)} (write {size})")
        elif value != size:
            report.at(name, f"{show(value)} examples; the {task.display_name} eval set has {how} "
                            f"(evaluate on the whole eval set)")


def _log_of(report: _Report, path: Path, fields: dict) -> Path | None:
    name = fields.get("logFilename")
    folder = path.parent
    if "logFilename" not in fields:
        return path.with_suffix(".tsv")          # old entries: the log has the JSON's stem
    if not isinstance(name, str) or not name.strip():
        return None
    if CONTROL.search(name):    # at both levels: v1's names were plain; a newline forges lines wherever it is shown
        report.at("logFilename", f"{show(name)} holds a control character (a newline, a tab, an escape): "
                                 f"write the log's plain file name, e.g. \"{path.stem}.tsv\"")
        return None
    if report.level == "v1" and URL.fullmatch(name):       # strict refuses it below, as any other non-file name
        report.at("logFilename", f"{show(name)} is a URL to the logs, as v1 had it; the log read is "
                                 f"{path.stem}.tsv, found by the JSON's own name as v1 found it", warning=True)
        return path.with_suffix(".tsv")
    if ("/" in name or "\\" in name or "\0" in name or name in (".", "..")
            or not name.endswith(".tsv")):
        report.at("logFilename", f"{show(name)} must be a .tsv file name in the entry's own folder "
                                 f"(write e.g. \"{path.stem}.tsv\")")
        return None
    log = folder / name
    try:
        if log.is_symlink() and log.resolve().parent != folder.resolve():
            report.at("logFilename", f"{show(name)} is a link out of the entry's folder "
                                     f"(put the log itself next to the JSON)")
            return None
    except (OSError, RuntimeError, ValueError):
        report.at("logFilename", f"{show(name)} cannot be resolved (put the log itself next to the JSON)")
        return None
    return log


def _check_train(report: _Report, path: Path, task: Task, fields: dict, valid: dict, threshold: float,
                 root: Path) -> tuple[Path | None, list | None]:
    """(the log, its rows as (line, numbers)) of a training entry, its problems reported."""
    log = _log_of(report, path, fields)
    if log is None:
        return None, None
    try:
        exists = log.exists()
    except (OSError, ValueError):
        exists = False
    if not exists:
        report.at("logFilename", f"the training log {log.name} is missing (put the TSV next to the JSON"
                                 f"{'' if 'logFilename' in fields else ', or name it in logFilename'})")
        return log, None
    rows = check_tsv(report, log, task, threshold, root)
    if not rows:
        return log, rows
    column = task.accuracy_field
    reached = next((row for _, row in rows if task.reaches(row[column], threshold)), None)
    if reached is None:
        return log, rows
    hours = reached["hours"]
    if "tta_seconds" in valid:
        tta = as_float(valid["tta_seconds"])
        if not _close(tta, hours * 3600, abs_tol=HOURS_ULP * 3600 * 2):
            report.at("tta_seconds", f"{tta:g} s, but the log reaches the threshold at {hours:g} h = "
                                     f"{hours * 3600:g} s (they must agree within 1%)")
    cost_usd, per_hour = valid.get("cost_usd"), valid.get("costPerHour")
    if cost_usd is not None:
        if per_hour is None:
            report.at("cost_usd", "given without costPerHour (add costPerHour, or set cost_usd to null)")
        else:
            expected = hours * as_float(per_hour)
            if not _close(as_float(cost_usd), expected, abs_tol=HOURS_ULP * 2 * as_float(per_hour)):
                report.at("cost_usd", f"{as_float(cost_usd):g} USD, but {hours:g} h x {as_float(per_hour):g} "
                                      f"USD/h = {expected:g} USD (fix cost_usd or costPerHour)")
    return log, rows


def _check_inference(report: _Report, task: Task, fields: dict, valid: dict, threshold: float) -> None:
    for name in ACCURACY_FIELDS:
        if name in valid:
            value = as_float(valid[name])
            figure = ACCURACY_FIELDS[name]
            # strict: _units_of_value refuses it
            if report.level == "v1" and not figure.percent and figure.upper == 1 and 1 < value <= 100:
                report.at(name, f"{value:g} is above 1: a percent, read as the fraction {value / 100:g} "
                                f"(divided by 100)", warning=True)
                value = value / 100
                report.fixes[name] = value
            ok = _units_of_value(report, name, value)
            if ok and figure.percent and 0 < value <= 1:
                report.at(name, f"{value:g} looks like a fraction; {name} is in percent (write {100 * value:g})")
                ok = False
            if ok and name == task.accuracy_field and not task.reaches(value, threshold):
                report.at(name, f"{value:g} is {task.kind.short_side} the threshold {threshold:g} "
                                f"(an inference entry must reach it: submit a model that does)")
    latency, cost, per_hour = valid.get("latency"), valid.get("cost"), valid.get("costPerHour")
    if latency is not None and cost is not None and per_hour is not None:
        expected = as_float(per_hour) * as_float(latency) / 3.6e6
        if not _close(as_float(cost), expected, abs_tol=1e-15):
            report.at("cost", f"{as_float(cost):g} USD per item, but costPerHour x latency / 3.6e6 = "
                              f"{expected:g} (fix cost, costPerHour or latency)")
    per_10k = valid.get("cost_per_10k_items_usd")
    if per_10k is not None and cost is not None and not _close(as_float(per_10k), 1e4 * as_float(cost),
                                                                abs_tol=1e-11):
        report.at("cost_per_10k_items_usd", f"{as_float(per_10k):g}, but cost x 10,000 = "
                                            f"{1e4 * as_float(cost):g} (fix one of them)")
    stats = valid.get("latency_ms")
    if isinstance(stats, dict) and all(schemas.conforms(("latency_ms", k), stats.get(k))
                                       for k in ("mean", "p50", "p90", "p99")):
        if latency is not None and not _close(as_float(stats["mean"]), as_float(latency), abs_tol=1e-9):
            report.at("latency_ms.mean", f"{as_float(stats['mean']):g} ms, but latency is "
                                         f"{as_float(latency):g} ms (they are the same figure)")
        if not as_float(stats["p50"]) <= as_float(stats["p90"]) <= as_float(stats["p99"]):
            report.at("latency_ms.p90", "percentiles out of order (need p50 <= p90 <= p99)")


def _check_price_per_node(report: _Report, valid: dict) -> None:
    """costPerHour is every node's together: at most MAX_USD_PER_HOUR a node (the schema bounds it for the
    largest count of nodes; an entry that gives its count is held to its own)."""
    per_hour, nodes = valid.get("costPerHour"), valid.get("nodes")
    if per_hour is not None and nodes is not None and as_float(per_hour) > MAX_USD_PER_HOUR * nodes:
        report.at("costPerHour", f"{as_float(per_hour):g} USD per hour for {nodes} node{'s' * (nodes != 1)} is over "
                                 f"{MAX_USD_PER_HOUR:,} USD per hour a node (give the on-demand price of the "
                                 f"machines used)")


def _check_price_record(report: _Report, fields: dict) -> None:
    """An entry's `price` record that names an instance of the prices table is the table's: this
    checkout's (prices.JUDGE_TABLE, never $DAWNBENCH_PRICES), at the table's price, and its costPerHour
    that price for its nodes. The board prices from the table anyway; the entry file must not say
    otherwise (a record made under a table of the entrant's, copied consistently into its run)."""
    record = fields.get("price")
    problem = prices.table_disagreement(record, prices.JUDGE_TABLE)
    if problem:
        report.at("price", f"{problem}: a named instance is priced from the table (submit the run priced with "
                           f"--instance {record['instance']}, or --cost-per-hour USD for a price of your own)")
        return
    if not _listed(record):
        return
    nodes, per_hour, usd = fields.get("nodes", 1), fields.get("costPerHour"), record["usd_per_hour"]
    if is_number(per_hour) and is_number(nodes) and not _close(as_float(per_hour), as_float(usd) * as_float(nodes)):
        report.at("costPerHour", f"{as_float(per_hour):g} USD per hour, but the price record's {as_float(usd):g} for "
                                 f"{nodes} node{'s' * (nodes != 1)} is {as_float(usd) * as_float(nodes):g} (they are "
                                 f"the same figure)")


def _listed(record: object) -> bool:
    """Whether a price record names an instance of the judge's table."""
    try:
        return isinstance(record, dict) and isinstance(record.get("instance"), str) and \
            record["instance"].strip().lower() in prices.load(prices.JUDGE_TABLE)
    except prices.PriceError:
        return False


def _check_runs(report: _Report, valid: dict) -> None:
    runs = valid.get("runs")
    if (isinstance(runs, dict) and all(schemas.conforms(("runs", k), runs.get(k)) for k in ("n", "converged"))
            and runs["converged"] > runs["n"]):
        report.at("runs.converged", f"{runs['converged']} converged of {runs['n']} runs "
                                    f"(converged counts runs, at most n)")


# ---------------------------------------------------------------- the entry against the files behind it

def _same(a: object, b: object) -> bool:
    """Two figures of an entry and of its record agree: numbers within rounding, anything else equal."""
    if is_number(a) and is_number(b):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def backed_fields(kind: str, record: dict, fields: dict) -> dict[str, object]:
    """{entry field: the value its run's record gives it} for every field of an entry that has a file
    behind it: the training run's result.json, or the inference's inference.json (`dawnbench submit`
    copies either into <stem>.run/). A price given at submit time (`price_added`) stands for the
    record's missing price, for as many nodes as the record ran on."""
    nodes = record.get("nodes", 1)
    backed: dict[str, object] = {"nodes": nodes, "reference": record.get("reference")}
    if kind == "train":
        backed.update({name: record.get(name) for name in ("tta_seconds", "train_seconds", "threshold",
                                                           "eval_examples")})
        recorded = record.get("precision")
        backed["precision"] = recorded.get("train") if isinstance(recorded, dict) else None
    else:
        backed.update({"latency": record.get("latency"), "eval_examples": record.get("items"),
                       "threshold": record.get("threshold")})
        stats = record.get("latency_ms")
        if isinstance(stats, dict):
            backed["latency_ms"] = {k: stats.get(k) for k in ("mean", "p50", "p90", "p99")}
        for figure in FIGURES.values():
            if is_number(record.get(figure.metric)):
                backed[figure.field] = figure.entry_value(record[figure.metric])
        if isinstance(record.get("model_source"), dict):
            backed["misc.model_source"] = record["model_source"]
    per_hour = record.get("costPerHour")
    added = fields.get("price_added")
    if per_hour is None and isinstance(added, dict) and is_number(added.get("usd_per_hour")) and is_number(nodes):
        per_hour = added["usd_per_hour"] * nodes          # priced at submit: that price, for the run's nodes
    else:
        backed.update(instance=record.get("instance"), price=record.get("price"))
    backed["costPerHour"] = per_hour
    if kind == "train" and is_number(per_hour) and is_number(record.get("tta_seconds")):
        backed["cost_usd"] = per_hour * record["tta_seconds"] / 3600.0
    elif kind == "inference" and is_number(per_hour) and is_number(record.get("latency")):
        backed["cost"] = per_hour * record["latency"] / 3.6e6
        backed["cost_per_10k_items_usd"] = backed["cost"] * 1e4
    return backed


def _check_against_run(report: _Report, path: Path, kind: str, fields: dict, root: Path,
                       allow_unofficial: bool = False) -> None:
    """An entry with its run folder beside it says what its run's record says: every field with a file
    behind it (time, cost, price, nodes, latency, accuracy, the model's source, the verdict) agrees
    with that file, or the entry is invalid, the file and both values named. Nothing an entrant edits
    in the entry JSON alone sets a figure the leaderboard ranks."""
    run = entries.run_folder(path)
    try:
        present = run.exists() or run.is_symlink()
        if not present:
            if "rules_version" in fields:       # written by `dawnbench submit`, which puts its run beside it
                report.at("rules_version", f"the entry is one `dawnbench submit` wrote, but its run {run.name}/ is "
                                           f"not beside it: its figures have no file behind them (submit the run "
                                           f"again, or copy {run.name}/ with the entry)")
            return
        folder_ok = not run.is_symlink() and run.is_dir() and safe_read.inside(run, root)
    except (OSError, ValueError):
        folder_ok = False
    name = entries.RUN_RECORD[kind]
    if not folder_ok:
        report.at("path", f"{run.name} is not a folder of the entries tree (the run `dawnbench submit` put "
                          f"beside the entry; submit the run again)", 1)
        return
    try:
        record = safe_read.read_json(run / name, root)
    except safe_read.Refused as e:
        report.at("path", f"{run.name}/{name}: {e.reason} (the entry's figures are that record's; submit the "
                          f"run again)", 1)
        return
    if not isinstance(record, dict):
        report.at("path", f"{run.name}/{name} is not a JSON object (submit the run again)", 1)
        return
    where = f"{run.name}/{name}"
    for field, expected in backed_fields(kind, record, fields).items():
        head, _, sub = field.partition(".")
        given = fields.get(head)
        given = given.get(sub) if sub and isinstance(given, dict) else given
        if given is None and expected is None:
            continue
        if (given is None or expected is None) and field in ("nodes", "eval_examples", "threshold", "reference",
                                                             "misc.model_source", "train_seconds") \
                or (given is None and field == "precision"):
            continue            # left out of one of them (an older harness's record, an older entry): the other stands
        if not _same(given, expected):
            report.at(field, f"{show(given)} is not what its run recorded, {show(expected)} ({where}): an "
                             f"entry's figures are its run's (submit the run again; do not edit the entry)")
    if fields.get("official") is True and record.get("official") is not True:
        report.at("official", f"true, but {where} records official {show(record.get('official'))}: the "
                              f"verdict is the run's (submit the run again)")
    # The run's own verdict is its judge's: a judge other than this checkout's or a released one
    # (harness.judge_hash) could have written any verdict, so its run is never official.
    judged = judges.problem(record)
    if judged and not allow_unofficial:
        report.at("official", f"{where}: {judged}")


def _check_series(report: _Report, path: Path, fields: dict, root: Path) -> None:
    """An entry of a series (`runs`, written by `dawnbench submit`) has its series beside it
    (<stem>.series/), and its `runs` block, acceptance included, is what those runs give, recomputed
    here (dawnbench.series_record): never the entry's word. Its run (<stem>.run/) is one of them."""
    runs = fields.get("runs")
    if not isinstance(runs, dict) or "rules_version" not in fields:
        return          # no series, or an entry typed by hand: its `runs` is shown as claimed
    if not (entries.run_folder(path).exists() or entries.run_folder(path).is_symlink()):
        return          # no run beside it at all: _check_against_run said so, in one line
    folder = entries.series_folder(path)
    if not folder.is_dir() or folder.is_symlink() or not safe_read.inside(folder, root):
        report.at("runs", f"the entry gives a series' figures, but its runs ({folder.name}/) are not beside it: "
                          f"nothing to recompute them from (submit the series again)")
        return
    try:
        results = series_record.read_runs(folder, root)
        computed = series_record.entry_runs(results, runs.get("submitted_seed"))
    except series_record.SeriesError as e:
        report.at("runs", f"{folder.name}/: {e} (submit the series again)")
        return
    found = series_record.difference(runs, computed)
    if found:
        field, given, expected = found
        report.at(f"runs.{field}", f"{show(given)} is not what its series' runs give, {show(expected)} "
                                   f"(recomputed from {folder.name}/): an entry's runs are its series' (submit the "
                                   f"series again; do not edit the entry)")
        return
    submitted = next((r for r in results if r["seed"] == runs.get("submitted_seed")), None)
    run = entries.run_folder(path) / "result.json"
    try:
        same = submitted is not None and run.read_bytes() == (folder / submitted["run_dir"] / "result.json").read_bytes()
    except OSError:
        same = False
    if not same:
        report.at("runs.submitted_seed", f"{show(runs.get('submitted_seed'))}: {run.parent.name}/ is not that run of "
                                         f"{folder.name}/ (submit the series again)")


def review_flags(path: Path, root: Path) -> list[str]:
    """The convergence guard's flags of a training entry (dawnbench.convergence): its run's, or every run
    of its series', read from the files beside it (never the entry's own figures)."""
    folder = entries.series_folder(path)
    try:
        if folder.is_dir() and not folder.is_symlink():
            results = series_record.read_runs(folder, root)
        else:
            record = safe_read.read_json(entries.run_folder(path) / "result.json", root)
            results = [record] if isinstance(record, dict) else []
    except (series_record.SeriesError, safe_read.Refused, OSError):
        return []       # nothing to read: the checks above say what is missing
    return convergence.review_flags(results)


# ---------------------------------------------------------------- files and trees

def _walk(root: Path, problems: list[Problem]) -> tuple[list[Path], list[Path]]:
    jsons: set[Path] = set()
    tsvs: set[Path] = set()

    def onerror(e: OSError) -> None:
        problems.append(Problem(str(e.filename or root), 1, "path",
                                f"directory cannot be read ({e.strerror or type(e).__name__}) "
                                f"(check its permissions)"))

    for folder, dirs, files in os.walk(root, onerror=onerror):
        if Path(folder).name in entries.KINDS:
            # <stem>.run/: the run behind a training entry, or the inference record behind an inference
            # entry, and <stem>.series/, its series' runs (dawnbench submit): what the entry's figures are
            # checked against, not entries of their own
            dirs[:] = [d for d in dirs if not d.endswith((entries.RUN_SUFFIX, entries.SERIES_SUFFIX))]
        for name in files:
            p = Path(folder) / name
            if name.endswith(".json"):
                jsons.add(p)
            elif name.endswith(".tsv"):
                tsvs.add(p)
    try:
        jsons.update(entries.find(root))
    except (OSError, ValueError):
        pass
    return sorted(jsons), sorted(tsvs)


def check(paths: list[Path], allow_unofficial: bool = False, level: str = "strict") -> tuple[list[Problem], int]:
    """Every problem under `paths` (files or trees) at `level` (warnings included: see
    Problem.warning), and the number of files looked at."""
    problems: list[Problem] = []
    jsons: list[Path] = []
    tsvs: list[Path] = []
    roots: dict[Path, Path] = {}      # a file found in a tree given -> that tree: nothing is read outside it
    for path in paths:
        path = Path(path)
        try:
            is_dir = path.is_dir()
            exists = is_dir or path.exists() or path.is_symlink()
        except (OSError, ValueError):
            is_dir, exists = False, False
        if not exists:
            problems.append(Problem(str(path), 1, "path", "does not exist (give an entry file or a tree of entries)"))
        elif is_dir:
            j, t = _walk(path, problems)
            roots.update((found, path) for found in j)
            jsons += j
            tsvs += t
        elif path.suffix == ".tsv":
            tsvs.append(path)
        else:
            jsons.append(path)
    jsons = list(dict.fromkeys(jsons))
    checked = {_norm(j) for j in jsons}
    owners = _LogOwners()
    referenced: set[Path] = set()
    refused_name: set[str] = set()      # entries whose logFilename was refused: their log's line says no more
    for path in jsons:
        found, log = check_entry(path, allow_unofficial, roots.get(path), level)
        problems += found
        if log is not None:
            referenced.add(_norm(log))
        elif any(p.field == "logFilename" and not p.warning for p in found):
            refused_name.add(_norm(path))
    for log in dict.fromkeys(tsvs):
        if _norm(log) in referenced:
            continue
        owner = owners.of(log)
        if owner is not None and _norm(owner) in refused_name and owner.stem == log.stem:
            continue
        if owner is not None and _norm(owner) not in checked:
            found, named = check_entry(owner, allow_unofficial, level=level)     # the log's entry, named by the log
            problems += found
            jsons.append(owner)
            checked.add(_norm(owner))
            if named is not None and _norm(named) == _norm(log):
                continue
        problems.append(Problem(str(log), 1, "path", "a training log that no entry JSON in its folder names "
                                                     "(add the entry JSON, or remove the log)"))
    return problems, len(jsons) + len(dict.fromkeys(tsvs))


def _norm(path: Path) -> str:
    return os.path.normpath(os.path.abspath(path))


class _LogOwners:
    """The JSON in a log's folder that names the log (or has its stem), if any. Each folder is listed,
    and each of its JSONs read, once: a hostile tree of thousands of logs that no JSON names would
    otherwise read every JSON of the folder once per log (quadratic: 2,000 such entries took minutes)."""

    def __init__(self) -> None:
        self._folders: dict[Path, tuple[dict[str, Path], dict[str, Path]] | None] = {}

    def of(self, log: Path) -> Path | None:
        if log.parent not in self._folders:
            self._folders[log.parent] = self._index(log.parent)
        index = self._folders[log.parent]
        if index is None:
            return None
        by_stem, by_log = index
        return by_stem.get(log.stem) or by_log.get(log.name)

    @staticmethod
    def _index(folder: Path) -> tuple[dict[str, Path], dict[str, Path]] | None:
        """({stem: its JSON}, {logFilename: the first JSON, in name order, that names it})."""
        try:
            candidates = sorted(folder.glob("*.json"))
        except (OSError, ValueError):
            return None
        by_stem = {candidate.stem: candidate for candidate in candidates}
        by_log: dict[str, Path] = {}
        for candidate in candidates:
            value, _, _ = read_json(candidate)
            name = value.get("logFilename") if isinstance(value, dict) else None
            if isinstance(name, str):
                by_log.setdefault(name, candidate)
        return by_stem, by_log


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's subcommand of this name, in the one tree) or on a parser
    of its own (`python -m dawnbench.validate_entries`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = ("Check DAWNBench v1 entries: one line per problem, FILE:LINE: FIELD: what is wrong (how to "
                     "fix); at the v1 level, FILE:LINE: FIELD: warning: what v1 tolerated (how it is read).")
    p.add_argument("paths", nargs="+", type=file_or_folder("", "give entry files or trees (entries/)"),
                   metavar="PATH", help="entry files or trees (entries/)")
    p.add_argument("--level", choices=LEVELS, default="strict",
                   help=f"which rules (default strict): {LEVEL_HELP}")
    p.add_argument("--allow-unofficial", action="store_true",
                   help="accept entries marked official_threshold: false or official: false (smoke tests), "
                        "checked against their own threshold")
    return p


def _check_given(paths: list[Path]) -> None:
    """A path that is not there is a usage error (exit 2), not a problem of an entry (exit 1)."""
    for given in paths:
        try:
            there = given.exists() or given.is_symlink()
        except (OSError, ValueError):
            there = False
        if not there:
            raise UsageError(f"{given}: no such file or folder: give entry files or a tree of entries (e.g. entries/)")


def _emit(line: str) -> None:
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    sys.stdout.write(line.encode(encoding, "backslashreplace").decode(encoding, "replace") + "\n")


def run(args) -> int:
    """The command on parsed options (dawnbench.cli runs it from the one tree)."""
    if (note := prices.override_note()) is not None:
        print(f"{PROG}: {note}", file=sys.stderr)
    try:
        _check_given(args.paths)
    except DawnbenchError as e:
        return report(PROG, e)
    found, n_files = check(args.paths, args.allow_unofficial, args.level)
    if n_files == 0:        # "0 files checked: all valid" would pass a typo'd or empty tree
        return report(PROG, UsageError(f"no entries found under {', '.join(map(str, args.paths))}: give entry "
                                       f"files or a tree of them, <Task>/<train|inference>/<name>.json and .tsv"))
    for problem in found:
        _emit(str(problem))
    problems = [p for p in found if not p.warning]
    review = len({p.file for p in found if p.field == REVIEW})
    warnings = len(found) - len(problems) - sum(p.field == REVIEW for p in found)
    tolerated = f" ({warnings} warning{'s' * (warnings != 1)}: v1 quirks, read as v1 read them)" if warnings else ""
    tolerated += f" ({review} entr{'ies' if review != 1 else 'y'} for review: converged faster than its recipe)" \
        if review else ""
    bad = len({p.file for p in problems})
    if problems:
        _emit(f"{len(problems)} problem{'s' * (len(problems) != 1)} in {bad} of {max(n_files, bad)} files"
              f"{tolerated}")
        return EXIT_FAILED
    _emit(f"{n_files} file{'s' * (n_files != 1)} checked: all valid{tolerated}")
    return EXIT_OK


main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
