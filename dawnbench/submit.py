"""`dawnbench submit RUN_DIR [--inference INFER_DIR] --out entries/`: a run as DAWNBench v1 entry files;
`dawnbench submit --inference INFER_DIR --out entries/`: an inference-only reference's entry.

    entries/<Task>/train/<author>_<model>_<hardware>_<framework>.json   (+ .tsv, the run's log as written)
    entries/<Task>/train/<same stem>.run/                              (the run: result.json, events.jsonl,
                                                                        its TSV, predictions/)
    entries/<Task>/inference/<same stem>.json                          (with --inference)

RUN_DIR is a run folder (result.json + its TSV) or a series folder from `dawnbench run --runs N`
(summary.json + seed<k>/): the series submits its median converged run and records every run's
statistics in `runs`. The run is verified first (`dawnbench verify`, with the eval labels of
--data): any disagreement between its log, stored predictions, result.json and TSV refuses it. The
files are written to a staging folder, checked with `dawnbench validate`, then moved into place;
nothing is written when anything is wrong. The entry names its code by URL: --code-url, else the run's commit on
a remote that holds it, else reference.toml's http(s) code_url; with none of them submit refuses and
says how to give one, and an entry that will show no link (--code-url '') is written with one warning
line (dawnbench/code_url.py). An existing entry file is left as it is when this run
would write the same bytes (the same run submitted again); one of other content is replaced only
with --force, and never by a run of another reference (a fork that kept its original's author and
model would take the original's entry name).

A run made without a price gets one here: --instance PROVIDER:INSTANCE (priced from the prices table,
as `dawnbench run --instance`) or --cost-per-hour USD (one node's price, as the submitter gives it).
The entry records which, and when (`price_added`). A run that has a price keeps it: another price is
refused, the same one changes nothing (docs/ENTRIES.md, "Prices").
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from dawnbench import code_url, entries, entry_status, prices, schemas, series_record, validate_entries
from harness import arguments, paths, registry, safe_read, safe_write, verify_run
from harness.arguments import DATA_FOLDER, Parser, folder, tool_main
from harness.errors import EXIT_OK, DawnbenchError, UsageError, command, report, shown
from harness.tasks import TASKS

PROG = command("submit")


class SubmitError(DawnbenchError):
    """A run that cannot be submitted; the message is the one line the user sees."""


def _read_json(path: Path, what: str) -> dict:
    if not (path.exists() or path.is_symlink()):
        raise SubmitError(f"{path}: missing; {what}")
    try:
        value = safe_read.read_json(path, path.parent)
    except safe_read.Refused as e:
        raise SubmitError(f"{path}: not readable JSON: {e.reason}; {what}") from None
    if not isinstance(value, dict):
        raise SubmitError(f"{path}: not a JSON object; {what}")
    return value


def _need(result: dict, path: Path, field: str, kind, what: str):
    value = result.get(field)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise SubmitError(f"{path}: {field} is {validate_entries.show(value)}, expected {what} "
                          f"(is this a result.json that `dawnbench run` wrote?)")
    return value


def _inside(folder: Path, name: object) -> Path | None:
    """folder/name when name is a plain relative path that stays inside folder."""
    if not isinstance(name, str) or not name or os.path.isabs(name) or "\0" in name:
        return None
    path = folder / name
    try:
        if os.path.commonpath([path.resolve(), folder.resolve()]) != str(folder.resolve()):
            return None
    except (OSError, ValueError, RuntimeError):
        return None
    return path


# ---------------------------------------------------------------- the run (or the series' median run)

def load_run(run_dir: Path) -> tuple[Path, dict, dict | None]:
    """(the run folder to submit, its result.json, the `runs` statistics of its series or None)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SubmitError(f"{shown(run_dir, 300)}: not a folder; give a run folder (results/<reference>/<run id>/) "
                          f"or a series folder holding summary.json")
    if (run_dir / "result.json").exists():
        return run_dir, _read_json(run_dir / "result.json", "a run folder holds the result.json of "
                                                            "`dawnbench run`"), None
    if not (run_dir / "summary.json").exists():
        raise SubmitError(f"{run_dir}: neither result.json (a run) nor summary.json (a series of runs) "
                          f"is here; give the folder `dawnbench run` printed")
    summary_path = run_dir / "summary.json"
    summary = _read_json(summary_path, "a series folder holds the summary.json of `dawnbench run --runs N`")
    runs = summary.get("runs")
    if not isinstance(runs, list):
        raise SubmitError(f"{summary_path}: runs is {validate_entries.show(runs)}, expected a list of runs")
    _check_finished(summary_path, summary, runs)
    # every figure from the runs' own folders (dawnbench.series_record), never from summary.json, which
    # must be theirs: an edited one is refused as `verify` refuses it
    try:
        results = series_record.read_runs(run_dir)
        problem = series_record.summary_problem(run_dir, summary, results)
    except series_record.SeriesError as e:
        raise SubmitError(str(e)) from None
    if problem:
        raise SubmitError(f"{run_dir}: {problem}")
    converged = [r for r in results if r.get("status") == "converged"
                 and validate_entries.is_number(r.get("tta_seconds")) and math.isfinite(r["tta_seconds"])]
    if not converged:
        raise SubmitError(f"{summary_path}: none of the {len(results)} runs converged (DNC): "
                          f"only a converged run is an entry")
    # the upper median: an actual run, and of two middle runs the slower one
    median = statistics.median_high([r["tta_seconds"] for r in converged])
    chosen = next(r for r in converged if r["tta_seconds"] == median)
    folder = run_dir / chosen["run_dir"]
    result = _read_json(folder / "result.json", "each run of a series is a run folder")
    stats = series_record.entry_runs(results, chosen["seed"])
    if summary.get("official_threshold") is False and result.get("official_threshold") is not False:
        result = {**result, "official_threshold": False}
    return folder, result, stats


