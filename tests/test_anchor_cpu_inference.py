"""imagenet-resnet50-cpu-inference against its anchor, DAWNBench v1's CPU inference winner (Intel's
optimized Caffe, intel/caffe's DAWN_Bench branch at 7e45219): this entry trains nothing, so its table
(references/imagenet-resnet50-cpu-inference/anchor.toml) holds its export and runtime settings, and
each row is checked here against infer.py and the harness's runtimes, as its `check` says: the
network and its count by building it (and the anchor's pruned network's count derived from its
prototxt), the eval preprocessing on fixed JPEGs against Pillow written out, the normalization in the
scored module, the ONNX export (opset, uint8 input, dynamic batch, the same scores), and one run of
the harness's runtime process as `dawnbench infer` drives it by default (OpenVINO, int8 from
onnxruntime's QDQ quantizer, one thread, batch 1), at 64 px on the tiny ImageNet fixture.
"""
from __future__ import annotations

import functools
import io
import json
import sys

import numpy as np
import pytest
from anchor_checks import anchor_rows, every_row_is_checked
from conftest import REPO, role_views

from harness import registry
from harness.reference import Context

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")

NAME = "imagenet-resnet50-cpu-inference"
CHECKED_HERE = {"parameters", "eval_preprocessing", "config", "test"}
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)      # the table's normalization
SMALL = {"eval_resize": 72, "eval_crop": 64}                         # the fixture's images, quickly


@functools.cache
def entry():
    """infer.py, imported once as the harness imports it (each import runs it anew)."""
    return sys.modules[registry.load_spec(NAME).load_entry_class().__module__]


def rows_by_item(kind: str) -> dict[str, dict]:
    return {row["item"]: row for row in anchor_rows(NAME, kind)}


def test_every_row_is_checked_here():
    every_row_is_checked(NAME, CHECKED_HERE, __file__)


def test_the_config_rows():
    spec = registry.load_spec(NAME)
    assert spec.infers_only
    for row in anchor_rows(NAME, "config"):
        assert spec.hyperparameters[row["expect"]] == row["ours"], row


# ---- the network ---------------------------------------------------------------------------------

def pruned_caffe_count() -> int:
    """The anchor's network as its deploy.prototxt defines it: conv1 7x7 3 -> 64 with a bias and a
    Scale (scale and shift) after every convolution; bottlenecks at widths 64-112-224-448 to
    224-448-880-1744 channels, 3-4-6-3 blocks, a 1x1 branch1 projection in each stage's first; fc1000
    with its bias. The BatchNorm layers' statistics are not trained (lr_mult 0)."""
    count, channels = 7 * 7 * 3 * 64 + 64 + 2 * 64, 64
    for width, out, blocks in ((64, 224, 3), (112, 448, 4), (224, 880, 6), (448, 1744, 3)):
        for block in range(blocks):
            count += (channels * out + 2 * out) if block == 0 else 0
            count += channels * width + 2 * width + 9 * width * width + 2 * width + width * out + 2 * out
            channels = out
    return count + channels * 1000 + 1000


def test_the_network_and_its_count():
    """torchvision's ResNet-50 v1.5: 25,557,032 parameters, the stride on each downsampling block's
    3x3, no convolution biases, the stem's pool padded (224 -> 56); the anchor's pruned network
    19,556,360 by its prototxt."""
    import torch
    net = entry().ResNet50()
    rows = rows_by_item("parameters")
    assert sum(p.numel() for p in net.parameters()) == rows["trainable parameters"]["ours"]
    assert pruned_caffe_count() == rows["trainable parameters"]["anchor"]
    for stage in (net.layer2, net.layer3, net.layer4):
        assert stage[0].conv2.stride == (2, 2) and stage[0].conv1.stride == (1, 1)
        assert stage[0].downsample[0].stride == (2, 2)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 53 and not any(m.bias is not None for m in convs)
    assert [m.out_channels for m in convs if m.kernel_size == (3, 3)] == [64] * 3 + [128] * 4 + [256] * 6 + [512] * 3
    with torch.no_grad():
        stem = torch.nn.functional.max_pool2d(net.bn1(net.conv1(torch.zeros(1, 3, 224, 224))), 3, stride=2, padding=1)
        assert tuple(net.layer1(stem).shape) == (1, 256, 56, 56)
    assert net.fc.in_features == 2048 and net.fc.out_features == 1000


