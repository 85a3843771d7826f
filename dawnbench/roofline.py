"""`dawnbench analyze roofline RUN...`: how well a run used its hardware (the DAWNBench analysis
paper's figure 8, where every entry sat far below its device's peak).

Per run folder:
  - FLOPs per training example, COUNTED on the run's stored model in a sandboxed predictor
    (harness.model_flops: PyTorch's FlopCounterMode, TensorFlow's profiler; MXNet "not counted"),
    2 FLOPs per multiply-add over convolutions and matmuls, forward and backward: the convention of
    `make bench-gpu`'s ResNet-50 MFU (bench/gpu.py);
  - training examples: the harness's training-set size (events.jsonl's dawnbench_train_examples)
    times the epochs trained through the converging one; the trainer's own `samples` beside it;
  - achieved FLOP/s = FLOPs per example x examples / train seconds (result.json's train_seconds: the
    train spans only);
  - the peak: for GPUs and TPUs dawnbench/data/peaks.toml (data sheets, by precision) x the device
    count; for a CPU an fp32 matmul measured by this command on this machine (only when it is the
    run's machine, else none);
  - bytes moved, an ESTIMATE: 2 x each layer's output bytes per example (written in the forward,
    read in the backward) + 3 x the parameter bytes (read forward and backward, gradient written)
    over the batch size; operational intensity = FLOPs / bytes;
  - MFU = achieved / peak; and the energy the run recorded (result.json's `energy`), per example.
Informative only: nothing here is ranked.
"""
from __future__ import annotations

import json
import math
import platform
import re
import time
import tomllib
from pathlib import Path

from dawnbench import launcher
from harness import environment, paths, registry, safe_read
from harness.errors import DawnbenchError

PEAKS_FILE = Path(__file__).parent / "data" / "peaks.toml"
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
EVENTS_LIMIT = 256 << 20
BYTES_FORMULA = ("2 x activation bytes per example (each layer's output, written in the forward and read in the "
                 "backward) + 3 x parameter bytes / batch size (weights read forward and backward, gradients "
                 "written, once a step)")


class InputError(DawnbenchError):
    """A run folder this analysis cannot read; the message says what is missing."""


# ---------------------------------------------------------------- the peaks table

def load_peaks(path: Path = PEAKS_FILE) -> list[dict]:
    with open(path, "rb") as f:
        table = tomllib.load(f)
    return table["device"]


def _tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", name.lower()) if t}


def find_peak(device_name: str, table: list[dict] | None = None) -> dict | None:
    """The first row all of whose `match` words are words of `device_name` (case-insensitive)."""
    words = _tokens(device_name)
    for row in table if table is not None else load_peaks():
        if all(w.lower() in words for w in row["match"]):
            return row
    return None


