"""What every `dawnbench analyze` subcommand shares: its name in messages, the input error, run and
series JSON read as entries are (bounded, nothing from outside the folder), the inputs and --out
options, and the PNG and JSON written into --out."""
from __future__ import annotations

from pathlib import Path

from dawnbench.entries import number
from harness import safe_read, safe_write
from harness.arguments import Parser, file_or_folder, folder
from harness.errors import EXIT_OK, DawnbenchError, command, report

PROG = command("analyze")


class InputError(DawnbenchError):
    """An input that cannot be analysed; the message names it and says what was expected."""


def read_json(path: Path):
    """A run's or a series' JSON, read like an entry's: nothing from outside its folder, bounded."""
    try:
        return safe_read.read_json(path, Path(path).parent)
    except safe_read.Refused as e:
        raise InputError(f"{path}: not readable JSON: {e.reason}") from None



def read_series(path: Path, warn=lambda line: None) -> dict:
    """A repeated-run series: its folder (holding summary.json) or the summary.json itself. One
    that did not finish its runs (killed, interrupted, still going) is said to `warn`, and marked."""
    path = Path(path)
    summary_file = path / "summary.json" if path.is_dir() else path
    if not summary_file.is_file():
        raise InputError(f"{path}: no summary.json; give a series folder written by "
                         f"`dawnbench run REF --runs N` (results/<REF>/<series id>/) or its summary.json")
    summary = read_json(summary_file)
    runs = summary.get("runs") if isinstance(summary, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise InputError(f"{summary_file}: not a series summary (field 'runs' must be a list of objects)")
    for n, run in enumerate(runs):
        if run.get("status") == "converged" and number(run.get("tta_seconds")) is None:
            raise InputError(f"{summary_file}: runs[{n}] converged but has no number 'tta_seconds'")
    summary["_source"] = str(summary_file)
    summary["_label"] = f"{summary.get('reference') or summary_file.parent.parent.name}/{summary_file.parent.name}"
    requested = summary.get("requested_runs")
    short = isinstance(requested, int) and not isinstance(requested, bool) and len(runs) < requested
    if short or summary.get("in_progress") is True or summary.get("interrupted") is True:
        how = ("interrupted" if summary.get("interrupted") is True else
               "still running, or killed before it could say so" if summary.get("in_progress") is True else "short")
        summary["_unfinished"] = f"{len(runs)} of {requested if isinstance(requested, int) else '?'} runs ({how})"
        warn(f"{summary_file}: an unfinished series: {summary['_unfinished']}; its statistics cover those runs only")
    return summary



def add_analysis(sub, name: str, help_text: str, inputs: str) -> Parser:
    """An analysis' subcommand: its inputs and --out."""
    a = sub.add_parser(name, help=help_text, description=help_text)
    a.add_argument("inputs", nargs="+", type=file_or_folder("", "give " + inputs), metavar="INPUT", help=inputs)
    add_out(a)
    return a


def add_out(a: Parser) -> None:
    a.add_argument("--out", type=folder("--out", "give the folder to write the PNG and JSON into (made if "
                                                 "missing), e.g. --out analysis/"),
                   required=True, help="the folder to write the PNG and JSON into")



def write_outputs(args, numbers: dict, plot) -> int:
    """<analysis>.png (drawn by `plot`) and <analysis>.json into --out; their paths printed."""
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return report(PROG, InputError(f"cannot make the output folder {args.out} ({e})"))
    png, data = args.out / f"{args.analysis}.png", args.out / f"{args.analysis}.json"
    try:
        try:
            plot(numbers, png)
        except OSError as e:
            raise safe_write.WriteError(png, e, "--out") from None
        safe_write.write_json(data, numbers, "--out")
    except safe_write.WriteError as e:
        return report(PROG, e)
    print(png)
    print(data)
    return EXIT_OK
