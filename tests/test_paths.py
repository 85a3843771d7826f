"""Path options checked before any work (issue 34, section 4), through the real command in a process of
its own: a path that is not what the option names (a file for a folder, a FIFO, a device, a folder for
a file) is one line `<prog>: error: ...`, exit status 2, nothing written, and it is said before anything
is opened or started (a FIFO is looked at, never opened: opening one blocks). Every subprocess has a
timeout, so a command that would hang fails the test instead of blocking it.

And a data file the sandbox's user cannot read (bwrap-root: the harness is root and reads anything)
is refused before the run starts, with the fix naming the host's path."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, cli_env

from harness.sandbox import modes

REF = "fashion-mnist-cnn-pytorch"
TIMEOUT = 60        # each refusal takes a second; a command that hangs (a FIFO opened) fails here


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def place(tmp_path) -> Path:
    """The working folder: a file, a FIFO, an empty folder and a model folder to name."""
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "entry.json").write_text("{}\n")
    os.mkfifo(tmp_path / "a-fifo")
    (tmp_path / "empty").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.pt").write_text("not weights\n")
    return tmp_path


def refused(place: Path, argv: list[str], module: str = "dawnbench", timeout: float = TIMEOUT, **env) -> str:
    """The one stderr line of `python -m <module> argv` run in `place`; asserts exit 2, no traceback,
    nothing on stdout, nothing written under `place`, and no hang."""
    before = files_under(place)
    try:
        proc = subprocess.run([PYTHON, "-m", module, *argv], cwd=place, env=cli_env(**env), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(argv)}: still running after {timeout} s (a path opened that blocks?)")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", (argv, proc.returncode, proc.stdout,
                                                                           proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    assert files_under(place) == before, (argv, files_under(place) - before)
    return lines[0]


INFER = ["infer", REF, "--model", "model", "--no-progress"]
RUN = ["run", REF, "--max-epochs", "1", "--no-progress"]
FOLDER_FIX = "give the folder the run folders go under (made if missing)"
DATA_FIX = "give the data root the datasets are under"

CASES = [   # (argv, the one line, as a regex)
    # the probe's cases
    ([*INFER, "--out", "a-file"],
     r"^dawnbench: error: --out a-file: is a file, not a folder; give the folder the inference's files go into"),
    ([*INFER, "--out", "a-fifo"], r"^dawnbench: error: --out a-fifo: is a FIFO, not a folder;"),
    ([*INFER, "--out", "/dev/null"], r"^dawnbench: error: --out /dev/null: is a device, not a folder;"),
    (["eval", "squad", "a-fifo", "a-fifo"],
     r"^dawnbench eval squad: error: a-fifo: is a FIFO, not a file; give the SQuAD dataset file"),
    (["eval", "squad", "empty", "a-file"], r"^dawnbench eval squad: error: empty: is a folder, not a file;"),
    (["reproduce", "empty", "--results", "a-file"],
     rf"^dawnbench reproduce: error: --results a-file: is a file, not a folder; {re.escape(FOLDER_FIX)}"),
    (["leaderboard", "a-file", "--out", "site"],
     r"^dawnbench leaderboard: error: a-file: is a file, not a folder; give the entry tree .*/<train\|inference>/"),
    (["leaderboard", "entry.json", "--out", "site"], r"^dawnbench leaderboard: error: entry.json: is a file, not a folder"),
    ([*RUN, "--data", "a-fifo"], rf"^dawnbench: error: --data a-fifo: is a FIFO, not a folder; {DATA_FIX}"),
    # the same kinds of option elsewhere
    ([*RUN, "--results", "a-file"], rf"^dawnbench: error: --results a-file: is a file, not a folder; {re.escape(FOLDER_FIX)}"),
    ([*RUN, "--results", "a-file/sub"],
     r"^dawnbench: error: --results a-file/sub: a-file is a file, not a folder, so there can be nothing under it;"),
    ([*INFER, "--data", "a-file"], rf"^dawnbench: error: --data a-file: is a file, not a folder; {DATA_FIX}"),
    (["infer", REF, "--model", "a-fifo", "--out", "out"],
     r"^dawnbench: error: --model a-fifo: is a FIFO, not a file or folder; give the model folder a run saved"),
    (["data", "verify", "fashion-mnist", "--data", "a-fifo"], r"^dawnbench: error: --data a-fifo: is a FIFO, not a folder"),
    (["verify", "a-fifo"], r"^dawnbench: error: a-fifo: is a FIFO, not a folder; give a run folder"),
    (["reproduce", "empty", "--data", "a-fifo"], r"^dawnbench reproduce: error: --data a-fifo: is a FIFO, not a folder"),
    (["leaderboard", "empty", "--out", "a-fifo"], r"^dawnbench leaderboard: error: --out a-fifo: is a FIFO, not a folder"),
    (["submit", "empty", "--out", "a-fifo"], r"^dawnbench submit: error: --out a-fifo: is a FIFO, not a folder"),
    (["analyze", "curves", "empty", "--out", "a-file"], r"^dawnbench analyze: error: --out a-file: is a file, not a folder"),
]


@pytest.mark.parametrize("argv, says", CASES, ids=[" ".join(a)[:70] for a, _ in CASES])
def test_a_path_that_is_not_what_its_option_names_is_one_line_before_any_work(place, argv, says):
    line = refused(place, argv)
    assert re.search(says, line), line


def test_harness_command_says_it_too(place):
    """The image's `harness` command shares the options (harness.cli), and their checks."""
    line = refused(place, ["infer", REF, "--model", "model", "--out", "a-fifo"], module="harness")
    assert line.startswith("harness: error: --out a-fifo: is a FIFO, not a folder;"), line
    line = refused(place, ["eval", "squad", "a-fifo", "a-fifo"], module="harness")
    assert line.startswith("harness eval squad: error: a-fifo: is a FIFO, not a file;"), line


