"""`dawnbench infer --runtime onnxruntime|openvino [--precision bf16|int8] [--threads N]`: the
sandboxed predictor exports the network (ONNX) and the eval inputs, and a harness process that never
imports the reference's code runs the model at batch 1 over every eval example and times each call.

A small Fashion-MNIST CNN (fashion-mnist-cnn-pytorch, widths 8-16-32) is trained in-process on part
of the training set to about 80%, once for the module; every runtime then infers all 10,000 real
test images with it. Tiny CIFAR-10 (the fixture) covers the CIFAR path.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from cheats import entrant_environment, marking
from conftest import PYTHON, REPO, cli_env, role_views

from common.loaders import load_cifar10
from harness import eval_labels, inference, registry
from harness.reference import Context

pytestmark = pytest.mark.recipe_run     # a small CNN trained here, exported and run in each runtime

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

REF = "fashion-mnist-cnn-pytorch"
SMALL = {"widths": [8, 16, 32], "batch_size": 128, "epochs": 1}
THRESHOLD = 0.70            # what the small model reaches comfortably (it gets about 80%)
THREADS = 1                 # a shared CI CPU: one thread per runtime keeps the timings steady


@pytest.fixture(scope="module")
def fashion(fashion_root, tmp_path_factory):
    """{"model": a trained model folder, "config": its hyperparameters, "reference": predict()'s
    scores of the 10,000 test images by the reference's own code, "views": the role views}."""
    tmp = tmp_path_factory.mktemp("fashion-model")
    spec = registry.load_spec(REF)
    config = dict(spec.hyperparameters, **SMALL)
    views = role_views("fashion-mnist", fashion_root, tmp)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cls = spec.load_entry_class()
        trainer = cls()
        trainer.setup(Context(config=config, data_root=views["train"], seed=0, task=spec.task, work_dir=tmp,
                              show_progress=False, role="train"))
        trainer.train_x, trainer.train_y = trainer.train_x[:10240], trainer.train_y[:10240]
        trainer.steps_per_epoch = 80
        trainer.train_epoch(1)
        trainer.save(tmp / "model")
        predictor = cls()
        predictor.setup(Context(config=config, data_root=views["predict"], seed=0, task=spec.task, work_dir=tmp,
                                show_progress=False, role="predict"))
        predictor.load(tmp / "model")
        scores = predictor.predict()
    finally:
        torch.set_num_threads(threads)
    return {"spec": spec, "model": tmp / "model", "config": config, "reference": scores, "root": fashion_root,
            "labels": eval_labels.load_eval_labels("fashion-mnist", fashion_root)}


@pytest.fixture(scope="module")
def infer_fashion(fashion, tmp_path_factory):
    """Run (and remember) one `dawnbench infer` of the small model: (report, predictions)."""
    done = {}

    def run(runtime: str, precision: str = "fp32", spec=None, tag: str = "", limit=None) -> tuple[dict, np.ndarray]:
        key = (runtime, precision, tag)
        if key not in done:
            out = tmp_path_factory.mktemp(f"infer-{runtime}-{precision}{tag}")
            report = inference.infer(spec or fashion["spec"], fashion["model"], fashion["config"],
                                     data_root=fashion["root"], warmup=5, out_dir=out, progress=False, limit=limit,
                                     threshold=THRESHOLD, runtime=runtime, precision=precision, threads=THREADS)
            done[key] = report, np.load(out / "predictions.npy")
        return done[key]
    return run


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float((a.argmax(1) == b.argmax(1)).mean())


REFERENCE_ITEMS = 1000     # the reference runtime's round trips are slow: its first 1,000 images


def test_reference_runtime_is_predict(fashion, infer_fashion):
    """The reference runtime (the reference's own infer(), one round trip per image) gives predict()'s
    scores; the exported runtimes are compared with predict() on all 10,000 images below."""
    report, predictions = infer_fashion("reference", limit=REFERENCE_ITEMS)
    assert report["runtime"] == "reference" and report["threads"] == THREADS
    assert report["items"] == REFERENCE_ITEMS and not report["complete_eval_set"]
    np.testing.assert_allclose(predictions, fashion["reference"][:REFERENCE_ITEMS], rtol=1e-4, atol=1e-4)
    assert report["round_trip_overhead_ms"] > 0 and report["precision"]["requested"] == "fp32"


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_fp32_runtimes_give_the_reference_runtimes_predictions(runtime, fashion, infer_fashion):
    """The exported network (flip test-time augmentation included) predicts as the reference's own
    infer(): the same top-1 class for all but at most a few of the 10,000 images. Not bit-exact:
    the runtimes fuse and order float32 sums differently, so an image whose top two scores tie to
    ~1e-6 may flip."""
    ref_predictions = fashion["reference"]       # predict(): what the reference runtime gives (test above)
    reference_top1 = float((ref_predictions.argmax(1) == fashion["labels"]).mean())
    report, predictions = infer_fashion(runtime)
    assert predictions.shape == (10_000, 10) and report["items"] == 10_000 and report["complete_eval_set"]
    np.testing.assert_allclose(predictions, ref_predictions, rtol=1e-3, atol=1e-3)
    assert _agreement(predictions, ref_predictions) >= 0.999
    assert abs(report["top1"] - reference_top1) <= 0.001
    # the accuracy is that of exactly the predictions the runtime process returned
    assert report["top1"] == float((predictions.argmax(1) == fashion["labels"]).mean())
    assert report["runtime"] == runtime and report["precision"] == {"requested": "fp32", "used": "fp32"}
    assert report["threads"] == THREADS and report["reached_threshold"] is True
    assert report["round_trip_overhead_ms"] is None and "runtime process" in report["timer"]
    lat = report["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    exported = report["exported_model"]
    assert exported["opset"] == 17 and re.fullmatch(r"[0-9a-f]{64}", exported["sha256"])
    out = Path(report["out_dir"])
    import hashlib
    assert hashlib.sha256((out / "model.onnx").read_bytes()).hexdigest() == exported["sha256"]
    saved = json.loads((out / "inference.json").read_text())
    assert saved["runtime_version"] == report["runtime_version"] and saved["runtime"] == runtime
    if runtime == "onnxruntime":
        import onnxruntime
        assert report["runtime_version"] == onnxruntime.__version__
        assert report["runtime_settings"]["intra_op_num_threads"] == THREADS
        assert report["runtime_settings"]["inter_op_num_threads"] == 1
    else:
        settings = report["runtime_settings"]
        assert settings["inference_num_threads"] == THREADS and settings["performance_hint"] == "LATENCY"
        assert settings["inference_precision_hint"] == "f32" and settings["inference_precision"] == "f32"


def test_openvino_bf16_reports_the_precision_it_used(fashion, infer_fashion):
    """bf16 is a hint: OpenVINO runs bf16 where the CPU has it and f32 elsewhere. The report says
    what the compiled model says it runs."""
    import openvino as ov
    report, predictions = infer_fashion("openvino", "bf16")
    compiled = ov.Core().compile_model(str(Path(report["out_dir"]) / "model.onnx"), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": THREADS,
                                        "PERFORMANCE_HINT": "LATENCY"})
    actual = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    assert report["runtime_settings"]["inference_precision"] == actual
    assert report["precision"] == {"requested": "bf16", "used": {"bf16": "bf16", "f32": "fp32"}[actual]}
    fp32, _ = infer_fashion("openvino")
    # bf16 keeps 8 bits of mantissa: the accuracy moves a little, if at all
    assert abs(report["top1"] - fp32["top1"]) <= 0.02 and report["reached_threshold"] is True
    if actual == "f32":
        assert _agreement(predictions, infer_fashion("openvino")[1]) >= 0.999


# A fork of the default whose code checks what its workers see, and tries to stop the clock.
PROBE = '''

import time as _time


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


class Probed(FashionCNN):
    """Calibration must come from a worker that sees the training files and no eval file; export
    must come from one that sees the eval images. Both try to stop the harness's clock."""

    def calibration_inputs(self, n):
        seen = _files(self.ctx.data_root)
        if any("t10k" in name for name in seen) or not any("train-images" in name for name in seen):
            raise RuntimeError(f"the calibration worker sees {seen}")
        for path in self.ctx.config["probe_paths"]:          # the real eval files, outside its view
            try:
                open(path, "rb").close()
            except OSError:
                continue
            raise RuntimeError(f"the calibration worker opened {path}")
        _time.perf_counter = lambda: 0.0
        return super().calibration_inputs(n)

    def export_onnx(self, path):
        _time.perf_counter = lambda: 0.0        # a clock that never moves: every latency would be 0
        _time.monotonic = lambda: 0.0
        super().export_onnx(path)

    def export_inputs(self, start=0, stop=None):
        seen = _files(self.ctx.data_root)
        if not any("t10k-images" in name for name in seen) or any("train" in name for name in seen):
            raise RuntimeError(f"the predictor sees {seen}")
        return super().export_inputs(start, stop)
'''


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    root = tmp_path_factory.mktemp("references")
    fork = root / "fashion-mnist-probed-pytorch"
    shutil.copytree(REPO / "references" / REF, fork, ignore=shutil.ignore_patterns("__pycache__"))
    (fork / "train.py").write_text((fork / "train.py").read_text() + PROBE)
    toml = (fork / "reference.toml").read_text().replace('entry = "train:FashionCNN"', 'entry = "train:Probed"')
    (fork / "reference.toml").write_text(toml.replace("[hyperparameters]", "[hyperparameters]\nprobe_paths = []"))
    return registry.load_spec(fork.name, root)


def test_int8_is_calibrated_on_training_images_only_and_keeps_the_accuracy(fashion, infer_fashion, probed):
    """onnxruntime int8 (static QDQ, per-channel): the calibration examples come from a trainer-role
    worker (its view: the training files, no eval file: the fork's calibration_inputs raises
    otherwise), and the quantized model stays within two points of fp32, over the threshold."""
    eval_files = [str(fashion["root"] / "fashion-mnist" / name) for name in
                  ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")]
    assert all(Path(p).exists() for p in eval_files)
    fashion["config"]["probe_paths"] = eval_files
    try:
        report, predictions = infer_fashion("onnxruntime", "int8", spec=probed, tag="-probed")
    finally:
        fashion["config"].pop("probe_paths")
    fp32, _ = infer_fashion("onnxruntime")
    assert report["precision"] == {"requested": "int8", "used": "int8"}
    assert abs(report["top1"] - fp32["top1"]) <= 0.02 and report["reached_threshold"] is True
    calibration = report["calibration"]
    assert calibration["examples"] == 256 and "training" in calibration["source"]
    assert re.fullmatch(r"[0-9a-f]{64}", calibration["sha256"])
    assert report["runtime_settings"]["quantization"]["format"] == "QDQ"
    assert report["runtime_settings"]["quantization"]["per_channel"] is True
    out = Path(report["out_dir"])
    import hashlib
    assert hashlib.sha256((out / "model.int8.onnx").read_bytes()).hexdigest() == report["quantized_model_sha256"]
    # The fork stopped the clock in its own processes; the latencies were timed elsewhere.
    lat = report["latency_ms"]
    assert lat["min"] > 0 and lat["mean"] > 0


def test_the_runtime_process_imports_no_reference_code(fashion, probed, tmp_path):
    """The timing process runs the harness's code alone: a fork that replaces time.perf_counter in its
    export hooks (see PROBE) leaves every latency where it was, and the process never imports train.py."""
    report = inference.infer(probed, fashion["model"], dict(fashion["config"], probe_paths=[]),
                             data_root=fashion["root"], warmup=0, limit=200, out_dir=tmp_path / "out",
                             progress=False, threshold=THRESHOLD, runtime="openvino", threads=THREADS)
    assert report["items"] == 200 and not report["complete_eval_set"]
    assert report["latency_ms"]["min"] > 0
    source = (REPO / "harness" / "inference_engines.py").read_text()
    imported = set(re.findall(r"^\s*(?:from|import) (\S+)", source, flags=re.M))
    assert imported <= {"__future__", "hashlib", "importlib.util", "json", "os", "sys", "time", "pathlib", "typing", "numpy",
                        "harness", "harness.errors", "logging", "onnx", "onnxruntime", "onnxruntime.quantization",
                        "openvino"}, imported


def test_the_timing_process_never_imports_the_reference_environments_runtime(fashion, tmp_path, monkeypatch):
    """Issue 46, attack 3: the entrant's requirements install an `onnxruntime` of their own build in the
    reference's environment (here one that marks every process importing it). The timing process ran that
    environment's interpreter with its site-packages on the path, and imported it (0.070 ms against the honest
    0.945 ms, ranked #1). It is a judge process of the harness's own environment now: the runtime timed is the
    judge's pinned one, and the entrant's is imported by no process outside the sandbox."""
    import onnxruntime
    marker = tmp_path / "marks.txt"
    fake = marking(marker, "entrant-onnxruntime") + "__version__ = '9.9.9'\nraise ImportError('the entrant build')\n"
    root = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="dawnbench-test-env-"))     # in the workers' view
    python = entrant_environment(root, {"onnxruntime/__init__.py": fake}, ("numpy", "torch", "onnx"))
    monkeypatch.setenv("DAWNBENCH_WORKER_PYTHON", str(python))       # the workers run the reference's environment
    report = inference.infer(fashion["spec"], fashion["model"], fashion["config"], data_root=fashion["root"],
                             warmup=0, limit=100, out_dir=tmp_path / "out", progress=False, threshold=THRESHOLD,
                             runtime="onnxruntime", threads=THREADS)
    assert report["runtime_version"] == onnxruntime.__version__ and report["items"] == 100
    marks = marker.read_text().splitlines() if marker.exists() else []
    shutil.rmtree(root, ignore_errors=True)
    assert not [m for m in marks if "inference_engines" in m or "judge.py" in m], marks


