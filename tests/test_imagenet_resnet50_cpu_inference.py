"""imagenet-resnet50-cpu-inference: an entry that only infers. Its network has torchvision's
ResNet-50 layout (so published weights load), it takes an imagenet-resnet50-pytorch run's model
(renamed, with its BlurPool and its flip), the harness refuses to train it, and `dawnbench infer`
records where the model came from and runs it on the tiny ImageNet fixture, by default in OpenVINO
int8 calibrated on training images."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess

import numpy as np
import pytest
import torch
from conftest import PYTHON, REPO, cli_env

from harness import registry
from harness.reference import InferenceReference

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

REF = "imagenet-resnet50-cpu-inference"
SMALL = ["--set", "eval_resize=72", "--set", "eval_crop=64"]     # 64 px: the fixture's images, quickly


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def entry():
    return load_file(REPO / "references" / REF / "infer.py", "cpu_inference_entry")


def dawnbench(*args, env=None):
    return subprocess.run([PYTHON, "-m", "dawnbench", *args], cwd=REPO, env=env or cli_env(), capture_output=True,
                          text=True, timeout=900)


def test_the_entry_only_infers_and_a_run_says_so(tmp_path):
    spec = registry.load_spec(REF)
    assert spec.infers_only and (spec.inference_runtime, spec.inference_precision) == ("openvino", "int8")
    assert issubclass(spec.load_entry_class(), InferenceReference)
    proc = dawnbench("run", REF, "--data", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "only infers" in lines[0] and f"dawnbench infer {REF} --model" in lines[0], proc.stderr
    assert not (REPO / "results" / REF).exists() or not any((REPO / "results" / REF).glob("*seed*"))


def test_torchvision_layout_and_parameter_count(entry):
    net = entry.ResNet50()
    state = net.state_dict()
    # torchvision's resnet50(): 320 tensors; 25,557,032 parameters = the ImageNet reference's count
    assert len(state) == 320
    assert sum(p.numel() for p in net.parameters()) == 25_557_032
    shapes = {"conv1.weight": (64, 3, 7, 7), "bn1.running_var": (64,), "layer1.0.downsample.0.weight": (256, 64, 1, 1),
              "layer2.0.conv2.weight": (128, 128, 3, 3), "layer3.5.bn3.num_batches_tracked": (),
              "layer4.2.conv3.weight": (2048, 512, 1, 1), "fc.weight": (1000, 2048), "fc.bias": (1000,)}
    assert {k: tuple(state[k].shape) for k in shapes} == shapes


def test_a_run_of_the_imagenet_reference_loads_renamed_and_computes_the_same(entry):
    """The training reference's ResNet-50 (BlurPool on) renamed into this layout gives the same scores."""
    trained = load_file(REPO / "references" / "imagenet-resnet50-pytorch" / "train.py", "imagenet_train_ref")
    torch.manual_seed(3)
    source = trained.resnet50(1000, True).eval()
    for m in source.modules():      # non-zero statistics and last-bn scales, so the comparison means something
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.data.uniform_(0.5, 1.5)
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    net = entry.ResNet50(1000, blur=True).eval()
    missing, unexpected = net.load_state_dict(entry.from_run_layout(source.state_dict()), strict=True)
    assert not missing and not unexpected
    x = torch.randn(2, 3, 64, 64)
    with torch.inference_mode():
        torch.testing.assert_close(net(x), source(x), rtol=1e-4, atol=1e-4)


def weights_file(entry, path):
    torch.manual_seed(0)
    torch.save(entry.ResNet50().state_dict(), path)
    return path


