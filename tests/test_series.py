"""Repeated runs (`dawnbench run REF --runs N`): the statistics, the series folder, and stopping."""
import dataclasses
import json
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest
from conftest import PYTHON, SCRIPTED, SCRIPTED_TOML, cli_env

from dawnbench import series
from dawnbench.cli import main
from harness import runner
from harness.events import read_events

SCHEMA = json.loads((Path(__file__).parent.parent / "harness/data/result.schema.json").read_text())

# The scripted reference of conftest, but one seed (`dnc_seed`) never gets over 10%, so a series can
# hold a DNC next to converged runs.
SEEDED = '''
from scripted import Scripted


class Seeded(Scripted):
    def predict(self):
        if self.ctx.seed == self.cfg["dnc_seed"]:
            self.cfg = {**self.cfg, "accuracies": [0.1]}
        return super().predict()
'''


@pytest.fixture
def seeded_refs(references_root, fashion_root):
    ref = references_root / "seeded-test"
    ref.mkdir()
    (ref / "scripted.py").write_text(SCRIPTED)
    shutil.copy(references_root / "scripted-test" / "labels.npy", ref / "labels.npy")
    (ref / "seeded.py").write_text(SEEDED)
    (ref / "reference.toml").write_text(SCRIPTED_TOML.replace('"scripted:Scripted"', '"seeded:Seeded"')
                                        .replace("short = false", "short = false\ndnc_seed = -1"))
    return references_root


def converged(tta, seed=0, **extra):
    return {"reference": "r", "task": "fashion-mnist", "metric": "top1", "threshold": 0.92,
            "official_threshold": True, "status": "converged", "tta_seconds": tta, "seed": seed,
            "run_id": f"seed{seed}", "epochs": 3, "metric_value": 0.93, **extra}


def dnc(seed=0):
    return {**converged(None, seed), "status": "DNC", "metric_value": 0.5}


# --- the statistics ------------------------------------------------------------------------------

def test_statistics_on_known_values():
    values = [10, 12, 11, 50, 9]
    s = series.summarize([converged(v, seed=i) for i, v in enumerate(values)])
    t = s["tta_seconds"]
    assert t["n"] == 5 and t["min"] == 9 and t["max"] == 50
    assert t["median"] == 11
    assert t["olympic_mean"] == 11          # (10 + 11 + 12) / 3: the best (9) and the worst (50) dropped
    assert t["mean"] == pytest.approx(18.4)
    assert t["stdev"] == pytest.approx(statistics.stdev(values))
    assert t["cv"] == pytest.approx(statistics.stdev(values) / 18.4)
    assert s["n"] == 5 and s["converged"] == 5 and s["fraction_converged"] == 1.0
    assert [r["run_dir"] for r in s["runs"]] == [f"seed{i}" for i in range(5)]
    assert set(s) == {"reference", "task", "metric", "threshold", "official_threshold", "n", "converged",
                      "fraction_converged", "runs", "tta_seconds", "acceptance"}
    # the task's rule (single for fashion-mnist) and the statistics over the same runs (dawnbench.evidence)
    a = s["acceptance"]
    assert (a["rule"], a["verdict"], a["n"], a["tta_median_seconds"]) == ("single", "accepted", 5, 11)
    assert set(s["runs"][0]) == {"seed", "run_dir", "status", "tta_seconds", "epochs", "metric_value"}


def test_statistics_are_over_converged_runs_only():
    s = series.summarize([converged(20.0, 0), dnc(1), converged(30.0, 2), dnc(3)])
    assert s["n"] == 4 and s["converged"] == 2 and s["fraction_converged"] == 0.5
    t = s["tta_seconds"]
    assert t["n"] == 2 and t["median"] == 25.0 and t["mean"] == 25.0
    assert t["olympic_mean"] is None                      # under 3 converged runs
    assert t["cv"] == pytest.approx(statistics.stdev([20.0, 30.0]) / 25.0)
    assert [r["status"] for r in s["runs"]] == ["converged", "DNC", "converged", "DNC"]
    assert s["runs"][1]["tta_seconds"] is None


