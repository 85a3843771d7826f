"""The one error base class of the project, and the exit codes its commands use.

Every mistake a user can fix (a bad option, a missing dataset, a malformed file) is raised as a
DawnbenchError subclass whose message is one line saying what is wrong and how to fix it; the
commands print `<prog>: error: <message>` and exit with the error's code, never a traceback.
"""
from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_FAILED = 1        # the command ran and its answer is "no": DNC, an invalid entry, below threshold
EXIT_USAGE = 2         # the user's input is wrong: nothing was done, nothing written


class DawnbenchError(Exception):
    """A problem the user can fix; `str(e)` is the one line to print."""

    exit_code = EXIT_USAGE


class UsageError(DawnbenchError):
    """A bad input from the user: the message is one line saying what is wrong and what to do."""


def report(prog: str, error: DawnbenchError) -> int:
    """Print the error's one line and return its exit code."""
    print(f"{prog}: error: {error}", file=sys.stderr)
    return error.exit_code