def measure_cpu_matmul(n: int = 2048, repeats: int = 5) -> dict:
    """This machine's fp32 matmul rate: best of `repeats` products of two n x n matrices (2 n^3
    FLOPs each), with torch where it is installed, else numpy."""
    try:
        import torch
        a, b = torch.randn(n, n), torch.randn(n, n)
        product, library = (lambda: torch.mm(a, b)), f"torch {torch.__version__} torch.mm"
    except ImportError:
        import numpy as np
        a, b = np.random.default_rng(0).standard_normal((2, n, n), dtype=np.float32)
        product, library = (lambda: a @ b), f"numpy {np.__version__} matmul"
    product()       # warm: thread pool, allocator
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - t)
    return {"flops_per_s": 2.0 * n ** 3 / best, "method": f"{library}, fp32 {n}x{n}, best of {repeats}",
            "measured": "by dawnbench analyze, on this machine, at " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ---------------------------------------------------------------- what a run says

def _read(path: Path, required: bool = True):
    try:
        return safe_read.read_json(path, path.parent)
    except safe_read.Refused as e:
        if required or path.exists():
            raise InputError(f"{path}: not readable JSON: {e.reason}") from None
        return None


def train_examples(run_dir: Path) -> int | None:
    """The harness's training-set size, as the run's log recorded it (dawnbench_train_examples)."""
    try:
        lines = safe_read.read_text(run_dir / "events.jsonl", run_dir, EVENTS_LIMIT).splitlines()
    except safe_read.Refused:
        return None
    for line in lines:
        if '"dawnbench_train_examples"' in line and line.startswith(":::MLLOG "):
            try:
                value = json.loads(line[len(":::MLLOG "):]).get("value")
            except ValueError:
                return None
            return int(value) if isinstance(value, (int, float)) and value > 0 else None
    return None


PRECISION_KEYS = ("precision", "mixed_precision", "bf16", "fp16", "amp")


def run_precision(hyperparameters: dict, on_gpu: bool, on_tpu: bool, cpu_bf16: bool | None = None) -> tuple[str, str]:
    """The arithmetic's precision, from the run's recorded hyperparameters, and how it was read;
    `cpu_bf16` is env.json's cpu.bf16 (the harness's reading of the CPU's flags), which says what a
    bf16 = "native" switch (common.torch_base.resolve_switch) chose on a CPU."""
    def on(value) -> bool | None:
        text = str(value).lower()
        if text == "native":
            return on_gpu or on_tpu or bool(cpu_bf16)
        return {"true": True, "1": True, "false": False, "0": False}.get(text, (on_gpu or on_tpu) if text == "auto" else None)
    for key in PRECISION_KEYS:
        if key not in hyperparameters:
            continue
        value = str(hyperparameters[key]).lower()
        if key in ("precision", "mixed_precision"):
            if "bfloat16" in value or "bf16" in value:
                return "bf16", f"hyperparameter {key} = {value!r}"
            if "float16" in value or "fp16" in value:
                return "fp16", f"hyperparameter {key} = {value!r}"
            if value == "auto":
                chosen = "bf16" if on_tpu else "fp16" if on_gpu else "fp32"
                return chosen, f"hyperparameter {key} = 'auto' on a {'TPU' if on_tpu else 'GPU' if on_gpu else 'CPU'}"
            return "fp32", f"hyperparameter {key} = {value!r}"
        if on(hyperparameters[key]):
            return ("bf16" if key == "bf16" else "fp16"), f"hyperparameter {key} = {value!r}" + \
                (f" on a {'GPU' if on_gpu else 'TPU'}" if value == "auto" else "") + \
                (" on a CPU whose flags (env.json cpu.bf16) include bf16" if value == "native" and not (on_gpu or on_tpu) else "")
        if value == "native" and key == "bf16":
            return "fp32", f"hyperparameter bf16 = 'native' on a CPU without bf16 in its flags (env.json cpu.bf16 = {cpu_bf16})"
    return "fp32", "no precision hyperparameter: the framework's default, fp32 (assumed)"


def device_of(result: dict, env: dict | None) -> dict:
    """{"kind", "name", "count", "source"} from env.json (the machine the harness described)."""
    nodes = result.get("nodes") if isinstance(result.get("nodes"), int) and result.get("nodes") > 0 else 1
    gpus = (env or {}).get("gpus") or []
    hardware = str(result.get("hardware") or "")
    if gpus:
        return {"kind": "gpu", "name": str(gpus[0].get("name")), "count": nodes * len(gpus),
                "source": "env.json gpus (every GPU listed) x nodes"}
    if "tpu" in _tokens(hardware):
        count = re.search(r"(\d+)\s*x", hardware)
        return {"kind": "tpu", "name": hardware, "count": int(count.group(1)) if count else 1,
                "source": "result.json hardware"}
    cpu = (env or {}).get("cpu") or {}
    return {"kind": "cpu", "name": str(cpu.get("model") or hardware), "count": nodes,
            "cores": cpu.get("usable_cores"), "host": (env or {}).get("hostname"),
            "source": "env.json cpu x nodes"}


# ---------------------------------------------------------------- the numbers of one run

def run_numbers(run_dir: Path, *, counted: dict, precision: str | None = None, cpu_peak=measure_cpu_matmul,
                table: list[dict] | None = None) -> dict:
    """The roofline figures of one run folder, given its FLOP count (harness.model_flops.count's answer)."""
    result = _read(run_dir / "result.json")
    if not isinstance(result, dict) or not result.get("reference"):
        raise InputError(f"{run_dir / 'result.json'}: not a run's result.json (no 'reference')")
    env = _read(run_dir / "env.json", required=False)
    device = device_of(result, env if isinstance(env, dict) else None)
    hyper = result.get("hyperparameters") if isinstance(result.get("hyperparameters"), dict) else {}
    recorded = result.get("precision") if isinstance(result.get("precision"), dict) else {}
    if precision:
        chosen, why = precision, "--precision"
    elif recorded.get("train") in PRECISIONS:      # what the reference reported its switches chose (issue 48)
        chosen, why = recorded["train"], f"result.json precision (the reference's report): {recorded.get('reason')}"
    else:       # a run before the harness recorded it: read off the switches
        cpu_bf16 = ((env or {}).get("cpu") or {}).get("bf16") if isinstance(env, dict) else None
        chosen, why = run_precision(hyper, device["kind"] == "gpu", device["kind"] == "tpu", cpu_bf16)

    history = [r for r in result.get("history") or [] if isinstance(r, dict)]
    epochs = result.get("epochs") if isinstance(result.get("epochs"), int) else len(history)
    train_s = result.get("train_seconds")
    if not isinstance(train_s, (int, float)) or train_s <= 0:
        spans = result.get("spans_seconds") or {}
        train_s = spans.get("train") if isinstance(spans.get("train"), (int, float)) and spans.get("train") > 0 else None
        train_source = "result.json spans_seconds.train (every train span: no train_seconds, a DNC or an older run)"
    else:
        train_source = "result.json train_seconds (the train spans through the converging epoch)"
    per_epoch = train_examples(run_dir)
    examples = per_epoch * epochs if per_epoch and epochs else None
    trainer = sum(float(r["samples"]) for r in history if isinstance(r.get("samples"), (int, float)))

    peak = _peak(device, chosen, table, cpu_peak)
    flops = counted.get("flops_per_example")
    achieved = flops * examples / train_s if flops and examples and train_s else None
    mfu = achieved / peak["flops_per_s"] if achieved and peak.get("flops_per_s") else None
    params, acts = counted.get("parameter_bytes"), counted.get("activation_bytes_per_example")
    batch = hyper.get("batch_size") if isinstance(hyper.get("batch_size"), int) and hyper.get("batch_size") > 0 else None
    sized = isinstance(acts, (int, float)) and isinstance(params, (int, float)) and batch
    moved = 2 * acts + 3 * params / batch if sized else None
    energy = result.get("energy") if isinstance(result.get("energy"), dict) else None
    joules = energy.get("joules") if energy else None
    return {
        "label": f"{result.get('reference')}/{run_dir.name}", "source": str(run_dir),
        "reference": result.get("reference"), "framework": result.get("framework"), "task": result.get("task"),
        "status": result.get("status"), "device": device,
        "precision": {"value": chosen, "source": why},
        "flops": counted,
        "train_examples": {"per_epoch": per_epoch, "epochs": epochs, "total": examples,
                           "source": "events.jsonl dawnbench_train_examples (the harness's) x epochs",
                           "trainer_reported_samples": trainer or None},
        "train_seconds": train_s, "train_seconds_source": train_source,
        "achieved_flops_per_s": achieved,
        "peak": peak,
        "mfu": mfu,
        **({"warning": "MFU over 1: the measured peak is below what the training reached (the machine was busier "
                       "when the peak was measured, or the network's kernels beat a plain matmul): read the peak as "
                       "a lower bound"} if mfu and mfu > 1 else {}),
        "bytes_per_example": {"estimate": True, "bytes": moved, "formula": BYTES_FORMULA, "parameter_bytes": params,
                              "activation_bytes_per_example": acts, "batch_size": batch,
                              **({} if moved else {"why_none": "no batch_size hyperparameter or no layer sizes"})},
        "operational_intensity": flops / moved if flops and moved else None,
        "energy": energy,
        "joules_per_example": joules / examples if isinstance(joules, (int, float)) and examples else None,
        "ranked": False,
    }


def _peak(device: dict, precision: str, table, cpu_peak) -> dict:
    if device["kind"] == "cpu":
        here = platform.node()
        model = environment._cpu_model()
        if device.get("host") not in (None, here) or device["name"] != model:
            return {"flops_per_s": None, "why_none": f"the run's CPU ({device['name']} on {device.get('host')}) is not this "
                                                     f"machine's ({model} on {here}): run the analysis on the run's machine"}
        measured = cpu_peak()
        note = "" if precision == "fp32" else f" (the run's precision is {precision}; the peak is fp32's)"
        return {"flops_per_s": measured["flops_per_s"] * device["count"], "per_device": measured["flops_per_s"],
                "source": "measured" + note, "method": measured["method"], "measured": measured["measured"],
                "memory_gbps": None}
    row = find_peak(device["name"], table)
    if row is None:
        return {"flops_per_s": None, "why_none": f"{device['name']!r} is not in dawnbench/data/peaks.toml"}
    tflops = row["tflops"].get(precision)
    if tflops is None:
        return {"flops_per_s": None, "why_none": f"peaks.toml has no {precision} peak for {row['name']} "
                                                 f"(it has {', '.join(row['tflops'])})", "row": row["name"]}
    return {"flops_per_s": tflops * 1e12 * device["count"], "per_device": tflops * 1e12, "row": row["name"],
            "source": row["source"], "memory_gbps": row.get("memory_gbps"),
            "method": f"data sheet, dense {precision}, x {device['count']} devices"}


# ---------------------------------------------------------------- reading and counting

def count_flops(run_dir: Path, references: Path | None = None, data_root: Path | None = None) -> dict:
    """The FLOP count of the run's stored model, from a sandboxed predictor (harness.model_flops)."""
    from harness import datasets, model_flops
    result = _read(run_dir / "result.json")
    name = result.get("reference") if isinstance(result, dict) else None
    if not isinstance(name, str):
        raise InputError(f"{run_dir / 'result.json'}: not a run's result.json (no 'reference')")
    try:
        spec = registry.load_spec(name, paths.references_root(references))
    except (registry.UsageError, FileNotFoundError) as e:
        return {"not_counted": f"the reference {name} is not found to load its model ({e}); give --references DIR"}
    hyper = result.get("hyperparameters") if isinstance(result.get("hyperparameters"), dict) else {}
    root = Path(data_root) if data_root else datasets.default_data_root()
    with launcher.reference_workers(name):      # the predictor runs the reference's interpreter
        return model_flops.count(spec, hyper, run_dir / "model", root, seed=int(result.get("seed") or 0))


def roofline_numbers(runs: list[dict]) -> dict:
    return {"analysis": "roofline", "ranked": False,
            "note": "informative: utilization and energy are never ranked; bytes moved are an estimate",
            "inputs": runs}
