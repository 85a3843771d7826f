"""`dawnbench analyze roofline`: FLOPs counted (checked against counts made by hand), the peaks
table, and the figures of a real harnessed Fashion-MNIST run recomputed from its own files."""
from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dawnbench import roofline
from dawnbench.cli import main
from harness import environment, flop_count, model_flops, registry

REPO = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"


def macs_by_hand(widths: list[int]) -> tuple[int, int]:
    """The Fashion-MNIST CNN (references/fashion-mnist-cnn-pytorch/train.py): 3x3 convolutions at
    28x28, 14x14 and 7x7 (each pools after), then Linear(w3 x 7 x 7, 10). Returns (forward MACs,
    backward MACs): the backward computes every weight gradient, and every input gradient but the
    first convolution's (the images need none)."""
    w1, w2, w3 = widths
    conv1, conv2, conv3 = 28 * 28 * w1 * 9 * 1, 14 * 14 * w2 * 9 * w1, 7 * 7 * w3 * 9 * w2
    linear = w3 * 7 * 7 * 10
    forward = conv1 + conv2 + conv3 + linear
    return forward, forward + (conv2 + conv3 + linear)


class TinyRef:
    """A reference as the predictor holds it, for harness.flop_count: the network and its inputs."""

    def __init__(self, net, inputs):
        self.net, self.inputs = net, inputs

    def evaluated(self):
        return self.net

    def export_inputs(self, start, stop):
        return self.inputs[start:stop]


# Conv2d(3 -> 8, 3x3, no bias) on 8x8, then Linear(8 x 8 x 8 -> 10, no bias), counted by hand:
CONV_MACS = 8 * 8 * 8 * (3 * 3 * 3)       # each output element: 3 x 3 x 3 multiply-adds
LINEAR_MACS = 8 * 8 * 8 * 10
# forward: both; backward: both weight gradients, and the linear layer's input gradient only
TINY_TRAIN_FLOPS = 2 * (CONV_MACS + LINEAR_MACS + CONV_MACS + LINEAR_MACS + LINEAR_MACS)


def test_pytorch_count_of_a_linear_and_a_conv_layer_is_the_hand_count():
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 8 * 8, 10, bias=False))
    inputs = np.random.default_rng(0).standard_normal((5, 3, 8, 8)).astype(np.float32)
    counted = flop_count.count("pytorch", TinyRef(net, inputs))
    assert TINY_TRAIN_FLOPS == 86_016
    assert counted["flops_per_example"] == TINY_TRAIN_FLOPS
    assert counted["examples"] == 2 and counted["input_shape"] == [3, 8, 8]
    assert counted["parameter_bytes"] == 4 * (8 * 3 * 3 * 3 + 512 * 10)
    assert "FlopCounterMode" in counted["counter"]
    assert all(p.grad is None for p in net.parameters())        # the count leaves no gradient behind


@pytest.mark.parametrize("batch_norm", [False, True], ids=["frozen", "assigns-variables"])
def test_tensorflow_count_of_a_linear_and_a_conv_layer_is_the_hand_count(batch_norm):
    """With batch norm the training step assigns its moving averages, so its graph cannot be frozen:
    the count reads the step's own graph, where the first convolution's unused input gradient stays
    (the gradient function makes both) and must not be counted."""
    tf = pytest.importorskip("tensorflow")
    norm = [tf.keras.layers.BatchNormalization()] if batch_norm else []
    model = tf.keras.Sequential([tf.keras.Input((8, 8, 3)), tf.keras.layers.Conv2D(8, 3, padding="same", use_bias=False),
                                 *norm, tf.keras.layers.Flatten(), tf.keras.layers.Dense(10, use_bias=False)])
    inputs = np.random.default_rng(0).standard_normal((5, 8, 8, 3)).astype(np.float32)
    counted = flop_count.count("tensorflow", TinyRef(model, inputs))
    assert counted["flops_per_example"] == TINY_TRAIN_FLOPS
    assert set(counted["by_op"]) >= {"Conv2D", "Conv2DBackpropFilter", "MatMul"}
    assert "profiler" in counted["counter"]


def test_mxnet_is_not_counted_rather_than_guessed(tmp_path):
    spec = registry.load_spec("imagenet-resnet152-mxnet", REPO / "references")
    answer = model_flops.count(spec, {}, tmp_path / "model", tmp_path)
    assert set(answer) == {"not_counted"} and "mxnet" in answer["not_counted"]
    with pytest.raises(flop_count.NotCounted, match="mxnet"):
        flop_count.count("mxnet", TinyRef(None, np.zeros((2, 1))))


