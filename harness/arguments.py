"""The command-line parser of the whole house, and the ranges of its numbers.

Every command (harness, dawnbench and its tools, bench, the packers) builds its parser from `Parser`,
so a bad option is one line, `<prog>: error: <what> (see `<prog> --help`)`, exit status 2, never
argparse's usage block. Numbers are parsed by `whole` and `number`, which carry their option's range:
a value out of it is refused while parsing, before anything starts or is written. The standard
library only: it is in the harness, inside every image, and the host tools import it from there.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import re
import stat
import sys
from pathlib import Path

from harness.errors import DawnbenchError, UsageError, one_line, report, shown

# numpy's legacy RandomState (and the frameworks' manual_seed/set_seed through it) takes 0 .. 2**32-1;
# beyond it a run dies inside the reference's process as a DNC instead of a usage error here.
SEED_MAX = 2**32 - 1
# The upper bounds below are far above any real use: they turn a typo (an extra digit, 1e23) into a
# usage error before anything starts, instead of a run that never ends or a cost that means nothing.
MAX_EPOCHS = 100_000        # the longest DAWNBench schedules are a few hundred epochs
MAX_SECONDS = 100 * 86_400  # 100 days: DAWNBench v1's slowest ImageNet entries took about two weeks;
                            # a larger budget overflowed the sandbox's timeouts (select: timestamp out of range)
MAX_NODES = 10_000          # the largest published entries used a few hundred machines
MAX_THREADS = 4096          # more than the cores of any one machine a batch-1 latency is timed on
MAX_WARMUP = 100_000        # untimed (or timed) batch-1 calls
MAX_EXAMPLES = 10_000_000   # --limit: the largest eval set (ImageNet val) has 50,000 examples
# A series is repeated runs for stability figures (DAWNBench's papers used 5 to 10); a thousand runs of
# even a one-minute reference is most of a day, so a larger count is a typo, refused before run 1.
MAX_RUNS = 1000
# One node's on-demand price, USD per hour (--cost-per-hour, a --price-record's or the prices table's
# usd_per_hour, an entry's price.usd_per_hour). The dearest cloud machines listed in 2024-2025 (8 x H100
# or H200, AWS p5.48xlarge, Azure ND H100 v5) cost about 100 USD/h on demand; 1,000 leaves ten times that
# and still turns 1e30 (or an extra few digits) into a usage error instead of a cost that means nothing.
# A price of 0 (or -0) is no price: it would rank first on cost for free, so it is refused too.
MAX_USD_PER_HOUR = 1000
# An entry's costPerHour is every node's together (price x nodes, the published v1 entries' 391.68 USD/h
# for 16 machines); its costs follow from it and the run's bounded time.
MAX_ENTRY_USD_PER_HOUR = MAX_USD_PER_HOUR * MAX_NODES
MAX_COST_USD = MAX_ENTRY_USD_PER_HOUR * MAX_SECONDS / 3600          # a whole run at that price
# Free text an entry shows (author, e-mail, hardware, code URL, model, framework): one line of at most
# this many characters. The longest of the 187 published v1 values has 145 characters, the longest of
# ours 232 (squad-bidaf-pytorch's model); a kilobyte of author is a mistake or a page-flooding attempt.
MAX_TEXT = 300


# What argparse takes for a negative number rather than an option: its own -1 and -.5, and also -1e5,
# -inf and -nan, so that `--cost-per-hour -inf` reaches the option's range check instead of argparse's
# "expected one argument".
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors raise harness.errors.UsageError (printed with
    `harness.errors.report`, exit status 2); subcommand parsers are of this class too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown option points to the help of the subcommand it was given to
        (`dawnbench run --help`), not to the top level's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            where = f"{self.prog} {command}" if isinstance(command, str) else self.prog
            raise UsageError(f"unrecognized arguments: {' '.join(extras)} (see `{where} --help`)")
        return parsed


def reports_errors(prog: str):
    """Decorate a command's main(argv) -> int: a DawnbenchError (a bad option included) is its one
    line on stderr and its exit code, never a traceback."""
    def decorate(main):
        @functools.wraps(main)
        def wrapped(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except DawnbenchError as e:
                return report(prog, e)
        return wrapped
    return decorate


def tool_main(prog: str, build_parser, run):
    """The main(argv) -> int of a tool that runs on its own (`python -m dawnbench.<tool>`) as well as in
    `dawnbench`'s one tree: its own parser, then `run(args)`. A bad option or any DawnbenchError is
    one line on stderr and its exit code, never a traceback (reports_errors)."""
    @reports_errors(prog)
    def main(argv: list[str] | None = None) -> int:
        return run(build_parser().parse_args(sys.argv[1:] if argv is None else list(argv)))
    return main


def _range_text(least, most) -> str:
    return f"{least:,} or more" if most is None else f"from {least:,} to {most:,}"


def whole(option: str, least: int, most: int | None, example: int, why: str = ""):
    """An argparse type for `option`: a whole number in [least, most] (most None: no upper bound).
    Out of range it raises UsageError, which argparse lets through: the line names the option and
    the value as given, `--nodes 0: give a whole number from 1 to 10,000, e.g. --nodes 4`."""
    reason = f" ({why})" if why else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least or (most is not None and value > most):
            raise UsageError(f"{option} {text}: give a whole number {_range_text(least, most)}{reason}, "
                             f"e.g. {option} {example}")
        return value
    return parse


def number(option: str, least: float, most: float | None = None, *, above: bool = False, example: float,
           why: str = ""):
    """An argparse type for `option`: a finite number, >= least (> least when `above`), <= most when
    given. NaN and the infinities are refused: they pass or fail comparisons silently."""
    low = f"above {least:g}" if above else f"{least:g} or more"
    span = low if most is None else f"{low} and at most {most:g}"
    reason = f" ({why})" if why else ""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if (not math.isfinite(value) or value < least or (above and value == least)
                or (most is not None and value > most)):
            raise UsageError(f"{option} {text}: give a finite number {span}{reason}, e.g. {option} {example:g}")
        return value
    return parse


# A run's (or an inference's) target, as the task's threshold is written (a fraction of an accuracy); the
# task's figure bounds it further (harness.tasks.Task.target: at most 1 for a fraction), once the task is known.
THRESHOLD = number("--threshold", 0, above=True, example=0.85, why="the task's target metric, as its threshold is written")


def price(option: str = "--cost-per-hour"):
    """An argparse type for one node's price in USD per hour: finite, above 0, at most MAX_USD_PER_HOUR."""
    return number(option, 0, MAX_USD_PER_HOUR, above=True, example=3.06,
                  why="USD per hour of one node; 0 is no price")


