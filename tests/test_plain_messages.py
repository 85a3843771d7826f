"""Issue 34, sections 2 and 5: what was a traceback, a misleading line or a silence, case by case.

Each row is a command a user could type, its exit status, the one line it must say on stderr, and
what it must not leave or print. A full disk is a 64 KiB tmpfs filled to the last block (root
only: CI runs as root); another user's environment is a venv folder only root can enter, used
by uid 65534.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cheats import write_reference
from conftest import REPO, cli_env
from leaderboard_fixture import write_entries

PYTHON = sys.executable
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="a tmpfs mount and another uid need root (CI runs as root)")


def dawnbench(*args, env=None, timeout=300, user: int | None = None) -> subprocess.CompletedProcess:
    command = [PYTHON, "-m", "dawnbench", *map(str, args)]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", str(REPO / "bin" / "dawnbench"),
                   *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=cli_env(**(env or {})))


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a file system with no block left."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        (mount / "out").mkdir()
        with contextlib.suppress(OSError), open(mount / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def dnc_run(tmp_path_factory, fashion_root) -> Path:
    """A real run that ends DNC: the cheats' numpy softmax regression (84%) for one epoch."""
    base = tmp_path_factory.mktemp("dnc")
    write_reference(base / "references", "softmax")
    proc = subprocess.run([PYTHON, "-m", "harness", "run", "softmax", "--references", str(base / "references"),
                           "--data", str(fashion_root), "--results", str(base / "results"), "--no-progress",
                           "--max-epochs", "1"], capture_output=True, text=True, timeout=300, cwd=REPO, env=cli_env())
    assert proc.returncode == 1, proc.stderr[-2000:]
    (run_dir,) = (base / "results" / "softmax").iterdir()
    return run_dir


# --- section 2: tracebacks ------------------------------------------------------------------------

@root_only
@pytest.mark.parametrize("command, written", [
    (lambda run, entries, out: ["analyze", "curves", run, "--out", out], "curves.png"),
    (lambda run, entries, out: ["submit", run, "--out", out, "--allow-unofficial", "--cost-per-hour", "1"], None),
    (lambda run, entries, out: ["leaderboard", entries, "--out", out / "site"], None),
    (lambda run, entries, out: ["infer", "fashion-mnist-cnn-pytorch", "--model", run / "model", "--out", out / "infer",
                                "--limit", "5", "--no-progress"], None),
], ids=["analyze", "submit", "leaderboard", "infer"])
def test_a_full_disk_is_one_line_naming_the_output_option(full_disk, default_run, tmp_path, command, written):
    """On 3e196d1: analyze, a 56-line OSError traceback from savefig; submit, "cannot read <the run's
    TSV>"; leaderboard, "(No space left on device: None)"."""
    entries = write_entries(tmp_path / "entries")
    out = full_disk / "out"
    proc = dawnbench(*command(default_run, entries, out))
    # the fixture's entries include broken ones on purpose: each has its line before the last
    # before the last line: the broken entries' lines, and submit's warning that the entry links no code
    assert "Traceback" not in proc.stderr and all(" invalid: " in x or x.startswith("warning: ")
                                                  for x in proc.stderr.splitlines()[:-1])
    line = proc.stderr.splitlines()[-1]
    assert proc.returncode == 2
    assert "No space left on device (ENOSPC); the disk is full: free space there, or give --out DIR on another disk" \
        in line, line
    assert str(full_disk) in line and "None" not in line
    assert [p.name for p in out.iterdir() if p.name.endswith((".png", ".json")) and p.stat().st_size] == []


