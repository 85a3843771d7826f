"""The harness's inference engines (ONNX Runtime, OpenVINO): an exported ONNX model run at batch 1 in a process of the
harness's own, which never imports the reference's code, each call timed there. That process is a judge process
(harness/judge.py) of the harness's interpreter, with the runtimes pinned in the harness's environment: never the
reference's, whose requirements could install an `onnxruntime` of their own (issue 46).

    python -m harness.inference_engines REQUEST.json

`dawnbench infer --runtime onnxruntime|openvino` (harness/inference.py) has the sandboxed predictor
export the evaluated network (ONNX bytes) and the eval inputs, and, for int8, a trainer (training
files only) give calibration examples; then it starts this module as a fresh process with the
files and reads back every output and every latency. Only numpy, onnx and the runtime library are
imported here, and only when the process runs: importing this module from the harness costs
nothing. The clock (time.perf_counter around the runtime's call, nothing else) lives in this
process, so no reference can move it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UsageError, command

if TYPE_CHECKING:      # numpy is imported where it is used: harness.registry reads RUNTIMES without it
    import numpy as np

RUNTIMES = ("reference", "torch", "onnxruntime", "openvino")
PRECISIONS = ("fp32", "bf16", "int8")
PRECISIONS_OF = {"reference": ("fp32",), "torch": ("fp32",), "onnxruntime": ("fp32", "int8"),
                 "openvino": ("fp32", "bf16", "int8")}
EXPORTED = ("onnxruntime", "openvino")         # the runtimes that run the exported model here
CALIBRATION_EXAMPLES = 256                     # training examples int8 is calibrated on
OPSET = 17
WHY = {"reference": "it runs the reference's own infer(), as the reference wrote it",
       "torch": "it runs the reference's own infer(), as the reference wrote it",
       "onnxruntime": "ONNX Runtime has no bf16 path on CPUs; use --runtime openvino for bf16"}


def check_options(runtime: str, precision: str, threads: int | None, framework: str) -> None:
    """One line for each mistake, before any worker starts."""
    if runtime not in RUNTIMES:
        raise UsageError(f"--runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision not in PRECISIONS_OF[runtime]:
        raise UsageError(f"--precision {precision} is not supported by --runtime {runtime} ({WHY[runtime]}); "
                         f"it takes {', '.join(PRECISIONS_OF[runtime])}")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads {threads}: give a whole number, 1 or more, e.g. --threads {physical_cores()}")
    if runtime == "torch" and framework != "pytorch":
        raise UsageError(f"--runtime torch runs a PyTorch reference's own infer(); this reference is {framework}: "
                         f"use --runtime reference, onnxruntime or openvino")
    if runtime in EXPORTED:
        needed = ["onnx", runtime] + (["onnxruntime"] if precision == "int8" else [])
        # looked for in the harness's own environment, where the timing process runs (harness/judge.py)
        missing = [m for m in dict.fromkeys(needed) if importlib.util.find_spec(m) is None]
        if missing:
            # `dawnbench infer` (dawnbench.launcher) installs them on first use; this Python is not one it set up
            raise UsageError(f"--runtime {runtime}{' --precision int8' if precision == 'int8' else ''} needs "
                             f"{', '.join(missing)}, not installed in the harness's environment ({sys.prefix}): run "
                             f"it with {command('infer')}, which installs requirements/infer-{runtime}.txt into the "
                             f"tools environment on first use, or pip install -r requirements/infer-{runtime}.txt there")


def physical_cores() -> int:
    """The physical cores this process may run on (hyperthread siblings counted once)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        try:
            cores.add(Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip())
        except OSError:
            return len(cpus)
    return max(1, len(cores))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- what runs in the runtime process ------------------------------------------------------------

def _tensors(graph):
    """Every tensor a graph carries (initializers, constants, subgraphs'), for the external-data check."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for sub in attribute.graphs:
                yield from _tensors(sub)


def check_model(path: Path) -> dict:
    """Refuse a model that reads other files (ONNX external data names a path: a label file, say)."""
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    for tensor in _tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
            raise UsageError(f"the exported model's tensor {tensor.name!r} reads an external file; "
                             f"export the weights inside the ONNX file")
    if len(model.graph.input) != 1:
        raise UsageError(f"the exported model takes {len(model.graph.input)} inputs; it must take one batch")
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    return {"opset": opsets.get("ai.onnx"), "inputs": [i.name for i in model.graph.input],
            "outputs": [o.name for o in model.graph.output]}


def quantize(model: Path, calibration: np.ndarray, out: Path) -> dict:
    """Static int8 quantization (QDQ, per-channel weights), calibrated on `calibration`."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
    graph_model = onnx.load(str(model), load_external_data=False)
    name = graph_model.graph.input[0].name
    if _inline_identities(graph_model.graph):
        model = out.with_name(out.stem + ".prepared.onnx")
        onnx.save(graph_model, str(model))

    class Reader(CalibrationDataReader):
        def __init__(self):
            # one example per batch: the model's batch axis may be fixed at 1
            self.batches = iter([{name: calibration[i:i + 1]} for i in range(len(calibration))])

        def get_next(self):
            return next(self.batches, None)

    import logging
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)     # its advice to pre-process, per bias, on the root logger
    excluded = _scalar_elementwise(graph_model.graph)
    try:
        quantize_static(str(model), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=excluded)
    finally:
        root.setLevel(level)
    return {"format": "QDQ", "per_channel": True, "activations": "uint8", "weights": "int8",
            "calibration_method": "MinMax", "tool": "onnxruntime.quantization.quantize_static",
            "not_quantized": excluded}


