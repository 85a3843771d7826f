"""What each reference's anchor reached on its task ([reach] of reference.toml, harness/registry.py;
docs/RULES.md, "Reach"): every reference states it, its README's anchor table shows the same figures,
and a network that cannot reach the task's threshold (ResNet-20, -56, -110 at CIFAR-10's 94%) is
refused a run at it in one line before any work (`make run`, `dawnbench run`, the runner itself),
runs at the threshold it can reach with --threshold, is listed so, and is never submitted as an entry."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, cli_env

from dawnbench import anchors, submit
from harness import registry, runner
from harness.errors import UsageError
from harness.tasks import get_task

NAMES = registry.available()
SPECS = {name: registry.load_spec(name) for name in NAMES}
MARKED = sorted(n for n, s in SPECS.items() if s.reach is not None and not s.reach.reaches_threshold)


def test_every_reference_states_what_its_anchor_reached():
    """Every reference the project ships says it, and the marked ones are exactly the networks whose
    anchors (He et al. 2015, Table 6) stay under CIFAR-10's 94%."""
    assert [n for n, s in SPECS.items() if s.reach is None] == []
    assert MARKED == [f"cifar10-resnet{d}-{f}" for d in (110, 20, 56) for f in ("pytorch", "tensorflow")]


@pytest.mark.parametrize("name", NAMES)
def test_the_readme_table_shows_the_data(name):
    """The anchor table's row is rendered from [reach], and the README holds that rendering: the anchor's
    figure and the margin the README states are the data's."""
    reach = SPECS[name].reach
    row = anchors.reach_row(name, reach)
    assert reach.shown(reach.anchor) in row and f"margin {reach.margin()}" in row and reach.source in row
    assert row in (REPO / "references" / name / "README.md").read_text()