def _bwrap_root() -> bool:
    return modes.probe().mode == "bwrap-root"


@pytest.mark.parametrize("command", ["run", "infer"])
def test_a_data_file_the_sandbox_cannot_read_is_refused_before_the_start(place, fashion_root, command):
    """As root the harness reads any file; the reference's code runs as uid 65534 under bwrap-root and
    sees only what others may read. The run used to start and end DNC in init, its fix naming the
    sandbox's /dawnbench/data/...; now it is one line before anything starts, naming the host's folder."""
    if os.geteuid() != 0 or not _bwrap_root():
        pytest.skip("needs root with bubblewrap (the bwrap-root sandbox)")
    data = place / "data"
    shutil.copytree(fashion_root / "fashion-mnist", data / "fashion-mnist")
    private = data / "fashion-mnist" / "train-images-idx3-ubyte"
    private.chmod(0o600)
    argv = ([*RUN, "--data", "data", "--results", "results"] if command == "run"
            else [*INFER, "--data", "data", "--out", "out"])
    line = refused(place, argv, timeout=300)
    folder = (place / "data" / "fashion-mnist").absolute()
    assert line == (f"dawnbench: error: {private.absolute()} cannot be read by the sandbox's user (uid 65534, which "
                    f"the reference's code runs as under bwrap-root); fix with: chmod -R a+rX {folder}"), line
    assert "/dawnbench/data" not in line


def test_the_path_types_never_open_what_they_look_at(tmp_path):
    """The helpers every command's path options use: os.stat only (a FIFO would block an open)."""
    from harness.arguments import path_kind, path_problem
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert path_kind(tmp_path / "fifo") == "a FIFO"
    assert path_kind(tmp_path / "file") == "a file"
    assert path_kind(tmp_path) == "a folder"
    assert path_kind("/dev/null") == "a device"
    assert path_kind(tmp_path / "dangling") == "a link to nothing"
    assert path_kind(tmp_path / "absent") is None
    assert path_problem(tmp_path / "absent" / "deeper", ("a folder",)) is None
    assert path_problem(tmp_path / "file" / "x", ("a folder",)) == (
        f"{tmp_path / 'file'} is a file, not a folder, so there can be nothing under it")
    assert path_problem(tmp_path / "fifo", ("a file", "a folder")) == "is a FIFO, not a file or folder"
    assert REPO.is_dir()
