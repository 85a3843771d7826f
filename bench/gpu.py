"""Everything measurable on one GPU without ImageNet: `python -m bench.gpu [--out FILE] [--quick]`.

Parts, each printed as name=value lines with its anchors, or as `<part>: not measured: <reason>`:
  resnet50        ResNet-50 training throughput (img/s) at 160, 192, 224 px: bf16 autocast,
                  channels_last, an SGD step, synthetic data on the device, torch.compile off and on
  mfu             model FLOP utilization of those steps: FLOPs counted by FlopCounterMode over the
                  device's peak dense bf16 FLOP/s (the roofline point of the DAWNBench analysis)
  dali            DALI JPEG decode throughput on Pillow-made 500x375 JPEGs
  latency         batch-1 latency, eager and torch.compile'd: ResNet-50 in bf16 and fp32, and the
                  Fashion-MNIST CNN, CIFAR-10 ResNet-56 and cifar10-fast networks in fp32 (the
                  models `dawnbench infer` runs): mean, p50, p99 ms
  cifar10_fast    cifar10-fast-pytorch's seconds per epoch on synthetic CIFAR-shaped data, its own
                  setup, step and epoch loop (the loader swapped for random images), compiled and not
  bidaf           squad-bidaf-pytorch's training step (its own network, Adam and weight average) on
                  synthetic SQuAD-shaped batches: seconds per step, per epoch and the projected time
                  to F1 0.75; the same for squad-bidaf-tensorflow where TensorFlow imports
  tta             the Fashion-MNIST default's real time-to-accuracy, a `harness run` subprocess
  multi_gpu       NCCL all-reduce bus bandwidth across the GPUs (2 or more)
  steps           each PyTorch reference's own training step at its real batch and input size on
                  synthetic data: ms a step, peak memory, whether the loss falls (bench/reference_steps.py)
  peer            the public frontier side by side: airbench94 (PyPI airbench 0.1.8), airbench94_muon
                  (the file given by $AIRBENCH94_MUON), cifar10-fast-pytorch and
                  cifar10-airbench-muon-pytorch, the same synthetic images, the same GPU: each whole
                  schedule's seconds, their ratios, held-out top-1 (bench/airbench_peer.py); in a CPU
                  smoke the two references only, at a tiny size
  harness_cost    what the harness costs a record-class run: cifar10-fast's whole schedule under
                  `dawnbench run` against a bare loop, paired repeats; the handover's median and p99
                  (bench/harness_cost.py)
  precision       cifar10-fast in bf16, fp16 with a loss scale, and fp32: seconds an epoch and
                  held-out top-1 on a learnable synthetic CIFAR-10 (bench/cifar_fast_precision.py)
  kill9           a kill -9 of the harness of a CUDA run in init, training and eval, in bubblewrap-as-root
                  and uid mode: seconds until no process is left and the GPU holds none of its memory
                  (bench/killed_run.py; root only)
  lm_step         the language-model task's references (fineweb-gpt2-modded and -llmc) at their own global
                  batch and sequence length on synthetic token shards: ms a step eager and compiled, tokens/s,
                  MFU (bench/lm_step.py)
  lm_cost         fineweb-gpt2-modded-pytorch's steps under `dawnbench run` against a bare loop, paired repeats

Without CUDA (or with --cpu-smoke) every part runs at tiny sizes on the CPU, labelled cpu, so the
code paths are exercised; torch.compile there uses the "eager" backend (no C++ toolchain needed).
Needs torch and numpy only (no pip install on a bare GPU machine); the JSON goes to
results/bench-gpu/<time>.json unless --out says otherwise.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import airbench_peer, cifar_fast_precision, harness_cost, killed_run, lm_step, reference_steps
from bench.gpu_common import (
    REPO,
    NotMeasured,
    Report,
    Setting,
    cpu_only,
    load_reference_module,
    one_line,
    peak_bf16_flops,
    reference_defaults,
)
from harness.arguments import Parser, regular_file, reports_errors

BIDAF_DIR = REPO / "references" / "squad-bidaf-pytorch"
PARTS = ("resnet50", "mfu", "dali", "latency", "cifar10_fast", "bidaf", "tta", "multi_gpu", "steps", "peer",
         "harness_cost", "precision", "kill9", "lm_step", "lm_cost")

# ResNet-50 forward at 224 px: 4.1 G multiply-adds (the usual "4.1 GFLOPs"), 2 FLOPs each;
# a training step is about 3 forwards (forward, and backward for activations and weights).
RESNET50_FWD_GMAC_224 = 4.1
ANCHORS = {
    "resnet50_train": "NVIDIA's published PyTorch AMP ResNet-50 ~2,470 img/s on one A100; "
                      "MLPerf Training v4.0 ~7,157 img/s per H100 (MXNet + DALI)",
    "resnet50_goal": ">= 3,500 img/s at 224 px on one H100",
    "cifar10_fast": "goal: 94% in under 4 s on one H100; published bar 3.83 s on an A100",
    "mfu": "the roofline point of the DAWNBench analysis: achieved over peak FLOP/s",
}
GOAL_IMGS_224 = 3500.0

# BiDAF's synthetic batches: the default batch of 60 questions, contexts of 160 tokens (SQuAD's
# training contexts average about 140, and a batch pads to its longest), questions of 12, 16
# characters a word, a 90,000-word frozen table (about the training words GloVe 6B holds) and a
# character list of 100 (ids 2..101: 0 and 1 are padding and unknown).
BIDAF_SHAPES = {"batch": 60, "context": 160, "question": 12, "word_chars": 16, "vocab": 90_000, "chars": 100}
BIDAF_SMOKE = {"batch": 4, "context": 20, "question": 5, "word_chars": 8, "vocab": 200, "chars": 30}
BIDAF_SMOKE_CONFIG = {"hidden": 8, "char_filters": 8, "word_dim": 8}      # the same layers, tiny
SQUAD_TRAIN_QUESTIONS = 87_599      # SQuAD v1.1 train-v1.1.json
# Epochs BiDAF needs to reach F1 0.75: the DAWNBench seed (TensorFlow 1.2, one K80) first logged
# F1 >= 0.75 after epoch 10 (0.7523 at 7.64 h; dawn-bench-entries SQuAD/train/
# dawn_bidaf_1k80-ec2_tensorflow.tsv). Assumed to hold for these references: not measured here.
BIDAF_EPOCHS_TO_F1_075 = 10
ANCHORS["bidaf"] = ("DAWNBench seed BiDAF (TensorFlow 1.2, one K80): 0.76 h an epoch, F1 0.75 at epoch 10 after "
                    "7.64 h; fastest DAWNBench entry FastFusionNet: 18.8 min on a GTX 1080 Ti")
GOAL_CIFAR_SECONDS = 4.0




def load_resnet50():
    """`resnet50` from the ImageNet reference's own file."""
    return load_reference_module("imagenet-resnet50-pytorch").resnet50




