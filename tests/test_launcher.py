"""The one `dawnbench` a user types (bin/dawnbench, dawnbench/launcher.py): where each subcommand
runs, first-use setup, the loop guard, a closed pipe, `list` from a Python without numpy, and the
README's first screen driven through bin/dawnbench on the real default run."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from dawnbench import launcher

WRAPPER = REPO / "bin" / "dawnbench"
REF = "fashion-mnist-cnn-pytorch"


def _bare_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", launcher.GUARD_ENV,
                                                            "DAWNBENCH_PROG")}
    env.update(extra)
    return env


@pytest.mark.parametrize("argv, env, needed, anywhere", [
    (["validate", "entries/"], "tools", "jsonschema", False),
    (["submit", "RUN", "--out", "entries/"], "tools", "jinja2", False),
    (["leaderboard", "--help"], "tools", "numpy", True),          # the one tree: any environment has its options
    (["data", "prepare", "imagenet", "--from", "x"], "tools", "scipy", False),
    (["verify", "RUN"], "tools", "numpy", True),
    (["--help"], "tools", "numpy", True),
    (["data", "fetch", "cifar10"], "tools", "numpy", True),
    (["data", "fetch", "--reference", "squad-bidaf-tensorflow"], "squad-bidaf-tensorflow", "numpy", True),
    (["run", REF, "--seed", "3"], REF, "torch", False),
    (["run", "--seed", "3", "--set", "lr=0.1", REF], REF, "torch", False),
    (["infer", REF, "--model", "m", "--runtime=onnxruntime"], REF, "onnxruntime", False),
    (["infer", "imagenet-resnet50-cpu-inference", "--model", "m"], "imagenet-resnet50-cpu-inference", "openvino", False),
])
def test_each_command_goes_to_its_environment(argv, env, needed, anywhere):
    r = launcher.route(argv)
    assert (r.env, needed in r.needs, r.anywhere) == (env, True, anywhere)
    assert r.setup == (("tools",) if env == "tools" else ("setup", f"REF={env}"))
    # only run and infer need the framework; help never does
    assert ("torch" in r.needs or "tensorflow" in r.needs) == (argv[0] in ("run", "infer"))
    assert not {"torch", "tensorflow"} & set(launcher.route([*argv, "--help"]).needs)


def fake_environment(folder: Path) -> None:
    """What `make setup`/`make tools` leaves: bin/python and .installed."""
    if not (folder / ".installed").is_file():
        (folder / "bin").mkdir(parents=True, exist_ok=True)
        (folder / "bin" / "python").symlink_to(sys.executable)
        (folder / ".installed").touch()


def test_a_make_that_leaves_no_environment_is_one_line(tmp_path, monkeypatch):
    """make's TOOLS_VENV named another folder than the launcher looked in (a fork's `make run` in the
    tests): it ended in a FileNotFoundError traceback at the exec; now one line, and make's folder is
    the one looked in when make says it ($DAWNBENCH_TOOLS_VENV)."""
    monkeypatch.setenv(launcher.VENVS_ENV, str(tmp_path / "venvs"))
    monkeypatch.delenv(launcher.TOOLS_VENV_ENV, raising=False)
    monkeypatch.setattr(launcher, "_make", lambda *args: None)
    with pytest.raises(launcher.SetupError, match="left no environment in"):
        launcher.prepare(launcher.route(["verify", "RUN"]))
    fake_environment(tmp_path / "elsewhere")
    monkeypatch.setenv(launcher.TOOLS_VENV_ENV, str(tmp_path / "elsewhere"))
    assert launcher.prepare(launcher.route(["verify", "RUN"])) == tmp_path / "elsewhere" / "bin" / "python"


def test_a_light_command_goes_to_any_environment_there_is(tmp_path, monkeypatch):
    """data fetch --reference REF with no REF environment and no tools environment: the one there is;
    but verify, which checks a run, never goes to a reference's environment (issue 33): the tools one."""
    monkeypatch.setenv(launcher.VENVS_ENV, str(tmp_path))
    monkeypatch.delenv(launcher.TOOLS_VENV_ENV, raising=False)
    made = []
    monkeypatch.setattr(launcher, "_make", lambda *args: made.append(args) or fake_environment(tmp_path / args[0]))
    other = tmp_path / "cifar10-fast-pytorch"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "python").touch()
    (other / ".installed").touch()
    assert launcher.prepare(launcher.route(["data", "fetch", "--reference", REF])) == other / "bin" / "python"
    assert made == []
    assert launcher.prepare(launcher.route(["verify", "RUN"])) == tmp_path / "tools" / "bin" / "python"
    assert made == [("tools",)]