@root_only
@pytest.mark.parametrize("command", [
    lambda run, out: ["submit", run, "--out", out / "e", "--allow-unofficial", "--cost-per-hour", "1"],
    lambda run, out: ["infer", "fashion-mnist-cnn-pytorch", "--model", run / "model", "--out", out / "inf",
                      "--limit", "5", "--warmup", "0"],
], ids=["submit", "infer"])
def test_an_output_folder_this_user_cannot_write_is_refused_first_in_one_line(default_run, tmp_path, command):
    """Issue 47's probe, rerun after the merges of 2026-11-28: as another user, into a folder it cannot write,
    submit said its warning that the entry links no code before the refusal, and infer timed every example
    (its progress bar on stderr) before it found it could not write. Now each refuses first, in one line."""
    for folder in [tmp_path, *tmp_path.parents]:
        os.chmod(folder, os.stat(folder).st_mode | 0o001)
    readonly = tmp_path / "readonly"
    readonly.mkdir(mode=0o555)
    readonly.chmod(0o555)
    run = shutil.copytree(default_run, tmp_path / "run")
    for path in [run, *run.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # this interpreter as that user (bin/dawnbench would make it environments of its own first)
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PYTHON, "-m", "dawnbench",
                           *map(str, command(run, readonly))], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=cli_env(HOME=str(tmp_path)))
    line = one_line(proc)
    assert proc.returncode == 2 and "readonly" in line and ("not writable" in line or "Permission denied" in line), line
    assert list(readonly.iterdir()) == []


@root_only
def test_another_users_environment_is_one_line(tmp_path):
    """On 3e196d1: a PermissionError traceback from the launcher."""
    venvs = tmp_path / "venvs"
    for name in ("fashion-mnist-cnn-pytorch", "tools"):
        (venvs / name / "bin").mkdir(parents=True)
        (venvs / name / ".installed").touch()
        os.symlink(sys.executable, venvs / name / "bin" / "python")
        os.chmod(venvs / name / "bin", 0o700)          # root's own
    for folder in [tmp_path, *tmp_path.parents]:
        os.chmod(folder, os.stat(folder).st_mode | 0o001)
    results = tmp_path / "results"
    proc = dawnbench("run", "fashion-mnist-cnn-pytorch", "--max-epochs", "1", "--results", results,
                     env={"DAWNBENCH_VENVS": str(venvs)}, user=65534)
    line = one_line(proc)
    assert proc.returncode == 2 and not results.exists()
    assert line.endswith(f"error: cannot use the environment at {venvs}/fashion-mnist-cnn-pytorch/bin/python: "
                         "Permission denied; run as the user who set it up, or give yourself environments of "
                         "your own: DAWNBENCH_VENVS=DIR (make VENVS=DIR)"), line


# --- section 5: misleading lines --------------------------------------------------------------------

def test_an_unknown_option_is_named_not_the_folder_after_it(tmp_path):
    """On 3e196d1: "reference name 'out/': not a plain folder name"."""
    for args in (["run", "-x", "--results", tmp_path / "out"],
                 ["run", "-x", "--results", tmp_path / "out", "fashion-mnist-cnn-pytorch"]):
        proc = dawnbench(*args)
        line = one_line(proc)
        assert proc.returncode == 2 and "out" not in line.split("(see")[0].replace("--results", ""), line
        assert "-x" in line or "required: reference" in line, line
        assert not (tmp_path / "out").exists()
    assert "unrecognized arguments: -x" in line


def test_verify_says_a_missing_data_root_on_stderr(default_run, tmp_path):
    """On 3e196d1: exit 2 with its line on stdout."""
    proc = dawnbench("verify", default_run, "--data", tmp_path / "missing")
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"--data {tmp_path / 'missing'}: not a folder" in one_line(proc)
    (tmp_path / "empty").mkdir()        # a folder without the dataset: the checks, then the verdict on stderr
    proc = dawnbench("verify", default_run, "--data", tmp_path / "empty")
    assert proc.returncode == 2 and "not verified" not in proc.stdout
    assert one_line(proc).startswith("dawnbench: not verified: no fashion-mnist eval labels on this machine")


