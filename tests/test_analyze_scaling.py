"""`dawnbench analyze scaling` on real runs of the default reference at 1 and 2 processes (gloo on the CPU,
the two ranks in one loopback-only network namespace: harness/local_ranks.py), on a small Fashion-MNIST
in the official format (tests/fashion_mnist_fixture.py). The expected figures are recomputed here from
each run's own files: time-to-accuracy from result.json, the time per epoch from events.jsonl's epoch
spans, so a mistake in the analysis' reading of either shows."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON, REPO, cli_env
from fashion_mnist_fixture import fixture_manifest, write_fashion_mnist

from dawnbench.cli import main
from harness import datasets, local_ranks
from harness.events import read_events

REF = "fashion-mnist-cnn-pytorch"
# One epoch with a one-epoch schedule on 1,280 images reaches about 0.38 top-1 on the fixture (both
# counts, seed 0); 0.25 leaves margin above chance (0.1) for a slower, busier machine.
RUN = ["run", REF, "--max-epochs", "1", "--set", "epochs=1", "--threshold", "0.25", "--no-progress", "--no-save"]

pytestmark = [pytest.mark.multiprocess, pytest.mark.recipe_run]


@pytest.fixture(scope="module")
def fixture_data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scaling-data")
    write_fashion_mnist(tmp / "data" / "fashion-mnist", n_train=1280, n_test=500, seed=0)
    manifest = fixture_manifest(tmp / "datasets.toml", tmp / "data" / "fashion-mnist")
    return tmp / "data", manifest


@pytest.fixture(scope="module")
def runs(fixture_data, tmp_path_factory) -> dict[int, Path]:
    """{processes: its run folder}: the 1- and 2-process runs, started together to halve the wait."""
    data, manifest = fixture_data
    tmp = tmp_path_factory.mktemp("scaling-runs")
    env = cli_env(**{datasets.MANIFEST_ENV: str(manifest)})
    launchers = {1: [PYTHON, "-m", "dawnbench"],
                 2: local_ranks.launcher_command(2, module="dawnbench")}
    procs = {n: subprocess.Popen([*launcher, *RUN, "--data", str(data), "--results", str(tmp / f"np{n}")], cwd=REPO,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n, launcher in launchers.items()}
    folders = {}
    for n, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert "keep this machine's network" not in err      # the ranks ran in their loopback-only namespace
        (folders[n],) = (tmp / f"np{n}" / REF).iterdir()
    return folders


def analyze(argv, capsys):
    code = main(["analyze", "scaling", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out.strip().splitlines(), captured.err.strip().splitlines()


def seconds_per_epoch(run_dir: Path) -> float:
    """The train spans from the event log, over the epochs trained."""
    events = read_events(run_dir / "events.jsonl")
    starts = [e["metadata"]["clock_s"] for e in events if e["key"] == "epoch_start"]
    stops = [e["metadata"]["clock_s"] for e in events if e["key"] == "epoch_stop"]
    assert len(starts) == len(stops) >= 1
    return sum(b - a for a, b in zip(starts, stops)) / len(stops)


def copy_run(run_dir: Path, to: Path, **changes) -> Path:
    shutil.copytree(run_dir, to)
    result = json.loads((to / "result.json").read_text())
    result.update(changes)
    (to / "result.json").write_text(json.dumps(result))
    return to


def test_speedups_epochs_and_the_ideal_line(runs, tmp_path, capsys):
    one, two = (json.loads((runs[n] / "result.json").read_text()) for n in (1, 2))
    assert (one["world_size"], two["world_size"]) == (1, 2) and one["status"] == two["status"] == "converged"
    # a series at 1 process (its summary.json and seed folder) and a run folder at 2: both kinds of input
    series = tmp_path / REF / "s1"
    copy_run(runs[1], series / "seed0")
    (series / "summary.json").write_text(json.dumps({"reference": REF, "runs": [{"seed": 0, "run_dir": "seed0",
                                                                                 "status": "converged",
                                                                                 "tta_seconds": one["tta_seconds"]}]}))
    code, printed, err = analyze([series, runs[2], "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    assert printed == [str(tmp_path / "out" / "scaling.png"), str(tmp_path / "out" / "scaling.json")]
    assert (tmp_path / "out" / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    numbers = json.loads((tmp_path / "out" / "scaling.json").read_text())
    assert (numbers["reference"], numbers["base_processes"]) == (REF, 1)
    a, b = numbers["counts"]
    assert [(r["processes"], r["n"], r["converged"], r["ideal_speedup"]) for r in (a, b)] == [(1, 1, 1, 1.0), (2, 1, 1, 2.0)]
    assert (a["speedup_tta"], a["speedup_per_epoch"]) == (1.0, 1.0)
    assert b["speedup_tta"] == pytest.approx(one["tta_seconds"] / two["tta_seconds"])
    assert b["speedup_per_epoch"] == pytest.approx(seconds_per_epoch(runs[1]) / seconds_per_epoch(runs[2]), rel=2e-3)
    assert (a["epochs_to_converge_median"], b["epochs_to_converge_median"]) == (one["epochs"], two["epochs"]) == (1, 1)
    assert a["note"] is None and b["note"] is None


def test_a_count_that_did_not_converge_says_so(runs, tmp_path, capsys):
    dnc = copy_run(runs[2], tmp_path / "dnc", status="DNC", tta_seconds=None)
    code, printed, err = analyze([runs[1], dnc, "--out", tmp_path / "out"], capsys)
    assert code == 0, err
    a, b = json.loads((tmp_path / "out" / "scaling.json").read_text())["counts"]
    assert (b["converged"], b["speedup_tta"], b["tta_seconds_median"]) == (0, None, None)
    assert b["note"] == "no run converged at 2 process(es): no time-to-accuracy speedup"
    assert b["speedup_per_epoch"] == pytest.approx(seconds_per_epoch(runs[1]) / seconds_per_epoch(runs[2]), rel=2e-3)


def test_mixed_references_or_tasks_are_refused_in_one_line(runs, tmp_path, capsys):
    other = copy_run(runs[2], tmp_path / "other", reference="fashion-mnist-cnn-tensorflow")
    code, printed, err = analyze([runs[1], other, "--out", tmp_path / "out"], capsys)
    assert code == 2 and printed == [] and len(err) == 1
    assert "the runs mix references (fashion-mnist-cnn-pytorch, fashion-mnist-cnn-tensorflow)" in err[0]
    task = copy_run(runs[2], tmp_path / "task", task="cifar10")
    code, printed, err = analyze([runs[1], task, "--out", tmp_path / "out"], capsys)
    assert code == 2 and len(err) == 1 and "the runs mix tasks (cifar10, fashion-mnist)" in err[0]
    # the process count is the harness's record: a run folder without it is refused, not guessed
    bare = copy_run(runs[2], tmp_path / "bare", world_size="2")
    code, printed, err = analyze([bare, tmp_path / "missing", "--out", tmp_path / "out"], capsys)
    assert code == 2 and len(err) == 2 and "no whole number 'world_size'" in err[0] and "no such file" in err[1]
    assert not (tmp_path / "out").exists()