def test_the_count_agrees_with_make_bench_gpu_on_resnet50():
    """bench/gpu.py's MFU counts ResNet-50's training FLOPs its own way (FlopCounterMode around a
    cross-entropy step at batch 2); the harness's count of the same network at the same size agrees."""
    torch = pytest.importorskip("torch")
    from bench import gpu
    px = 64       # the count scales with the pixels; small, to keep the test quick
    bench_flops = gpu.training_flops_per_image(SimpleNamespace(torch=torch), px)
    net = gpu.load_resnet50()(num_classes=1000)
    inputs = np.random.default_rng(0).standard_normal((2, 3, px, px)).astype(np.float32)
    ours = flop_count.count("pytorch", TinyRef(net, inputs))["flops_per_example"]
    assert ours == pytest.approx(bench_flops, rel=1e-9)
    # and both are about 3 forwards of ResNet-50's published 4.1 GMAC at 224 px, scaled to 64 px
    assert ours == pytest.approx(3 * 2 * 4.1e9 * (px / 224) ** 2, rel=0.08)


@pytest.mark.parametrize("name, row", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H200", "NVIDIA H200"), ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"), ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB"),
    ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2"), ("Tesla V100-PCIE-32GB", "NVIDIA V100 PCIe"),
    ("Tesla T4", "NVIDIA T4"), ("NVIDIA L4", "NVIDIA L4"), ("TPU v3-8", "Google TPU v3 (per chip)"),
    ("NVIDIA L40S", None), ("NVIDIA GeForce RTX 4090", None)])
def test_peaks_table_matches_device_names(name, row):
    found = roofline.find_peak(name)
    assert (found["name"] if found else None) == row


def test_peaks_table_rows_have_sources_and_known_precisions():
    rows = roofline.load_peaks()
    assert len(rows) >= 14
    for row in rows:
        assert row["source"].startswith("https://"), row["name"]
        assert set(row["tflops"]) <= set(roofline.PRECISIONS) and row["tflops"], row["name"]
        assert row["memory_gbps"] > 0
    h100 = roofline.find_peak("NVIDIA H100 80GB HBM3")
    assert h100["tflops"]["bf16"] == 989.5 and h100["tflops"]["fp32"] == 67.0


def gpu_run(tmp_path: Path, gpus: list[str], hyperparameters: dict, **result) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({
        "reference": "imagenet-resnet50-pytorch", "task": "imagenet", "status": "converged", "epochs": 2,
        "train_seconds": 100.0, "nodes": 1, "hyperparameters": hyperparameters,
        "history": [{"epoch": 1, "samples": 1000.0}, {"epoch": 2, "samples": 1000.0}], **result}))
    (run / "env.json").write_text(json.dumps({"hostname": "elsewhere", "gpus": [{"name": n} for n in gpus],
                                              "cpu": {"model": "x"}}))
    (run / "events.jsonl").write_text(':::MLLOG {"key": "dawnbench_train_examples", "value": 1000}\n')
    return run


def test_gpu_run_figures_from_the_table(tmp_path):
    run = gpu_run(tmp_path, ["NVIDIA H100 80GB HBM3"] * 8, {"bf16": "auto", "batch_size": 100},
                  energy={"joules": 4000.0, "method": "nvml"})
    counted = {"flops_per_example": 1e12, "parameter_bytes": 4_000_000, "activation_bytes_per_example": 1e6}
    numbers = roofline.run_numbers(run, counted=counted, cpu_peak=lambda: pytest.fail("a GPU run measures no CPU"))
    assert numbers["device"] == {"kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "count": 8,
                                 "source": "env.json gpus (every GPU listed) x nodes"}
    assert numbers["precision"]["value"] == "bf16"                  # "auto" on a GPU
    assert numbers["train_examples"]["total"] == 2000               # the harness's 1000 x 2 epochs
    assert numbers["achieved_flops_per_s"] == pytest.approx(1e12 * 2000 / 100.0)
    assert numbers["peak"]["flops_per_s"] == pytest.approx(8 * 989.5e12)
    assert numbers["mfu"] == pytest.approx(2e13 / (8 * 989.5e12))
    moved = 2 * 1e6 + 3 * 4_000_000 / 100
    assert numbers["bytes_per_example"]["bytes"] == pytest.approx(moved) and numbers["bytes_per_example"]["estimate"]
    assert numbers["operational_intensity"] == pytest.approx(1e12 / moved)
    assert numbers["joules_per_example"] == pytest.approx(2.0) and numbers["ranked"] is False
    assert "warning" not in numbers
    over = roofline.run_numbers(run, counted={**counted, "flops_per_example": 1e16})      # 2e17 FLOP/s achieved
    assert over["mfu"] == pytest.approx(2e17 / (8 * 989.5e12)) and "lower bound" in over["warning"]
    # fp32 forced: the table's fp32 peak; a V100 has no bf16 peak: no MFU, and why
    assert roofline.run_numbers(run, counted=counted, precision="fp32")["peak"]["flops_per_s"] == pytest.approx(8 * 67e12)
    v100 = gpu_run(tmp_path / "v", ["Tesla V100-SXM2-16GB"], {"bf16": "true"})
    numbers = roofline.run_numbers(v100, counted=counted)
    assert numbers["mfu"] is None and "no bf16 peak" in numbers["peak"]["why_none"]