def _check_finished(summary_path: Path, summary: dict, runs: list) -> None:
    """A series is submitted whole: one killed or interrupted part-way has fewer runs than it was asked
    for, and the median of those is not the series' (summary.json is rewritten after every run, so it
    is there as soon as the first run ends)."""
    requested = summary.get("requested_runs")
    requested = requested if validate_entries.is_number(requested) else None
    if summary.get("in_progress") is True:
        why = "it was killed, or is still running"
    elif summary.get("interrupted") is True:
        why = "it was interrupted"
    elif requested is not None and len(runs) < requested:
        why = "it stopped early"
    else:
        return
    done = f"{len(runs)} of {requested:g} runs" if requested is not None else f"{len(runs)} runs"
    again = f"{command()} run {_reference_name(summary)} --runs {f'{requested:g}' if requested is not None else 'N'}"
    raise SubmitError(f"{summary_path}: the series is unfinished ({done}; {why}): re-run the series ({again}), "
                      f"or submit one finished run on its own ({summary_path.parent}/seed<k>)")


def _reference_name(summary: dict) -> str:
    """The series' reference as a command line may name it, or REF (summary.json is untrusted)."""
    try:
        return paths.check_name(summary.get("reference"), "reference")
    except DawnbenchError:
        return "REF"


MAX_REASONS = 4000      # characters of the refusal's reasons: all of them, not only the first


def _unofficial(result: dict, task) -> list[str]:
    """Every reason the run is not an entry: a lowered threshold (said once, in submit's words), then
    each of result.json's unofficial_reasons; [] for an official run."""
    why = []
    lowered = result.get("official_threshold") is not True
    reasons = result.get("unofficial_reasons")
    listed = [r for r in reasons if isinstance(r, str)] if isinstance(reasons, list) else []
    # a network that cannot reach the task's threshold: its own reason says so, and "rerun without
    # --threshold" would send the user to a run the harness refuses
    unreachable = any(r.startswith(registry.UNREACHABLE) for r in listed)
    if lowered and not unreachable:
        why.append(f"it was trained to a lowered threshold {validate_entries.show(result.get('threshold'))} (official "
                   f"{task.threshold:g}): a smoke test, not an entry; rerun without --threshold")
    why += [r for r in listed if not (lowered and r.startswith("--threshold "))]
    if result.get("official") is not True and not listed:
        why.append("result.json records no provenance (rerun with this harness)")
    return why


def _check_run(folder: Path, result: dict, allow_unofficial: bool) -> None:
    path = folder / "result.json"
    status = result.get("status")
    if status != "converged":
        reason = result.get("dnc_reason")
        raise SubmitError(f"{path}: the run is {validate_entries.show(status)}"
                          f"{f' ({reason})' if isinstance(reason, str) else ''}: only a converged run is an entry")
    task = TASKS.get(result.get("task"))
    if task is None:
        raise SubmitError(f"{path}: task is {validate_entries.show(result.get('task'))}, expected one of "
                          f"{', '.join(sorted(TASKS))}")
    if not allow_unofficial:
        why = _unofficial(result, task)
        if why:
            # every reason at once: a user fixes them all before the next (long) run, not one per run
            raise SubmitError(f"{path}: the run is not official: {validate_entries.show('; '.join(why), MAX_REASONS)[1:-1]} "
                              f"(--allow-unofficial submits it anyway, marked official: false)")
    for field in ("author", "model", "hardware", "framework", "timestamp", "reference"):
        _need(result, path, field, str, "a string")
    _need(result, path, "tta_seconds", (int, float), "a number of seconds")
    _check_price(path, result)
    problems = schemas.result_errors(result)
    if problems:
        first = problems[0]
        where = ".".join(map(str, first.path)) or "result"
        raise SubmitError(f"{path}: {where}: {first.message[:200]} (is this a result.json that `dawnbench run` "
                          f"wrote? harness/data/result.schema.json is its format)")


# ---------------------------------------------------------------- the entries

