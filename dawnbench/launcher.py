"""The one `dawnbench` a user types: `bin/dawnbench` in the checkout, or any environment's
`dawnbench` console script. It decides where each subcommand runs and goes there:

    run REF, infer REF, analyze lesion REF  the harness in the tools environment, .venv/tools; its sandboxed
                                           workers in REF's, .venv/REF (`make setup REF=REF`), named to it
                                           by $DAWNBENCH_WORKER_PYTHON
    the entry tools, data prepare          the tools environment, .venv/tools (`make tools`)
    verify, eval, --help (any subcommand's)  any environment there is but a reference's (none: the tools one);
                                           verify of a challenge folder: the tools environment (scipy)
    data fetch|verify                      any environment there is (none: REF's for `data --reference
                                           REF`, else the tools environment)
    list [--references DIR]                here, whatever Python this is (it reads reference.toml)
    fork REF NEW                           here, whatever Python this is (it copies a folder, edits two lines)

The harness (clock, scoring, files) never runs in a reference's environment: what its requirements
install there (a `.pth` file runs in every interpreter of the environment) would run in the harness's
process. So run and infer run here only when this Python is no reference's environment, and
`verify` and `eval` never go to one (docs/RULES.md, "The harness's environment").

Here, in this process, when this Python already has what the subcommand needs (the tests' .venv/test
has everything); else `os.execv` of the right environment's Python, set up first on first use with
one progress line. `infer --runtime onnxruntime|openvino` installs the pinned runtime into the tools
environment on first use (requirements/infer-<runtime>.txt): the harness's timing process runs there.

Standard library only, and nothing of the project's that needs more (harness.registry reads the
references without numpy): `bin/dawnbench` starts under a bare system python3.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness import judge
from harness.errors import EXIT_USAGE, PROG_ENV, DawnbenchError, UsageError, quiet_on_closed_pipe, report
from harness.worker_env import WORKER_PYTHON_ENV

CHECKOUT = Path(__file__).resolve().parent.parent
VENVS_ENV = "DAWNBENCH_VENVS"       # where the environments are (default <checkout>/.venv)
TOOLS_VENV_ENV = "DAWNBENCH_TOOLS_VENV"   # the tools environment, where make's TOOLS_VENV names another folder
GUARD_ENV = "DAWNBENCH_LAUNCHED"    # set on the exec: the environment it names runs the command, never another
TOOLS_ENV = "tools"
ENTRY_TOOLS = ("submit", "validate", "leaderboard", "analyze", "compliance", "reproduce", "entries", "compare",
               "challenge")
CHALLENGE_RECORD = "challenge.json"     # dawnbench.challenge_record.CHALLENGE (that module needs numpy and scipy)
REFERENCE_COMMANDS = ("run", "infer", "data")
HERE = ("fork",)       # standard library only: answered by whatever Python this is, no environment needed
# What a Python needs to run a subcommand in-process (find_spec only: nothing is imported to ask).
BASE = ("numpy", "tqdm", "yaml")                   # the `dawnbench` command itself (requirements/dawnbench.txt)
TOOLS = (*BASE, "jsonschema", "jinja2", "matplotlib", "docker", "mlperf_logging", "scipy", "PIL")
FRAMEWORKS = {"pytorch": ("torch",), "tensorflow": ("tensorflow",), "mxnet": ("mxnet",)}
# The exported runtimes of `infer`: the modules each needs (int8 calibrates with onnxruntime's quantizer).
RUNTIME_MODULES = {"onnxruntime": ("onnx", "onnxruntime"), "openvino": ("onnx", "openvino", "onnxruntime")}
# Options of run, infer, data and analyze lesion that take no value (tests/test_launcher.py keeps it equal to the
# parsers'); every other long option takes one, so the token after it is not the reference.
FLAGS = ("--no-progress", "--no-save", "--allow-unverified", "--factor")
# The progress line's estimate. Measured on a shared 2-core VM with pip's cache warm: .venv/tools 34 s,
# .venv/fashion-mnist-cnn-pytorch about 60 s (94 s with a one-epoch run). TensorFlow's and MXNet's are
# guesses from their wheels' sizes; a cold cache downloads them too.
SETUP_MINUTES = {TOOLS_ENV: 1, "pytorch": 1, "tensorflow": 3, "mxnet": 2}


@dataclass(frozen=True)
class Route:
    """Where a command runs: `env` (a folder under the environments' root), what a Python needs to
    run it (`needs`), the make target that sets the environment up, the runtime `infer` installs;
    `anywhere`: any environment that is set up will do (they all have the command's own needs)."""
    env: str
    needs: tuple[str, ...]
    setup: tuple[str, ...]
    minutes: int
    runtime: str | None = None
    anywhere: bool = False
    workers: bool = False       # run, infer: `env` is the workers' environment; the harness runs in the tools one
    trusted: bool = False       # anywhere, but never in a reference's environment (it checks or scores)


def prog() -> str:
    """How this command was called, for messages: $DAWNBENCH_PROG (the wrapper sets it), else the
    console script's path as typed, else `dawnbench`."""
    if os.environ.get(PROG_ENV):
        return os.environ[PROG_ENV]
    called = sys.argv[0] if sys.argv else ""
    if os.path.basename(called) != "dawnbench" or shutil.which("dawnbench") == os.path.abspath(called):
        return "dawnbench"
    return called


def venvs_root() -> Path:
    return Path(os.environ.get(VENVS_ENV) or CHECKOUT / ".venv")


@contextlib.contextmanager
def reference_workers(name: str):
    """Within it, the harness's sandboxed workers run reference `name`'s own interpreter, as in a run:
    its .venv/REF where that is set up and no other was named ($DAWNBENCH_WORKER_PYTHON); else this
    one (the tests' environment has every framework). Used by the analyses that load a run's model."""
    own, named = env_dir(name) / "bin" / "python", os.environ.get(WORKER_PYTHON_ENV)
    if not named and own.is_file():
        os.environ[WORKER_PYTHON_ENV] = str(own)
    try:
        yield
    finally:
        if not named:
            os.environ.pop(WORKER_PYTHON_ENV, None)


def env_dir(name: str) -> Path:
    """The folder of environment `name`: the tools one where make's TOOLS_VENV put it
    ($DAWNBENCH_TOOLS_VENV, which make passes down), else under venvs_root()."""
    if name == TOOLS_ENV and os.environ.get(TOOLS_VENV_ENV):
        return Path(os.environ[TOOLS_VENV_ENV])
    return venvs_root() / name


def _option(argv: list[str], name: str) -> str | None:
    """The value of `name VALUE` or `name=VALUE` in argv (the last one, as argparse takes it)."""
    value = None
    for i, token in enumerate(argv):
        if token == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith(name + "="):
            value = token.partition("=")[2]
    return value


def _positionals(argv: list[str]) -> list[str]:
    found, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == "--":
            break
        elif token.startswith("-"):
            # the harness has no short options but -h: `-x` is unknown, and takes no value here, or
            # `run -x --results out/ REF` would name 'out/' the reference, not -x the mistake
            skip = token.startswith("--") and "=" not in token and token not in FLAGS
        else:
            found.append(token)
    return found


def _reference(argv: list[str]) -> tuple[str, dict] | None:
    """The reference a run, infer or data command names and its reference.toml, or None when it
    names none; an unknown reference is the registry's error, before any environment is set up."""
    command, rest = argv[0], argv[1:]
    name = _option(rest, "--reference") if command == "data" else next(iter(_positionals(rest)), None)
    if not name:
        return None
    from harness import paths, registry
    paths.reference_name(name)      # before any file is read or environment set up for it
    root = registry.references_root(_option(rest, "--references"))
    try:
        with open(root / name / "reference.toml", "rb") as f:
            return name, tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, ValueError):
        registry.load_spec(name, root)      # its one line: no such reference, or what is wrong with its file
        return None


def refuse_unreachable(argv: list[str]) -> None:
    """`run REF ...` of a reference whose network cannot reach the threshold asked (reference.toml's
    [reach]): refused in one line before any environment is set up or any data fetched. Also what
    make runs first (check_run)."""
    if argv[:1] != ["run"] or "-h" in argv or "--help" in argv:
        return
    rest = argv[1:]
    name = next(iter(_positionals(rest)), None)
    if not name:
        return          # the harness's parser says what is missing
    from harness import registry
    from harness.arguments import THRESHOLD
    threshold = _option(rest, "--threshold")
    registry.check_reach(registry.load_spec(name, _option(rest, "--references")),
                         THRESHOLD(threshold) if threshold is not None else None)


def check_run(argv: list[str]) -> int:
    """`make run`'s check before any work, from a bare python3: REF [RUN OPTIONS] as `run` takes them;
    0, or the one line of refuse_unreachable and its exit status."""
    os.environ[PROG_ENV] = prog()
    try:
        refuse_unreachable(["run", *argv])
    except DawnbenchError as e:
        return report(os.environ[PROG_ENV], e)
    return 0


def route(argv: list[str]) -> Route | None:
    """Where `dawnbench ARGV` runs; None: `list` or `fork`, which this process answers itself."""
    tools = Route(TOOLS_ENV, TOOLS, ("tools",), SETUP_MINUTES[TOOLS_ENV])
    light = Route(TOOLS_ENV, BASE, ("tools",), SETUP_MINUTES[TOOLS_ENV], anywhere=True, trusted=True)
    if argv[:1] in ([], ["-h"], ["--help"]):
        return light
    command, rest = argv[0], argv[1:]
    if command in HERE:
        return None
    lesion = command == "analyze" and rest[:1] == ["lesion"] and not ("-h" in rest or "--help" in rest)
    if lesion:
        # a lesion study is runs of its reference: routed as `run REF` is (the harness in the tools
        # environment, the workers in REF's), and it plots as the entry tools do
        command, rest, argv = "run", rest[1:], ["run", *rest[1:]]
    if command in ENTRY_TOOLS:
        # their options are in dawnbench.cli's one tree, which any environment builds
        return light if "-h" in rest or "--help" in rest else tools
    if command == "list" and (not rest or (len(rest) == 2 and rest[0] == "--references")
                              or (len(rest) == 1 and rest[0].startswith("--references="))):
        return None
    if command == "verify" and any((Path(p) / CHALLENGE_RECORD).is_file() for p in _positionals(rest)[:1]):
        return tools        # a challenge's statistics are scipy's
    if command not in REFERENCE_COMMANDS or "-h" in rest or "--help" in rest:
        return light
    if command == "data" and rest[:1] == ["prepare"]:
        return tools        # ImageNet's files are read with scipy and Pillow
    found = _reference(argv)
    if found is None:
        return light
    name, toml = found
    framework = toml.get("framework", "")
    setup, minutes = ("setup", f"REF={name}"), SETUP_MINUTES.get(framework, SETUP_MINUTES["pytorch"])
    if command == "data":
        # fetch and verify need no framework: any environment there is; with none yet, the
        # reference's, which its run needs next anyway
        return Route(name, BASE, setup, minutes, anywhere=True)
    needs = (*(TOOLS if lesion else BASE), *FRAMEWORKS.get(framework, ()))
    runtime = None
    if command == "infer":
        runtime = _option(rest, "--runtime") or toml.get("inference", {}).get("runtime")
        runtime = runtime if runtime in RUNTIME_MODULES else None
        needs += RUNTIME_MODULES.get(runtime, ())
    return Route(name, needs, setup, minutes, runtime, workers=True)


def reference_environment(prefix: str | Path) -> bool:
    """Whether `prefix` (an environment's folder) is a reference's environment: <environments>/<a reference>."""
    prefix = Path(prefix).resolve()
    return prefix.parent == venvs_root().resolve() and (CHECKOUT / "references" / prefix.name / "reference.toml").is_file()


def runs_here(needed: tuple[str, ...]) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in needed)