def make(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """make in the checkout with every folder a run would fill pointed into tmp_path, to see that none is made."""
    env = cli_env(DAWNBENCH_DATA=str(tmp_path / "data"))
    return subprocess.run(["make", "--no-print-directory", *args, f"VENVS={tmp_path / 'venvs'}",
                           f"TOOLS_VENV={tmp_path / 'tools'}"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def refusal(proc: subprocess.CompletedProcess) -> str:
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("bin/dawnbench: error:")]
    assert "Traceback" not in proc.stderr
    return line


@pytest.mark.parametrize("name", MARKED)
def test_make_run_says_so_before_any_work(name, tmp_path):
    """`make run REF=...` at the task's threshold: one line naming the threshold it can reach and the
    option that runs it there, exit 2, and nothing made: no environment, no data, no runtime chosen."""
    reach = SPECS[name].reach
    proc = make(tmp_path, "run", f"REF={name}")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    line = refusal(proc)
    assert f"{name} cannot reach the task's 94% top-1 accuracy: its anchor reached {reach.shown(reach.anchor)}" in line
    assert f"with --threshold {reach.reachable:g} (unofficial)" in line
    assert not any(tmp_path.iterdir()), list(tmp_path.iterdir())
    # over what it can reach: the same line, saying which option asked for it
    over = make(tmp_path, "run", f"REF={name}", f"ARGS=--threshold {reach.reachable + 0.001:g}")
    assert over.returncode == 2 and "is over what it can reach" in refusal(over)
    # at it: the check passes (what follows it is the run itself)
    assert make(tmp_path, "check-reach", f"REF={name}", f"ARGS=--seed 2 --threshold={reach.reachable:g}").returncode == 0
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", MARKED)
def test_dawnbench_run_says_so_before_any_environment(name, tmp_path):
    env = cli_env(DAWNBENCH_VENVS=str(tmp_path / "venvs"), DAWNBENCH_PROG="bin/dawnbench")
    proc = subprocess.run([str(REPO / "bin" / "dawnbench"), "run", name, "--no-progress"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"--threshold {SPECS[name].reach.reachable:g}" in refusal(proc)
    assert not any(tmp_path.iterdir())


def test_list_shows_it():
    proc = subprocess.run([str(REPO / "bin" / "dawnbench"), "list"], cwd=REPO, env=cli_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert set(lines) == set(NAMES)
    for name, line in lines.items():
        reach = SPECS[name].reach
        note = (f"[cannot reach 94% top-1 accuracy: anchor {reach.shown(reach.anchor)}; "
                f"--threshold {reach.reachable:g} (unofficial)]") if name in MARKED else None
        assert (note is not None and line.endswith(note)) or (note is None and "cannot reach" not in line), line


def test_every_way_into_a_run_is_refused_before_its_folder(tmp_path):
    """The runner checks it itself (a series, reproduce, compare and the analyses come through it), and
    so does the harness's command; with the threshold it can reach, the check passes."""
    spec = SPECS[MARKED[0]]
    results = tmp_path / "results"
    with pytest.raises(UsageError, match="cannot reach the task's 94%"):
        runner.run(spec, dict(spec.hyperparameters), runner.RunOptions(results_root=results, progress=False))
    assert not results.exists()
    registry.check_reach(spec, spec.reach.reachable)
    registry.check_reach(spec, spec.reach.reachable / 2)
    with pytest.raises(UsageError, match=r"--threshold 0\.95 is over what it can reach"):
        registry.check_reach(spec, 0.95)
    for name in set(NAMES) - set(MARKED):
        registry.check_reach(SPECS[name], None)


def test_a_fork_keeps_the_mark_until_its_network_can_reach_it(tmp_path):
    """`cp -r` of a marked reference is refused alike; the fork that deletes [reach] (its own network,
    its own claim) runs at the task's threshold, as the refusal says."""
    original = MARKED[0]
    fork = tmp_path / original.replace("resnet", "mynet")
    shutil.copytree(REPO / "references" / original, fork)
    with pytest.raises(UsageError, match=f"{fork.name} cannot reach") as caught:
        registry.check_reach(registry.load_spec(fork.name, tmp_path), None)
    assert "delete [reach] from the fork's reference.toml" in str(caught.value)
    toml = fork / "reference.toml"
    toml.write_text(toml.read_text().split("\n# What this network's anchor reached")[0] + "\n")
    spec = registry.load_spec(fork.name, tmp_path)
    assert spec.reach is None
    registry.check_reach(spec, None)


REACHES = 'anchor = 0.9222\nsource = "its own runs"\n'


@pytest.mark.parametrize("table, says", [
    ('anchor = 1.5\nsource = "x"\n', "field 'anchor' = 1.5 must be a fraction above 0 and at most 1"),
    ('anchor = "92%"\nsource = "x"\n', "field 'anchor' = '92%' must be a fraction"),
    ("anchor = 0.93\n", "field 'source' must be one line of text"),
    (REACHES + 'reaches_threshold = "no"\n', "field 'reaches_threshold' = 'no' must be true or false"),
    (REACHES + "reaches_threshold = false\n", "reaches_threshold = false, but anchor = 0.9222 reaches the task's "
                                              "threshold 0.92; set reaches_threshold = true"),
    ('anchor = 0.9\nsource = "x"\n', "reaches_threshold = true, but anchor = 0.9 is under the task's threshold 0.92; "
                                     "set reaches_threshold = false, with reachable and reachable_source"),
    ('anchor = 0.9\nsource = "x"\nreaches_threshold = false\nreachable = 0.95\nreachable_source = "y"\n',
     "field 'reachable' = 0.95 reaches the task's threshold 0.92"),
    ('anchor = 0.9\nsource = "x"\nreaches_threshold = false\nreachable = 0.9\n', "field 'reachable_source' must be"),
    (REACHES + "reachable = 0.9\n", "field 'reachable' goes only with reaches_threshold = false"),
    (REACHES + "margin = 0.1\n", "unknown field 'reach.margin' in [reach]"),
])
def test_a_bad_reach_table_is_one_line(tmp_path, table, says):
    name = "fashion-mnist-cnn-pytorch"
    ref = shutil.copytree(REPO / "references" / name, tmp_path / name)
    toml = ref / "reference.toml"
    toml.write_text(toml.read_text().split("[reach]\n")[0] + "[reach]\n" + table)
    with pytest.raises(UsageError) as caught:
        registry.load_spec(name, tmp_path)
    assert says in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_submit_never_makes_it_an_entry():
    """A run of a marked reference carries the harness's reason (harness/official.py), which submit says
    in place of its "rerun without --threshold" (a run the harness refuses): one line, and refused."""
    spec = SPECS[MARKED[0]]
    reason = spec.reach.unofficial_reason(spec.name)
    assert reason.startswith(registry.UNREACHABLE) and "never entries of the task's official table" in reason
    result = {"status": "converged", "task": "cifar10", "official": False, "official_threshold": False,
              "threshold": spec.reach.reachable,
              "unofficial_reasons": [reason, f"--threshold {spec.reach.reachable:g} is not the task's 0.94 (a smoke test)"]}
    assert submit._unofficial(result, get_task("cifar10")) == [reason]
    with pytest.raises(submit.SubmitError) as caught:
        submit._check_run(Path("run"), result, allow_unofficial=False)
    assert "\n" not in str(caught.value) and reason in str(caught.value)
    assert "rerun without --threshold" not in str(caught.value)
    # any other lowered run still hears the way to an entry
    other = {**result, "unofficial_reasons": result["unofficial_reasons"][1:]}
    assert "rerun without --threshold" in submit._unofficial(other, get_task("cifar10"))[0]


def test_a_run_records_the_reason(monkeypatch):
    """harness/official.py puts the reason first among a run's unofficial reasons (what submit reads)."""
    from harness import official
    spec = SPECS[MARKED[0]]
    seen = {}

    def collect(spec, files, found):
        seen["found"] = found
        return {"provenance": {}}
    monkeypatch.setattr(official.provenance, "collect", collect)
    monkeypatch.setattr(official.worker_env, "reasons", lambda *a: [])
    monkeypatch.setattr(official.worker_env, "harness_record", lambda *a: {})

    class Isolated:
        isolated, mode, reason = True, "bwrap", ""

    class EvalSet:
        dropped_indices = None

        def reasons(self):
            return []
    official.official_verdict(spec, spec.reach.reachable, [], EvalSet(), Isolated(), worker={"sha256": "0" * 64})
    assert seen["found"][0] == spec.reach.unofficial_reason(spec.name)