def _verify(folder: Path, data_root: Path | None) -> list[str]:
    """Refuse a run that does not verify; the run's files to copy with the entry (relative paths)."""
    try:
        checked = verify_run.verify(folder, data_root)
    except verify_run.VerifyError as e:
        raise SubmitError(f"the run cannot be verified: {e}") from None
    failure = checked.first_failure
    if failure is not None:
        raise SubmitError(f"{folder}: does not verify: {failure.name}: {failure.detail} "
                          f"(`{command(f'verify {folder}')}` shows every check)")
    if checked.labels_problem is not None:
        raise SubmitError(f"{folder}: cannot be verified here: {checked.labels_problem}")
    # env.json carries the workers' environment record that result.json's hash names: `verify` of the
    # entry's run fails without it, and `reproduce ENTRY` compares the reproduction's environment with it
    files = ["result.json", "events.jsonl"] + (["env.json"] if (folder / "env.json").is_file() else [])
    for record in verify_run.read_events(folder):
        name = record["metadata"].get("predictions_file") if record["key"] == "eval_accuracy" else None
        if isinstance(name, str):
            files.append(name)
    return files


def _clean(mapping: dict) -> dict:
    return {k: v for k, v in mapping.items() if v is not None or k in _KEEP_NULL}


_KEEP_NULL = {"costPerHour", "cost", "cost_usd", "cost_per_10k_items_usd", "instance", "price",
              "image_digest", "git_commit", "runs", "commitHash", "provenance"}


def _common(result: dict, args) -> dict:
    git = result.get("git") if isinstance(result.get("git"), dict) else {}
    return {
        "version": "v1.0",
        "author": args.author or result["author"],
        "authorEmail": args.author_email if args.author_email is not None else result.get("authorEmail") or "",
        "framework": result["framework"],
        "codeURL": args.code_url if args.code_url is not None else result.get("codeURL") or "",
        "model": result["model"],
        "hardware": args.hardware or result["hardware"],
    }, git


def _official(result: dict) -> dict:
    """The run's verdict and provenance (harness/provenance.py), as every entry of it carries them."""
    reasons = result.get("unofficial_reasons")
    return {"official": result.get("official") is True,
            "unofficial_reasons": [r for r in reasons if isinstance(r, str)] if isinstance(reasons, list) else [],
            "provenance": result.get("provenance") if isinstance(result.get("provenance"), dict) else None}


# ---------------------------------------------------------------- a price given at submit time

SUBMITTER_SOURCE = "submit --cost-per-hour, given by the submitter"


def given_price(args) -> dict | None:
    """One node's price from --instance or --cost-per-hour: {"usd_per_hour", "record" (the prices
    table's `price` record, as `dawnbench run --instance` keeps it, or None), "added" (what the entry
    records of where the price came from and when)}; None when neither option is given."""
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    if args.instance is not None:
        price = prices.lookup(args.instance, prices.JUDGE_TABLE)
        return {"usd_per_hour": price.usd_per_hour, "record": price.record(),
                "added": {"by": "submit", "date": today, "option": f"--instance {price.key}",
                          "usd_per_hour": price.usd_per_hour, "source": price.source, "source_date": price.date}}
    usd = args.cost_per_hour
    if usd is None:
        return None
    return {"usd_per_hour": usd, "record": None,
            "added": {"by": "submit", "date": today, "option": f"--cost-per-hour {usd:g}", "usd_per_hour": usd,
                      "source": SUBMITTER_SOURCE}}


def _train_cost(entry: dict) -> None:
    entry["cost_usd"] = entry["costPerHour"] * entry["tta_seconds"] / 3600.0      # as harness/run_record.py


def _inference_cost(entry: dict) -> None:
    # DAWNBench v1: cost per item = costPerHour x latency / 3.6e6 (as harness/inference.py)
    entry["cost"] = entry["costPerHour"] * entry["latency"] / 3.6e6
    entry["cost_per_10k_items_usd"] = entry["cost"] * 1e4


def add_price(entry: dict, path: Path, given: dict | None, what: str, costs) -> dict:
    """`entry` priced with `given` (for all its nodes), its costs recomputed by `costs`. A price the
    run (or inference, at `path`) already has stands: the same price changes nothing, another is
    refused, since an entry's price must not change silently after the fact."""
    if given is None:
        return entry
    nodes = entry.get("nodes") if isinstance(entry.get("nodes"), int) and entry["nodes"] >= 1 else 1
    per_hour = given["usd_per_hour"] * nodes
    had = entry.get("costPerHour")
    option = given["added"]["option"]
    if had is not None:
        if validate_entries.is_number(had) and math.isclose(had, per_hour, rel_tol=1e-9, abs_tol=1e-12):
            return entry
        instance = f" ({entry['instance']})" if isinstance(entry.get("instance"), str) else ""
        raise SubmitError(f"{path}: the {what} already has a price, costPerHour {validate_entries.show(had)} USD for "
                          f"{nodes} node(s){instance}, and {option} gives {per_hour:g}: submit does not replace "
                          f"a recorded price; leave out {option.split()[0]} (or give the same price)")
    entry = {**entry, "costPerHour": per_hour, "price": given["record"],
             "instance": given["record"]["instance"] if given["record"] else None,
             "price_added": {**given["added"], "nodes": nodes}}
    costs(entry)
    return entry