# ---- the eval preprocessing ----------------------------------------------------------------------

def jpeg(width: int, height: int, seed: int) -> bytes:
    from PIL import Image
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3)).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=95)
    return out.getvalue()


def test_the_eval_preprocessing_on_fixed_jpegs(tmp_path):
    """eval_pixels with the entry's defaults (232, 224) on JPEGs of four shapes, against Pillow
    written out as torchvision's Resize(232) + CenterCrop(224) do it: the short side to 232, the long
    one int(232 x long / short), bilinear (Pillow antialiases when it shrinks); the crop at
    int(round((side - 224) / 2)); uint8, CHW. Then the scored module's normalization: RGB,
    (x - mean) / std with the table's constants, no mirror."""
    import torch
    from PIL import Image
    cfg = registry.load_spec(NAME).hyperparameters
    resize, crop = cfg["eval_resize"], cfg["eval_crop"]
    assert (resize, crop) == (232, 224) and "232" in rows_by_item("eval_preprocessing")["eval resize"]["ours"]
    for width, height in ((300, 240), (240, 333), (232, 232), (500, 375)):
        path = tmp_path / f"{width}x{height}.JPEG"
        path.write_bytes(jpeg(width, height, width))
        got = entry().eval_pixels(str(path), resize, crop)
        with Image.open(path) as image:
            size = (resize, int(resize * height / width)) if width <= height else (int(resize * width / height), resize)
            resized = np.asarray(image.convert("RGB").resize(size, Image.Resampling.BILINEAR))
        left, top = int(round((size[0] - crop) / 2.0)), int(round((size[1] - crop) / 2.0))
        expected = resized[top:top + crop, left:left + crop].transpose(2, 0, 1)
        assert got.dtype == np.uint8 and got.shape == (3, crop, crop)
        np.testing.assert_array_equal(got, expected)
    pixels = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (2, 3, 8, 8)).astype(np.uint8))
    scorer = entry().Scores(torch.nn.Identity(), flip=cfg["flip_tta"])
    expected = (pixels.numpy() - np.array(MEAN)[None, :, None, None]) / np.array(STD)[None, :, None, None]
    np.testing.assert_allclose(scorer(pixels).numpy(), expected, rtol=1e-6, atol=1e-5)


# ---- export, quantization, the runtime -----------------------------------------------------------

@pytest.fixture(scope="module")
def exported(imagenet_prepared, tmp_path_factory):
    """The entry as `dawnbench infer` sets it up, at 64 px on conftest's tiny ImageNet: the predictor
    (validation images only) exports its scored network (random weights: the settings are what is
    checked); the trainer role gives the int8 calibration images."""
    root = tmp_path_factory.mktemp("cpu-inference")
    views = role_views("imagenet", imagenet_prepared[0], root)
    spec = registry.load_spec(NAME)
    cls = getattr(entry(), spec.entry.partition(":")[2])
    refs = {}
    for role in ("predict", "train"):
        refs[role] = cls()
        refs[role].setup(Context(config=dict(spec.hyperparameters, **SMALL), data_root=views[role], seed=0,
                                 task=spec.task, show_progress=False, role=role))
    path = root / "model.onnx"
    refs["predict"].export_onnx(path)
    return refs, path, root