def test_list_needs_no_environment_and_help_no_framework():
    assert launcher.route(["list"]) is None and launcher.route(["list", "--references", "x"]) is None
    assert launcher.route(["list", "--bogus"]).needs == launcher.BASE      # the command's own parser says what is wrong
    assert launcher.route(["run", REF]).runtime is None
    assert launcher.route(["infer", "imagenet-resnet50-cpu-inference", "--runtime", "reference"]).runtime is None


def test_first_use_sets_up_then_runs_there(tmp_path, monkeypatch, capsys):
    """A missing environment: one progress line, `make setup REF=...` into $DAWNBENCH_VENVS; an
    infer runtime the environment lacks: one line, `make infer-runtime`; then the exec, guarded."""
    monkeypatch.setenv(launcher.VENVS_ENV, str(tmp_path))
    monkeypatch.setenv(launcher.PROG_ENV, "dawnbench")
    made, execs = [], []

    def make(*args):
        made.append(args)
        if args[0] in ("setup", "tools"):
            fake_environment(tmp_path / (REF if args[0] == "setup" else "tools"))

    monkeypatch.setattr(launcher, "_make", make)
    monkeypatch.setattr(launcher, "runs_here", lambda needs: False)
    monkeypatch.setattr(launcher, "_has_modules", lambda python, modules: False)
    monkeypatch.setattr(launcher.os, "execve", lambda path, args, env: execs.append((path, args, env)))
    monkeypatch.delenv(launcher.GUARD_ENV, raising=False)
    launcher.main(["infer", REF, "--model", "m", "--runtime", "onnxruntime"])
    # the runtime into the tools environment, where the harness's timing process runs (issue 46)
    assert made == [("setup", f"REF={REF}"), ("tools",), ("infer-runtime", "INFER_RUNTIME=onnxruntime")]
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"setting up {tmp_path / REF} (first use, ~") and err[0].endswith("min)...")
    assert f"installing onnxruntime into {tmp_path / 'tools'}" in err[2] and "requirements/infer-onnxruntime.txt" in err[2]
    ((path, args, env),) = execs
    # the harness in the tools environment, its workers in REF's (issue 33)
    assert path == tmp_path / "tools" / "bin" / "python"
    assert env[launcher.WORKER_PYTHON_ENV] == str(tmp_path / REF / "bin" / "python")
    # a judge process: -I, this checkout's code first by harness/judge.py, no PYTHONPATH (issue 46)
    assert args[1:] == ["-I", "-u", str(REPO / "harness" / "judge.py"), "dawnbench.launcher", "infer", REF,
                        "--model", "m", "--runtime", "onnxruntime"]
    assert env[launcher.GUARD_ENV] == "tools" and "PYTHONPATH" not in env


def test_a_failed_setup_shows_makes_output_and_stops(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launcher, "CHECKOUT", tmp_path)
    (tmp_path / "Makefile").write_text("setup:\n\t@echo pip says no; exit 3\n")
    with pytest.raises(launcher.SetupError, match=r"failed \(exit 2\)"):
        launcher._make("setup", f"REF={REF}")
    assert "pip says no" in capsys.readouterr().err