def train_entry(result: dict, stem: str, args, runs: dict | None) -> dict:
    common, git = _common(result, args)
    task = TASKS[result["task"]]
    misc = dict(result["misc"]) if isinstance(result.get("misc"), dict) else {}
    misc.update({k: result.get(k) for k in ("seed", "epochs", "wall_seconds", "world_size", "run_id",
                                             "hyperparameters", "spans_seconds") if k in result})
    misc["git_dirty"] = git.get("dirty")
    entry = {
        **common,
        "costPerHour": result.get("costPerHour"),
        "timestamp": result["timestamp"],
        "logFilename": f"{stem}.tsv",
        "commitHash": result.get("commitHash", git.get("commit")),
        "misc": misc,
        # explicit units and provenance
        "reference": result["reference"],
        "rules_version": result.get("rules_version"),
        "tta_seconds": result["tta_seconds"],
        "train_seconds": result.get("train_seconds"),      # shown beside it, never ranked (docs/RULES.md)
        # what the reference reports it trained in (harness.precision): a word, absent where not recorded
        "precision": result["precision"].get("train") if isinstance(result.get("precision"), dict) else None,
        "cost_usd": result.get("cost_usd"),
        "nodes": result.get("nodes", 1),
        "instance": result.get("instance"),
        "price": result.get("price"),
        "image_digest": result.get("image_digest"),
        "git_commit": git.get("commit"),
        "runs": runs,
        "eval_examples": result.get("eval_examples", task.eval_examples),
        "threshold": result.get("threshold", task.threshold),
        "official_threshold": result.get("official_threshold") is True,
        **_official(result),
    }
    if isinstance(result.get("usedBlacklist"), bool):
        entry["usedBlacklist"] = result["usedBlacklist"]
    return _clean(entry)


def _check_inference(path: Path, infer: dict, result: dict, allow_unofficial: bool, run_dir: Path) -> None:
    if infer.get("reference") != result.get("reference"):
        raise SubmitError(f"{path}: an inference of {validate_entries.show(infer.get('reference'))}, but the run is of "
                          f"{validate_entries.show(result.get('reference'))}: give the inference of this run's model")
    # an inference of a run's model folder (`infer --model <run>/model`) must be of this run's scored model, by
    # the log's hash, and of its code; a model from elsewhere (a file, a folder) ranks "provenance unverified"
    source = infer.get("model_source")
    problem = entry_status.not_the_runs_model(infer, run_dir) if isinstance(source, dict) and source.get("kind") == "run" \
        else None
    if problem:
        raise SubmitError(f"{path}: {problem}: infer this run's own model (`{command('infer')} "
                          f"{result.get('reference')} --model {run_dir}/model`) and submit that")
    _check_scores(path, infer, result, allow_unofficial)


def _check_price(path: Path, record: dict) -> None:
    """A run (or inference) whose price record names an instance of the prices table at another price
    (`harness run --price-record`, which has no table to check it against) is refused."""
    problem = prices.table_disagreement(record.get("price"), prices.JUDGE_TABLE)
    if problem:
        raise SubmitError(f"{path}: price: {problem}: a named instance is priced from the table; run it again "
                          f"with --instance {record['price']['instance']} (or --cost-per-hour USD for a price of "
                          f"your own)")


def _figure(task, value: object) -> str:
    """A figure read from a file, in its task's unit where it is a number of a known task (94.12%, F1
    0.7523), else as the file has it."""
    return task.figure.said(value) if task is not None and validate_entries.is_number(value) else validate_entries.show(value)


def _check_scores(path: Path, infer: dict, result: dict, allow_unofficial: bool) -> None:
    """The whole eval set, at the official threshold, reached, with a latency; and official."""
    _check_price(path, infer)
    if infer.get("complete_eval_set") is not True:
        task = TASKS.get(result.get("task"))
        raise SubmitError(f"{path}: timed {validate_entries.show(infer.get('items'))} items, not the whole eval set"
                          f"{f' of {task.eval_examples}' if task else ''} (rerun `{command('infer')}` on the official "
                          f"data, without --limit)")
    if infer.get("official_threshold") is not True and not allow_unofficial:
        raise SubmitError(f"{path}: scored against a lowered threshold {validate_entries.show(infer.get('threshold'))}: "
                          f"a smoke test, not an entry (rerun `{command('infer')}` without --threshold)")
    value, threshold, task = infer.get("metric_value"), infer.get("threshold"), TASKS.get(result.get("task"))
    if not (validate_entries.is_number(value) and validate_entries.is_number(threshold) and task is not None
            and task.reaches(value, threshold) and infer.get("reached_threshold") is True):
        side = task.kind.short_side if task else "below"
        raise SubmitError(f"{path}: {infer.get('metric')} {_figure(task, value)} is {side} the threshold "
                          f"{_figure(task, threshold)}: only a model that reaches it is an inference entry")
    if not validate_entries.is_number(infer.get("latency")) or not infer["latency"] > 0:
        raise SubmitError(f"{path}: latency is {validate_entries.show(infer.get('latency'))}, expected ms per item "
                          f"(is this the inference.json of `dawnbench infer`?)")
    verdict = _inference_verdict(infer, result)
    if not verdict["official"] and not allow_unofficial:
        why = "; ".join(verdict["unofficial_reasons"])
        raise SubmitError(f"{path}: the inference is not official: {validate_entries.show(why, 400)[1:-1]} "
                          f"(--allow-unofficial submits it anyway, marked official: false)")


