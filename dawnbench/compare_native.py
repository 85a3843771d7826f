"""`dawnbench compare --runtime native`: the two sides of a version-bump comparison without a container engine
(and `run`, one run as a judge process with its workers in a given environment, which `dawnbench challenge` uses too).

Each pin gets an environment of its own, built as a reference's is (the Makefile's venv macro, `make
compare-env`): `<environments>/<REF>@<pin>` (default `.venv/`) from the reference's requirements with the
pin swapped in (docker/requirements.py flatten: a framework's pin replaces its family's line, another
package's its own) and the `dawnbench` command's own (requirements/dawnbench.txt). It is reused while
those requirements are the same. Each run is `dawnbench run` as a judge process of this environment (the
tools one: -I, no start-up hooks; harness/judge.py), with the pin's environment named for its sandboxed
workers only ($DAWNBENCH_WORKER_PYTHON): the harness, its clock and its files never run a pin's code.

A run's output goes to `<out>/runs/<A|B>-seed<k>.log` whole, and to the terminal without the frameworks'
start-up log lines (TensorFlow's and absl's `I0000 ...`, oneDNN's notes: a third of what a TensorFlow
comparison printed), which also get TF_CPP_MIN_LOG_LEVEL=2.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from dawnbench import launcher, stoppable
from harness import judge
from harness.errors import UsageError
from harness.worker_env import WORKER_PYTHON_ENV

REQUIREMENTS_TOOL = launcher.CHECKOUT / "docker" / "requirements.py"
COMMAND_REQUIREMENTS = launcher.CHECKOUT / "requirements" / "dawnbench.txt"
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# The frameworks' own start-up lines: absl/glog (`I0000 00:00:1795 port.cc:153] ...`), TensorFlow's older
# form (`2026-11-20 10:00:00.1: I tensorflow/...`), absl's notice before it is set up, and oneDNN's and
# the CPU-instructions notes they print on import.
NOISE = re.compile(r"^(?:[IWE]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] "
                   r"|WARNING: All log messages before absl::InitializeLog\(\) is called|To enable the following "
                   r"instructions|This TensorFlow binary is optimized|.*oneDNN custom operations are on)")


def project(line: str) -> str | None:
    match = NAME.match(line)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


def _flatten(path: Path, pin: str = "") -> list[str]:
    done = subprocess.run([sys.executable, "-I", str(REQUIREMENTS_TOOL), "flatten", str(path), *([pin] if pin else [])],
                          capture_output=True, text=True, env=judge.environment(None, INFER_RUNTIMES=""))
    if done.returncode != 0:
        problem = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise UsageError(f"--versions {pin}: {problem}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def requirements(directory: Path, pin: str) -> list[str]:
    """What the pin's environment installs: the reference's requirements with `pin` swapped in, then the
    `dawnbench` command's own that they do not name (the pin wins there too)."""
    own = _flatten(directory / "requirements.txt", pin)
    named = {project(line) for line in own}
    command = _flatten(COMMAND_REQUIREMENTS)
    return own + [line for line in command if project(line) not in named]


def slug(pin: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "-", pin).strip("-")


def environment(name: str, directory: Path, pin: str) -> Path:
    """The Python of `pin`'s environment for reference `name`, set up first (or again, when its
    requirements changed) with one line saying so."""
    env = launcher.venvs_root() / f"{name}@{slug(pin)}"
    wanted = "\n".join(requirements(directory, pin)) + "\n"
    listed = env / "requirements.compare.txt"
    python = env / "bin" / "python"
    if launcher._installed(env) and listed.is_file() and listed.read_text(encoding="utf-8") == wanted:
        return python
    print(f"setting up {launcher._shown(env)} for {pin} (first use, ~{launcher.SETUP_MINUTES.get('pytorch')} min "
          f"or more)...", file=sys.stderr, flush=True)
    try:
        env.mkdir(parents=True, exist_ok=True)
        (env / ".installed").unlink(missing_ok=True)
        listed.write_text(wanted, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot set up {env}: {e.strerror or e}; give environments of your own: "
                         f"{launcher.VENVS_ENV}=DIR") from None
    launcher._make("compare-env", f"COMPARE_ENV={env}", f"COMPARE_REQS={listed}")
    if not launcher._installed(env):
        raise UsageError(f"`make compare-env` left no environment in {env}")
    return python


def noise(line: str) -> bool:
    return bool(NOISE.match(line))


def run(reference: str, options: list[str], python: Path, log: Path) -> int:
    """One `dawnbench run REF OPTIONS` with the workers in `python`'s environment: its exit status. Its
    output goes whole to `log`, and to this terminal without the frameworks' start-up lines."""
    env = judge.environment(None, **{WORKER_PYTHON_ENV: str(python), "TF_CPP_MIN_LOG_LEVEL": "2"})
    env[launcher.GUARD_ENV] = "tools"       # the launcher runs it in this (the tools) environment, as it would
    log.parent.mkdir(parents=True, exist_ok=True)
    # its own process group: a SIGTERM or Ctrl-C to this tool reaches the run through stoppable.stop, once; the
    # log line-buffered, so that it holds every line said so far even if this tool is killed outright
    with open(log, "w", encoding="utf-8", buffering=1) as kept, stoppable.popen(
            judge.command("dawnbench.launcher", "run", reference, *options), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        try:
            for line in proc.stdout:
                kept.write(line)
                if not noise(line):
                    sys.stdout.write(line)
                    sys.stdout.flush()
        except KeyboardInterrupt as e:      # SIGTERM or Ctrl-C (dawnbench.stoppable): the run writes its DNC record
            stoppable.stop(proc, stoppable.signum_of(e), kept.write)
            raise
        return proc.wait()


def check(directory: Path, pins: list[str]) -> None:
    """Refuse before any set-up what would fail in one: a pin that is not name==version or names nothing
    the reference installs (the flattening's own one line)."""
    for pin in pins:
        requirements(directory, pin)