def text(option: str, *, empty: bool = False, limit: int = MAX_TEXT):
    """An argparse type for free text an entry shows (--author, --hardware): one line, no control
    character (a newline would forge lines wherever it is shown), at most `limit` characters; blank
    only where `empty` (--author-email '' leaves the e-mail out)."""
    def parse(value: str) -> str:
        if one_line(value) != value:
            raise UsageError(f"{option} {shown(value, 60)}: holds a control character (a newline, a tab, an "
                             f"escape): give it as one line of plain text")
        if len(value) > limit:
            raise UsageError(f"{option} {shown(value, 60)}: too long: give at most {limit} characters")
        if not empty and not value.strip():
            raise UsageError(f"{option} {value!r}: blank: give some text, or leave the option out")
        return value
    return parse


def nonempty_path(text: str) -> Path:
    """An argparse type: a path, never the empty one (Path('') is the current folder, so `--results ''`
    would write into wherever the command was started)."""
    if not text:
        raise argparse.ArgumentTypeError("'' is an empty path (the current folder): give a file or folder name")
    return Path(text)


# --- paths ---------------------------------------------------------------------------------------
# A path option names a folder, a regular file, or either; what is there is looked at while parsing
# (os.stat, links followed: never opened, as opening a FIFO blocks and reading a device never ends),
# so that `--out a-file`, `--data a-fifo` or `eval squad FIFO FIFO` is one line before any work, not
# an error after an hour of training or a command that never returns. Nothing there is left to the
# command (an output folder is made; a missing input says how to get it), except that the nearest
# existing folder above it must be a folder: `--results a-file/sub` could never be made.

def path_kind(path: str | os.PathLike) -> str | None:
    """What is at `path`, links followed: 'a folder', 'a file' (a regular one), 'a FIFO', 'a device',
    'a socket', 'a special file', 'a link to nothing'; None when nothing is. Never opens it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a link to nothing" if os.path.islink(path) else None
    except NotADirectoryError:
        return None         # a file on the way: path_problem says which
    except (OSError, ValueError):
        return "a path that cannot be looked at"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "a special file"


def path_problem(path: str | os.PathLike, want: tuple[str, ...]) -> str | None:
    """Why `path` is not one of `want` ('a folder', 'a file'): e.g. 'is a FIFO, not a folder', or for
    a path that is not there, 'x is a file, so nothing can be made under it'; None when it is fine
    (one of `want`, or nothing there under a folder)."""
    kind = path_kind(path)
    if kind in want:
        return None
    wanted = " or ".join(w[2:] if i else w for i, w in enumerate(want))     # "a file or folder"
    if kind is not None:
        return f"is {kind}, not {wanted}"
    for parent in Path(path).parents:       # nothing there: the nearest thing above it must be a folder
        above = path_kind(parent)
        if above == "a folder":
            return None
        if above is not None:
            return f"{parent} is {above}, not a folder, so there can be nothing under it"
    return None


def check_path(option: str, path: str | os.PathLike, want: tuple[str, ...], fix: str) -> None:
    """UsageError `<option> <path>: is a FIFO, not a folder; <fix>` unless path_problem finds nothing."""
    problem = path_problem(path, want)
    if problem:
        raise UsageError(f"{option + ' ' if option else ''}{path}: {problem}; {fix}")


def _path_type(option: str, want: tuple[str, ...], fix: str):
    def parse(text: str) -> Path:
        path = nonempty_path(text)
        check_path(option, path, want, fix)
        return path
    return parse


def folder(option: str, fix: str):
    """An argparse type: a folder, or nothing yet under a folder (an output folder the command makes,
    an input folder whose absence the command explains); never a file, a FIFO or a device."""
    return _path_type(option, ("a folder",), fix)


def regular_file(option: str, fix: str):
    """An argparse type: a regular file (or nothing, which the command explains); never a folder, a
    FIFO or a device, which are refused unopened."""
    return _path_type(option, ("a file",), fix)


def file_or_folder(option: str, fix: str):
    """An argparse type: a regular file or a folder (or nothing, which the command explains)."""
    return _path_type(option, ("a file", "a folder"), fix)


# The path options many commands share, each with its fix.
DATA_FOLDER = folder("--data", "give the data root the datasets are under, e.g. --data ./data "
                               "(default $DAWNBENCH_DATA or ./data)")
RESULTS_FOLDER = folder("--results", "give the folder the run folders go under (made if missing), e.g. --results results/")
REFERENCES_FOLDER = folder("--references", "give the folder that holds <reference>/reference.toml")


def parse_forwarding(parser, argv: list[str]):
    """The command's own arguments, then the options after `--` as `run_options`, passed on as they are
    (argparse would take a `--` list for a positional only before the options): `dawnbench compare`'s."""
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.run_options = argv[cut + 1:]
    return args