# ----------------------------------------------------------------------------------------------
# ResNet-50: training throughput and FLOP utilization

def train_step_fn(s: Setting, model, opt):
    torch, F = s.torch, s.torch.nn.functional

    def step(x, y):
        with torch.autocast(s.device.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def resnet50_throughput(s: Setting, px: int, compiled: bool) -> float:
    torch = s.torch
    net = load_resnet50()(num_classes=1000).to(s.device, memory_format=torch.channels_last).train()
    model = s.compile(net) if compiled else net
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
    x = torch.randn(s.batch, 3, px, px, device=s.device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (s.batch,), device=s.device)
    step = train_step_fn(s, model, opt)
    for _ in range(s.warmup):           # compilation, cuDNN's autotuning, the allocator's growth
        step(x, y)
    s.sync()
    start = time.perf_counter()
    for _ in range(s.steps):
        step(x, y)
    s.sync()
    return s.batch * s.steps / (time.perf_counter() - start)


def training_flops_per_image(s: Setting, px: int) -> float:
    """FLOPs of one training step per image (2 per multiply-add), counted by torch's FlopCounterMode
    on the CPU at batch 2 (batch norm in training needs two): convolutions and matmuls, forward and
    backward."""
    torch = s.torch
    from torch.utils.flop_counter import FlopCounterMode
    net = load_resnet50()(num_classes=1000).train()
    x, y = torch.randn(2, 3, px, px), torch.randint(0, 1000, (2,))
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(net(x), y).backward()
    return float(counter.get_total_flops()) / 2


def part_resnet50(s: Setting, r: Report) -> dict[tuple[int, bool], float]:
    rates = {}
    for px in s.sizes:
        for compiled in (False, True):
            name = f"resnet50_train_imgs_per_s_{px}px_{'compiled' if compiled else 'eager'}"
            try:
                rates[px, compiled] = resnet50_throughput(s, px, compiled)
            except Exception as exc:        # torch.compile without a toolchain, out of memory: that figure only
                r.skip(name, one_line(exc))
                continue
            r.figure(name, rates[px, compiled], f"batch {s.batch}, bf16, channels_last; anchors: {ANCHORS['resnet50_train']}")
    best = max((v for (px, _), v in rates.items() if px == 224), default=None)
    if best is not None and not s.smoke:
        on_h100 = "H100" in s.name
        r.goal("resnet50_224px", best >= GOAL_IMGS_224,
               f"{best:,.0f} img/s, {ANCHORS['resnet50_goal']}" + ("" if on_h100 else f"; measured on {s.name}"))
    return rates


def part_mfu(s: Setting, r: Report, rates: dict[tuple[int, bool], float]) -> None:
    if not rates:
        raise NotMeasured("no ResNet-50 throughput was measured")
    peak = peak_bf16_flops(s.name) if not s.smoke else None
    for px in s.sizes:
        flops = training_flops_per_image(s, px)
        analytic = 3 * 2 * RESNET50_FWD_GMAC_224 * 1e9 * (px / 224) ** 2
        r.figure(f"resnet50_train_gflop_per_image_{px}px", flops / 1e9,
                 f"counted; analytic 3 x 2 x {RESNET50_FWD_GMAC_224} GMAC x ({px}/224)^2 = {analytic / 1e9:.1f}")
        for compiled in (False, True):
            if (px, compiled) not in rates:
                continue
            achieved = rates[px, compiled] * flops
            tag = f"{px}px_{'compiled' if compiled else 'eager'}"
            r.figure(f"resnet50_achieved_tflops_{tag}", achieved / 1e12)
            if peak:
                r.figure(f"resnet50_mfu_{tag}", achieved / peak,
                         f"of {peak / 1e12:.0f} TFLOP/s peak dense bf16; {ANCHORS['mfu']}")
    if peak is None:
        r.skip("mfu_peak", "a CPU has no bf16 tensor peak on record (the utilization needs a GPU in the table)")


# ----------------------------------------------------------------------------------------------
# DALI decode

def part_dali(s: Setting, r: Report) -> None:
    try:
        from nvidia.dali import fn, pipeline_def
    except ImportError:
        raise NotMeasured("DALI is not installed") from None
    try:
        from PIL import Image
    except ImportError:
        raise NotMeasured("Pillow is not installed (it makes the JPEGs)") from None
    count, batch = (64, 8) if s.smoke else (2048, 256)
    folder = Path(tempfile.mkdtemp(prefix="bench-gpu-jpeg-"))
    rng = np.random.default_rng(0)
    (folder / "0").mkdir()
    for i in range(count):   # noise compresses badly: smooth gradients plus a little noise, as photographs
        base = np.linspace(0, 255, 500, dtype=np.float32)[None, :, None] * np.ones((375, 1, 3), np.float32)
        image = np.clip(base + rng.normal(0, 12, (375, 500, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(folder / "0" / f"{i:05d}.jpg", quality=90)

    @pipeline_def(batch_size=batch, num_threads=max(1, min(8, os.cpu_count() or 1)), device_id=0 if not s.smoke else None)
    def decode():
        jpegs, _ = fn.readers.file(file_root=str(folder), random_shuffle=False, name="reader")
        return fn.decoders.image(jpegs, device="cpu" if s.smoke else "mixed")

    pipe = decode()
    pipe.build()
    for _ in range(2):
        pipe.run()
    rounds = max(1, count // batch)
    start = time.perf_counter()
    for _ in range(rounds):
        pipe.run()
    r.figure("dali_decode_imgs_per_s", rounds * batch / (time.perf_counter() - start), "500x375 JPEGs, quality 90")


# ----------------------------------------------------------------------------------------------
# Batch-1 latency

def batch1_latency(s: Setting, r: Report, name: str, net, x, bf16: bool) -> None:
    """`net` at batch 1, eager then compiled (its compilation in the warm-up calls): mean, p50, p99 ms."""
    torch = s.torch
    for compiled in (False, True):
        model = s.compile(net) if compiled else net
        times = []
        with torch.inference_mode(), torch.autocast(s.device.type, dtype=torch.bfloat16, enabled=bf16):
            for i in range(s.latency_warmup + s.latency_runs):
                s.sync()
                start = time.perf_counter()
                model(x)
                s.sync()
                if i >= s.latency_warmup:      # warm-up calls (compilation) excluded
                    times.append(1000 * (time.perf_counter() - start))
        tag = f"{'compiled' if compiled else 'eager'}_{'bf16' if bf16 else 'fp32'}"
        times.sort()
        r.figure(f"{name}_latency_ms_{tag}_mean", statistics.fmean(times))
        r.figure(f"{name}_latency_ms_{tag}_p50", times[len(times) // 2])
        r.figure(f"{name}_latency_ms_{tag}_p99", times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)])


def part_latency(s: Setting, r: Report) -> None:
    torch = s.torch
    last = torch.channels_last
    net = load_resnet50()(num_classes=1000).to(s.device, memory_format=last).eval()
    px = s.sizes[-1]
    x = torch.randn(1, 3, px, px, device=s.device).contiguous(memory_format=last)
    for bf16 in (True, False):
        batch1_latency(s, r, "resnet50", net, x, bf16)
    # The small tasks' networks as their references build them (default hyperparameters), fp32.
    fashion = load_reference_module("fashion-mnist-cnn-pytorch").build_model(
        reference_defaults("fashion-mnist-cnn-pytorch")["widths"])
    resnet56 = load_reference_module("cifar10-resnet56-pytorch").CifarResNetModel(56, "basic")
    fast_cfg = reference_defaults("cifar10-fast-pytorch")
    fast = load_reference_module("cifar10-fast-pytorch").net_from_config(fast_cfg)
    for name, small, shape in (("fashion_mnist_cnn", fashion, (1, 1, 28, 28)),
                               ("cifar10_resnet56", resnet56, (1, 3, 32, 32)),
                               ("cifar10_fast", fast, (1, 3, 32, 32))):
        small = small.to(s.device, memory_format=last).eval()
        batch1_latency(s, r, name, small, torch.randn(*shape, device=s.device).contiguous(memory_format=last), False)


# ----------------------------------------------------------------------------------------------
# cifar10-fast-pytorch: its own setup and epoch loop on random CIFAR-shaped images

def cifar_fast_epochs(s: Setting, compiled: bool) -> tuple[float, float, int]:
    """(first epoch s, later epochs' mean s, the schedule's epochs) of the reference on synthetic
    data: CifarFast.setup with its loader swapped for random uint8 images, then train_epoch."""
    from harness import registry
    from harness.reference import Context
    spec = registry.load_spec("cifar10-fast-pytorch", REPO / "references")
    cls = spec.load_entry_class()
    module = sys.modules[cls.__module__]
    n = 256 if s.smoke else 50_000
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.int64)
    module.load_cifar10 = lambda root, split: (images, labels)      # the data, never the recipe
    overrides = [f"compile={'true' if compiled else 'false'}"]
    if s.smoke:         # the same network and step, narrower, on 2 batches an epoch
        overrides += ["batch_size=128", "widths=16,32,32"]
    config = registry.resolve_hyperparameters(spec, overrides)
    with cpu_only(s.torch) if s.smoke else contextlib.nullcontext():
        ref = cls()
        ref.setup(Context(config=config, data_root=Path(tempfile.gettempdir()), seed=0, task=spec.task,
                          show_progress=False))
    times = []
    for epoch in range(1, 3 if s.smoke else 5):
        ref.synchronize()
        start = time.perf_counter()
        ref.train_epoch(epoch)
        ref.synchronize()
        times.append(time.perf_counter() - start)
    return times[0], statistics.fmean(times[1:]), math.ceil(config["epochs"])      # 9.9: 10 epochs, the last partial


def part_cifar10_fast(s: Setting, r: Report) -> None:
    for compiled in (False, True):
        tag = "compiled" if compiled else "eager"
        try:
            first, later, epochs = cifar_fast_epochs(s, compiled)
        except Exception as exc:
            r.skip(f"cifar10_fast_{tag}", one_line(exc))
            continue
        r.figure(f"cifar10_fast_first_epoch_s_{tag}", first, "includes compilation and cuDNN autotuning")
        r.figure(f"cifar10_fast_epoch_s_{tag}", later, "50,000 synthetic 32x32 images" if not s.smoke else "tiny")
        projected = epochs * later
        r.figure(f"cifar10_fast_{epochs}_epochs_s_{tag}", projected,
                 f"the schedule's epochs x a warm epoch, no setup, no eval; {ANCHORS['cifar10_fast']}")
        if compiled and not s.smoke:
            r.goal("cifar10_fast_4s", projected < GOAL_CIFAR_SECONDS,
                   f"{projected:.2f} s for {epochs} epochs on {s.name}; accuracy not measured (synthetic data)")


# ----------------------------------------------------------------------------------------------
# BiDAF on SQuAD: seconds per epoch from the references' own training steps

def load_bidaf():
    """squad-bidaf-pytorch's train.py."""
    return load_reference_module("squad-bidaf-pytorch")


def bidaf_inputs(s: Setting) -> tuple[dict, dict, dict, int, int]:
    """(shapes, the reference.toml hyperparameters for this setting, a synthetic batch, steps, warm-up)."""
    import tomllib

    from common.squad import synthetic_batch
    shapes = BIDAF_SMOKE if s.smoke else BIDAF_SHAPES
    with open(BIDAF_DIR / "reference.toml", "rb") as f:
        config = tomllib.load(f)["hyperparameters"]
    config.update(BIDAF_SMOKE_CONFIG if s.smoke else {}, batch_size=shapes["batch"])
    batch = synthetic_batch(shapes["batch"], shapes["context"], shapes["question"], shapes["word_chars"],
                            shapes["vocab"], shapes["chars"] + 2, np.random.default_rng(0))
    steps, warmup = (2, 1) if s.smoke else ((10, 3) if s.quick else (30, 5))
    return shapes, config, batch, steps, warmup


def bidaf_torch_step_seconds(s: Setting, config: dict, batch: dict, shapes: dict, steps: int, warmup: int) -> float:
    torch = s.torch
    train = load_bidaf()
    words = torch.randn(shapes["vocab"], config["word_dim"])
    net = train.BiDAF(words, shapes["chars"] + 2, config).to(s.device).train()
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=config["lr"])
    ema = train.EMA(net, config["ema_decay"])
    for _ in range(warmup):         # cuDNN's plans, the allocator's growth, Adam's state
        train.train_step(net, opt, ema, batch, s.device)
    s.sync()
    start = time.perf_counter()
    for _ in range(steps):
        train.train_step(net, opt, ema, batch, s.device)
    s.sync()
    return (time.perf_counter() - start) / steps


def bidaf_figures(s: Setting, r: Report, framework: str, step: float, shapes: dict) -> None:
    per_epoch = math.ceil(SQUAD_TRAIN_QUESTIONS / shapes["batch"])
    shape = (f"batch {shapes['batch']}, context {shapes['context']} tokens, question {shapes['question']}, "
             f"{shapes['word_chars']} chars a word, {shapes['vocab']:,}-word frozen table, {shapes['chars']} chars")
    r.figure(f"bidaf_step_s_{framework}", step, shape + ("" if s.smoke else "; synthetic ids, fp32"))
    r.figure(f"bidaf_samples_per_s_{framework}", shapes["batch"] / step)
    epoch = per_epoch * step
    r.figure(f"bidaf_epoch_s_{framework}", epoch,
             f"{per_epoch:,} steps of {shapes['batch']} (SQuAD v1.1's {SQUAD_TRAIN_QUESTIONS:,} training questions)")
    r.figure(f"bidaf_projected_f1_075_s_{framework}", BIDAF_EPOCHS_TO_F1_075 * epoch,
             f"{BIDAF_EPOCHS_TO_F1_075} epochs x an epoch (the seed's epochs to F1 0.75, assumed), no setup, no eval; "
             f"{ANCHORS['bidaf']}")


def part_bidaf(s: Setting, r: Report) -> None:
    shapes, config, batch, steps, warmup = bidaf_inputs(s)
    try:
        bidaf_figures(s, r, "pytorch", bidaf_torch_step_seconds(s, config, batch, shapes, steps, warmup), shapes)
    except Exception as exc:
        r.skip("bidaf_pytorch", one_line(exc))
    if s.smoke:                     # TensorFlow's start-up and tracing are many seconds: GPU runs only
        r.skip("bidaf_tensorflow", "not run in a CPU smoke")
        return
    if importlib.util.find_spec("tensorflow") is None:
        r.skip("bidaf_tensorflow", "TensorFlow is not installed (the squad-bidaf-tensorflow environment has it)")
        return
    if importlib.util.find_spec("bench.bidaf_tensorflow") is None:
        r.skip("bidaf_tensorflow", "bench/bidaf_tensorflow.py is missing")
        return
    try:
        from bench import bidaf_tensorflow
        tf_config = dict(config, vocab=shapes["vocab"], chars=shapes["chars"])
        step = bidaf_tensorflow.step_seconds(batch, tf_config, steps, warmup)
    except Exception as exc:
        r.skip("bidaf_tensorflow", one_line(exc))
        return
    bidaf_figures(s, r, "tensorflow", step, shapes)


# ----------------------------------------------------------------------------------------------
# The Fashion-MNIST default's time-to-accuracy, as a user runs it

def tta_of(result_file: Path) -> tuple[float, dict]:
    """tta_seconds of a finished run's result.json; a run that did not converge is not a figure."""
    result = json.loads(result_file.read_text())
    if result.get("status") != "converged" or result.get("tta_seconds") is None:
        raise NotMeasured(f"the run ended {result.get('status')}: {result.get('dnc_reason')}")
    return float(result["tta_seconds"]), result


def part_tta(s: Setting, r: Report, reference: str) -> None:
    from harness import datasets, registry
    from harness.errors import command
    spec = registry.load_spec(reference)
    root = datasets.default_data_root()
    try:
        datasets.verify_dataset(spec.task.dataset, root)
    except datasets.DatasetError as exc:
        raise NotMeasured(f"no {spec.task.dataset} data in {root} ({command(f'data fetch {spec.task.dataset}')}): "
                          f"{one_line(exc)}") from None
    results = Path(tempfile.mkdtemp(prefix="bench-gpu-tta-"))
    smoke = ["--max-epochs", "1", "--threshold", "0.5"] if s.smoke else []     # a code-path check, not a figure
    cmd = [sys.executable, "-m", "harness", "run", reference, "--no-progress", "--no-save",
           "--results", str(results), "--run-id", "bench-gpu", *smoke]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    result_file = results / reference / "bench-gpu" / "result.json"
    if not result_file.exists():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise NotMeasured(f"`harness run {reference}` left no result (exit {proc.returncode}): {tail[:300]}")
    tta, result = tta_of(result_file)
    r.figure(f"tta_seconds_{reference}", tta, f"{result['metric']} {100 * result['metric_value']:.2f}% >= "
             f"{100 * result['threshold']:.0f}% at epoch {result['epochs']}, hardware {result['hardware']}")
    isolation = (result.get("isolation") or {}).get("mode")
    r.figure(f"tta_official_{reference}", "yes" if result.get("official") else "no",
             f"isolation {isolation}" + ("" if result.get("official") else
                                         f"; unofficial: {'; '.join(result.get('unofficial_reasons') or [])}"))


# ----------------------------------------------------------------------------------------------
# Several GPUs: NCCL all-reduce bandwidth

def _allreduce_worker(rank: int, world: int, port: int, megabytes: int, queue) -> None:
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    x = torch.ones(megabytes * 2**20 // 2, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    rounds = 20
    start = time.perf_counter()
    for _ in range(rounds):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / rounds
    if rank == 0:       # nccl-tests' bus bandwidth: what every link carries in a ring all-reduce
        queue.put(2 * (world - 1) / world * x.numel() * x.element_size() / seconds / 1e9)
    dist.destroy_process_group()


def part_multi_gpu(s: Setting, r: Report) -> None:
    torch = s.torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if s.smoke or count < 2:
        raise NotMeasured("no GPU" if s.smoke or count == 0 else "one GPU")
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    megabytes = 64 if s.quick else 256
    mp.start_processes(_allreduce_worker, args=(count, port, megabytes, queue), nprocs=count, start_method="spawn")
    r.figure("nccl_allreduce_bus_gb_per_s", queue.get(), f"{count} GPUs, {megabytes} MiB bf16")


# ----------------------------------------------------------------------------------------------

@reports_errors("python -m bench.gpu")
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m bench.gpu", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=regular_file("--out", "give the JSON file to write (a new name or a file to "
                                                  "replace)"),
                   default=None, help="the JSON file (default results/bench-gpu/<time>.json)")
    p.add_argument("--quick", action="store_true", help="224 px only, fewer steps")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU, even where CUDA is present")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    p.add_argument("--harness-cost-reference", default=harness_cost.REFERENCE, choices=sorted(harness_cost.SCHEDULES),
                   help="the record-class reference the harness_cost part times against its bare loop")
    p.add_argument("--lm-references", default=",".join(lm_step.REFERENCES),
                   help="comma-separated: the language-model references the lm_step part times (default both)")
    p.add_argument("--tta-reference", default="fashion-mnist-cnn-pytorch",
                   help="the reference whose time-to-accuracy the tta part measures")
    a = p.parse_args(argv)
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        print(f"python -m bench.gpu: error: --parts: unknown {', '.join(unknown)}; choose from {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("python -m bench.gpu: error: torch is not installed (make bench-gpu uses a reference's environment)",
              file=sys.stderr)
        return 2
    lm_names = [x.strip() for x in a.lm_references.split(",") if x.strip()]
    if not lm_names or set(lm_names) - set(lm_step.REFERENCES):
        print(f"python -m bench.gpu: error: --lm-references: give some of {', '.join(lm_step.REFERENCES)}", file=sys.stderr)
        return 2
    smoke = a.cpu_smoke or not torch.cuda.is_available()
    s = Setting(torch, smoke, a.quick)
    r = Report("cpu smoke" if smoke else "cuda")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = a.out or REPO / "results" / "bench-gpu" / f"{stamp}.json"
    print(f"device={'cpu' if smoke else 'cuda'}  {s.name}" + ("  (no CUDA or --cpu-smoke: tiny sizes, "
          "code paths only, not comparable to the anchors)" if smoke else ""), flush=True)
    print(f"torch={torch.__version__}", flush=True)
    if s.device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    rates: dict = {}
    runners = {
        "resnet50": lambda: rates.update(part_resnet50(s, r)),
        "mfu": lambda: part_mfu(s, r, rates),
        "dali": lambda: part_dali(s, r),
        "latency": lambda: part_latency(s, r),
        "cifar10_fast": lambda: part_cifar10_fast(s, r),
        "bidaf": lambda: part_bidaf(s, r),
        "tta": lambda: part_tta(s, r, a.tta_reference),
        "multi_gpu": lambda: part_multi_gpu(s, r),
        "steps": lambda: reference_steps.part_steps(s, r),
        "peer": lambda: airbench_peer.part_peer(s, r),
        "harness_cost": lambda: harness_cost.part_harness_cost(s, r, a.harness_cost_reference),
        "precision": lambda: cifar_fast_precision.part_precision(s, r),
        "kill9": lambda: killed_run.part_kill9(s, r),
        "lm_step": lambda: lm_step.part_lm_step(s, r, lm_names),
        "lm_cost": lambda: lm_step.part_lm_cost(s, r),
    }
    for part in parts:
        try:
            runners[part]()
        except NotMeasured as exc:
            r.skip(part, str(exc))
        except Exception as exc:       # one part's failure is its line, the others still run
            r.skip(part, one_line(exc))
    report = {"time": stamp, "device": "cpu" if smoke else "cuda", "device_name": s.name, "smoke": smoke,
              "quick": a.quick, "torch": torch.__version__, "sizes_px": list(s.sizes), "batch": s.batch,
              "figures": r.figures, "notes": r.notes, "not_measured": r.not_measured, "goals": r.goals,
              "anchors": ANCHORS}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    except OSError as exc:
        print(f"python -m bench.gpu: error: cannot write {out}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"json={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
