"""The judge's processes are never the entrant's (issue 46, attack 2): the rank launcher, the harness of every
rank, a reproduction's runs, the image's harness start from the judge's environment as `python -I`, with no
inherited start-up hook, whatever the reference's environment holds.

The attack, rebuilt: a wheel of the reference's requirements ships a `.pth` that puts a `sitecustomize` on
`PYTHONPATH`. torchrun, the old rank launcher, ran in the reference's interpreter, so the `.pth` ran in it, and
every rank's harness (started without -I) imported the `sitecustomize`: the clock at half speed in both ranks.
The inference timer's route is in test_infer_runtimes.py.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from cheats import entrant_environment, marking
from conftest import REPO, cli_env

from dawnbench import containers, reproduce
from harness import judge


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """(the entrant's bin/python, the marker file): its `.pth` marks every process of that interpreter and
    puts a folder holding a marking `sitecustomize` on PYTHONPATH, for whatever that process starts."""
    marker, hook = tmp_path / "marks.txt", tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(marking(marker, "sitecustomize"), encoding="utf-8")
    pth = f"import os; os.environ['PYTHONPATH'] = {str(hook)!r}; exec({marking(marker, 'pth')!r})\n"
    return entrant_environment(tmp_path, {"speedup.pth": pth}, ("numpy", "torch")), marker


def test_the_planted_files_do_run_where_the_entrants_interpreter_runs(tmp_path):
    """The rebuilt attack works on what it reaches: the reference's interpreter runs the .pth, and a plain
    harness process it starts imports the sitecustomize."""
    python, marker = planted(tmp_path)
    subprocess.run([str(python), "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'])"],
                   check=True, timeout=60)
    kinds = [line.split()[0] for line in marker.read_text().splitlines()]
    assert "pth" in kinds and "sitecustomize" in kinds, kinds


def test_a_reproductions_ranks_never_start_from_the_references_interpreter(tmp_path):
    """`reproduce` of a 2-rank run: the launcher and both ranks' harness run, and neither the entrant's .pth
    nor its sitecustomize runs in any of them, even with PYTHONPATH and LD_PRELOAD set where it starts."""
    python, marker = planted(tmp_path)
    original = reproduce.Original(run_dir=tmp_path, result={"reference": "no-such-reference", "world_size": 2,
                                                              "seed": 0, "threshold": 0.5}, env={}, entry=None)
    code = reproduce.Code(tmp_path / "references", REPO, "here")
    (tmp_path / "references").mkdir()
    command = reproduce.run_command(original, code, "native", tmp_path, tmp_path / "results", ["--seed", "0"],
                                    python)
    env = cli_env(PYTHONPATH=str(tmp_path / "hook"), LD_PRELOAD="", DAWNBENCH_WORKER_PYTHON=str(python))
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert not marker.exists(), marker.read_text()      # torchrun's ranks imported the sitecustomize here
    # the ranks ran the harness, which refused the reference nobody has in one line; the first to fail ends the
    # other at once (issue 47), maybe before it said so too
    assert proc.stderr.count("no-such-reference") >= 1, proc.stderr[-2000:]
    assert re.search(r"^dawnbench: rank [01] failed \(exit status 2\); (stopping the other ranks|the other ranks "
                     r"ended too)$", proc.stderr, re.M), proc.stderr[-2000:]
    assert command[:3] == [sys.executable, "-I", "-u"] and str(python) not in command


def test_the_rank_environment_holds_no_start_up_hook():
    from harness import local_ranks
    env = local_ranks.rank_environment(1, 2, {"PYTHONPATH": "/x", "PYTHONSTARTUP": "/y", "LD_PRELOAD": "/z.so",
                                              "LD_AUDIT": "/a.so", "PYTHONHOME": "/h", "PATH": "/bin",
                                              "MASTER_PORT": "1234", "DAWNBENCH_RUN_TOKEN": "t"})
    assert env["PATH"] == "/bin" and env["MASTER_PORT"] == "1234" and env["DAWNBENCH_RUN_TOKEN"] == "t"
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("1", "1", "2")
    assert not {"PYTHONPATH", "PYTHONSTARTUP", "LD_PRELOAD", "LD_AUDIT", "PYTHONHOME"} & env.keys()


def test_make_run_nproc_starts_the_judges_launcher():
    """`make run NPROC=2`: the launcher is the tools environment's Python with -I; the reference's environment
    is named only as the workers' interpreter (it was `.venv/REF/bin/torchrun`)."""
    proc = subprocess.run(["make", "--no-print-directory", "-n", "run-native", "NPROC=2", "VENVS=/nonexistent"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    launch = proc.stdout.replace("\\\n", " ").splitlines()[-1]      # the recipe's last command, joined
    workers, _, launcher = launch.partition(" ")
    assert workers == "DAWNBENCH_WORKER_PYTHON=/nonexistent/fashion-mnist-cnn-pytorch/bin/python"
    assert "torchrun" not in launcher and "/nonexistent/fashion-mnist-cnn-pytorch" not in launcher
    assert launcher.split()[:6] == ["/nonexistent/tools/bin/python", "-I", "harness/judge.py", "harness.local_ranks",
                                    "--nproc-per-node", "2"], launcher


def test_an_images_ranks_start_from_the_images_harness_environment():
    entrypoint = containers.rank_entrypoint(2)
    assert entrypoint[:2] == ["/opt/harness/bin/python", "-I"] and not any("/opt/venv" in a for a in entrypoint)
    assert containers.rank_entrypoint(1) is None


def test_a_judge_process_imports_this_code_whatever_the_path_says(tmp_path):
    """PYTHONPATH naming another harness (or an editable install of another clone): a judge process imports
    the harness beside harness/judge.py."""
    other = tmp_path / "other" / "harness"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise SystemExit('the other harness')\n")
    env = cli_env(PYTHONPATH=str(tmp_path / "other"))
    assert subprocess.run([sys.executable, "-c", "import harness"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60).stderr.strip() == "the other harness"
    proc = subprocess.run(judge.command("harness.errors"), capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
