"""How the judge's processes start: every process that times, scores, verifies or reproduces a run.

The judge is the maintainer's code in the maintainer's environment; the entrant's code runs only in
the sandbox (docs/RULES.md, "The trust boundary"). Whatever starts a judge process may have been
touched by an entrant on the way (a launcher that once ran in the reference's interpreter passed a
`PYTHONPATH` holding a `sitecustomize` to every rank: issue 46), so a judge process is started

- by an interpreter of the judge's environment (the one running this code, unless told another of
  the judge's: never a reference's),
- with `-I`: no `PYTHONPATH`, `PYTHONHOME`, `PYTHONSTARTUP`, user site-packages or current folder on
  its path, so only the judge's environment and this code are imported,
- with this code's folder first on its path (this file, run as `python -I harness/judge.py MODULE
  ARGS...`, puts it there and runs the module): an editable install of another clone, or a path
  variable, names no other harness,
- and an environment without the inherited start-up hooks (`PYTHON*`, `LD_PRELOAD`, `LD_AUDIT`, ...),
  which its own children (the workers included) would inherit otherwise.

Standard library only: the image's harness and the launcher's bare python3 use it.
"""
from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

# The folder holding harness/ and common/ (and dawnbench/ in a checkout): this code's own.
ROOT = str(Path(__file__).resolve().parent.parent)
# Variables that make a process run code it was not asked to, before or beside its own: the dynamic
# loader's (a library into every process), the shells' start-up files. Every PYTHON* goes too.
LOADER_HOOKS = ("LD_PRELOAD", "LD_AUDIT")
HOOKS = (*LOADER_HOOKS, "BASH_ENV", "ENV")


def environment(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """`base` (default: this process's environment) without the start-up hooks, plus `extra`."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith("PYTHON") and k not in HOOKS}
    env.update(extra)
    return env


def command(module: str, *args: str, python: str | None = None) -> list[str]:
    """`python -m module args` as a judge process: the judge's interpreter (default this one) with -I,
    unbuffered (its lines reach the user as they are written), this code's folder first on its path."""
    return [python or sys.executable, "-I", "-u", os.path.join(ROOT, "harness", "judge.py"), module, *args]


def main(argv: list[str]) -> None:
    """`python -I harness/judge.py MODULE ARGS...`: `python -m MODULE ARGS` with ROOT first on the path
    (-I puts no folder there: neither this file's nor the current one)."""
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: python -I harness/judge.py MODULE [ARG ...]   (e.g. harness run REF)")
    sys.path.insert(0, ROOT)
    sys.argv = list(argv)
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])