def _inference_verdict(infer: dict, result: dict) -> dict:
    """The entry's verdict: the model's run's (when there is one) and the inference's own, which
    `dawnbench infer` records as a run does (its code, data, isolation, threshold, eval set)."""
    own = _official(infer) if "official" in infer else {
        "official": False, "provenance": None,
        "unofficial_reasons": ["inference.json records no provenance (rerun `dawnbench infer` with this harness)"]}
    if infer is result:         # an inference-only entry: the inference is all there is
        return own
    verdict = _official(result)
    reasons = verdict["unofficial_reasons"] + [r for r in own["unofficial_reasons"]
                                               if r not in verdict["unofficial_reasons"]]
    return {**verdict, "official": verdict["official"] and own["official"], "unofficial_reasons": reasons}


def inference_entry(infer: dict, result: dict, args) -> dict:
    common, git = _common(result, args)
    task = TASKS[result["task"]]
    if not args.hardware and isinstance(infer.get("hardware"), str) and infer["hardware"].strip():
        common["hardware"] = infer["hardware"]       # inference may run on other hardware than training
    if isinstance(infer.get("framework"), str) and infer["framework"].strip():
        common["framework"] = infer["framework"]
    accuracy = {}
    for figure in task.kind.figures:
        if validate_entries.is_number(infer.get(figure.metric)):
            accuracy[figure.field] = figure.entry_value(infer[figure.metric])
    stats = infer.get("latency_ms") if isinstance(infer.get("latency_ms"), dict) else {}
    entry = {
        **common,
        "costPerHour": infer.get("costPerHour"),
        "latency": infer["latency"],
        "cost": infer.get("cost"),
        **accuracy,
        "timestamp": infer.get("timestamp") or result["timestamp"],
        "commitHash": result.get("commitHash", git.get("commit")),
        "misc": {"items": infer.get("items"), "batch_size": infer.get("batch_size"),
                 "warmup_items": infer.get("warmup_items"), "threads": infer.get("threads"),
                 **{k: infer[k] for k in ("runtime", "precision", "model_source") if k in infer}},
        "reference": result["reference"],
        "rules_version": result.get("rules_version"),
        "latency_ms": {k: stats.get(k) for k in ("mean", "p50", "p90", "p99")} if stats else None,
        "cost_per_10k_items_usd": infer.get("cost_per_10k_items_usd"),
        "nodes": infer.get("nodes", 1),
        "instance": infer.get("instance"),
        "price": infer.get("price"),
        "image_digest": infer.get("image_digest"),
        "git_commit": git.get("commit"),
        "eval_examples": infer.get("items"),
        "threshold": infer.get("threshold", task.threshold),
        "official_threshold": infer.get("official_threshold") is True,
        **_inference_verdict(infer, result),    # an inference of an unofficial run is not official either
    }
    return _clean(entry)