@pytest.mark.recipe_run
def test_infer_records_the_file_and_the_runtimes_agree(entry, imagenet_root, tmp_path):
    """A weights file through the CLI: the reference's own infer() (torch eager) and ONNX Runtime fp32
    on the exported graph give the same scores; the result names the file and its sha256."""
    model = weights_file(entry, tmp_path / "resnet50-published.pth")
    env = cli_env()
    reports, predictions = {}, {}
    for runtime in ("reference", "onnxruntime"):
        out = tmp_path / runtime
        proc = dawnbench("infer", REF, "--model", str(model), "--data", str(imagenet_root), "--runtime", runtime,
                         "--threads", "1", "--warmup", "1", "--threshold", "0.01", "--out", str(out),
                         "--no-progress", *SMALL, env=env)
        assert proc.returncode in (0, 1) and (out / "inference.json").is_file(), proc.stderr[-3000:]
        reports[runtime] = json.loads((out / "inference.json").read_text())
        predictions[runtime] = np.load(out / "predictions.npy")
    report = reports["onnxruntime"]
    assert report["infers_only"] is True and report["items"] == 12
    assert report["precision"] == {"requested": "fp32", "used": "fp32"}
    source = report["model_source"]
    assert source["kind"] == "file"
    assert source["files"] == {model.name: {"sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
                                            "bytes": model.stat().st_size}}
    np.testing.assert_allclose(predictions["onnxruntime"], predictions["reference"], rtol=1e-3, atol=1e-3)
    assert reports["reference"]["metric_value"] == report["metric_value"]
    # The inference's own verdict, as a run's: who, the code, the data, and why it is not official here
    assert (report["author"], report["model"]) == ("dawnbench", registry.load_spec(REF).model)
    reasons = report["unofficial_reasons"]
    assert report["official"] is False and reasons[0] == "--threshold 0.01 is not the task's 0.93 (a smoke test)"
    assert "the eval set has 12 examples, not the 50000 of the imagenet task (fixture or subset data)" in reasons
    assert any(r.startswith("the imagenet dataset was prepared from unverified files") for r in reasons)
    assert set(report["provenance"]["datasets"]) == {"imagenet", "imagenet (prepared)"} and report["git"]["commit"]
    # No run to give: the entry of an inference-only reference is submitted from its inference alone
    # (and this one is refused: 12 fixture images are not ImageNet's val set)
    entries = tmp_path / "entries"
    proc = dawnbench("submit", "--inference", str(tmp_path / "onnxruntime"), "--out", str(entries),
                     "--allow-unofficial", env=env)
    assert proc.returncode == 2 and not entries.exists(), proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"dawnbench submit: error: {tmp_path / 'onnxruntime' / 'inference.json'}: timed 12 items, not the whole "
        f"eval set of 50000 (rerun `dawnbench infer` on the official data, without --limit)"]


@pytest.mark.recipe_run
def test_default_runtime_is_openvino_int8_calibrated_on_training_images(entry, imagenet_root, tmp_path):
    """No --runtime: the entry's own [inference] runtime and precision. The model here is a run's
    folder (model.pt and config.json of imagenet-resnet50-pytorch, result.json beside it)."""
    trained = load_file(REPO / "references" / "imagenet-resnet50-pytorch" / "train.py", "imagenet_train_ref")
    run_dir = tmp_path / "results" / "imagenet-resnet50-pytorch" / "20261124-000000-seed0"
    (run_dir / "model").mkdir(parents=True)
    torch.manual_seed(1)
    torch.save(trained.resnet50(1000, True).state_dict(), run_dir / "model" / "model.pt")
    (run_dir / "model" / "config.json").write_text(json.dumps({"blur": True, "eval_resize": 72, "eval_crop": 64}))
    (run_dir / "result.json").write_text(json.dumps({"reference": "imagenet-resnet50-pytorch", "status": "converged",
                                                      "metric": "top5", "metric_value": 0.93, "official": False}))
    out = tmp_path / "default"
    proc = dawnbench("infer", REF, "--model", str(run_dir / "model"), "--data", str(imagenet_root), "--threads", "1",
                     "--warmup", "1", "--threshold", "0.01", "--out", str(out), "--no-progress")
    assert proc.returncode in (0, 1) and (out / "inference.json").is_file(), proc.stderr[-3000:]
    report = json.loads((out / "inference.json").read_text())
    assert report["runtime"] == "openvino" and report["precision"]["requested"] == "int8"
    assert report["precision"]["used"].startswith("int8")
    assert report["calibration"]["examples"] == 14        # the fixture's training images: all it has
    assert report["calibration"]["source"].startswith("training set")
    source = report["model_source"]
    assert source["kind"] == "run" and source["run"]["reference"] == "imagenet-resnet50-pytorch"
    assert set(source["files"]) == {"model.pt", "config.json"}
    assert (out / "model.int8.onnx").is_file()


def test_a_model_that_is_not_resnet50_is_one_line(imagenet_root, tmp_path):
    bad = tmp_path / "other.pth"
    torch.save({"weight": torch.zeros(3)}, bad)
    proc = dawnbench("infer", REF, "--model", str(bad), "--data", str(imagenet_root), "--runtime", "reference",
                     "--no-progress", *SMALL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "torchvision's layout" in lines[0] and "Traceback" not in proc.stderr
