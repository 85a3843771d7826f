"""`dawnbench compare` without Docker (issue 47): an environment a pin, built as a reference's is, interleaved
runs, intervals, the machine's load in the summary and the plot's title, the frameworks' log lines kept out
of the terminal. The end-to-end run compares two numpy pins under the scripted reference from a committed
copy of the project (a fresh clone), one run a side: two small environments set up, two runs of seconds."""
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
from test_containers import COMPARE_PINS, compare_runs

from dawnbench import compare, compare_native
from harness import eval_labels

PINS = ["numpy==2.3.5", "numpy==2.4.6"]        # both in this machine's wheelhouse / index


def test_the_frameworks_start_up_lines_are_noise_and_the_harness_s_are_not():
    assert compare_native.noise("I0000 00:00:1795839687.094884    9167 port.cc:153] oneDNN custom operations are on.")
    assert compare_native.noise("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR")
    assert compare_native.noise("2026-11-20 10:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:210] x")
    assert compare_native.noise("To enable the following instructions: AVX2 AVX512F, in other operations, rebuild")
    for line in ("epoch   1/5  loss 1.0000  top1  50.00% (target 92.00%)  time-to-accuracy clock     0.9 s",
                 "converged: top1 95.00% at epoch 3; time-to-accuracy 0.9 s (eval excluded), wall 3.8 s",
                 "official: yes", "warning: other processes used 91% of the 2 CPUs this run may use"):
        assert not compare_native.noise(line)


def test_the_load_is_named_in_the_summary_and_the_title_with_the_table_s_speedup():
    s = compare.summarize(compare_runs([140.0, 145.0, 150.0], [90.0, 100.0, 110.0]), COMPARE_PINS)
    s["load"] = compare.machine_load([
        {"others_share": 0.91, "busy": True, "usable_cpus": 2, "loadavg_before": [9.7, 5, 4]},
        {"others_share": 0.02, "busy": False, "usable_cpus": 2, "loadavg_before": [1.5, 1, 1]}, None])
    assert s["load"]["line"] == ("machine load: other processes used up to 91% of the 2 CPUs during the runs (1 of 3 "
                                 "runs busy: the times are not the hardware's alone); 1-minute load average 1.5-9.7 "
                                 "before the runs")
    lines = compare.table(s, COMPARE_PINS)
    assert s["load"]["line"] in lines
    title = compare.title_text(s, "x").splitlines()
    speedup = compare.speedup_text(s)
    assert title[0] == f"x: {speedup}" and any(line.startswith(speedup) for line in lines)
    assert "1.450x" in speedup and "1.45x" not in title[0].replace("1.450x", "")    # one number, one rounding
    assert title[-1] == "machine load: other processes up to 91% of 2 CPUs, 1 of 3 runs busy"
    assert compare.machine_load([None])["line"] == "machine load: not measured in 1 run(s) (env.json records no load)"


def test_a_pin_that_names_nothing_the_reference_installs_is_one_line_before_any_set_up(tmp_path, capsys):
    venvs = tmp_path / "venvs"
    os.environ["DAWNBENCH_VENVS"] = str(venvs)
    try:
        code = compare.main(["fashion-mnist-cnn-pytorch", "--versions", "scipy==1.0.0", "scipy==1.1.0", "--out",
                             str(tmp_path / "out")])
    finally:
        del os.environ["DAWNBENCH_VENVS"]
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("dawnbench compare: error: --versions scipy==1.0.0: ")
    assert "has no scipy requirement to replace" in err[0] and not venvs.exists()


@pytest.mark.second_env
def test_compare_runs_natively_on_a_fresh_clone_with_two_pins(fashion_root, tmp_path):
    project = copy_project(tmp_path / "project")
    scripted = project / "references" / "scripted-test"
    scripted.mkdir()
    (scripted / "scripted.py").write_text(SCRIPTED)
    (scripted / "reference.toml").write_text(SCRIPTED_TOML)
    (scripted / "requirements.txt").write_text("-r ../../requirements/harness.txt\n")
    np.save(scripted / "labels.npy", eval_labels.load_eval_labels("fashion-mnist", fashion_root))
    commit_all(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAWNBENCH_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(project), DAWNBENCH_VENVS=str(tmp_path / "venvs"))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "dawnbench.cli", "compare", "scripted-test", "--versions", *PINS,
                           "--runs", "1", "--out", str(out), "--", "--data", str(fashion_root), "--threshold", "0.9"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "compare.json").read_text())
    assert summary["runtime"] == "native" and set(summary["environments"]) == set(PINS)
    for label, pin in zip("AB", PINS):
        run_dir = out / "runs" / "scripted-test" / f"{label}-seed0"
        workers = json.loads((run_dir / "env.json").read_text())["worker_environment"]
        assert {d["name"].lower(): d["version"] for d in workers["distributions"]}["numpy"] == pin.split("==")[1]
        assert Path(workers["prefix"]).name == f"scripted-test@{pin}"
        assert (out / "runs" / f"{label}-seed0.log").read_text().count("converged: ") == 1
        (run,) = summary["versions"][pin]["runs"]
        assert run["status"] == "converged" and run["official_threshold"] is False
    stdout = proc.stdout.splitlines()
    assert any(line.startswith("speedup B/A: time-to-accuracy ") for line in stdout)
    assert any(line.startswith("machine load: ") for line in stdout) and summary["load"]["runs"] == 2
    assert "verdict: too few runs to compare: A has 1 converged run, B 1; 3 a side at least: run more (RUNS=4)" in stdout
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