def _dump(entry: dict, path: Path) -> None:
    try:
        text = json.dumps(entry, indent=2, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise SubmitError(f"{path.name}: the run's files hold NaN or Infinity, which an entry cannot "
                          f"(check result.json and inference.json)") from None
    path.write_text(text + "\n", encoding="utf-8")


def _read_inference(given: Path) -> tuple[Path, dict]:
    path = Path(given)
    path = path / "inference.json" if path.is_dir() or not path.suffix else path
    return path, _read_json(path, "give the folder `dawnbench infer` wrote (--out)")


def _with_code_url(args, record: dict):
    """args with the entry's code URL (dawnbench.code_url), the warning said when it is no link."""
    url, warning = code_url.for_entry(record, args.code_url, required=not args.allow_unofficial)
    if warning:
        print(warning, file=sys.stderr)
    return argparse.Namespace(**{**vars(args), "code_url": url})


def submit(args) -> list[Path]:
    given = given_price(args)
    _check_out(Path(args.out))
    if args.run_dir is None:
        return submit_inference_only(args, given)
    folder, result, runs = load_run(args.run_dir)
    _check_run(folder, result, args.allow_unofficial)
    task = TASKS[result["task"]]
    log = _log(folder, result)
    infer = None
    if args.inference is not None:
        infer_path, infer = _read_inference(args.inference)
        _check_inference(infer_path, infer, result, args.allow_unofficial, folder)
    run_files = _verify(folder, args.data) + [log.name]
    # a series goes whole beside its entry (<stem>.series/seed<k>/, each run as verified), so that
    # `validate` recomputes the entry's `runs` from them
    series_files = [f"{r['run_dir']}/{name}" for r in series_record.read_runs(folder.parent)
                    for name in _verify(folder.parent / r["run_dir"], args.data)
                    + [_log(folder.parent / r["run_dir"], r).name]] if runs is not None else []
    args = _with_code_url(args, result)

    train = add_price(train_entry(result, "", args, runs), folder / "result.json", given, "run", _train_cost)
    stem = entries.entry_stem(train["author"], train["model"], train["hardware"], train["framework"])
    train["logFilename"] = f"{stem}.tsv"
    targets = {("train", f"{stem}.tsv"): log, ("train", f"{stem}.json"): train}
    runs = [(folder, run_files, f"{stem}{entry_status.RUN_SUFFIX}", "train")]
    if series_files:
        runs.append((folder.parent, series_files, f"{stem}{entries.SERIES_SUFFIX}", "train"))
    if infer is not None:
        targets[("inference", f"{stem}.json")] = add_price(inference_entry(infer, result, args), infer_path, given,
                                                          "inference", _inference_cost)
        runs.append(_inference_run(infer_path, stem))
    return _place(Path(args.out), task, targets, runs, args)


def _log(folder: Path, result: dict) -> Path:
    """The run's DAWNBench log (the TSV its result.json names), which must be there."""
    log_name = result.get("logFilename")
    log = _inside(folder, log_name) if isinstance(log_name, str) else None
    log = log or folder / f"{result.get('reference')}.tsv"
    if not log.is_file():
        raise SubmitError(f"{log}: the run's log is missing; a run folder holds the TSV `dawnbench run` wrote")
    return log


def _inference_run(infer_path: Path, stem: str) -> tuple:
    """The inference's record, as `dawnbench infer` wrote it, to go beside its entry as
    <stem>.run/inference.json: the file the entry's latency, accuracy and cost are checked against."""
    return (infer_path.parent, [infer_path.name], f"{stem}{entry_status.RUN_SUFFIX}", "inference")


def submit_inference_only(args, given: dict | None) -> list[Path]:
    """`submit --inference INFER_DIR` without a run: the entry of a reference that only infers
    (its model came from another run or a file, which inference.json's model_source names)."""
    if args.inference is None:
        raise SubmitError("give a run folder (RUN_DIR), or --inference INFER_DIR alone for an inference-only "
                          "reference's entry")
    path, infer = _read_inference(args.inference)
    reference = validate_entries.show(infer.get("reference"))
    if infer.get("infers_only") is not True:
        raise SubmitError(f"{path}: an inference of {reference}, a reference that trains: its entry goes with its "
                          f"run ({command('submit')} RUN_DIR --inference {args.inference})")
    task = TASKS.get(infer.get("task"))
    if task is None:
        raise SubmitError(f"{path}: task is {validate_entries.show(infer.get('task'))}, "
                          f"expected one of {', '.join(sorted(TASKS))}")
    for field in ("author", "model", "hardware", "framework", "timestamp", "reference"):
        _need(infer, path, field, str, "a string (is this the inference.json of `dawnbench infer`?)")
    _check_scores(path, infer, infer, args.allow_unofficial)
    args = _with_code_url(args, infer)
    entry = add_price(inference_entry(infer, infer, args), path, given, "inference", _inference_cost)
    stem = entries.entry_stem(entry["author"], entry["model"], entry["hardware"], entry["framework"])
    return _place(Path(args.out), task, {("inference", f"{stem}.json"): entry}, [_inference_run(path, stem)], args)


def _check_out(out: Path) -> None:
    """--out is the entries tree: a folder, or a path where one can be made."""
    for path in (out, *out.parents):
        if path.exists() and not path.is_dir():
            there = "" if path == out else f" (in --out {out})"
            raise UsageError(f"--out {path}{there} is a file, not a folder: give the entries folder to write "
                             f"into, e.g. --out entries/ (made if missing)")
        if path.exists():
            # checked before the run is read and anything is said of it: a refusal is then its one line
            if not os.access(path, os.W_OK | os.X_OK):
                raise UsageError(f"cannot write the entry under {out}: {path} is not writable by this user; give "
                                 f"--out a folder you can write (nothing was written)")
            return


def _os_error(e: OSError, to: Path) -> SubmitError:
    """An OS error while placing the entry as one line, without Python's `[Errno N]` (nothing was
    moved into place: the staging folder is removed)."""
    where = Path(e.filename) if e.filename is not None else to
    problem = e.strerror or type(e).__name__
    if e.errno in safe_write.WRITE_SIDE:         # a copy names its source, but only the target can be full
        return SubmitError(f"{safe_write.write_problem(to, e, '--out')} (nothing was written)")
    if where == to or to.resolve() in where.resolve().parents:
        return SubmitError(f"cannot write the entry under {to}: {where}: {problem}; give --out a folder you can "
                           f"write (nothing was written)")
    return SubmitError(f"cannot read {where}: {problem} (nothing was written)")    # a file of the run


def _place(to: Path, task, targets: dict, runs: list[tuple], args) -> list[Path]:
    """Write `targets` ({(kind, name): entry dict, or the log file to copy}) and the verified runs
    (folder, its files, the name it takes, the entry kind it goes with) into the entries tree `to`:
    staged, validated, then moved into place, so that nothing is written when anything is wrong."""
    finals = [to / task.display_name / kind / name for kind, name in targets]
    run_finals = [to / task.display_name / run[3] / run[2] for run in runs]
    finals_and_run = finals + run_finals
    existing = [p for p in finals_and_run if p.exists() or p.is_symlink()]

    try:
        to.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".submit-", dir=to))
    except OSError as e:
        raise _os_error(e, to) from None
    try:
        for (kind, name), entry in targets.items():
            path = staging / task.display_name / kind / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(entry, Path):
                shutil.copyfile(entry, path)        # the log exactly as the harness wrote it
            else:
                _dump(entry, path)
        for folder, run_files, run_name, kind in runs:
            for name in run_files:       # the run, as verified: what the leaderboard verifies again
                path = staging / task.display_name / kind / run_name / name
                path.parent.mkdir(parents=True, exist_ok=True)
                if Path(name).name == "env.json":      # the machine's folders written as public names (its hash holds none)
                    _dump(_public_paths(json.loads((folder / name).read_text(encoding="utf-8"))), path)
                else:
                    shutil.copyfile(folder / name, path)
        problems, _ = validate_entries.check([staging], allow_unofficial=args.allow_unofficial)
        problems = [p for p in problems if not p.warning]     # a review flag is the board's note, not a refusal
        if problems:
            first = problems[0]
            where = Path(first.file).relative_to(staging)
            raise SubmitError(f"the entry would not pass `dawnbench validate`: {to / where}:{first.line}: "
                              f"{first.field}: {first.message}")
        _refuse_machine_paths(staging, to, [run[0] for run in runs] + ([args.data] if args.data else []))
        if existing:
            staged = [staging / p.relative_to(to) for p in finals_and_run]
            if not _same_content(existing, finals_and_run, staged):
                _refuse_replacing(existing, finals, staged, targets, runs, args.force)
        for k, run_final in enumerate(run_finals):    # --force: the old run goes with the old entry
            if run_final.exists() or run_final.is_symlink():
                os.replace(run_final, staging / f"replaced-{k}.run")
        for (kind, name), final in zip(targets, finals):
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / task.display_name / kind / name, final)
        for (_, _, run_name, kind), run_final in zip(runs, run_finals):
            os.replace(staging / task.display_name / kind / run_name, run_final)
    except OSError as e:
        raise _os_error(e, to) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return finals_and_run