def test_the_guard_runs_here_whatever_is_missing(monkeypatch):
    """Exec'd once, the command runs where it landed: no environment can send it on again."""
    ran = []
    monkeypatch.setenv(launcher.PROG_ENV, "dawnbench")
    monkeypatch.setattr(launcher, "runs_here", lambda needs: False)
    monkeypatch.setattr(launcher, "prepare", lambda r: pytest.fail("sent on again"))
    monkeypatch.setattr(launcher, "main_here", lambda argv: ran.append(argv) or 0)
    monkeypatch.setenv(launcher.GUARD_ENV, "tools")
    assert launcher.main(["validate", "x"]) == 0 and ran == [["validate", "x"]]
    assert launcher.GUARD_ENV not in os.environ      # what the command starts (a series' runs) dispatches afresh


def test_any_environments_dawnbench_goes_where_the_command_belongs(tmp_path):
    """An environment with the command's own dependencies only (numpy, tqdm, PyYAML: what a
    reference's environment has besides its framework, here without one): its `dawnbench` (the
    console script calls launcher.main, as `python -m dawnbench` does) sends `validate` to the tools
    environment and `run` there too with the reference's Python for its workers (issue 33), each a
    stand-in Python that says how it was started."""
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = tmp_path / "deps"
    deps.mkdir()
    ours = Path(__import__("numpy").__file__).resolve().parent.parent
    for name in ("numpy", "numpy.libs", "tqdm", "yaml", "_yaml"):
        if (ours / name).exists():
            (deps / name).symlink_to(ours / name)
    (site / "deps.pth").write_text(f"{deps}\n")
    venvs = tmp_path / "venvs"
    for name in ("tools", REF):
        (venvs / name / "bin").mkdir(parents=True)
        (venvs / name / ".installed").touch()
        stand_in = venvs / name / "bin" / "python"
        stand_in.write_text(f'#!/bin/sh\necho "{name}: $* (guard $DAWNBENCH_LAUNCHED) workers $DAWNBENCH_WORKER_PYTHON"\n')
        stand_in.chmod(0o755)
    env = _bare_env(PYTHONPATH=str(REPO), **{launcher.VENVS_ENV: str(venvs)})
    for argv, workers in ((["validate", "entries/"], ""), (["run", REF, "--seed", "3"], venvs / REF / "bin" / "python")):
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "dawnbench", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        judge = f"-I -u {REPO / 'harness' / 'judge.py'} dawnbench.launcher"
        assert proc.stdout.strip() == f"tools: {judge} {' '.join(argv)} (guard tools) workers {workers}".strip()
    # what needs nothing more it answers itself
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "dawnbench", "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and REF in listed.stdout, listed.stderr


