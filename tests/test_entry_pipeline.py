"""The whole path from runs to the leaderboard, through the real commands: a series of runs
(fresh processes), batch-1 inference on the median run's model, `submit`, `validate`,
`leaderboard` (JSON and site: the entry apart as submitted, then, once `reproduce` ran it again,
ranked by the judge's measurement) and `analyze` on what those commands wrote.

Only an official run is an entry, and a run is official only from committed code: the series runs
from a copy of the project committed to a fresh git repository, with no DAWNBENCH_* override."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest
from conftest import SCRIPTED, SCRIPTED_TOML
from project_copy import commit_all, copy_project

from dawnbench import entries
from dawnbench.cli import main
from harness import eval_labels


def test_series_to_entry_to_leaderboard(fashion_root, tmp_path, capsys, monkeypatch):
    results, tree = tmp_path / "results", tmp_path / "entries"
    project = copy_project(tmp_path / "project")
    (project / "references" / "scripted-test").mkdir()
    (project / "references" / "scripted-test" / "scripted.py").write_text(SCRIPTED)
    (project / "references" / "scripted-test" / "reference.toml").write_text(SCRIPTED_TOML)
    np.save(project / "references" / "scripted-test" / "labels.npy", eval_labels.load_eval_labels("fashion-mnist", fashion_root))
    commit = commit_all(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAWNBENCH_")}
    # The scripted reference reaches 95% at epoch 3 on the official threshold (92%).
    proc = subprocess.run([sys.executable, "-m", "dawnbench", "run", "scripted-test", "--runs", "3", "--set",
                           "train_sleep=0.02", "--data", str(fashion_root), "--results", str(results),
                           "--no-progress", "--instance", "aws:p3.2xlarge"],
                          cwd=project, env={**env, "PYTHONPATH": str(project)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    monkeypatch.setenv("DAWNBENCH_REFERENCES", str(project / "references"))
    (series,) = (results / "scripted-test").iterdir()
    summary = json.loads((series / "summary.json").read_text())
    assert summary["converged"] == 3 and summary["official_threshold"] is True
    for seed in range(3):
        result = json.loads((series / f"seed{seed}" / "result.json").read_text())
        assert result["official"] is True and result["git"]["commit"] == commit, result["unofficial_reasons"]
    median = summary["tta_seconds"]["median"]

    # The series' entry is its median run: submit says which, then that run's model is timed.
    # the copy has no git remote to derive the code's URL from: it is given (dawnbench/code_url.py)
    code = ["--code-url", "https://example.org/pipeline-test"]
    assert main(["submit", str(series), "--out", str(tree), "--author", "Pipeline Test", *code]) == 0
    (train_json,) = (tree / "FashionMNIST" / "train").glob("*.json")
    seed = json.loads(train_json.read_text())["runs"]["submitted_seed"]
    run_dir = series / f"seed{seed}"
    assert json.loads((run_dir / "result.json").read_text())["tta_seconds"] == pytest.approx(median)

    # The inference too runs from the committed copy: its own verdict is official only then.
    infer_dir = tmp_path / "infer"
    proc = subprocess.run([sys.executable, "-m", "dawnbench", "infer", "scripted-test", "--model", str(run_dir / "model"),
                           "--data", str(fashion_root), "--out", str(infer_dir), "--no-progress", "--warmup", "5",
                           "--instance", "aws:p3.2xlarge"],
                          cwd=project, env={**env, "PYTHONPATH": str(project)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-2] == "official: yes"
    inferred = json.loads((infer_dir / "inference.json").read_text())
    assert inferred["official"] is True and inferred["git"]["commit"] == commit, inferred["unofficial_reasons"]

    assert main(["submit", str(series), "--inference", str(infer_dir), "--out", str(tree),
                 "--author", "Pipeline Test", "--force", *code]) == 0
    written = capsys.readouterr().out
    (train_json,) = (tree / "FashionMNIST" / "train").glob("*.json")
    (infer_json,) = (tree / "FashionMNIST" / "inference").glob("*.json")
    assert str(train_json) in written and train_json.stem.startswith("Pipeline-Test_scripted_")
    assert infer_json.stem == train_json.stem
    entry = json.loads(train_json.read_text())
    assert entry["official"] is True and entry["git_commit"] == commit
    assert entry["version"] == "v1.0" and entry["costPerHour"] == pytest.approx(3.06)
    assert entry["runs"]["n"] == 3 and entry["tta_seconds"] == pytest.approx(median)
    # The TSV is the median run's log as the harness wrote it.
    assert train_json.with_suffix(".tsv").read_text() == (run_dir / "scripted-test.tsv").read_text()
    # The inference entry names its model: the run it came from and each file's sha256.
    infer_entry = json.loads(infer_json.read_text())
    assert (infer_entry["official"], infer_entry["unofficial_reasons"]) == (True, [])
    source = infer_entry["misc"]["model_source"]
    assert source["kind"] == "run" and source["run"]["reference"] == "scripted-test"
    # by name, not by its path on the machine that ran it (an entry is public: harness.paths.public)
    assert source["path"] == "<outside the checkout>/model" and source["files"]

    assert main(["validate", str(tree)]) == 0
    capsys.readouterr()

    assert main(["leaderboard", str(tree), "--format", "json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tasks"]["FashionMNIST"]
    # not reproduced yet: ranked by its claim, in the submitted table, apart from the verified tier
    assert tables["train_time"] == tables["train_cost"] == tables["train_cost_given"] == []
    (claim_row,) = tables["train_submitted"]
    (latency_row,) = tables["inference_latency"]
    hours = float(train_json.with_suffix(".tsv").read_text().splitlines()[3].split("\t")[1])   # epoch 3
    assert claim_row["entry"] == train_json.stem and claim_row["hours"] == pytest.approx(hours)
    assert claim_row["hms"] == entries.hms(hours) and claim_row["time_basis"] == "claimed"
    inference = json.loads((infer_dir / "inference.json").read_text())
    assert latency_row["latency_ms"] == pytest.approx(inference["latency"])

    # The judge runs the entry again (issue 46): the verified tier ranks what it measured, the claim beside it.
    assert main(["reproduce", str(train_json), "--runtime", "native", "--data", str(fashion_root),
                 "--results", str(tmp_path / "judge"), "--tolerance", "1000%"]) == 0
    capsys.readouterr()
    record = json.loads((entries.run_folder(train_json) / "reproduction.json").read_text())
    # an entry of a series is reproduced whole (issue 48): each seed once, the series' rule on the judge's times
    times = [run["figures"]["tta_seconds"] for run in record["reproduced"]]
    assert len(times) == 3 and record["series"]["rule"] == "single"
    judged = statistics.median(times)           # the single rule: the median converged run
    assert main(["leaderboard", str(tree), "--format", "json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tasks"]["FashionMNIST"]
    (train_row,) = tables["train_time"]
    assert tables["train_submitted"] == []
    assert train_row["hours"] == pytest.approx(judged / 3600) and train_row["claimed_hours"] == pytest.approx(hours)
    assert (train_row["time_basis"], train_row["judge_runs"]) == ("judge", 3)
    # a CPU run given a V100 instance's price: not the hardware its harness recorded, so not priced from the
    # table (tests/test_entry_trust.py); its price ranks as the submitter's, at the judge's time
    assert tables["train_cost"] == []
    (cost_row,) = tables["train_cost_given"]
    assert cost_row["cost_usd"] == pytest.approx(judged / 3600 * 3.06)

    site = tmp_path / "site"
    assert main(["leaderboard", str(tree), "--out", str(site)]) == 0
    index = (site / "index.html").read_text()
    assert "Pipeline Test" in index and f"{train_json.stem}.html" in index

    out = tmp_path / "analysis"
    assert main(["analyze", "curves", str(train_json), str(run_dir), "--out", str(out)]) == 0
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG" and (out / "curves.json").is_file()