def test_statistics_of_one_and_of_no_converged_run():
    one = series.summarize([converged(7.5)])["tta_seconds"]
    assert one["median"] == 7.5 and one["stdev"] is None and one["cv"] is None and one["olympic_mean"] is None
    none = series.summarize([dnc(0), dnc(1)])
    assert none["fraction_converged"] == 0.0 and none["tta_seconds"]["n"] == 0
    assert all(none["tta_seconds"][k] is None for k in ("min", "median", "max", "mean", "stdev", "cv", "olympic_mean"))
    assert series.summarize([])["fraction_converged"] is None


def test_runs_of_different_thresholds_are_not_summarized_together():
    with pytest.raises(ValueError, match="threshold"):
        series.summarize([converged(1.0), converged(2.0, threshold=0.85)])


# --- the options every run repeats ---------------------------------------------------------------

def test_the_table_shows_each_task_s_figure_as_the_pages_do():
    """An accuracy in percent, F1 (a fraction) as a fraction: never F1 as "81.25%"."""
    from harness.tasks import TASKS
    for task in TASKS.values():
        summary = series.summarize([{"reference": "r", "task": task.name, "metric": task.metric, "threshold": 0.5,
                                     "seed": 0, "status": "converged", "tta_seconds": 3.0, "epochs": 2,
                                     "metric_value": 0.8125, "run_id": "seed0"}])
        row = series.table(summary)[1].split()
        # a figure with a unit of its own says it (kjv-bytes: "0.812 bits/byte", the pages' three decimals)
        expected = ("81.25%" if task.figure.scale == 100 else f"0.812 {task.figure.unit}" if task.figure.unit
                    else "0.8125")
        assert " ".join(row[3:3 + len(expected.split())]) == expected, (task.name, row)


def test_every_run_option_but_the_series_own_is_forwarded(seeded_refs, fashion_root, tmp_path, monkeypatch):
    """Each run of a series gets the typed options that one `dawnbench run` of the same command line
    gets, but for what the series sets per run: the seed, and the folder results/REF/<series>/seed<k>."""
    results = (tmp_path / "r").resolve()
    argv = ["run", "seeded-test", "--set", "train_sleep=0.5", "--set", "eval_sleep=0.25", "--seed", "4",
            "--data", str(fashion_root), "--no-progress", "--instance", "aws:p3.2xlarge", "--nodes", "2",
            "--max-epochs", "3", "--max-seconds", "9.5", "--threshold", "0.85", "--results", str(results), "--no-save"]
    calls = []
    monkeypatch.setattr(runner, "run", lambda spec, hp, opts: calls.append((spec.name, hp, opts)) or {"status": "DNC"})
    assert main(argv) == 1                      # one run: harness.cli.cmd_run -> runner.run
    monkeypatch.setattr(series, "_run_in_own_process",
                        lambda spec, hp, opts: calls.append((spec.name, hp, opts)) or (1, dnc(opts.seed)))
    assert main([*argv, "--runs", "3"]) == 1    # a series of three
    (name, hp, single), *runs = calls
    assert single.instance == "aws:p3.2xlarge" and single.nodes == 2 and single.price["instance"] == "aws:p3.2xlarge"
    assert hp["train_sleep"] == 0.5 and hp["eval_sleep"] == 0.25 and single.cost_per_hour is not None
    assert not single.progress and not single.save_model and single.max_seconds == 9.5
    assert [opts.seed for _, _, opts in runs] == [4, 5, 6]
    series_dir = the_series(results, "seeded-test")
    for run_name, run_hp, opts in runs:
        assert (run_name, run_hp) == (name, hp)
        assert (opts.results_root, opts.series_id, opts.run_id) == (results, series_dir.name, f"seed{opts.seed}")
        assert dataclasses.replace(opts, seed=4, results_root=single.results_root, series_id=None, run_id=None) == single


# --- a real series -------------------------------------------------------------------------------

def the_series(results: Path, reference: str) -> Path:
    (folder,) = (results / reference).iterdir()
    return folder


