"""Entries on disk: DAWNBench v1 JSON + TSV pairs, as the 2017-2020 entries wrote them.

    entries/<CIFAR10|ImageNet|SQuAD|FashionMNIST>/<train|inference>/<author>_<model>_<hardware>_<framework>.json
    (training entries also have the .tsv log its `logFilename` names; old entries may omit
    `logFilename`, and then the log is the .tsv of the same stem)

This module reads entries (every file through `harness.safe_read`) and computes the figures the
leaderboard and the analyses show (hours to the threshold, costs, latency); `dawnbench validate`
says what is wrong with an entry. Each figure in the logs and in inference entries is in its field's
unit (harness.task_kinds.Figure: percent for accuracies, a fraction for F1): `log_threshold` converts
a task's threshold to those units.
"""
from __future__ import annotations

import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import harness.tasks
from dawnbench import prices
from harness import safe_read
from harness.errors import DawnbenchError
from harness.tasks import TASKS, Task

KINDS = ("train", "inference")
TASK_BY_DIR = {task.display_name: task for task in TASKS.values()}     # "CIFAR10" -> cifar10
ITEMS = 10_000   # inference cost is quoted per 10,000 items, as DAWNBench did
RUN_SUFFIX = ".run"     # <stem>.run/ beside an entry: the run (or inference) it came from, as submit verified it
SERIES_SUFFIX = ".series"   # <stem>.series/seed<k>/ beside an entry of a series: every run, as submit verified it
RUN_RECORD = {"train": "result.json", "inference": "inference.json"}    # the record in it an entry's figures are


def run_folder(entry_json: Path) -> Path:
    """Where an entry's run lives: <stem>.run/ next to its JSON (a training entry's run; an inference
    entry's `dawnbench infer` record)."""
    entry_json = Path(entry_json)
    return entry_json.with_name(entry_json.stem + RUN_SUFFIX)


def series_folder(entry_json: Path) -> Path:
    """Where an entry's series lives: <stem>.series/ next to its JSON, one run folder a seed."""
    entry_json = Path(entry_json)
    return entry_json.with_name(entry_json.stem + SERIES_SUFFIX)


class EntryError(DawnbenchError):
    """An entry that cannot be read; the message names the file (and line and field, if known)."""


@dataclass
class Entry:
    path: Path                       # the .json
    kind: str                        # "train" | "inference"
    task: Task
    fields: dict                     # the JSON object, as read (at validate's v1 level, normalized)
    rows: list[dict[str, float]]     # training: the TSV rows by column; inference: []
    notes: list[str] = field(default_factory=list)   # validate's v1 warnings: what was tolerated, how it was read
    written: dict | None = None      # the JSON object as written, where `fields` normalized it
    review_flags: list[str] = field(default_factory=list)   # validate's convergence guard (dawnbench.convergence)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def metric_column(self) -> str:
        return self.task.accuracy_field

    def first_at_threshold(self) -> dict[str, float] | None:
        """The first log row that reaches the task's threshold (as its kind says: at or over it, or at or
        under it where lower is better): the row a training entry ranks by."""
        return first_at_threshold(self.rows, self.task)


def number(value) -> float | None:
    """A finite JSON number as float; None for anything else (strings, booleans, NaN, null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def to_log_units(task: Task, fraction: float) -> float:
    """A metric as the harness computes it (a fraction) in the units of the logs: its field's (percent
    for accuracies, a fraction for F1; harness.task_kinds.Figure)."""
    return task.figure.to_log(fraction)


def log_threshold(task: Task) -> float:
    """The task's threshold in the units of the logs."""
    return round(to_log_units(task, task.threshold), 6)


def first_at_threshold(rows: list[dict[str, float]], task: Task) -> dict[str, float] | None:
    column, target = task.accuracy_field, log_threshold(task)
    for row in rows:
        value = row.get(column)
        if value is not None and math.isfinite(value) and task.reaches(value, target):
            return row
    return None


