"""An entry's two statuses on the leaderboard, each read from files beside the entry as untrusted input
(harness.safe_read); nothing here raises on a hostile tree.

**Verification**: whether a training entry's result is re-checked from its run. `dawnbench submit`
puts the run an entry came from next to it, `<Task>/train/<stem>.run/`: its result.json,
events.jsonl, TSV and stored predictions (the files `harness verify` reads). Here that folder is
verified again (harness.verify_run: the log, the predictions re-scored against the official labels on
this machine, result.json and the TSV agree) and tied to the entry: the entry's log must be the
run's, byte for byte, and its tta_seconds, train_seconds and reference the run's. The status is one of

    verified
    failed: <the first disagreement>
    not verified: no eval labels on this machine           (the dataset is absent here)
    not verified: no run folder with stored predictions    (a DAWNBench v1 entry, or one submitted before)

**Reproduction**: reproduction.json, what `dawnbench reproduce` found. It writes the record into the
run folder it ran again (for an entry, the entry's `<stem>.run/`): the claimed figures and the
reproduced ones side by side, the environment of each, the tolerances and the verdict. The
leaderboard reads it back and shows one of

    reproduced                                    (the same curve, and the time within the tolerance)
    accuracy reproduced, time not compared (other hardware)    (not counted as reproduced: is_reproduced)
    not reproduced: <the first difference, with both figures>
    not tried                                     (no record, or a record of another log)
    not tried: needs N processes, ...             (the machine that tried lacked the run's ranks)

The record names the sha256 of the run's DAWNBench log, so a record left behind by an earlier
version of the entry is not shown as this version's.

**The judge's measurement** (`Judged`): for a reproduced entry, the median time-to-accuracy of the
reproduction's own runs (a series': its rule applied to the judge's runs of its seeds), the 95% interval
of their mean time, and the hardware they ran on. It is what the leaderboard's verified tier ranks, the
claim shown beside it (dawnbench.ranking): a reproduced record without one reads as not tried. The
record is the maintainer's (docs/RULES.md, "Reproduction"): a submission that brings its own is refused
in review.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from dawnbench import entries, evidence
from dawnbench.entries import Entry
from harness import eval_labels, safe_read, snapshots, verify_run
from harness.errors import DawnbenchError
from harness.tasks import Task

RUN_SUFFIX = entries.RUN_SUFFIX
run_folder = entries.run_folder
VERIFIED = "verified"
NO_RUN = "not verified: no run folder with stored predictions"


class Labels:
    """The official eval labels per dataset, loaded (checksummed) once per leaderboard build."""

    def __init__(self, data_root: Path | None):
        self.data_root = data_root
        self._cache: dict[str, object] = {}

    def __call__(self, task: Task, data_root: Path | None):
        if task.dataset not in self._cache:
            try:
                self._cache[task.dataset] = eval_labels.load_eval_labels(task.dataset, self.data_root)
            except DawnbenchError as e:
                self._cache[task.dataset] = e
        value = self._cache[task.dataset]
        if isinstance(value, DawnbenchError):
            raise value
        return task.kind.scored_labels(task, value)


def _folder_problem(run: Path, root: Path, missing: str) -> str | None:
    """The status of an entry whose run folder is missing (`missing`) or not a plain folder inside the
    entries tree; None when it is one."""
    if not (run.exists() or run.is_symlink()):
        return missing
    if run.is_symlink() or not run.is_dir() or not safe_read.inside(run, root):
        return f"failed: {run.name} is not a folder of the entries tree"
    return None


def verification_status(entry: Entry, labels: Labels, root: Path | None = None) -> str:
    """The verification status of a training entry (see the module's docstring)."""
    root = entries.tree_root(entry.path) if root is None else Path(root)
    run = run_folder(entry.path)
    try:
        if (problem := _folder_problem(run, root, NO_RUN)) is not None:
            return problem
        report = verify_run.verify(run, labels.data_root, labels_for=labels)
    except verify_run.VerifyError as e:
        return f"failed: {_short(str(e), run)}"
    except (OSError, ValueError) as e:
        return f"failed: {run.name} cannot be read ({type(e).__name__})"
    if report.first_failure is not None:
        return _short(report.status, run)
    problem = _tied(entry, run, root)       # without the labels too: the entry must be its run's
    if problem:
        return f"failed: {problem}"
    return _short(report.status, run) if not report.verified else VERIFIED


def _tied(entry: Entry, run: Path, root: Path) -> str | None:
    """Why the entry is not the run's, or None."""
    try:
        result = safe_read.read_json(run / "result.json", root)
        log_name = result.get("logFilename") if isinstance(result.get("logFilename"), str) else ""
        run_log = safe_read.read_bytes(run / Path(log_name).name, run, safe_read.MAX_TSV_BYTES)
        entry_log = safe_read.read_bytes(entries.tsv_path(entry.path, entry.fields), root, safe_read.MAX_TSV_BYTES)
    except safe_read.Refused as e:
        return f"the run's files cannot be read: {e.reason}"
    if entry_log != run_log:
        return "the entry's log is not the run's (its TSV must be the run's, byte for byte)"
    for name in ("tta_seconds", "train_seconds", "reference"):
        if name in entry.fields and entry.fields[name] != result.get(name):
            return f"the entry's {name} {entry.fields[name]!r} is not the run's {result.get(name)!r}"
    return None


def _short(text: str, run: Path) -> str:
    """A reason without the tree's absolute path (the site shows it)."""
    return text.replace(str(run) + "/", "").replace(str(run), run.name)


NO_RECORD = "not verified: no inference record beside the entry"
MODEL_VERIFIED = "verified: the model of this entry's verified training run"
MODEL_UNVERIFIED = "model provenance unverified"


def inference_status(entry: Entry, root: Path | None = None) -> str:
    """An inference entry's status: `verified` when its record (`<stem>.run/inference.json`, what
    `dawnbench infer` wrote) is beside it, which validate has already tied every figure of the entry to
    (latency, accuracy, cost, price, nodes); else not verified. The latency is the record's: no file
    lets it be measured again here (`dawnbench reproduce` is for runs)."""
    root = entries.tree_root(entry.path) if root is None else Path(root)
    run = run_folder(entry.path)
    try:
        if (problem := _folder_problem(run, root, NO_RECORD)) is not None:
            return problem
        record = safe_read.read_json(run / entries.RUN_RECORD["inference"], root)
    except safe_read.Refused as e:
        return f"failed: {run.name}/{entries.RUN_RECORD['inference']} cannot be read: {e.reason}"
    except (OSError, ValueError) as e:
        return f"failed: {run.name} cannot be read ({type(e).__name__})"
    return VERIFIED if isinstance(record, dict) else f"failed: {run.name}/inference.json is not a JSON object"


def model_provenance(entry: Entry, statuses_: dict[str, str], root: Path | None = None) -> str:
    """Whether an inference entry's model is shown to be a run's: its record's `model_source` names a
    run (`dawnbench infer --model <run>/model`) whose result.json is, byte for byte (sha256), the
    result.json of the verified training entry of the same name. Anything else (`infer --model FILE`,
    a folder, an inference-only reference's published weights, a run not submitted) is unverified:
    the model could have been trained on anything, the eval labels included."""
    if statuses_.get(str(entry.path)) != VERIFIED:
        return MODEL_UNVERIFIED
    root = entries.tree_root(entry.path) if root is None else Path(root)
    train_json = entry.path.parent.parent / "train" / entry.path.name
    if statuses_.get(str(train_json)) != VERIFIED:
        return MODEL_UNVERIFIED
    try:
        record = safe_read.read_json(run_folder(entry.path) / entries.RUN_RECORD["inference"], root)
        result = safe_read.read_bytes(run_folder(train_json) / "result.json", root, safe_read.MAX_JSON_BYTES)
    except (safe_read.Refused, OSError, ValueError):
        return MODEL_UNVERIFIED
    source = record.get("model_source") if isinstance(record, dict) else None
    run = source.get("run") if isinstance(source, dict) and source.get("kind") == "run" else None
    if (isinstance(run, dict) and run.get("result_sha256") == hashlib.sha256(result).hexdigest()
            and not not_the_runs_model(record, run_folder(train_json), root)):
        return MODEL_VERIFIED
    return MODEL_UNVERIFIED


def not_the_runs_model(infer: dict, run_dir: Path, root: Path | None = None) -> str | None:
    """Why the model an inference record loaded is not run `run_dir`'s (one phrase), or None when it is: the
    files it names (model_source's path, size and sha256 of each) hash, as a snapshot does, to the snapshot the
    run's log scored last (issue 46: a model fine-tuned on the public test set after its run, and put back
    before submit, was paired with it), and the inference ran the run's code (its reference tree's hash)."""
    source = infer.get("model_source") if isinstance(infer, dict) else None
    files = source.get("files") if isinstance(source, dict) else None
    try:
        loaded = snapshots.manifest_sha256({str(rel): (int(f["bytes"]), str(f["sha256"])) for rel, f in files.items()})
    except (AttributeError, KeyError, TypeError, ValueError):
        return "the inference record names no files it loaded (model_source.files)"
    try:
        scored = verify_run.scored_model_sha256(verify_run.read_events(run_dir))
    except (DawnbenchError, OSError, ValueError):
        scored = None
    if loaded != scored:
        return (f"the model it timed (files hashing to {loaded[:16]}...) is not the run's scored model "
                f"({str(scored)[:16]}... in its events.jsonl)")
    ran = (infer.get("provenance") or {}).get("reference_tree_sha256") if isinstance(infer.get("provenance"), dict) else None
    try:
        result = safe_read.read_json(run_dir / "result.json", root or run_dir)
    except (safe_read.Refused, OSError, ValueError):
        result = None
    claimed = ((result or {}).get("provenance") or {}).get("reference_tree_sha256") if isinstance(result, dict) else None
    if ran != claimed:
        return (f"the inference ran other code than the run (reference tree {str(ran)[:16]}... against the run's "
                f"{str(claimed)[:16]}...)")
    return None


def verification_statuses(loaded: list[Entry], data_root: Path | None, root: Path | None = None) -> dict[str, str]:
    """{entry JSON path: status} of every entry: a training entry's run verified again, an inference
    entry's record."""
    labels = Labels(data_root)
    return {str(e.path): verification_status(e, labels, root) if e.kind == "train" else inference_status(e, root)
            for e in loaded}


def model_provenances(loaded: list[Entry], statuses_: dict[str, str], root: Path | None = None) -> dict[str, str]:
    """{inference entry JSON path: model_provenance}."""
    return {str(e.path): model_provenance(e, statuses_, root) for e in loaded if e.kind == "inference"}


# --- reproduction ---------------------------------------------------------------------------------

REPRODUCTION_RECORD = "reproduction.json"
REPRODUCED = "reproduced"
ACCURACY_ONLY = "accuracy reproduced, time not compared (other hardware)"
OLD_ACCURACY_ONLY = "reproduced: accuracy only"     # the same verdict, as records written before said it
NOT_REPRODUCED = "not reproduced"
NOT_TRIED = "not tried"
# A reproduction run in the reference's image: its judge is the image's, which the entry's Dockerfile builds
IMAGE_JUDGE = ("reproduced in the reference's image, where the judge is the image's (docs/RULES.md, \"The judge in "
               "an image\"): reproduce it with --runtime native")
VERDICTS = (REPRODUCED, ACCURACY_ONLY, OLD_ACCURACY_ONLY, NOT_REPRODUCED, NOT_TRIED)


def is_reproduced(words: str | None) -> bool:
    """Whether the leaderboard's words for a reproduction count as reproduced, where anything sorts or
    filters on it: only `reproduced` (time compared too). "accuracy reproduced, time not compared" is
    not: the claimed time was never run again."""
    return words == REPRODUCED


def log_sha256(run_dir: Path, result: dict) -> str | None:
    """The sha256 of the run's DAWNBench TSV (the log an entry is ranked by), or None when absent."""
    name = result.get("logFilename")
    if not isinstance(name, str) or Path(name).name != name:
        return None
    try:
        return hashlib.sha256(safe_read.read_bytes(run_dir / name, run_dir, safe_read.MAX_TSV_BYTES)).hexdigest()
    except safe_read.Refused:
        return None


@dataclass(frozen=True)
class Judged:
    """What the judge measured when it reproduced an entry: the figure the verified tier ranks, with the
    95% interval of its runs' mean time (Student's t, dawnbench.evidence.interval; None under two runs), so
    that the verified tier shows ties as the claimed one does."""
    seconds: float      # the median time-to-accuracy of its reproduction runs (a mean-rule series': their mean)
    runs: int           # how many runs that figure is of
    hardware: str       # the hardware class it ran on, as its harness labelled it
    interval: tuple[float, float] | None = None     # seconds: the 95% interval of the runs' mean time
    statistic: str = "median"                       # which figure of the runs `seconds` is: median or mean


def reproduction_status(run_dir: Path, root: Path) -> str:
    """The leaderboard's words for the reproduction of the run in `run_dir` (inside `root`)."""
    return _reading(run_dir, root)[0]


def judged_time(run_dir: Path, root: Path) -> Judged | None:
    """The judge's measurement of the run in `run_dir` when its reproduction reproduced it (time
    compared, on the run's hardware); None otherwise."""
    return _reading(run_dir, root)[1]


def _reading(run_dir: Path, root: Path) -> tuple[str, Judged | None]:
    path = Path(run_dir) / REPRODUCTION_RECORD
    if not (path.exists() or path.is_symlink()):
        return NOT_TRIED, None
    try:
        record = safe_read.read_json(path, root)
        result = safe_read.read_json(Path(run_dir) / "result.json", root)
    except safe_read.Refused as e:
        return f"{NOT_TRIED}: {REPRODUCTION_RECORD} cannot be read ({e.reason})", None
    if not isinstance(record, dict) or not isinstance(result, dict) or record.get("verdict") not in VERDICTS:
        return f"{NOT_TRIED}: {REPRODUCTION_RECORD} holds no verdict of `dawnbench reproduce`", None
    if record.get("log_sha256") != log_sha256(Path(run_dir), result):
        return f"{NOT_TRIED}: {REPRODUCTION_RECORD} is of another log than this entry's (reproduce it again)", None
    if record["verdict"] == NOT_REPRODUCED:
        first = record.get("differences")
        first = first[0] if isinstance(first, list) and first and isinstance(first[0], str) else "differs"
        return f"{NOT_REPRODUCED}: {_line(first)}", None
    if record["verdict"] == NOT_TRIED:      # e.g. a run of more processes than the machine that tried had
        reason = record.get("reason")
        return (f"{NOT_TRIED}: {_line(reason)}" if isinstance(reason, str) and reason else NOT_TRIED), None
    if record["verdict"] in (ACCURACY_ONLY, OLD_ACCURACY_ONLY):
        return ACCURACY_ONLY, None
    if record.get("runtime") == "docker":       # what `reproduce` ran its runs in (not the original run's)
        return f"{NOT_TRIED}: {IMAGE_JUDGE}", None
    judged = _measured(record)
    if judged is None:
        return f"{NOT_TRIED}: {REPRODUCTION_RECORD} holds no time the reproduction measured (reproduce it again)", None
    return REPRODUCED, judged


def _measured(record: dict) -> Judged | None:
    """The judge's figure from its own reproduction runs, on the one hardware they ran on: for a run, the
    median of its N runs' times (every run a positive time); for a series (`series.rule` in the record,
    `dawnbench reproduce` of a series), the series' rule applied to the judge's runs of its seeds
    (dawnbench.evidence: the median of the converged runs' times under `single`, the mean of every run's
    final time under `mean`). None unless every run names the same hardware and the rule has times."""
    runs = record.get("reproduced")
    series = record.get("series") if isinstance(record.get("series"), dict) else None
    rule = series.get("rule") if series is not None else None
    if not isinstance(runs, list) or not runs or rule not in (None, evidence.SINGLE, evidence.MEAN):
        return None
    times, machines = [], set()
    for run in runs:
        figures = run.get("figures") if isinstance(run, dict) else None
        env = run.get("environment") if isinstance(run, dict) else None
        hardware = env.get("hardware") if isinstance(env, dict) else None
        if not isinstance(figures, dict) or not isinstance(hardware, str):
            return None
        as_run = {"status": figures.get("status"), "tta_seconds": figures.get("tta_seconds"),
                  "history": figures.get("curve")}
        if rule == evidence.SINGLE and as_run["status"] != evidence.CONVERGED:
            continue            # a DNC run of a series: the single rule times the converged ones
        seconds = evidence.final_seconds(as_run) if rule == evidence.MEAN else as_run["tta_seconds"]
        if not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds)
                and seconds > 0):
            return None
        times.append(float(seconds))
        machines.add(_line(hardware, 200))
    if not times or len(machines) != 1:
        return None
    spread = evidence.interval(times)
    interval = None if spread["lo"] is None else (spread["lo"], spread["hi"])
    if rule == evidence.MEAN:
        return Judged(spread["mean"], len(times), machines.pop(), interval, "mean")
    return Judged(spread["median"], len(times), machines.pop(), interval)


def _line(text: str, limit: int = 300) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


def reproduction_statuses(loaded: list, root: Path | None = None) -> dict[str, str]:
    """{entry JSON path: the reproduction's words} of every training entry, from its `<stem>.run/`."""
    return {path: words for path, (words, _) in _readings(loaded, root).items()}


def judged_times(loaded: list, root: Path | None = None) -> dict[str, Judged]:
    """{entry JSON path: the judge's measurement} of every training entry that was reproduced."""
    return {path: judged for path, (_, judged) in _readings(loaded, root).items() if judged is not None}


def _readings(loaded: list, root: Path | None) -> dict[str, tuple[str, Judged | None]]:
    found = {}
    for entry in loaded:
        if entry.kind != "train":
            continue
        run = run_folder(entry.path)
        tree = entries.tree_root(entry.path) if root is None else Path(root)
        inside = run.is_dir() and not run.is_symlink() and safe_read.inside(run, tree)
        found[str(entry.path)] = _reading(run, tree) if inside else (NOT_TRIED, None)
    return found