def test_cifar10_fixture_through_onnxruntime(cifar10_root, cifar10_views, tmp_path):
    """cifar10-resnet20-pytorch on the tiny CIFAR-10 (50 test images), one epoch, exported and run by
    onnxruntime at a lowered threshold: its predictions are the reference's own."""
    spec = registry.load_spec("cifar10-resnet20-pytorch")
    config = dict(spec.hyperparameters, batch_size=16)
    cls = spec.load_entry_class()
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer = cls()
        trainer.setup(Context(config=config, data_root=cifar10_views["train"], seed=0, task=spec.task,
                              work_dir=tmp_path, show_progress=False, role="train"))
        trainer.train_epoch(1)
        trainer.save(tmp_path / "model")
        predictor = cls()
        predictor.setup(Context(config=config, data_root=cifar10_views["predict"], seed=0, task=spec.task,
                                work_dir=tmp_path, show_progress=False, role="predict"))
        predictor.load(tmp_path / "model")
        scores = predictor.predict()
        # int8 calibration examples are the training images prepared as the eval images: the
        # training padding cut off, unaugmented, normalized (the fixture has 100: all of them)
        calibration = trainer.calibration_inputs(256)
    finally:
        torch.set_num_threads(threads)
    train_module = sys.modules[cls.__module__]
    images, _ = load_cifar10(cifar10_views["train"], "train")
    expected = train_module.normalize(torch.from_numpy(images).permute(0, 3, 1, 2)).contiguous().numpy()
    np.testing.assert_array_equal(calibration, expected)
    report = inference.infer(spec, tmp_path / "model", config, data_root=cifar10_root, warmup=2,
                             out_dir=tmp_path / "infer", progress=False, threshold=0.01,
                             runtime="onnxruntime", threads=THREADS)
    predictions = np.load(tmp_path / "infer" / "predictions.npy")
    np.testing.assert_allclose(predictions, scores, rtol=1e-3, atol=1e-3)
    assert report["items"] == 50 and report["reached_threshold"] is True
    labels = eval_labels.load_eval_labels("cifar10", cifar10_root)
    assert report["top1"] == float((scores.argmax(1) == labels).mean())