def test_a_cpu_run_from_another_machine_gets_no_peak(tmp_path):
    run = gpu_run(tmp_path, [], {})
    numbers = roofline.run_numbers(run, counted={"flops_per_example": 10.0},
                                   cpu_peak=lambda: pytest.fail("not this machine's CPU: nothing to measure"))
    assert numbers["device"]["kind"] == "cpu" and numbers["peak"]["flops_per_s"] is None
    assert "not this machine's" in numbers["peak"]["why_none"] and numbers["mfu"] is None


@pytest.mark.parametrize("cpu_bf16, want", [(True, "bf16"), (False, "fp32"), (None, "fp32")])
def test_bf16_native_on_a_cpu_is_read_from_the_flags_the_harness_recorded(tmp_path, cpu_bf16, want):
    """The default's bf16 = "native" trains in bf16 only where the CPU multiplies it in hardware: the
    precision comes from env.json's cpu.bf16 (the harness's reading of /proc/cpuinfo), not assumed."""
    run = gpu_run(tmp_path, [], {"bf16": "native"})
    env = json.loads((run / "env.json").read_text())
    (run / "env.json").write_text(json.dumps({**env, "cpu": {"model": "x", "bf16": cpu_bf16}}))
    numbers = roofline.run_numbers(run, counted={"flops_per_example": 10.0}, cpu_peak=lambda: pytest.fail("elsewhere"))
    assert numbers["precision"]["value"] == want and "native" in numbers["precision"]["source"]
    on_gpu = roofline.run_numbers(gpu_run(tmp_path / "g", ["NVIDIA H100 80GB HBM3"], {"bf16": "native"}),
                                  counted={"flops_per_example": 10.0})
    assert on_gpu["precision"]["value"] == "bf16"


def test_cpu_matmul_peak_is_measured():
    measured = roofline.measure_cpu_matmul(n=256, repeats=2)
    assert 1e8 < measured["flops_per_s"] < 1e14 and "fp32 256x256, best of 2" in measured["method"]


