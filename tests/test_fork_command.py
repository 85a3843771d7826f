"""`dawnbench fork REF NEW` (issue 35): its refusals, the fork's own author and model (so its entries
have a name of their own), and a fork walked end to end through bin/dawnbench: fork, edit, a run
before the commit (unofficial, and its last lines say why), commit, an official run, verify, submit,
validate and the leaderboard, where the fork's row carries the fork's names beside the original's.

The walk uses the scripted reference (tests/conftest.py) in a committed copy of the project
(tests/project_copy.py): an official run, at the task's threshold, in seconds."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SCRIPTED, SCRIPTED_TOML
from project_copy import commit_all, copy_project

from dawnbench import entries
from dawnbench.cli import main
from harness import eval_labels, registry

REPO = Path(__file__).resolve().parent.parent
ORIGINAL = "fashion-mnist-cnn-pytorch"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def references(tmp_path) -> Path:
    root = tmp_path / "references"
    root.mkdir()
    subprocess.run(["cp", "-r", str(REPO / "references" / ORIGINAL), str(root)], check=True)
    return root


@pytest.mark.parametrize("argv, words", [
    (["no-such-ref", "mine"], "unknown reference 'no-such-ref'; available: fashion-mnist-cnn-pytorch"),
    ([ORIGINAL, "../mine"], "NEW '../mine': not a plain folder name"),
    ([ORIGINAL, ".hidden"], "NEW '.hidden': not a plain folder name"),
    ([ORIGINAL, ORIGINAL], f"{ORIGINAL} exists: give the fork another name (NEW)"),
    ([ORIGINAL, "mine", "--model", "two\nlines"], "--model two\\nlines: holds a control character"),
    ([ORIGINAL, "mine", "--author", ""], "--author '': blank"),
    ([ORIGINAL, "mine", "--model", "CNN (3 conv-pool-BN-ReLU layers, 16-32-64)"],
     "are the original's: its entries would share the fork's name"),
    ([ORIGINAL], "the following arguments are required: NEW"),
])
def test_fork_refusals(references, capsys, argv, words):
    before = tree(references)
    assert main(["fork", *argv, "--references", str(references)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dawnbench fork: error: ") and words in err[0], err
    assert tree(references) == before and sorted(p.name for p in references.iterdir()) == [ORIGINAL]


def test_a_fork_has_its_own_author_model_and_entry_name(references, capsys):
    assert main(["fork", ORIGINAL, "mine", "--author", "Ann Author", "--references", str(references)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"forked {ORIGINAL} into {references / 'mine'}: author 'Ann Author', model ")
    assert out[2:5] == [f"  $EDITOR {references / 'mine'}/train.py",
                        f"  git add {references / 'mine'} && git commit -m 'mine: forked from {ORIGINAL}'",
                        "  dawnbench run mine"]
    original, fork = registry.load_spec(ORIGINAL, references), registry.load_spec("mine", references)
    assert (fork.author, fork.model) == ("Ann Author", f"{original.model} (fork mine)")
    assert (fork.framework, fork.entry, fork.hyperparameters) == (original.framework, original.entry,
                                                                  original.hyperparameters)
    stem = [entries.entry_stem(s.author, s.model, "1 x CPU", "PyTorch") for s in (original, fork)]
    assert stem[0] != stem[1]
    # the edit is the two lines: every comment and every other line as it was
    old = (references / ORIGINAL / "reference.toml").read_text().splitlines()
    new = (references / "mine" / "reference.toml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(old, new) if a != b]
    assert len(old) == len(new) and [b.split(" =")[0] for _, b in changed] == ["model", "author"]
    readme = (references / "mine" / "README.md").read_text().splitlines()
    assert readme[0] == "# mine" and readme[2].startswith(f"Forked from `references/{ORIGINAL}` outside any git commit")
    # the default author is the original's; the model alone already names the fork
    assert main(["fork", ORIGINAL, "theirs", "--references", str(references)]) == 0
    spec = registry.load_spec("theirs", references)
    assert (spec.author, spec.model) == (original.author, f"{original.model} (fork theirs)")


def test_the_launcher_runs_fork_here_with_any_python(tmp_path, references):
    """No environment is set up for it: bin/dawnbench under a bare python3 forks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAWNBENCH_") and k != "PYTHONPATH"}
    env["DAWNBENCH_VENVS"] = str(tmp_path / "no-venvs")         # none there: nothing may be set up
    proc = subprocess.run([f"{sys.base_prefix}/bin/python3", "-m", "dawnbench.launcher", "fork", ORIGINAL, "mine",
                           "--references", str(references)], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (references / "mine" / "reference.toml").is_file() and not (tmp_path / "no-venvs").exists()


def _run(project: Path, argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([str(project / "bin" / "dawnbench"), *argv], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)


def said(stderr: str) -> list[str]:
    """A run's lines on stderr without the busy machine's warnings (harness.load), which a loaded CI
    machine adds after the official line."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("warning: ")]


def test_a_fork_end_to_end_through_bin_dawnbench(fashion_root, tmp_path):
    project = copy_project(tmp_path / "project")
    scripted = project / "references" / "scripted-test"
    scripted.mkdir()
    (scripted / "scripted.py").write_text(SCRIPTED)
    (scripted / "reference.toml").write_text(SCRIPTED_TOML)
    (scripted / "README.md").write_text("# scripted-test\n\nThe tests' scripted reference.\n")
    np.save(scripted / "labels.npy", eval_labels.load_eval_labels("fashion-mnist", fashion_root))
    commit_all(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAWNBENCH_") and k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"       # python3: the tests' own
    results, tree_ = tmp_path / "results", tmp_path / "entries"
    run_args = ["--data", str(fashion_root), "--results", str(results), "--no-progress"]

    proc = _run(project, ["fork", "scripted-test", "scripted-mine", "--author", "Fork Author"], env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2:5] == ["  $EDITOR references/scripted-mine/scripted.py",
                          "  git add references/scripted-mine && git commit -m 'scripted-mine: forked from "
                          "scripted-test'", f"  {project / 'bin' / 'dawnbench'} run scripted-mine"]
    fork = project / "references" / "scripted-mine"
    code = fork / "scripted.py"
    code.write_text(code.read_text() + "\n# my change\n")        # the edit

    # before the commit: unofficial, and the run's last lines say so, with every reason
    proc = _run(project, ["run", "scripted-mine", "--threshold", "0.9", *run_args], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = said(proc.stderr)
    assert last[-3].startswith("converged: ") and last[-1].startswith("results: ")
    assert last[-2].startswith("unofficial: --threshold 0.9 is not the task's 0.92 (a smoke test); ")
    assert "the code differs from commit" in last[-2] and "references/scripted-mine/" in last[-2]
    (early,) = (results / "scripted-mine").iterdir()
    reasons = json.loads((early / "result.json").read_text())["unofficial_reasons"]
    assert last[-2] == "unofficial: " + "; ".join(reasons) and len(reasons) >= 2
    proc = _run(project, ["verify", str(early), "--data", str(fashion_root)], env)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-2] == last[-2], proc.stdout + proc.stderr
    proc = _run(project, ["submit", str(early), "--out", str(tree_), "--data", str(fashion_root)], env)
    assert proc.returncode == 2 and not tree_.exists()
    assert ("the run is not official: it was trained to a lowered threshold 0.9 (official 0.92)" in proc.stderr
            and "the code differs from commit" in proc.stderr), proc.stderr

    commit_all(project, "scripted-mine: forked from scripted-test")
    for reference in ("scripted-test", "scripted-mine"):
        proc = _run(project, ["run", reference, *run_args], env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert said(proc.stderr)[-2] == "official: yes", proc.stderr[-2000:]
    runs = {r: max((results / r).iterdir()) for r in ("scripted-test", "scripted-mine")}
    proc = _run(project, ["verify", str(runs["scripted-mine"]), "--data", str(fashion_root)], env)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-2] == "official: yes", proc.stdout + proc.stderr
    for run_dir in runs.values():
        proc = _run(project, ["submit", str(run_dir), "--out", str(tree_), "--data", str(fashion_root)], env)
        assert proc.returncode == 0, proc.stderr
    assert _run(project, ["validate", str(tree_)], env).returncode == 0
    proc = _run(project, ["leaderboard", str(tree_), "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["tasks"]["FashionMNIST"]["train_submitted"]       # official, not reproduced
    by_entry = {row["entry"]: row for row in rows}
    stems = {r: entries.entry_stem(*(lambda s: (s.author, s.model))(registry.load_spec(r, project / "references")),
                                   *(lambda e: (e["hardware"], e["framework"]))(json.loads(
                                       (runs[r] / "result.json").read_text()))) for r in runs}
    assert stems["scripted-mine"].startswith("Fork-Author_scripted-fork-scripted-mine")
    assert set(by_entry) == set(stems.values()) and len(by_entry) == 2
    entry = json.loads((tree_ / "FashionMNIST" / "train" / f"{stems['scripted-mine']}.json").read_text())
    assert (entry["author"], entry["model"], entry["reference"], entry["official"]) == (
        "Fork Author", "scripted (fork scripted-mine)", "scripted-mine", True)