def machine_paths(folders: list[Path]) -> list[str]:
    """The folders of this machine no entry file may name: the run's and the inference's, the data, the
    references, the checkout, the Python, the home and working folders (a record of an older harness
    held $DAWNBENCH_WORKER_PYTHON, the model's and the checkpoint's paths)."""
    found = {*folders, paths.data_root(), paths.references_root(), paths.PACKAGE_PARENT, Path(sys.prefix),
             Path.home(), Path.cwd()}
    texts = {str(p) for p in found} | {os.path.realpath(p) for p in found}
    return sorted((t for t in texts if len(t) > 1 and os.path.isabs(t)), key=len, reverse=True)


def _refuse_machine_paths(staging: Path, to: Path, folders: list[Path]) -> None:
    """An entry is public: a staged file that names a folder of this machine is refused in one line."""
    pattern = re.compile(b"(" + b"|".join(re.escape(os.fsencode(t)) for t in machine_paths(folders))
                         + rb")(?![A-Za-z0-9_.-])")
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        found = pattern.search(path.read_bytes())
        if found:
            raise SubmitError(f"{to / path.relative_to(staging)} would publish {os.fsdecode(found.group(1))!r}, a "
                              f"path of this machine: an entry is public (the run was made by an older harness, "
                              f"which recorded paths): run it again with this one (nothing was written)")


def _public_paths(value):
    """`value` (env.json's record) with every absolute path of this machine as `harness.paths.public`
    writes it: the interpreter, the prefixes, site-packages, .pth files, the data root. The workers'
    environment hash is of names, versions and contents only (harness.worker_env.digest), so it holds."""
    if isinstance(value, dict):
        return {k: _public_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_public_paths(v) for v in value]
    return paths.public(value) if isinstance(value, str) else value


def _files(path: Path) -> dict[str, bytes] | None:
    """A file's bytes, or a folder's files by relative path (None: a link or something else)."""
    if path.is_symlink():
        return None
    if path.is_file():
        return {"": path.read_bytes()}
    if path.is_dir():
        return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}
    return None


def _same_content(existing: list[Path], finals: list[Path], staged: list[Path]) -> bool:
    """Whether every existing target holds what this submit would write there (the same run
    submitted again): then nothing is replaced but the same bytes."""
    pairs = dict(zip(finals, staged))
    return all(_files(p) is not None and _files(p) == _files(pairs[p]) for p in existing)


def _entry_of(path: Path) -> dict:
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return fields if isinstance(fields, dict) else {}