def test_roofline_of_a_real_run(default_run, fashion_root, tmp_path, capsys):
    """The harnessed Fashion-MNIST run: the predictor's count on its stored model is the hand count,
    and every figure follows from the run's own files."""
    run = tmp_path / "run"
    shutil.copytree(default_run, run)
    out = tmp_path / "out"
    code = main(["analyze", "roofline", str(run), "--out", str(out), "--data", str(fashion_root),
                 "--references", str(REPO / "references")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert printed.out.split() == [str(out / "roofline.png"), str(out / "roofline.json")]
    assert (out / "roofline.png").read_bytes()[:8] == PNG
    (item,) = json.loads((out / "roofline.json").read_text())["inputs"]
    result = json.loads((run / "result.json").read_text())
    forward, backward = macs_by_hand(result["hyperparameters"]["widths"])
    assert item["flops"]["flops_per_example"] == 2 * (forward + backward)
    assert item["flops"]["by_op"]["aten.convolution"] + item["flops"]["by_op"]["aten.addmm"] == 2 * forward
    assert item["train_examples"]["total"] == 60_000 * result["epochs"]
    assert item["train_seconds"] == result["train_seconds"]
    achieved = 2 * (forward + backward) * 60_000 * result["epochs"] / result["train_seconds"]
    assert item["achieved_flops_per_s"] == pytest.approx(achieved)
    assert item["device"]["kind"] == "cpu" and item["peak"]["source"].startswith("measured")
    assert item["device"]["name"] == environment._cpu_model() and item["device"]["host"] == platform.node()
    assert item["mfu"] == pytest.approx(achieved / item["peak"]["flops_per_s"])
    assert 0 < item["mfu"] < 1.5      # a busy machine's best matmul can undershoot; never by much
    assert item["operational_intensity"] == pytest.approx(item["flops"]["flops_per_example"]
                                                          / item["bytes_per_example"]["bytes"])


def test_a_folder_without_result_json_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = main(["analyze", "roofline", str(tmp_path / "empty"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "no result.json" in err[0]
    assert not (tmp_path / "out").exists()


def test_the_entry_page_shows_utilization_and_energy(tmp_path, capsys):
    pytest.importorskip("jinja2", reason="the site needs jinja2; `make test` runs this with it")
    from leaderboard_fixture import write_entries

    from dawnbench import entries, site
    tree = write_entries(tmp_path / "entries")
    path = next(p for p in sorted(tree.rglob("train/*.json")))
    entry = entries.load(path)
    page = site.entry_page(entry, [], None, None)
    assert "Utilization" not in page and "Energy" not in page        # no run folder: no rows
    folder = entries.run_folder(path)
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps({"energy": {
        "available": True, "joules": 7200.0, "method": "nvml", "how": "NVML, read by the harness", "train_spans": 3,
        "devices": [], "ranked": False}}))
    numbers = {"analysis": "roofline", "inputs": [{
        "source": str(folder), "achieved_flops_per_s": 2.5e14, "mfu": 0.25,
        "peak": {"flops_per_s": 1e15, "method": "data sheet, dense bf16, x 1 devices"},
        "flops": {"flops_per_example": 2.4e10, "counter": "torch.utils.flop_counter.FlopCounterMode"}}]}
    page = site.entry_page(entry, [], None, None, utilization=site.utilization_lines(numbers))
    assert ("<tr><th>Utilization</th><td>MFU 25.00%: 250 of 1e+03 TFLOP/s (data sheet, dense bf16, x 1 devices); "
            "24 GFLOP per training example, counted by torch.utils.flop_counter.FlopCounterMode") in page
    assert ("<tr><th>Energy</th><td>7,200.0 J (0.002 kWh) over 3 train spans: NVML, read by the harness "
            "(informative, never ranked)</td></tr>") in page
    (folder / "result.json").write_text(json.dumps({"energy": {"available": False, "reason": "NVML: no GPU; RAPL: none",
                                                               "ranked": False}}))
    page = site.entry_page(entry, [], None, None)
    assert "<tr><th>Energy</th><td>not available: NVML: no GPU; RAPL: none</td></tr>" in page
    assert "<tr><th>Utilization</th><td>not analysed (dawnbench analyze roofline" in page
    # the leaderboard takes the analysis with --roofline; anything else is one line
    (tmp_path / "other.json").write_text(json.dumps({"analysis": "curves"}))
    code = main(["leaderboard", str(tree), "--out", str(tmp_path / "site"), "--roofline", str(tmp_path / "other.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "not a roofline analysis" in err[0]
    (tmp_path / "roofline.json").write_text(json.dumps(numbers))
    assert main(["leaderboard", str(tree), "--out", str(tmp_path / "site"), "--roofline", str(tmp_path / "roofline.json")]) == 0


@pytest.mark.parametrize("flops", [float("nan"), -1.0, 0.0, True, "1e9", None])
def test_a_count_from_the_predictor_that_is_no_positive_number_is_not_counted(tmp_path, monkeypatch, flops):
    """The count comes from the reference's process: the harness takes a positive finite number and
    the rest clipped, or nothing."""
    class Predictor:
        def call(self, op, **fields):
            assert op == "flops"
            return {"count": {"flops_per_example": flops, "counter": "x" * 5000, "by_op": {"y" * 500: 1.0}}}, None

        def kill(self):
            return []
    monkeypatch.setattr(model_flops.inference, "_start", lambda *a, **k: (Predictor(), {}))
    monkeypatch.setattr(model_flops.inference, "_load", lambda *a, **k: None)
    monkeypatch.setattr(model_flops.data_views, "check_workers_can_read", lambda *a, **k: None)
    monkeypatch.setattr(model_flops.kernel, "protect_harness", lambda: None)
    (tmp_path / "model").mkdir()
    spec = registry.load_spec("fashion-mnist-cnn-pytorch", REPO / "references")
    answer = model_flops.count(spec, {}, tmp_path / "model", tmp_path)
    assert set(answer) == {"not_counted"} and "not a positive number" in answer["not_counted"]
    monkeypatch.setattr(Predictor, "call", lambda self, op, **f: ({"count": {
        "flops_per_example": 5.0, "counter": "x" * 5000, "by_op": {"y" * 500: 1.0, "z": float("inf")}}}, None))
    answer = model_flops.count(spec, {}, tmp_path / "model", tmp_path)
    assert answer["flops_per_example"] == 5.0 and len(answer["counter"]) == 200
    assert answer["by_op"] == {"y" * 80: 1.0, "z": None}


def test_the_precision_a_run_recorded_wins_over_its_switches(tmp_path):
    """A run that records its precision (result.json, the reference's report of what its switches chose) is
    read as it says, not re-guessed from the switch (issue 48)."""
    run = gpu_run(tmp_path, ["NVIDIA H100 80GB HBM3"], {"bf16": "native"})
    result = json.loads((run / "result.json").read_text())
    reason = 'fp16 = "true" on cuda: float16 autocast with a dynamic loss scale (weights float32)'
    (run / "result.json").write_text(json.dumps({**result, "precision": {"train": "fp16", "reason": reason}}))
    numbers = roofline.run_numbers(run, counted={"flops_per_example": 10.0})
    assert numbers["precision"] == {"value": "fp16", "source": f"result.json precision (the reference's report): {reason}"}