# ------------------------------------------------------------------------------ user mistakes

def _dawnbench(*args, env=None):
    return subprocess.run([PYTHON, "-m", "dawnbench", *args], capture_output=True, text=True,
                          env=env or cli_env(), cwd=REPO, timeout=300)


@pytest.mark.parametrize("options, message", [
    (["--runtime", "tensorrt"], "--runtime 'tensorrt': expected one of reference, torch, onnxruntime, openvino"),
    (["--runtime", "onnxruntime", "--precision", "bf16"], "ONNX Runtime has no bf16 path on CPUs"),
    (["--runtime", "openvino", "--precision", "fp16"], "--precision 'fp16': expected one of fp32, bf16, int8"),
    (["--precision", "int8"], "--precision int8 is not supported by --runtime reference"),
    (["--runtime", "openvino", "--threads", "0"], "--threads 0: give a whole number from 1 to 4,096"),
])
def test_bad_options_are_one_line(options, message, fashion, tmp_path):
    proc = _dawnbench("infer", REF, "--model", str(fashion["model"]), "--data", str(fashion["root"]),
                      "--out", str(tmp_path / "out"), *options)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_reference_without_export_is_one_line(references_root, tmp_path):
    """The scripted test reference (numpy, no export hooks): --runtime torch is for PyTorch
    references; onnxruntime needs export_onnx(), which it lacks."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.txt").write_text("3")
    env = cli_env(DAWNBENCH_REFERENCES=str(references_root))
    proc = _dawnbench("infer", "scripted-test", "--model", str(model), "--runtime", "torch", env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--runtime torch runs a PyTorch reference's own infer()" in proc.stderr
    proc = _dawnbench("infer", "scripted-test", "--model", str(model), "--runtime", "onnxruntime",
                      "--out", str(tmp_path / "out"), env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Scripted has no export_onnx(): it runs only with --runtime reference" in proc.stderr


def test_a_scalar_scale_stays_float_and_openvino_runs_the_int8_model(tmp_path):
    """cifar10-fast scales its logits by a constant (and GELU divides and adds constants): with
    those quantized, OpenVINO 2026.4's low-precision pass fails ("index '0' out of range"). They
    stay float; the int8 model compiles and agrees with ONNX Runtime's."""
    from harness import inference_engines

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            x = torch.nn.functional.gelu(self.conv(x)).amax((2, 3))
            return self.fc(x) * 0.125

    torch.manual_seed(0)
    model, quantized = tmp_path / "scaled.onnx", tmp_path / "scaled.int8.onnx"
    x = torch.randn(1, 3, 8, 8)
    torch.onnx.export(Scaled().eval(), (x,), str(model), dynamo=False, opset_version=inference_engines.OPSET,
                      input_names=["input"], output_names=["scores"], dynamic_axes={"input": {0: "b"}, "scores": {0: "b"}})
    calibration = np.random.default_rng(0).standard_normal((16, 3, 8, 8)).astype(np.float32)
    facts = inference_engines.quantize(model, calibration, quantized)
    assert "/Mul_2" in facts["not_quantized"], facts["not_quantized"]     # the logit scale
    openvino_call, _ = inference_engines.openvino_model(quantized, 1, "int8")
    onnxruntime_call, _ = inference_engines.onnxruntime_session(quantized, 1)
    np.testing.assert_allclose(openvino_call(x.numpy()), onnxruntime_call(x.numpy()), rtol=0.05, atol=0.02)


