"""`dawnbench compliance RUN_DIR`: MLPerf's official compliance checker on a run's events.jsonl.

It runs `python -m mlperf_logging.compliance_checker --ruleset 4.0.0 --config
dawnbench/data/mlperf/common.yaml` (the mlperf-logging package, pinned in requirements/tools.txt:
a host tool, never in a reference image) and prints its verdict in one line; `--verbose` shows the
checker's own report first. Exit status 0 when the log passes, 1 when it does not, 2 for a bad
RUN_DIR. docs/RULES.md, "The MLPerf reading", says what the ruleset checks.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.arguments import Parser, check_path, reports_errors, tool_main
from harness.errors import EXIT_FAILED, EXIT_OK, UsageError, command
from harness.events import read_events

PROG = command("compliance")
RULESET = "4.0.0"       # the last MLPerf training ruleset with ResNet, the closest to dawnbench's tasks
CONFIG = Path(__file__).resolve().parent / "data" / "mlperf" / "common.yaml"
SEPARATOR = "-" * 30    # between the checker's messages


def events_file(path: str) -> Path:
    p = Path(path)
    fix = "give a run folder, results/<reference>/<run id>/"
    check_path("", p, ("a file", "a folder"), fix)      # a device or a FIFO is said to be one, never opened
    events = p / "events.jsonl" if p.is_dir() else p
    check_path("", events, ("a file",), fix)
    if not events.is_file():
        where = f"{p} has no events.jsonl" if p.is_dir() else f"{p} does not exist"
        raise UsageError(f"{where}: {fix}")
    return events


def checker_version() -> str:
    if importlib.util.find_spec("mlperf_logging") is None:
        raise UsageError(f"mlperf-logging is not installed in {sys.executable}: run {command('compliance')} "
                         "from the checkout (it goes to the tools environment), or pip install -r requirements/tools.txt")
    return importlib.metadata.version("mlperf-logging")


def run_checker(events: Path) -> subprocess.CompletedProcess:
    """The official checker, as its README runs it; its log file goes to a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="dawnbench-compliance-") as tmp:
        return subprocess.run(
            [sys.executable, "-m", "mlperf_logging.compliance_checker", "--ruleset", RULESET,
             "--config", str(CONFIG), "--log_output", str(Path(tmp) / "compliance_checker.log"),
             str(events.resolve())],
            capture_output=True, text=True, cwd=tmp)


def first_problem(output: str) -> tuple[int, str]:
    """(number of problems, the first one in one line) from the checker's report."""
    if "WARNING - " not in output:
        lines = [line for line in output.strip().splitlines() if line.strip()]
        return 1, "the checker stopped: " + (lines[-1].strip() if lines else "no output")
    body = output.split("WARNING - ", 1)[1].split("ERROR - FAILED", 1)[0]
    messages = [m.strip() for m in body.split(SEPARATOR) if m.strip()]
    lines = messages[0].splitlines()
    failed = [" ".join(line.split()) for line in lines if line.startswith("failed test:")]
    return len(messages), "; ".join([lines[0].strip().rstrip(":"), *failed[:1]])


def mlperf_seconds(events: Path) -> float | None:
    """run_start -> run_stop, MLPerf's time to train, from the log's wall-clock stamps."""
    try:
        times = {e["key"]: e["time_ms"] for e in read_events(events) if e["key"] in ("run_start", "run_stop")}
        return (times["run_stop"] - times["run_start"]) / 1000.0
    except (ValueError, KeyError, TypeError):
        return None


def verdict(events: Path, proc: subprocess.CompletedProcess, version: str) -> tuple[int, str]:
    rules = f"MLPerf training {RULESET} common rules + dawnbench's open ruleset, mlperf-logging {version}"
    if proc.returncode == 0:
        seconds = mlperf_seconds(events)
        timed = f"; MLPerf time run_start->run_stop {seconds:.1f} s" if seconds is not None else ""
        return EXIT_OK, f"{events}: compliant ({rules}){timed}"
    count, first = first_problem(proc.stdout + proc.stderr)
    return EXIT_FAILED, (f"{events}: NOT compliant ({rules}): {count} problem{'s' * (count != 1)}, "
                         f"first: {first} (--verbose for the checker's report)")


def build_parser(parser: Parser | None = None) -> Parser:
    """The options, on `parser` (dawnbench.cli's `compliance`, in the one tree) or on a parser of its
    own (`python -m dawnbench.compliance`)."""
    parser = parser if parser is not None else Parser(prog=PROG)
    parser.description = ("Check a run's events.jsonl with MLPerf's official compliance checker and dawnbench's "
                          "ruleset; one line, exit 0 when it passes")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (results/<reference>/<run id>/) or its events.jsonl")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the checker's own report first")
    return parser


@reports_errors(PROG)
def run(args) -> int:
    """The command on parsed options (dawnbench.cli runs it from the one tree)."""
    events = events_file(args.run_dir)
    version = checker_version()
    proc = run_checker(events)
    if args.verbose:
        print((proc.stdout + proc.stderr).rstrip(), file=sys.stderr)
    code, line = verdict(events, proc, version)
    print(line)
    return code


main = tool_main(PROG, build_parser, run)


if __name__ == "__main__":
    sys.exit(main())