def test_verify_of_a_dnc_run_names_no_time_to_accuracy(dnc_run, fashion_root):
    """On 3e196d1: "time-to-accuracy None s"."""
    proc = dawnbench("verify", dnc_run, "--data", fashion_root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = proc.stdout.splitlines()[-1]
    assert "None" not in verdict and "no time-to-accuracy (the threshold was not reached)" in verdict, verdict


def test_stability_says_a_series_is_unfinished(tmp_path):
    """On 3e196d1: a killed series (2 of 5 runs, in_progress) analysed with exit 0 and not a word."""
    folder = tmp_path / "fashion-mnist-cnn-pytorch" / "series-a"
    folder.mkdir(parents=True)
    runs = [{"seed": k, "run_dir": f"seed{k}", "status": "converged", "tta_seconds": 100.0 + k, "epochs": 3,
             "metric_value": 0.93} for k in range(2)]
    (folder / "summary.json").write_text(json.dumps({
        "reference": "fashion-mnist-cnn-pytorch", "task": "fashion-mnist", "metric": "top1", "threshold": 0.92,
        "official_threshold": True, "n": 2, "converged": 2, "fraction_converged": 1.0, "runs": runs,
        "requested_runs": 5, "interrupted": False, "in_progress": True}))
    proc = dawnbench("analyze", "stability", folder, "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert one_line(proc) == (f"dawnbench analyze: {folder / 'summary.json'}: an unfinished series: 2 of 5 runs "
                              f"(still running, or killed before it could say so); its statistics cover those runs only")
    (series,) = json.loads((tmp_path / "out" / "stability.json").read_text())["series"]
    assert series["unfinished"] == "2 of 5 runs (still running, or killed before it could say so)"
    shutil.rmtree(tmp_path / "out")


def test_infer_never_writes_over_another_inference(default_run, tmp_path):
    """On 3e196d1 a second `infer --out F` replaced the first one's inference.json without a word."""
    out = tmp_path / "infer"
    first = dawnbench("infer", "fashion-mnist-cnn-pytorch", "--model", default_run / "model", "--out", out,
                      "--limit", "5", "--no-progress")
    assert first.returncode in (0, 1) and (out / "inference.json").is_file(), first.stderr[-2000:]
    kept = (out / "inference.json").read_bytes()
    again = dawnbench("infer", "fashion-mnist-cnn-pytorch", "--model", default_run / "model", "--out", out,
                      "--limit", "5", "--no-progress")
    assert again.returncode == 2 and again.stdout == ""
    assert one_line(again).endswith(f"--out {out} already holds an inference (inference.json): give a new folder, "
                                    f"or move that one away first")
    assert (out / "inference.json").read_bytes() == kept


@pytest.mark.parametrize("variable, argv, says", [
    ("DAWNBENCH_DATASETS_MANIFEST", ["data", "verify", "fashion-mnist"],
     "$DAWNBENCH_DATASETS_MANIFEST={path}: is a FIFO, not a file; give a manifest file"),
    ("DAWNBENCH_PRICES", ["run", "fashion-mnist-cnn-pytorch", "--instance", "aws:p3.2xlarge", "--max-epochs", "1"],
     "{path}: is a FIFO, not a file; set $DAWNBENCH_PRICES to a prices file"),
], ids=["manifest", "prices"])
def test_a_file_an_environment_variable_names_is_never_a_fifo_opened(tmp_path, fashion_root, variable, argv, says):
    """Issue 34's own probe: $DAWNBENCH_DATASETS_MANIFEST naming a FIFO hung `data verify` for ever."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = dawnbench(*argv, "--data", fashion_root, "--results", tmp_path / "results", timeout=60,
                     env={variable: str(fifo)}) if argv[0] == "run" else \
        dawnbench(*argv, "--data", fashion_root, timeout=60, env={variable: str(fifo)})
    assert proc.returncode == 2 and says.format(path=fifo) in one_line(proc), proc.stderr
    assert not (tmp_path / "results").exists()