def test_the_export(exported):
    """ONNX opset 17, one input "input": uint8 (batch, 3, crop, crop) with the batch axis dynamic, one
    output "scores"; onnxruntime's scores of the fixture's images are the entry's own."""
    import onnx
    import onnxruntime as ort
    import torch
    refs, path, _ = exported
    model = onnx.load(str(path))
    assert {o.domain or "ai.onnx": o.version for o in model.opset_import}["ai.onnx"] == 17
    (graph_input,) = model.graph.input
    dims = [d.dim_param or d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    assert graph_input.name == "input" and graph_input.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert isinstance(dims[0], str) and dims[1:] == [3, SMALL["eval_crop"], SMALL["eval_crop"]]
    assert [o.name for o in model.graph.output] == ["scores"]
    x = refs["predict"].export_inputs(0, 3)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        expected = refs["predict"].scores(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(session.run(None, {"input": x})[0], expected, rtol=1e-4, atol=1e-4)
    assert "dynamo=False, opset_version=17" in (REPO / "common" / "torch_base.py").read_text()


def test_the_runtime_quantizes_and_times_batch_1(exported):
    """The harness's runtime process (harness.inference_engines.run) as `dawnbench infer` runs the entry by
    default: reference.toml names OpenVINO and int8; the exported model is quantized by onnxruntime
    (QDQ, int8 weights with a scale per output channel, uint8 activations, MinMax) on the trainer's
    calibration images, prepared as the eval images are; every convolution and the classifier read
    quantized weights; OpenVINO compiles it for latency on the threads asked for (1 here: the
    default is inference_engines.physical_cores()), and times one call per image (batch 1)."""
    import onnx
    from onnx import numpy_helper

    from harness import inference_engines
    spec = registry.load_spec(NAME)
    assert (spec.inference_runtime, spec.inference_precision) == ("openvino", "int8")
    assert "openvino==2026.4.1" in (REPO / "references" / NAME / "requirements.txt").read_text().split()
    assert inference_engines.CALIBRATION_EXAMPLES == 256 and 1 <= inference_engines.physical_cores()
    refs, path, root = exported
    calibration = refs["train"].calibration_inputs(4)
    inputs = refs["predict"].export_inputs(0, 3)
    assert calibration.dtype == inputs.dtype == np.uint8 and calibration.shape[1:] == inputs.shape[1:]
    out = root / "runtime"
    out.mkdir()
    np.save(out / "calibration.npy", calibration)
    np.save(out / "inputs.npy", inputs)
    facts = inference_engines.run({"runtime": "openvino", "precision": "int8", "threads": 1, "warmup": 1, "out": str(out),
                          "model": str(path), "calibration": str(out / "calibration.npy"),
                          "inputs": str(out / "inputs.npy")})
    json.dumps(facts)                                        # what the report records
    quantization = facts["quantization"]
    assert (quantization["format"], quantization["per_channel"], quantization["weights"], quantization["activations"],
            quantization["calibration_method"]) == ("QDQ", True, "int8", "uint8", "MinMax")
    assert facts["inference_num_threads"] == 1 and facts["performance_hint"] == "LATENCY"
    assert facts["precision_used"].startswith("int8") and facts["items"] == 3
    assert np.load(out / "latencies.npy").shape == (3,) and np.load(out / "outputs.npy").shape == (3, 1000)
    graph = onnx.load(str(out / "model.int8.onnx")).graph
    made_by = {o: node for node in graph.node for o in node.output}
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    weighted = [node for node in graph.node if node.op_type in ("Conv", "Gemm", "MatMul")]
    assert sum(node.op_type == "Conv" for node in weighted) == 53
    for node in weighted:
        dequantize = made_by[node.input[1]]
        assert dequantize.op_type == "DequantizeLinear", node.name
        weight, scale, zero = (constants[name] for name in dequantize.input)
        assert weight.dtype == np.int8 and zero.dtype == np.int8, node.name
        assert scale.ndim == 1 and scale.size in weight.shape and scale.size > 1, node.name     # per channel
        activation = made_by[node.input[0]]
        assert activation.op_type == "DequantizeLinear" and constants[activation.input[2]].dtype == np.uint8