class SlicingWorker:
    """A predictor as the harness sees it: export_inputs(start, stop) answers with that slice."""

    def __init__(self, inputs, bad_at=None, bad=None):
        self.inputs, self.calls, self.bad_at, self.bad = inputs, [], bad_at, bad

    def call(self, op, **fields):
        assert op == "export_inputs"
        self.calls.append((fields["start"], fields["stop"]))
        if fields["start"] == self.bad_at:
            return {}, self.bad
        return {}, self.inputs[fields["start"]:fields["stop"]]


def test_eval_inputs_come_a_slice_at_a_time_into_a_memory_mapped_file(tmp_path, monkeypatch):
    """ImageNet's export inputs are 7.5 GB: the harness asks for slices of about
    EXPORT_SLICE_BYTES and writes each into the .npy the runtime memory-maps, never the whole set."""
    spec = registry.load_spec(REF)
    inputs = np.arange(1000 * 3 * 4, dtype=np.uint8).reshape(1000, 3, 4)      # 12 bytes an example
    monkeypatch.setattr(inference, "EXPORT_SLICE_BYTES", 12 * 100)
    worker = SlicingWorker(inputs)
    inference._export_inputs(worker, spec, 950, tmp_path / "inputs.npy")
    assert worker.calls == [(0, 16)] + [(s, min(950, s + 100)) for s in range(16, 950, 100)]
    stored = np.load(tmp_path / "inputs.npy", mmap_mode="r")
    assert stored.dtype == np.uint8 and stored.shape == (950, 3, 4)
    np.testing.assert_array_equal(stored, inputs[:950])
    # A slice of the wrong length or of another shape than the first is one line, naming the call
    short = SlicingWorker(inputs, bad_at=116, bad=inputs[:3])
    with pytest.raises(inference.RuntimeFailed, match=r"^export_inputs\(116, 216\) gave 3 examples, not 100$"):
        inference._export_inputs(short, spec, 950, tmp_path / "short.npy")
    other = SlicingWorker(inputs, bad_at=16, bad=np.zeros((100, 4, 3), np.uint8))
    with pytest.raises(inference.RuntimeFailed, match=r"gave uint8 \(4, 3\) examples, but the first slice was uint8 \(3, 4\)"):
        inference._export_inputs(other, spec, 950, tmp_path / "other.npy")