def _make(*args: str) -> None:
    """A make target of the checkout, quietly: the progress line before it says what happens, and
    its output is shown only when it fails (on stderr: stdout is the command's own)."""
    cmd = ["make", "--no-print-directory", "-C", str(CHECKOUT), *args, f"VENVS={venvs_root()}"]
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-6000:])
        raise SetupError(f"`{' '.join(cmd)}` failed (exit {done.returncode}); the end of its output is above")


class SetupError(DawnbenchError):
    exit_code = 1


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _has_modules(python: Path, modules: tuple[str, ...]) -> bool:
    probe = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))"
    return subprocess.run([str(python), "-c", probe, *modules], env=_child_env()).returncode == 0


def _child_env() -> dict[str, str]:
    """The checkout first on the path: an environment's editable install may point at another clone."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH")) if p)
    return env


def _installed(env: Path) -> bool:
    return (env / ".installed").is_file() and (env / "bin" / "python").is_file()


def prepare(r: Route) -> Path:
    """The Python of `r`'s environment, set up first (and infer's runtime installed) on first use."""
    env = env_dir(r.env)
    if r.anywhere and not _installed(env):
        others = [env_dir(TOOLS_ENV), *sorted(p.parent for p in venvs_root().glob("*/.installed"))]
        env = next((e for e in others if _installed(e) and not (r.trusted and reference_environment(e))), env)
    python = env / "bin" / "python"
    if not _installed(env):
        print(f"setting up {_shown(env)} (first use, ~{r.minutes} min)...", file=sys.stderr, flush=True)
        _make(*r.setup)
        if not _installed(env):
            raise SetupError(f"`make {' '.join(r.setup)}` left no environment in {_shown(env)} (a TOOLS_VENV or "
                             f"VENVS that names another folder?); run it again with the default folders")
    if r.runtime and not _has_modules(python, RUNTIME_MODULES[r.runtime]):
        requirements = f"requirements/infer-{r.runtime}.txt"
        print(f"installing {r.runtime} into {_shown(env)} (first use of --runtime {r.runtime}, {requirements})...",
              file=sys.stderr, flush=True)
        _make("infer-runtime", f"INFER_RUNTIME={r.runtime}")
    return python


def list_references(argv: list[str]) -> int:
    """`list [--references DIR]` without numpy or a framework: the harness's listing, from any Python."""
    from harness import registry
    from harness.arguments import Parser, nonempty_path
    # the option parsed as dawnbench.cli parses it (`--references ''` refused as run refuses it), without
    # importing the harness's CLI (its runner)
    p = Parser(prog=f"{os.environ.get(PROG_ENV) or 'dawnbench'} list")
    p.add_argument("--references", type=nonempty_path, default=None)
    for line in registry.listing(p.parse_args(argv[1:]).references):
        print(line)
    return 0