def _refuse_replacing(existing: list[Path], finals: list[Path], staged: list[Path], targets: dict, runs: list,
                      force: bool) -> None:
    """An existing entry of other content is replaced only with --force, and never by another
    reference's run: two references whose author, model, hardware and framework are the same (a fork
    and its original) would share one entry name, and one would silently take the other's place."""
    new_run = runs[0][0]
    jsons = [(final, stage) for final, stage, (kind, name) in zip(finals, staged, targets) if name.endswith(".json")]
    old, new = next(((_entry_of(f), _entry_of(s)) for f, s in jsons if f in existing), ({}, {}))
    target = next((f for f, _ in jsons if f in existing), existing[0])
    old_ref, new_ref = old.get("reference"), new.get("reference")
    show = validate_entries.show
    held = (f"holds another entry (reference {show(old_ref)}, timestamp {show(old.get('timestamp'))})"
            if old else "holds other content")
    if old_ref is not None and new_ref is not None and old_ref != new_ref:
        raise SubmitError(f"{target} {held}, and the run {new_run} of reference {validate_entries.show(new_ref)} would "
                          f"take its name: give this run an entry name of its own (--author NAME, or `model` or "
                          f"`author` in references/{new_ref}/reference.toml; `{command('fork')}` sets both); --force "
                          f"replaces an entry of the same reference only (nothing was written)")
    if not force:
        raise SubmitError(f"{target} {held}; the run {new_run} would replace it: --force replaces it, or give this "
                          f"run another entry name (--author NAME) (nothing was written)")


def build_parser(p: Parser | None = None) -> Parser:
    """The options, on `p` (dawnbench.cli's `submit`, in the one tree) or on a parser of its own
    (`python -m dawnbench.submit`)."""
    p = p if p is not None else Parser(prog=PROG)
    p.description = ("Write a converged run (or a series' median run) as DAWNBench v1 entry files: "
                     "<Task>/train/<author>_<model>_<hardware>_<framework>.json + .tsv, and with --inference "
                     "<Task>/inference/<same>.json.")
    p.add_argument("run_dir", type=folder("", "give a run folder (result.json) or a series folder (summary.json)"),
                   metavar="RUN_DIR", nargs="?",
                   help="a run folder (result.json) or a series folder (summary.json); left out, --inference alone "
                        "submits the entry of a reference that only infers")
    p.add_argument("--inference", type=folder("--inference", "give the folder `dawnbench infer` wrote (its --out)"),
                   metavar="INFER_DIR", help="the folder `dawnbench infer` wrote")
    p.add_argument("--out", type=folder("--out", "give the entries folder to write into, e.g. --out entries/ "
                                                 "(made if missing)"),
                   default=Path("entries"), help="the entries tree (default: entries)")
    # one line each, at most MAX_TEXT characters: validate refuses the same in an entry (its schema)
    p.add_argument("--author", type=arguments.text("--author"), help="the author (default: the reference's)")
    p.add_argument("--author-email", type=arguments.text("--author-email", empty=True), help="the author's e-mail")
    p.add_argument("--hardware", type=arguments.text("--hardware"),
                   help="the hardware, as it should read on the leaderboard")
    p.add_argument("--code-url", type=arguments.text("--code-url", empty=True),
                   help="where the code is (default: the run's commit on a remote of its repository that holds it, "
                        "<remote>/tree/<commit>/references/<reference>; else reference.toml's http(s) code_url); "
                        "'' for an entry without a link")
    p.add_argument("--data", type=DATA_FOLDER, default=None,
                   help="the data root with the official eval labels, to verify the run (default $DAWNBENCH_DATA "
                        "or ./data)")
    price = p.add_mutually_exclusive_group()
    price.add_argument(prices.INSTANCE_OPTION, default=None, metavar="PROVIDER:INSTANCE",
                       help="price a run made without one: the cloud instance it ran on, priced from "
                            "dawnbench/data/prices.yaml as `dawnbench run --instance` does (e.g. aws:p3.2xlarge)")
    price.add_argument("--cost-per-hour", type=arguments.price(), default=None, metavar="USD",
                       help=f"price a run made without one: the on-demand USD per hour of one node (above 0, at "
                            f"most {arguments.MAX_USD_PER_HOUR:,}), "
                            "recorded as given by the submitter")
    p.add_argument("--force", action="store_true",
                   help="replace an existing entry of the same reference (another reference's entry is never replaced)")
    p.add_argument("--allow-unofficial", action="store_true",
                   help="submit a run that is not official (a lowered threshold, overrides, uncommitted code), "
                        "marked official: false (smoke tests)")
    return p


def run(args) -> int:
    """The command on parsed options (dawnbench.cli runs it from the one tree)."""
    if (note := prices.override_note()) is not None:
        print(f"{PROG}: {note}", file=sys.stderr)
    try:
        written = submit(args)
    except DawnbenchError as e:
        return report(PROG, e)
    except OSError as e:        # e.g. a run file unreadable: nothing was moved into place
        where = f"{e.filename}: " if e.filename is not None else ""
        return report(PROG, SubmitError(f"{where}{e.strerror or type(e).__name__} (nothing was written)"))
    for path in written:
        print(path)
    return EXIT_OK


main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