def test_list_from_a_python_without_numpy(tmp_path):
    """`-S`: no site-packages, so no numpy, tqdm or PyYAML; nothing is set up either."""
    env = _bare_env(PYTHONPATH=str(REPO), **{launcher.VENVS_ENV: str(tmp_path)})
    assert subprocess.run([sys.executable, "-S", "-c", "import numpy"], env=env, capture_output=True).returncode == 1
    proc = subprocess.run([sys.executable, "-S", "-m", "dawnbench.launcher", "list"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == sorted(p.parent.name for p in (REPO / "references").glob("*/reference.toml"))
    assert REF in names and proc.stderr == "" and list(tmp_path.iterdir()) == []


def test_make_list_and_a_typo_set_nothing_up(tmp_path):
    """`make list` lists from a bare python3 (it used to install torch first), and an unknown
    reference is the registry's one line before any environment is set up."""
    env = _bare_env()
    listed = subprocess.run(["make", "--no-print-directory", "list", f"VENVS={tmp_path}"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and REF in listed.stdout.split(), listed.stderr
    typo = subprocess.run([str(WRAPPER), "run", "fashion-mnist-cnn-pytorh"], cwd=tmp_path,
                          env=dict(env, **{launcher.VENVS_ENV: str(tmp_path)}), capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr.startswith(f"{WRAPPER}: error: unknown reference 'fashion-mnist-cnn-pytorh'")
    assert len(typo.stderr.splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_messages_name_the_command_as_typed(monkeypatch):
    """$DAWNBENCH_PROG names the command in messages, the reference's sandboxed workers' too (the
    only DAWNBENCH_ variable they see); datasets.toml's fetch commands follow it."""
    from harness import datasets, provenance
    from harness.errors import command
    from harness.sandbox import launch
    monkeypatch.setenv(launcher.PROG_ENV, "bin/dawnbench")
    monkeypatch.setenv("DAWNBENCH_DATA", "/secret")
    assert command("list") == "bin/dawnbench list"
    assert datasets.manifest("fashion-mnist")["fetch_command"] == "bin/dawnbench data fetch fashion-mnist"
    env = launch.worker_environment("/home", "/tmp", {})
    assert env[launcher.PROG_ENV] == "bin/dawnbench" and "DAWNBENCH_DATA" not in env
    recorded = provenance.overrides()       # how the command was typed is no override of the run
    # a path as an entry may publish it (harness.paths.public): the name, never where it lies on this machine
    assert recorded["DAWNBENCH_DATA"] == "<outside the checkout>/secret" and launcher.PROG_ENV not in recorded


def test_a_closed_pipe_ends_quietly(tmp_path):
    """The reader goes away before the first line is written: no traceback, SIGPIPE's status."""
    env = _bare_env(**{launcher.VENVS_ENV: str(tmp_path)})
    for argv in ([str(WRAPPER), "list"], [sys.executable, "-m", "harness", "list"]):
        proc = subprocess.Popen(argv, cwd=REPO, env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141 and err == "", (argv, err)
    shell = subprocess.run(f"{WRAPPER} list | head -1", shell=True, cwd=REPO, env=env, capture_output=True, text=True)
    assert shell.stdout.startswith("cifar10-") and shell.stderr == ""


def _first_screen() -> list[str]:
    """The bin/dawnbench lines of the README's first code block after `make run` and `make test`."""
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return [line for line in blocks[1].splitlines() if line.startswith("bin/dawnbench ")]


# What the test adds to the README's commands: the shared default run is one epoch to a lowered
# threshold (so the infer and the entry are unofficial), and the data root is the tests'.
TEST_OPTIONS = {"infer": ["--threshold", "0.5"], "submit": ["--allow-unofficial"], "validate": ["--allow-unofficial"]}


def test_the_first_screen_works_through_bin_dawnbench(default_run, fashion_root, tmp_path):
    """Each command of the README's first screen, typed as shown, from a bare python3 through
    bin/dawnbench: it leaves this interpreter for the tools and the reference's environments
    ($DAWNBENCH_VENVS: this test environment under both names, so nothing is installed)."""
    venvs = tmp_path / "venvs"
    venvs.mkdir()
    for name in ("tools", REF):
        (venvs / name).symlink_to(Path(sys.prefix))
    assert (Path(sys.prefix) / ".installed").is_file(), "the test environment is made by make"
    shutil.copytree(default_run, tmp_path / "RUN")
    env = _bare_env(DAWNBENCH_DATA=str(fashion_root), **{launcher.VENVS_ENV: str(venvs)})
    bare = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    env["DAWNBENCH_PYTHON"] = bare
    commands = _first_screen()
    assert [c.split()[1] for c in commands] == ["list", "verify", "infer", "submit", "validate", "leaderboard", "analyze"]
    for line in commands:
        argv = line.split()
        argv[0] = str(WRAPPER)
        argv += TEST_OPTIONS.get(argv[1], [])
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (line, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and "setting up" not in proc.stderr, proc.stderr
        if argv[1] == "list":
            assert REF in proc.stdout
        if argv[1] == "verify":
            assert proc.stdout.splitlines()[-1].startswith("verified: RUN")
    assert (tmp_path / "infer" / "inference.json").is_file()
    assert "onnxruntime" in (tmp_path / "infer" / "inference.json").read_text()
    assert list((tmp_path / "entries").rglob("*.json")) and list((tmp_path / "entries").rglob("*.tsv"))
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "analysis" / "curves.png").is_file()


def test_the_launchers_flags_are_the_parsers_options_without_a_value():
    """The launcher finds the reference without the parsers: every long option but FLAGS takes a
    value. A flag missing from FLAGS would make the reference its value (issue 34)."""
    import argparse

    from dawnbench import cli as dawnbench_cli
    from dawnbench import launcher
    from harness import cli

    def flags(parser) -> set[str]:
        found = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if parser.prog.count(" ") or name in (*launcher.REFERENCE_COMMANDS, "analyze"):
                        found |= flags(sub)
            elif action.nargs == 0 and not isinstance(action, argparse._HelpAction):
                found |= set(action.option_strings)
        return found
    assert flags(cli.build_parser()) | flags(dawnbench_cli.build_parser()) == set(launcher.FLAGS)


@pytest.mark.parametrize("name", ["../references/" + REF, "references/" + REF, "./" + REF, REF + "/"])
def test_a_path_as_the_reference_is_refused_before_any_setup(name, tmp_path):
    """`bin/dawnbench run ../references/REF` (tab completion from bin/) ran `make setup REF=../references/REF`
    for 92 s, a 971 MB virtualenv inside the reference's folder, before the name was refused (issue 47):
    the name is checked first, by the launcher and by make, in one line, and nothing is set up."""
    before = sorted(p.name for p in (REPO / "references" / REF).iterdir())
    with pytest.raises(launcher.UsageError, match="is a path") as refused:
        launcher.route(["run", name])
    assert "\n" not in str(refused.value) and f"'{REF}'" in str(refused.value)
    made = subprocess.run(["make", "--no-print-directory", "setup", f"REF={name}", f"VENVS={tmp_path}"], cwd=REPO,
                          env=_bare_env(), capture_output=True, text=True, timeout=60)
    assert made.returncode == 2 and "is a path" in made.stderr, made.stderr
    assert list(tmp_path.iterdir()) == [] and sorted(p.name for p in (REPO / "references" / REF).iterdir()) == before


def test_make_run_fetches_into_the_data_root_the_run_reads(tmp_path):
    """`make run ARGS="--data DIR"` fetched into ./data whatever DIR was, so a run meant for fixture data
    re-fetched (and, under another manifest, emptied) the real data/fashion-mnist (issue 47): the fetch of
    run-native (`data`) and run-docker gets the run's --data; with none, the run's default ($DAWNBENCH_DATA
    or ./data), which the fetch's is too. A stand-in tools environment records what make starts."""
    tools, calls = tmp_path / "tools", tmp_path / "calls"
    (tools / "bin").mkdir(parents=True)
    for program in ("dawnbench", "python"):
        (tools / "bin" / program).write_text(f'#!/bin/sh\necho {program} "$@" >> {calls}\n')
        (tools / "bin" / program).chmod(0o755)
    (tools / ".installed").touch()
    for target in ("data", "run-docker"):
        for args, data in ((f"--seed 3 --data '{tmp_path}/my data' --max-epochs 1", f"{tmp_path}/my data"),
                           (f"--data={tmp_path}/d2 --no-save", f"{tmp_path}/d2"), ("--seed 3", None)):
            calls.unlink(missing_ok=True)
            made = subprocess.run(["make", "--no-print-directory", target, f"REF={REF}", f"ARGS={args}",
                                   f"TOOLS_VENV={tools}"], cwd=REPO, env=_bare_env(), capture_output=True,
                                  text=True, timeout=60)
            assert made.returncode == 0, made.stderr
            fetch = calls.read_text().splitlines()[0]
            assert fetch.startswith(f"dawnbench data fetch --reference {REF}"), fetch
            assert fetch.endswith(f" --data {data}" if data else REF), (target, args, fetch)
