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

from dawnbench import anchors, entries
from dawnbench import fork as fork_module
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
    assert out[2] == f"  $EDITOR {references / 'mine'}/train.py"
    assert out[3].startswith(f"  $EDITOR {references / 'mine'}/reference.toml {references / 'mine'}/README.md ")
    assert "set `model`" in out[3] and "TODO(fork)" in out[3]
    assert out[4:6] == [f"  git add {references / 'mine'} && git commit -m 'mine: forked from {ORIGINAL}'",
                        "  dawnbench run mine"]
    original, fork = registry.load_spec(ORIGINAL, references), registry.load_spec("mine", references)
    # the copied model text would describe the original's network: the fork's is to do, naming its source
    assert (fork.author, fork.model) == ("Ann Author", f"TODO(fork): describe mine's model (forked from: "
                                                       f"{original.model})")
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
    assert readme[4].startswith(f"**TODO(fork):** what follows describes {ORIGINAL}, the original")
    # the anchor table is marked above its generated text, which stays anchor.toml's rendering
    todo = readme.index(fork_module.ANCHORS_BEGIN) - 2
    assert readme[todo].startswith(f"**TODO(fork):** the table below is {ORIGINAL}'s recipe")
    anchors.check(references / "mine")
    assert (references / "mine" / "anchor.toml").read_text().startswith(f"# TODO(fork): these rows are {ORIGINAL}'s")
    # the default author is the original's; the model alone already names the fork
    assert main(["fork", ORIGINAL, "theirs", "--references", str(references)]) == 0
    spec = registry.load_spec("theirs", references)
    assert (spec.author, spec.model) == (original.author, f"TODO(fork): describe theirs's model (forked from: "
                                                          f"{original.model})")
    # a model given on the command line is the fork's own: nothing to do there, the README's still is
    assert main(["fork", ORIGINAL, "given", "--model", "CNN with GELU", "--references", str(references)]) == 0
    assert registry.load_spec("given", references).model == "CNN with GELU"
    assert "check `model`" in capsys.readouterr().out


def test_fork_knows_the_anchor_tables_first_line():
    assert fork_module.ANCHORS_BEGIN == anchors.BEGIN


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


def spec_model(project: Path, name: str) -> str:
    return registry.load_spec(name, project / "references").model


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
    assert lines[2] == "  $EDITOR references/scripted-mine/scripted.py"
    assert lines[3].startswith("  $EDITOR references/scripted-mine/reference.toml references/scripted-mine/README.md")
    assert "set `model`" in lines[3]
    assert lines[4:6] == ["  git add references/scripted-mine && git commit -m 'scripted-mine: forked from "
                          "scripted-test'", f"  {project / 'bin' / 'dawnbench'} run scripted-mine"]
    fork = project / "references" / "scripted-mine"
    code = fork / "scripted.py"
    code.write_text(code.read_text() + "\n# my change\n")        # the edit
    # As `make run NPROC=N` and a bare python3's bin/dawnbench do, the workers' interpreter is named by path: a
    # path of this machine, which no entry file may carry (issue 47)
    env["DAWNBENCH_WORKER_PYTHON"] = sys.executable

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
    # the model's text is still the fork's to do: a reason of its own, until reference.toml's `model` is set
    assert "reference.toml's model still reads TODO(fork)" in last[-2]
    toml = fork / "reference.toml"
    toml.write_text(toml.read_text().replace(spec_model(project, "scripted-mine"), "scripted, with my change"))

    commit = commit_all(project, "scripted-mine: forked from scripted-test")
    # pushed to a remote: the entry links the code at the run's commit, without the remote's credentials
    git = ["git", "-C", str(project)]
    subprocess.run([*git, "remote", "add", "origin", "https://fork-author:s3cret@github.com/fork-author/dawnbench.git"],
                   check=True)
    subprocess.run([*git, "update-ref", "refs/remotes/origin/main", commit], check=True)     # as `git push` leaves it
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
    assert stems["scripted-mine"].startswith("Fork-Author_scripted-with-my-change")
    assert set(by_entry) == set(stems.values()) and len(by_entry) == 2
    entry = json.loads((tree_ / "FashionMNIST" / "train" / f"{stems['scripted-mine']}.json").read_text())
    assert (entry["author"], entry["model"], entry["reference"], entry["official"]) == (
        "Fork Author", "scripted, with my change", "scripted-mine", True)
    assert entry["codeURL"] == f"https://github.com/fork-author/dawnbench/tree/{commit}/references/scripted-mine"
    assert by_entry[stems["scripted-mine"]]["code_url"] == entry["codeURL"]
    # An entry is public: no path of the machine that ran and submitted it, in any of its files
    machine = {str(p) for p in (tmp_path, project, fashion_root, results, Path(sys.executable).parent.parent,
                                Path.home(), REPO)} | {str(p.resolve()) for p in (tmp_path, fashion_root, REPO)}
    for path in sorted(p for p in tree_.rglob("*") if p.is_file()):
        content = path.read_bytes()
        found = [m for m in machine if m.encode() in content]
        assert not found, f"{path.relative_to(tree_)} holds {found}"
