"""ImageNet end to end through the `dawnbench` command, as a user goes: the official files (a tiny
fixture in their exact formats) -> `data prepare` -> `data verify` -> `run imagenet-resnet50-pytorch`
-> `verify` the run -> `infer` on its model. The fixture is smaller than the official eval set, and
its files are not the official ones: the run goes, and says it is unofficial and why."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import PYTHON, cli_env
from imagenet_fixture import fixture_manifest, write_imagenet_fixture

from harness import datasets

pytestmark = pytest.mark.recipe_run     # prepare, run, verify and infer on the ImageNet fixture

REF = "imagenet-resnet50-pytorch"
SMALL = ["image_size_start=32", "image_size_end=32", "eval_resize=40", "eval_crop=32", "batch_size=4",
         "eval_batch_size=6", "num_workers=0"]


def dawnbench(*args, env, check=True):
    proc = subprocess.run([PYTHON, "-m", "dawnbench", *args], capture_output=True, text=True, env=env, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imagenet-e2e")
    fixture = write_imagenet_fixture(tmp / "official-files")
    env = cli_env(**{datasets.MANIFEST_ENV: str(fixture_manifest(tmp / "datasets.toml", fixture))})
    return tmp, fixture, env


def test_prepare_verify_run_verify_infer(prepared):
    tmp, fixture, env = prepared
    data, results = tmp / "data", tmp / "results"
    # The fixture's md5s are not the official ones: refused, one line, until --allow-unverified.
    refused = dawnbench("data", "prepare", "imagenet", "--from", str(fixture.folder), "--data", str(data),
                        env=env, check=False)
    assert refused.returncode == 2 and "--allow-unverified" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    dawnbench("data", "prepare", "imagenet", "--from", str(fixture.folder), "--data", str(data),
              "--allow-unverified", env=env)

    checked = dawnbench("data", "verify", "imagenet", "--data", str(data), env=env).stdout
    assert "ok val_labels.txt" in checked and "ok synsets.txt" in checked
    assert f"ok {sum(map(len, fixture.train.values())) + len(fixture.val) + 3} files" in checked
    assert "unofficial: the imagenet dataset was prepared from unverified files" in checked

    run = dawnbench("run", REF, "--data", str(data), "--results", str(results), "--max-epochs", "1",
                    "--threshold", "0.99", "--no-progress", *[a for s in SMALL for a in ("--set", s)],
                    env=env, check=False)
    (run_dir,) = (results / REF).iterdir()
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "DNC" and result["epochs"] == 1, run.stderr[-3000:]
    assert result["dnc_reason"].startswith("budget: max_epochs=1")
    assert result["eval_examples"] == len(fixture.val) and result["usedBlacklist"] is False
    assert result["history"][0]["samples"] == 12            # 14 training images, batches of 4
    reasons = " ".join(result["unofficial_reasons"])
    assert not result["official"] and "prepared from unverified files" in reasons
    assert f"the eval set has {len(fixture.val)} examples, not the 50000" in reasons
    assert result["isolation"]["mode"] != "none" or "not isolated" in reasons

    verified = dawnbench("verify", str(run_dir), "--data", str(data), env=env)
    assert "disagreement" not in verified.stdout and "FAIL" not in verified.stdout

    infer = dawnbench("infer", REF, "--model", str(run_dir / "model"), "--data", str(data), "--warmup", "1",
                      "--out", str(tmp / "infer"), "--no-progress", env=env, check=False)
    report = json.loads((tmp / "infer" / "inference.json").read_text())
    assert report["items"] == len(fixture.val) and report["complete_eval_set"] is False, infer.stderr[-2000:]
    assert report["latency_ms"]["p99"] >= report["latency_ms"]["p50"] > 0
