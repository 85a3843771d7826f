"""ResNet-50 batch-1 CPU latency per inference runtime, side by side, and the CPU inference entry's
goal: `python -m bench.infer_runtimes [--threads N] [--calls 50] [--warmup 10] [--size 224] [--no-int8]`.

The network is imagenet-resnet50-cpu-inference's (references/imagenet-resnet50-cpu-inference/infer.py:
ResNet-50 in torchvision's layout, randomly initialized, eval mode, with its uint8-in normalization),
at 224 px: torch eager fp32, then its ONNX export (what `dawnbench infer --runtime ...` runs) through
onnxruntime fp32, OpenVINO fp32 and bf16 (bf16 where the CPU has it: the precision OpenVINO reports is
printed), and int8 (onnxruntime's static QDQ quantization, calibrated on a few random images: a
latency figure only, no accuracy). The runtimes are driven by harness/inference_engines.py, the code
`dawnbench infer` uses. Each: warm-up calls, then N timed calls (time.perf_counter around the call),
median and p99 in ms, printed as name=value lines.

Last, the entry's goal, from these medians: its default runtime and precision (reference.toml's
[inference]) within 1.1x of the fastest runtime measured here, and at least 2x faster than torch
eager (`goal_met=yes|no`). Needs torch, onnx, onnxruntime and openvino (the test environment has them).

Anchor: Intel's DAWNBench v1 winner ran ResNet-50 inference at 9.96 ms per image (optimized Caffe
on a Xeon Platinum 8124M, 36 vCPUs).
"""
from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.arguments import MAX_THREADS, MAX_WARMUP, Parser, reports_errors, whole

REPO = Path(__file__).resolve().parent.parent
ENTRY = "imagenet-resnet50-cpu-inference"
ENTRY_FILE = REPO / "references" / ENTRY / "infer.py"
GOAL_OVER_FASTEST, GOAL_OVER_EAGER = 1.1, 2.0


def load_entry():
    """The CPU entry's own file (by path: reference folders are not packages)."""
    spec = importlib.util.spec_from_file_location("cpu_inference_entry", ENTRY_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def goal(out: dict, runtime: str, precision: str) -> dict:
    """The entry's default against the fastest runtime measured and against torch eager."""
    medians = {k[:-len("_median_ms")]: v for k, v in out.items() if k.endswith("_median_ms")}
    default = f"{runtime}_{precision}"
    if default not in medians:
        return {"entry_default": default, "goal_met": "not measured (run without --no-int8)"}
    fastest = min(medians, key=medians.get)
    over_fastest = medians[default] / medians[fastest]
    over_eager = medians["torch_eager_fp32"] / medians[default]
    return {"entry_default": default, "entry_default_median_ms": medians[default], "fastest": fastest,
            "default_over_fastest": over_fastest, "eager_over_default": over_eager,
            "goal": f"default <= {GOAL_OVER_FASTEST}x the fastest and >= {GOAL_OVER_EAGER}x faster than torch eager",
            "goal_met": "yes" if over_fastest <= GOAL_OVER_FASTEST and over_eager >= GOAL_OVER_EAGER else "no"}


def timed(call, x: np.ndarray, warmup: int, calls: int) -> dict[str, float]:
    for _ in range(warmup):
        call(x)
    times = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        call(x)
        times[i] = time.perf_counter() - t0
    ms = times * 1000.0
    return {"median_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99))}


@reports_errors("python -m bench.infer_runtimes")
def main(argv=None) -> int:
    from harness import inference_engines, registry
    p = Parser(prog="python -m bench.infer_runtimes")
    p.add_argument("--threads", type=whole("--threads", 1, MAX_THREADS, 4), default=None,
                   help="default: the physical cores")
    p.add_argument("--calls", type=whole("--calls", 1, MAX_WARMUP, 50), default=50, help="timed batch-1 calls")
    p.add_argument("--warmup", type=whole("--warmup", 0, MAX_WARMUP, 10), default=10, help="untimed calls first")
    # the image side in pixels: ImageNet networks take 224; 4,096 is far beyond any of them
    p.add_argument("--size", type=whole("--size", 32, 4096, 224), default=224)
    p.add_argument("--no-int8", action="store_true", help="skip int8 (its quantization takes a while)")
    args = p.parse_args(argv)
    threads = args.threads or inference_engines.physical_cores()

    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    entry = load_entry()
    net = entry.Scores(entry.ResNet50(1000), flip=False).eval()
    x = np.random.default_rng(0).integers(0, 256, (1, 3, args.size, args.size), dtype=np.uint8)
    out = {"threads": threads, "size_px": args.size, "calls": args.calls, "warmup": args.warmup,
           "torch_version": torch.__version__}

    def torch_call(a):
        with torch.inference_mode():
            return net(torch.from_numpy(a))
    for k, v in timed(torch_call, x, args.warmup, args.calls).items():
        out[f"torch_eager_fp32_{k}"] = v

    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder) / "resnet50.onnx"
        torch.onnx.export(net, (torch.from_numpy(x),), str(model), dynamo=False, opset_version=inference_engines.OPSET,
                          input_names=["input"], output_names=["scores"],
                          dynamic_axes={"input": {0: "batch"}, "scores": {0: "batch"}})
        settings = [("onnxruntime", "fp32", model), ("openvino", "fp32", model), ("openvino", "bf16", model)]
        if not args.no_int8:
            quantized = Path(folder) / "resnet50.int8.onnx"
            t0 = time.perf_counter()
            calibration = np.random.default_rng(1).integers(0, 256, (8, 3, args.size, args.size), dtype=np.uint8)
            inference_engines.quantize(model, calibration, quantized)
            out["int8_quantize_seconds"] = time.perf_counter() - t0
            settings += [("onnxruntime", "int8", quantized), ("openvino", "int8", quantized)]
        for runtime, precision, path in settings:
            name = f"{runtime}_{precision}"
            if runtime == "onnxruntime":
                call, details = inference_engines.onnxruntime_session(path, threads)
            else:
                call, details = inference_engines.openvino_model(path, threads, precision)
                out[f"{name}_precision_used"] = details["inference_precision"]
            out[f"{runtime}_version"] = details["runtime_version"]
            for k, v in timed(call, x, args.warmup, args.calls).items():
                out[f"{name}_{k}"] = v
    spec = registry.load_spec(ENTRY)
    out.update(goal(out, spec.inference_runtime, spec.inference_precision))
    for key, value in out.items():
        print(f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
