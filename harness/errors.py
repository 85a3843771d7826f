"""The one error base class of the project, and the exit codes its commands use.

Every mistake a user can fix (a bad option, a missing dataset, a malformed file) is raised as a
DawnbenchError subclass whose message is one line saying what is wrong and how to fix it; the
commands print `<prog>: error: <message>` and exit with the error's code, never a traceback.
"""
from __future__ import annotations

import os
import sys

EXIT_OK = 0
EXIT_FAILED = 1        # the command ran and its answer is "no": DNC, an invalid entry, below threshold
EXIT_USAGE = 2         # the user's input is wrong: nothing was done, nothing written
EXIT_CLOSED_PIPE = 128 + 13   # stdout's reader went away (SIGPIPE's status)
EXIT_INTERRUPTED = 128 + 2    # Ctrl-C that no command handled (SIGINT's status)


# How the user called the `dawnbench` command (`bin/dawnbench`, `.venv/tools/bin/dawnbench`): set by
# dawnbench.launcher, so that a message naming a command names one that works as printed.
PROG_ENV = "DAWNBENCH_PROG"


def command(rest: str = "") -> str:
    """`<the user's dawnbench> rest`: a command as the user types it ($DAWNBENCH_PROG, else `dawnbench`).
    In an image, the host's: dawnbench.containers passes its own in, since the user reads it there."""
    prog = os.environ.get(PROG_ENV) or "dawnbench"
    return f"{prog} {rest}" if rest else prog


class DawnbenchError(Exception):
    """A problem the user can fix; `str(e)` is the one line to print."""

    exit_code = EXIT_USAGE


class UsageError(DawnbenchError):
    """A bad input from the user: the message is one line saying what is wrong and what to do."""


# A message longer than this is cut (a value a source forgot to clip, a 100 kB --author): the line stays
# readable and a terminal is not flooded. Every message the project writes is well under it.
MAX_MESSAGE = 2000


def one_line(text: str) -> str:
    """`text` with each character that is not printable (a newline, a tab, an escape, a C1 control)
    written as Python escapes it (\\n, \\t, \\x1b, \\x85): one line on any terminal, nothing forged."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown(value: object, limit: int = 80) -> str:
    """A user's value in a message: one line (see `one_line`) and at most `limit` characters, cut
    short with "..." and its full length (`aaaa... (100,000 characters)`)."""
    text = one_line(str(value))
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(str(value)):,} characters)"


def report(prog: str, error: DawnbenchError) -> int:
    """Print the error's one line and return its exit code. Whatever the message echoes is escaped
    to one line here, in the one place every command prints its error (and cut at MAX_MESSAGE)."""
    print(f"{prog}: error: {shown(error, MAX_MESSAGE)}", file=sys.stderr)
    return error.exit_code


def quiet_on_closed_pipe(run) -> int:
    """`dawnbench list | head -1`: a reader that goes away ends the command quietly, with the status
    a process killed by SIGPIPE has (128 + 13), as the shell's own tools end; never a traceback. So does
    a Ctrl-C that nothing below handled (`validate` of a large tree, `data verify`): one line, and the
    status of a process killed by SIGINT (128 + 2). A run handles its own: it ends DNC with its files."""
    try:
        status = run()
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        print(f"{command()}: interrupted (Ctrl-C): stopped before it finished", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python flushes stdout again at exit and would report the broken pipe then: point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