def test_a_series_with_one_dnc(seeded_refs, tmp_path, capsys):
    results = tmp_path / "results"
    code = main(["run", "seeded-test", "--runs", "3", "--seed", "5", "--set", "dnc_seed=6",
                 "--set", "accuracies=0.5,0.95", "--set", "train_sleep=0.05", "--max-epochs", "3",
                 "--results", str(results), "--no-progress", "--no-save", "--instance", "aws:p3.2xlarge",
                 "--nodes", "2"])
    assert code == 1                                   # not every run converged
    folder = the_series(results, "seeded-test")
    assert sorted(p.name for p in folder.iterdir()) == ["seed5", "seed6", "seed7", "summary.json"]
    runs = {}
    for seed in (5, 6, 7):
        run_dir = folder / f"seed{seed}"
        assert sorted(p.name for p in run_dir.iterdir()) == ["env.json", "events.jsonl", "predictions",
                                                             "result.json", "seeded-test.tsv"]
        r = json.loads((run_dir / "result.json").read_text())
        jsonschema.validate(r, SCHEMA)
        assert r["seed"] == seed and r["run_id"] == f"seed{seed}"
        assert r["costPerHour"] == pytest.approx(6.12) and r["instance"] == "aws:p3.2xlarge" and r["nodes"] == 2
        runs[seed] = r
    assert runs[6]["status"] == "DNC" and runs[6]["epochs"] == 3
    assert runs[5]["status"] == runs[7]["status"] == "converged"

    summary = json.loads((folder / "summary.json").read_text())
    ttas = [runs[5]["tta_seconds"], runs[7]["tta_seconds"]]
    assert summary["reference"] == "seeded-test" and summary["task"] == "fashion-mnist"
    assert summary["metric"] == "top1" and summary["threshold"] == 0.92 and summary["official_threshold"] is True
    assert summary["n"] == 3 and summary["converged"] == 2 and summary["fraction_converged"] == pytest.approx(2 / 3)
    assert summary["requested_runs"] == 3 and summary["interrupted"] is False
    assert [(r["seed"], r["run_dir"], r["status"]) for r in summary["runs"]] == [
        (5, "seed5", "converged"), (6, "seed6", "DNC"), (7, "seed7", "converged")]
    assert [r["tta_seconds"] for r in summary["runs"]] == [ttas[0], None, ttas[1]]
    assert [r["epochs"] for r in summary["runs"]] == [2, 3, 2]
    assert summary["runs"][1]["metric_value"] == pytest.approx(0.1)
    t = summary["tta_seconds"]
    assert t["median"] == pytest.approx(statistics.median(ttas)) and t["min"] == min(ttas) and t["max"] == max(ttas)
    assert t["cv"] == pytest.approx(statistics.stdev(ttas) / statistics.fmean(ttas))
    assert t["olympic_mean"] is None and min(ttas) >= 0.1     # two epochs of 0.05 s sleep each

    out = capsys.readouterr().out
    assert "converged 2/3 (67%)" in out and f"summary: {folder / 'summary.json'}" in out
    assert "\nnot stable: " in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["5"], ["6"], ["7"])]
    assert [row[1] for row in rows] == ["converged", "DNC", "converged"]


def test_a_series_where_every_run_converges_exits_0(seeded_refs, tmp_path):
    results = tmp_path / "results"
    assert main(["run", "seeded-test", "--runs", "2", "--threshold", "0.5", "--results", str(results),
                 "--no-progress"]) == 0
    folder = the_series(results, "seeded-test")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["converged"] == 2 and summary["threshold"] == 0.5 and summary["official_threshold"] is False
    assert [r["seed"] for r in summary["runs"]] == [0, 1]
    assert (folder / "seed0" / "model" / "model.txt").read_text() == "1"
    # the runs were made in place: each log names its own run's model, inside the run (no path of the machine)
    (checkpoint,) = [e for e in read_events(folder / "seed1" / "events.jsonl") if e["key"] == "checkpoint"]
    assert checkpoint["value"] == "model" and (folder / "seed1" / "model" / "model.txt").is_file()