def main_here(argv: list[str]) -> int:
    from dawnbench import cli
    return cli.main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    os.environ[PROG_ENV] = prog()
    try:
        return quiet_on_closed_pipe(lambda: _dispatch(argv))
    except DawnbenchError as e:
        return report(os.environ[PROG_ENV], e)


def _dispatch(argv: list[str]) -> int:
    # Popped: the processes the command starts (a series' runs, a reproduction) dispatch afresh.
    if os.environ.pop(GUARD_ENV, None) or not (CHECKOUT / "Makefile").is_file():
        # exec'd here already; or installed with pip, not a checkout: this Python is the environment
        return main_here(argv)
    r = route(argv)
    if r is None and argv[0] in HERE:
        from dawnbench import fork
        return fork.main(argv[1:])
    if r is None:
        return list_references(argv)
    refuse_unreachable(argv)
    if runs_here(r.needs) and not ((r.workers or r.trusted) and reference_environment(sys.prefix)):
        return main_here(argv)
    try:
        python = prepare(dataclasses.replace(r, runtime=None) if r.workers else r)
        env = _child_env()
        if r.workers:
            # the workers run REF's interpreter; the harness, the tools environment's, which no reference's
            # requirements reach; and so does infer's timing process, with the runtime it times installed there
            env[WORKER_PYTHON_ENV] = str(python)
            python = prepare(Route(TOOLS_ENV, TOOLS, ("tools",), SETUP_MINUTES[TOOLS_ENV], r.runtime))
        env[GUARD_ENV] = python.parent.parent.name
        sys.stdout.flush()
        sys.stderr.flush()
        # a judge process (harness/judge.py): -I, this checkout first on its path (not PYTHONPATH, nor an
        # editable install of another clone), no inherited start-up hook, which its runs, a series' runs
        # and a reproduction's would inherit (issue 46)
        os.execve(python, judge.command("dawnbench.launcher", *argv, python=str(python)), judge.environment(env))
    except OSError as e:        # another user's environment, a broken link, a full disk while setting up
        where = e.filename or venvs_root()
        raise UsageError(f"cannot use the environment at {where}: {e.strerror or e}; run as the user who set it up, "
                         f"or give yourself environments of your own: {VENVS_ENV}=DIR (make VENVS=DIR)") from None
    return EXIT_USAGE       # not reached


if __name__ == "__main__":
    sys.exit(main())