def _scalar_elementwise(graph) -> list[str]:
    """Element-wise nodes with a one-number constant operand (a logit scale, say): left in float.
    OpenVINO's low-precision transformations fail on such a Mul once its constant is quantized
    (MultiplyPartialTransformation: "index '0' out of range", OpenVINO 2026.4), and quantizing a
    scalar multiply saves nothing."""
    import numpy as np
    from onnx import numpy_helper
    scalars = {t.name for t in graph.initializer if int(np.prod(t.dims)) == 1}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t"):
            if numpy_helper.to_array(node.attribute[0].t).size == 1:
                scalars.add(node.output[0])
    return [node.name for node in graph.node
            if node.op_type in ("Mul", "Div", "Add", "Sub") and any(i in scalars for i in node.input)]


def _inline_identities(graph) -> int:
    """Replace each Identity of an initializer by a copy of it: the exporter shares equal weights
    (biases the batch-norm folding made equal, say) through Identity nodes, and the quantizer
    quantizes only biases that are initializers. Returns how many it replaced."""
    initializers = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    kept, copies = [], []
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in initializers and node.output[0] not in outputs:
            copy = type(initializers[node.input[0]])()
            copy.CopyFrom(initializers[node.input[0]])
            copy.name = node.output[0]
            copies.append(copy)
        else:
            kept.append(node)
    if copies:
        graph.initializer.extend(copies)
        del graph.node[:]
        graph.node.extend(kept)
    return len(copies)


def onnxruntime_session(model: Path, threads: int):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    output = session.get_outputs()[0].name

    def call(x):
        return session.run([output], {name: x})[0]
    return call, {"runtime_version": ort.__version__, "providers": session.get_providers(),
                  "intra_op_num_threads": threads, "inter_op_num_threads": 1, "execution_mode": "sequential"}


def openvino_model(model: Path, threads: int, precision: str):
    import openvino as ov
    core = ov.Core()
    hint = "bf16" if precision == "bf16" else "f32"   # with no hint, OpenVINO picks bf16 itself where the CPU has it
    compiled = core.compile_model(core.read_model(str(model)), "CPU",
                                  {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
                                   "INFERENCE_PRECISION_HINT": hint})
    request = compiled.create_infer_request()

    def call(x):
        return request.infer([x])[0]
    used = compiled.get_property("INFERENCE_PRECISION_HINT")
    return call, {"runtime_version": ov.get_version(), "inference_precision_hint": hint,
                  "inference_precision": str(getattr(used, "get_type_name", lambda: used)()),
                  "inference_num_threads": int(compiled.get_property("INFERENCE_NUM_THREADS")),
                  "performance_hint": str(compiled.get_property("PERFORMANCE_HINT"))}


PRECISION_NAMES = {"f32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16", "f16": "fp16",
                   "float16": "fp16"}


def run(request: dict) -> dict:
    """Run the model at batch 1 over every input; write outputs.npy and latencies.npy; return the facts."""
    import numpy as np

    out = Path(request["out"])
    runtime, precision, threads = request["runtime"], request["precision"], int(request["threads"])
    model = Path(request["model"])
    facts = {"model": check_model(model)}
    if precision == "int8":
        calibration = np.load(request["calibration"], allow_pickle=False)
        quantized = out / "model.int8.onnx"
        facts["quantization"] = quantize(model, calibration, quantized)
        facts["quantized_model_sha256"] = sha256(quantized)
        model = quantized
    inputs = np.load(request["inputs"], allow_pickle=False, mmap_mode="r")    # ImageNet's: gigabytes
    if runtime == "onnxruntime":
        call, details = onnxruntime_session(model, threads)
        used = "int8" if precision == "int8" else "fp32"
    elif runtime == "openvino":
        call, details = openvino_model(model, threads, precision)
        used = PRECISION_NAMES.get(details["inference_precision"].lower(), details["inference_precision"])
        if precision == "int8":
            used = f"int8 (other layers {used})"
    else:
        raise UsageError(f"runtime {runtime!r} does not run here")
    n = len(inputs)
    for i in range(min(int(request["warmup"]), n)):     # untimed: lazy initialisation, caches
        call(inputs[i:i + 1])
    latencies = np.empty(n, dtype=np.float64)
    first = np.asarray(call(inputs[0:1]))
    outputs = np.empty((n, *first.shape[1:]), dtype=first.dtype)
    clock = time.perf_counter
    for i in range(n):
        x = np.ascontiguousarray(inputs[i:i + 1])      # read from the file before the clock starts
        t0 = clock()
        y = call(x)
        latencies[i] = clock() - t0
        outputs[i] = y[0]
    np.save(out / "outputs.npy", outputs, allow_pickle=False)
    np.save(out / "latencies.npy", latencies, allow_pickle=False)
    facts.update(details)
    facts.update({"runtime": runtime, "precision_requested": precision, "precision_used": used,
                  "threads": threads, "items": n, "timer": "time.perf_counter around each runtime call, "
                  "in the harness's runtime process"})
    return facts


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        facts = run(request)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(request["out"], "facts.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