@pytest.mark.parametrize("args, env, says", [
    (["--runs", "2", "--run-id", "x"], {}, "--runs and --run-id do not go together"),
    (["--runs", "0"], {}, "--runs 0"),
    (["--runs", "2"], {"WORLD_SIZE": "2"}, "under torchrun (WORLD_SIZE=2)"),
])
def test_refused_series_are_one_line_and_write_nothing(seeded_refs, tmp_path, capsys, monkeypatch, args, env, says):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code = main(["run", "seeded-test", "--results", str(tmp_path / "r"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "r").exists()


def test_a_series_without_its_dataset_is_one_line_and_writes_nothing(seeded_refs, tmp_path, capsys):
    code = main(["run", "seeded-test", "--runs", "2", "--data", str(tmp_path / "empty"),
                 "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "dawnbench data fetch fashion-mnist" in err[0]
    assert not (tmp_path / "r").exists()


def test_an_interrupted_series_still_writes_its_summary(seeded_refs, tmp_path):
    """Ctrl-C during the second run: the first is summarized; the second, stopped, keeps its logs."""
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [PYTHON, "-m", "dawnbench", "run", "seeded-test", "--runs", "3", "--results", str(results), "--no-progress",
         "--no-save", "--set", "accuracies=0.5,0.95", "--set", "train_sleep=0.3"],
        env=cli_env(DAWNBENCH_REFERENCES=str(seeded_refs)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # as from a terminal
    try:
        deadline = time.monotonic() + 60
        # The second run is under way once its first epoch is in its log.
        while not list(results.glob("seeded-test/*/seed1/seeded-test.tsv")) or \
                len(next(results.glob("seeded-test/*/seed1/seeded-test.tsv")).read_text().splitlines()) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    folder = the_series(results, "seeded-test")
    assert sorted(p.name for p in folder.iterdir()) == ["seed0", "seed1", "summary.json"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["n"] == 1 and summary["runs"][0]["seed"] == 0 and summary["runs"][0]["status"] == "converged"
    assert summary["interrupted"] is True and summary["requested_runs"] == 3
    stopped = json.loads((folder / "seed1" / "result.json").read_text())
    assert stopped["status"] == "DNC" and stopped["dnc_reason"] == "error: interrupted (Ctrl-C, SIGINT)"
    assert "summary.json covers the 1 run(s) that finished" in err and "converged 1/1" in out


def a_frame_in_logging_s_at_fork_hook():
    import sys as _sys
    hook = {"__name__": "logging", "sys": _sys}
    exec("def _releaseLock():\n    return sys._getframe()\n", hook)
    return hook["_releaseLock"]()


@pytest.mark.parametrize("where", ["dawnbench.stoppable", "dawnbench.series"])
def test_every_handler_that_raises_sends_a_signal_landing_in_an_at_fork_hook_again(where):
    """The class of the case below: the tools' own handlers raise Stopped (`dawnbench.stoppable.signals_stop`,
    which every tool that runs a run uses, and the series' SIGTERM), and Python drops it inside the hook as it
    dropped the run's. Each sends the signal again and raises after the hook, its state untouched before."""
    from dawnbench import series, stoppable
    frame = a_frame_in_logging_s_at_fork_hook()
    if where == "dawnbench.stoppable":
        with stoppable.signals_stop():
            stoppable._stopped(signal.SIGTERM, frame)     # inside the hook: nothing raised, nothing spent
            assert not stoppable._received and signal.getsignal(signal.SIGINT) is stoppable._stopped
            with pytest.raises(stoppable.Stopped):
                time.sleep(5)                            # the same signal again, 50 ms later, outside it
            assert stoppable._received == [signal.SIGTERM]
    else:
        previous = signal.signal(signal.SIGTERM, series._raise_stopped)
        try:
            series._raise_stopped(signal.SIGTERM, frame)
            with pytest.raises(series.Stopped):
                time.sleep(5)
        finally:
            signal.signal(signal.SIGTERM, previous)