def split_tsv(text: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every non-blank line of a DAWNBench log's text, split on tabs, each
    cell stripped (old logs pad their cells with spaces)."""
    numbered = []
    for n, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if line.strip():
            numbered.append((n, [c.strip() for c in line.split("\t")]))
    return numbered


def read_tsv(path: Path, root: Path | None = None) -> tuple[list[str], list[list[str]]]:
    """The header and the data rows of a DAWNBench log, split on tabs; a UTF-8 BOM is dropped and
    blank lines are skipped. Read from the tree `root` only (default: the log's folder);
    safe_read.Refused for a file that is not a log's."""
    text = safe_read.read_text(path, Path(path).parent if root is None else root)
    lines = [cells for _, cells in split_tsv(text)]
    if not lines:
        return [], []
    return lines[0], lines[1:]


def _blacklist_examples() -> dict[str, int]:
    # tasks.toml records the blacklist size next to the eval-set size; harness.tasks.Task does not carry it
    with open(Path(harness.tasks.__file__).parent / "data" / "tasks.toml", "rb") as f:
        raw = tomllib.load(f)["tasks"]
    return {name: int(t["blacklist_examples"]) for name, t in raw.items() if "blacklist_examples" in t}


BLACKLIST_EXAMPLES = _blacklist_examples()      # {"imagenet": 1762}


def eval_set_size(task: Task, used_blacklist: bool = False) -> int:
    """The number of eval examples an entry of `task` is scored on (ImageNet may drop its blacklist)."""
    return task.eval_examples - (BLACKLIST_EXAMPLES.get(task.name, 0) if used_blacklist else 0)


def name_part(text: object) -> str:
    """One part of an entry's file name: letters, digits, '-' and '.'; anything else becomes '-'
    (runs of them one '-'), so '_' stays the separator of the four parts."""
    part = re.sub(r"[^A-Za-z0-9.-]+", "-", str(text))
    part = re.sub(r"-{2,}", "-", part).strip("-.")
    return part or "unknown"


def entry_stem(author: object, model: object, hardware: object, framework: object) -> str:
    """<author>_<model>_<hardware>_<framework>, as DAWNBench named its entries."""
    return "_".join(name_part(p) for p in (author, model, hardware, framework))


def tsv_path(json_path: Path, fields: dict) -> Path:
    name = fields.get("logFilename")
    if isinstance(name, str) and name and "/" not in name and "\\" not in name and name not in (".", ".."):
        return Path(json_path).parent / name
    return Path(json_path).with_suffix(".tsv")


def locate(path: Path) -> tuple[Task, str]:
    """(task, kind) from an entry's place in the tree: <Task>/<kind>/<file>.json."""
    path = Path(path)
    kind, task_dir = path.parent.name, path.parent.parent.name
    if task_dir not in TASK_BY_DIR or kind not in KINDS:
        raise EntryError(f"{path}: an entry lives in <{'|'.join(TASK_BY_DIR)}>/<{'|'.join(KINDS)}>/, "
                         f"not in {task_dir}/{kind}/")
    return TASK_BY_DIR[task_dir], kind


def tree_root(path: Path) -> Path:
    """The entries tree an entry file belongs to, <root>/<Task>/<kind>/<file>, judged by its place;
    the file's own folder when it is in no such place. Nothing is read from outside it."""
    path = Path(path)
    if path.parent.name in KINDS and path.parent.parent.name in TASK_BY_DIR:
        return path.parent.parent.parent
    return path.parent


def load(json_path: Path, root: Path | None = None) -> Entry:
    """One entry, JSON and (for training) its TSV rows as numbers, read from the entries tree `root`
    (default: the tree its place names). Raises EntryError. It is not validated: see
    `dawnbench.validate_entries.load_entry` for an entry to rank."""
    json_path = Path(json_path)
    task, kind = locate(json_path)
    root = tree_root(json_path) if root is None else root
    try:
        fields = safe_read.read_json(json_path, root)
    except safe_read.Refused as e:
        raise EntryError(f"{json_path}: not readable JSON: {e.reason}") from None
    if not isinstance(fields, dict):
        raise EntryError(f"{json_path}: the entry must be a JSON object")
    rows: list[dict[str, float]] = []
    if kind == "train":
        log = tsv_path(json_path, fields)
        try:
            header, raw = read_tsv(log, root)
        except safe_read.Refused as e:
            raise EntryError(f"{log}: the training log is not readable: {e.reason}") from None
        for n, cells in enumerate(raw, start=2):
            try:
                rows.append({column: float(cell) for column, cell in zip(header, cells)})
            except ValueError:
                raise EntryError(f"{log}:{n}: not a number in {cells!r}") from None
    return Entry(path=json_path, kind=kind, task=task, fields=fields, rows=rows)


def load_tree(root: Path, report=None) -> tuple[list[Entry], list[str]]:
    """Every entry under `root` that loads; the others as one line each (also passed to `report`)."""
    loaded, skipped = [], []
    for path in find(root):
        try:
            loaded.append(load(path, root if Path(root).is_dir() else None))
        except EntryError as e:
            skipped.append(str(e))
            if report:
                report(str(e))
    return loaded, skipped


def find(root: Path) -> list[Path]:
    """Every entry JSON under `root` (a tree as above, or one file), in a stable order."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(p for task_dir in TASK_BY_DIR for kind in KINDS
                  for p in (root / task_dir / kind).glob("*.json"))


def hms(hours: float) -> str:
    """Hours as h:mm:ss, the leaderboard's format."""
    seconds = int(round(hours * 3600))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


# ---------------------------------------------------------------- the figures an entry is ranked and plotted by

def text(value) -> str:
    """An entry field as display text (untrusted: HTML escapes it)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def is_http_url(url) -> bool:
    """Whether a code URL may be a link: http(s), a host, no whitespace (javascript:, data:,
    relative and protocol-relative URLs stay text). The board's rule, and submit's for its warning."""
    url = text(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc) and not any(c.isspace() for c in url)


def cost_per_hour(entry: Entry) -> float | None:
    price = number(entry.fields.get("costPerHour"))
    return price if price is not None and price >= 0 else None


def training_row(entry: Entry) -> dict | None:
    """The log row a training entry ranks by: the first that reaches the threshold, with finite hours."""
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
    return accuracy is not None and entry.task.reaches(accuracy, log_threshold(entry.task))


def latency_ms(entry: Entry) -> float | None:
    """Mean ms per item: the v1 `latency`, or the mean of a new entry's `latency_ms`."""
    value = number(entry.fields.get("latency"))
    if value is None and isinstance(entry.fields.get("latency_ms"), dict):
        value = number(entry.fields["latency_ms"].get("mean"))
    return value if value is not None and value >= 0 else None


TABLE_PRICE = "prices table"
GIVEN_PRICE = "submitter-given price"


def table_price(entry: Entry) -> float | None:
    """USD per hour for all the entry's nodes at the judge's prices table's price (this checkout's
    dawnbench/data/prices.yaml; never $DAWNBENCH_PRICES) of the instance the entry records; None when it records none, or one the
    table does not know. The entry's own `costPerHour` and `price` are not read: a price is the
    table's, never the entrant's."""
    instance, nodes = entry.fields.get("instance"), entry.fields.get("nodes", 1)
    if not isinstance(instance, str) or isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        return None
    try:
        price = prices.lookup(instance, prices.JUDGE_TABLE)
    except prices.PriceError:
        return None
    return price.usd_per_hour * nodes if fits(price, recorded_hardware(entry), nodes) else None


def run_record(entry: Entry) -> dict | None:
    """The record the harness wrote for the entry's run (result.json) or inference (inference.json) in
    <stem>.run/, read from the entry's tree; None without one."""
    try:
        record = safe_read.read_json(run_folder(entry.path) / RUN_RECORD[entry.kind], tree_root(entry.path))
    except (safe_read.Refused, OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def recorded_hardware(entry: Entry) -> str | None:
    """The hardware the harness recorded for the entry's run (or inference): its record's `hardware`
    in <stem>.run/, which `dawnbench submit --hardware` does not rename; None without one."""
    hardware = (run_record(entry) or {}).get("hardware")
    return hardware if isinstance(hardware, str) else None


def runtime(entry: Entry) -> str:
    """What ran an inference entry's timed calls: the runtime and its version its `dawnbench infer`
    record names ("onnxruntime 1.19.2"; the reference's own infer() runs in its framework), else the
    entry's `misc.runtime`, else its `framework` (what a DAWNBench v1 entry named there)."""
    record = run_record(entry) or {}
    name, version = record.get("runtime"), record.get("runtime_version")
    if isinstance(name, str) and name:
        if name == "reference":
            return f"the reference's infer() ({text(version)})" if version else "the reference's infer()"
        shown = text(version) if isinstance(version, str) and version else name
        return shown if shown.lower().startswith(name.lower()) else f"{name} {shown}"
    misc = entry.fields.get("misc")
    named = misc.get("runtime") if isinstance(misc, dict) else None
    return text(named) if isinstance(named, str) and named else text(entry.fields.get("framework"))


def fits(price: prices.Price, hardware: str | None, nodes: int) -> bool:
    """Whether an instance of the prices table could be the hardware the harness recorded: a CPU
    instance for a run without accelerators, with no more cores on a node (the label's, rank 0's
    machine) than the instance's vCPUs; else the same accelerator model (V100, A100, H100, ...), the
    same variant where both name it (memory: 16 or 32 GB, 40 or 80 GB; form factor: PCIe, SXM or NVL),
    and no more of them than the instance has, on every node. An entry cannot take a cheaper
    instance's price than the machine it ran on."""
    if not hardware:
        return False
    counted = re.match(r"(\d+) x (.*)", hardware)
    if price.accelerator_count == 0 or not price.accelerator:
        cores = re.search(r"\((\d+) cores\b", hardware)
        return counted is None and cores is not None and (price.vcpus is None or int(cores[1]) <= price.vcpus)
    model = re.search(r"\b([A-Z]+\d+[A-Z]?)\b", price.accelerator)
    if counted is None or model is None or re.search(rf"\b{model[1]}\b", counted[2], re.I) is None:
        return False
    ours, theirs = _variant(price.accelerator), _variant(counted[2])
    if any(a is not None and b is not None and a != b for a, b in zip(ours, theirs)):
        return False
    return int(counted[1]) <= price.accelerator_count * nodes


def _variant(name: str) -> tuple[int | None, str | None]:
    """(memory in GB, form factor) an accelerator's name gives, None for what it does not name.
    nvidia-smi names the SXM5 H100 "NVIDIA H100 80GB HBM3" (the PCIe one says PCIe)."""
    memory = re.search(r"(\d+)\s*GB\b", name, re.I)
    form = ("PCIe" if re.search(r"pcie", name, re.I) else "NVL" if re.search(r"\bnvl\b", name, re.I) else
            "SXM" if re.search(r"sxm\d?|\bhbm3\b", name, re.I) else None)
    return (int(memory[1]) if memory else None), form


def inference_cost(entry: Entry) -> float | None:
    """USD per 10,000 items: the entry's own per-item `cost`, else costPerHour x latency."""
    per_item = number(entry.fields.get("cost"))
    if per_item is None:
        price, latency = cost_per_hour(entry), latency_ms(entry)
        if price is None or latency is None:
            return None
        per_item = price * latency / 3.6e6
    return per_item * ITEMS if per_item >= 0 else None
