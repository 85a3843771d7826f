"""The `lm_step` and `lm_cost` parts of `python -m bench.gpu`: the language-model task's GPU tier.

Both run on synthetic GPT-2 token shards written in the speedrun's exact `.bin` format
(tests/fineweb_fixture.py's writer) and brought in by `dawnbench data fetch fineweb10B`'s own code from
a file:// folder, so the references read them as they read FineWeb. Random tokens: the loss stays near
ln 50,257 = 10.8 nats, and the step's work is the real one.

lm_step   each reference's own `train_step` (its global batch of 524,288 tokens, its micro-batches, its
          optimizers) at its sequence length of 1,024, in this process: eager, then torch.compile'd as the
          recipe runs on CUDA; after warm-up steps, ms a step (each closed by a synchronize), tokens/s,
          peak memory, the compiled first step's seconds (the compilation a run pays on its clock), and
          MFU: the model's FLOPs a step (forward and backward, counted by torch's FlopCounterMode on one
          window, times the windows a step; the optimizer's Newton-Schulz products are not model FLOPs)
          over the device's peak dense bf16 FLOP/s. Attention is counted whole, as FlopCounterMode and
          nanoGPT's estimate_mfu count it, though a causal kernel does about half of it.
lm_cost   fineweb-gpt2-modded-pytorch's steps under `dawnbench run` against the bare loop (bench/overhead.py's
          `paired`): the same steps in fresh processes, back to back, alternating which goes first; the
          median of the paired ratios of the train spans with a bootstrap 95% interval, and ms a step each
          side. Eager on both sides: a compiled run compiles inside its first step, and the inductor cache
          a bare process finds in /tmp is one the sandboxed trainer cannot see, so compiled pairs would
          time the cache, not the harness. The harnessed run's eval is on a short validation stream (its
          run is unofficial for that), which changes no train span.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import overhead
from bench.gpu_common import REPO, NotMeasured, Report, Setting, cpu_only, peak_bf16_flops

REFERENCES = {"fineweb-gpt2-modded-pytorch": "modded", "fineweb-gpt2-llmc-pytorch": "llmc"}
PAIRED = "fineweb-gpt2-modded-pytorch"
WARMUP, STEPS = 2, 5                  # steps before the clock (the allocator, cuBLAS's plans), steps timed
SMOKE_WARMUP, SMOKE_STEPS = 1, 2
PAIRED_STEPS, PAIRED_REPEATS = 6, 3   # a paired run: one epoch of 6 steps (3.1M tokens), 3 pairs
TRAIN_TOKENS = 1 << 21                # one train shard; the streams wrap to its start after its end
VAL_TOKENS = 513                      # 512 scored tokens: the eval and its audit stay seconds
SMOKE_VAL_TOKENS = 65                 # the CPU smoke's: 64 audited prefixes (a test runs it in CI)
# The CPU smoke: each recipe's own code at a size a CPU steps in well under a second.
SMOKE_SETS = {
    "modded": {"n_layer": 2, "n_head": 2, "n_embd": 32, "sequence_length": 64, "batch_size": 8,
               "device_batch_size": 4, "eval_batch_size": 4, "bf16": "false"},
    "llmc": {"n_layer": 2, "n_head": 2, "n_embd": 32, "sequence_length": 64, "micro_batch": 4,
             "total_batch_tokens": 512, "eval_batch_size": 4, "bf16": "false", "tf32": "false"},
}


def tokens_per_step(key: str, cfg: dict) -> int:
    """The global batch in tokens, from each recipe's own keys."""
    if key == "modded":
        return cfg["batch_size"] * cfg["sequence_length"]
    return cfg["total_batch_tokens"]


def write_fineweb(root: Path, seed: int = 0, val_tokens: int = VAL_TOKENS) -> tuple[Path, Path]:
    """Synthetic FineWeb under root: the val shard and one train shard in the exact format, fetched into
    root/data by the fetch code with their sha256s pinned in a manifest; (data root, manifest)."""
    sys.path.insert(0, str(REPO / "tests"))         # the exact-format writer the tests use
    try:
        from fineweb_fixture import VAL, fixture_manifest, shard_bytes, train_name
    finally:
        sys.path.remove(str(REPO / "tests"))
    import dawnbench.fetch as fetcher

    rng = np.random.default_rng(seed)
    published = root / "published"
    published.mkdir(parents=True)
    shards = {}
    for name, n in ((VAL, val_tokens), (train_name(1), TRAIN_TOKENS)):
        ids = rng.integers(0, 50256, size=n)
        ids[::1000] = 50256                          # documents of 1,000 tokens, as the tokenizer ends them
        shards[name] = shard_bytes(ids)
        (published / name).write_bytes(shards[name])
    manifest = fixture_manifest(root / "datasets-synthetic-fineweb.toml", shards, train=1)
    with manifest_set(manifest):
        fetcher.fetch("fineweb10B", root / "data", url_base=published.as_uri() + "/", progress=False)
    return root / "data", manifest


@contextlib.contextmanager
def manifest_set(manifest: Path):
    """$DAWNBENCH_DATASETS_MANIFEST names `manifest` while inside, as it was after."""
    from harness.datasets import MANIFEST_ENV
    before = os.environ.get(MANIFEST_ENV)
    os.environ[MANIFEST_ENV] = str(manifest)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MANIFEST_ENV)
        else:
            os.environ[MANIFEST_ENV] = before


def model_flops_per_token(s: Setting, net, window: int) -> float:
    """Forward and backward FLOPs of the network per token, counted on one window of random ids."""
    torch = s.torch
    from torch.utils.flop_counter import FlopCounterMode
    idx = torch.randint(0, 50257, (1, window + 1), device=next(net.parameters()).device)
    with FlopCounterMode(display=False) as counter:
        logits = net(idx[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), idx[:, 1:].reshape(-1)).backward()
    net.zero_grad(set_to_none=True)
    return float(counter.get_total_flops()) / window


def build(s: Setting, name: str, data_root: Path, compiled: bool):
    """The reference's own entry, set up as a trainer on the synthetic shards; (entry, config)."""
    from harness import registry
    from harness.reference import Context
    key = REFERENCES[name]
    spec = registry.load_spec(name, REPO / "references")    # this checkout's, whatever $DAWNBENCH_REFERENCES names
    sets = {**(SMOKE_SETS[key] if s.smoke else {}), "compile": "true" if compiled else "false"}
    cfg = registry.resolve_hyperparameters(spec, [f"{k}={v}" for k, v in sets.items()])
    ref = spec.load_entry_class()()
    with cpu_only(s.torch) if s.smoke else contextlib.nullcontext():
        ref.setup(Context(config=cfg, data_root=data_root, seed=0, task=spec.task, show_progress=False))
    return ref, cfg


def peak_flops(s: Setting) -> float | None:
    """The device's peak dense bf16 FLOP/s, or None where none is on record (a CPU): no utilization then."""
    try:
        return peak_bf16_flops(s.name)
    except NotMeasured:
        return None


def time_steps(s: Setting, name: str, data_root: Path, compiled: bool, r: Report) -> None:
    key, mode = REFERENCES[name], "compiled" if compiled else "eager"
    torch = s.torch
    if s.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    ref, cfg = build(s, name, data_root, compiled)
    warmup, steps = (SMOKE_WARMUP, SMOKE_STEPS) if s.smoke else (WARMUP, STEPS)
    t = time.perf_counter()
    losses = [float(ref.train_step())]
    s.sync()
    first = time.perf_counter() - t
    for _ in range(warmup - 1):
        losses.append(float(ref.train_step()))
    s.sync()
    t = time.perf_counter()
    for _ in range(steps):
        ref.train_step()
    s.sync()
    step_s = (time.perf_counter() - t) / steps
    tokens = tokens_per_step(key, cfg)
    prefix = f"lm_{key}_{mode}"
    r.figure(f"{prefix}_step_ms", 1000 * step_s, f"{name}'s train_step, {tokens:,} tokens a step of "
             f"{cfg['sequence_length']}, mean of {steps} after {warmup} warm-up steps")
    r.figure(f"{prefix}_tokens_per_s", tokens / step_s)
    r.figure(f"{prefix}_first_step_s", first, "the first step: " + ("compilation included" if compiled else
                                                                     "the allocator and cuBLAS's plans"))
    if s.device.type == "cuda":
        r.figure(f"{prefix}_peak_mib", torch.cuda.max_memory_allocated() / 2**20)
    if not compiled:
        flops = model_flops_per_token(s, ref.net, cfg["sequence_length"])
        r.figure(f"lm_{key}_model_gflop_per_token", flops / 1e9, "forward + backward, FlopCounterMode on one window "
                 "(attention counted whole)")
        r.figure(f"lm_{key}_loss_first", losses[0], "random tokens: ln 50,257 = 10.82 nats is chance")
    else:
        flops = r.figures[f"lm_{key}_model_gflop_per_token"] * 1e9
    peak = peak_flops(s)
    if peak and math.isfinite(step_s):
        r.figure(f"{prefix}_mfu", flops * tokens / step_s / peak, f"over {peak / 1e12:.0f} TFLOP/s dense bf16")
    del ref


def part_lm_step(s: Setting, r: Report, names=tuple(REFERENCES)) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-gpu-lm-") as folder:
        data_root, manifest = write_fineweb(Path(folder), val_tokens=SMOKE_VAL_TOKENS if s.smoke else VAL_TOKENS)
        with manifest_set(manifest):
            for name in names:
                for compiled in (False, True):
                    time_steps(s, name, data_root, compiled, r)


def part_lm_cost(s: Setting, r: Report) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-gpu-lm-cost-") as folder:
        data_root, manifest = write_fineweb(Path(folder), val_tokens=SMOKE_VAL_TOKENS if s.smoke else VAL_TOKENS)
        env = {"DAWNBENCH_DATA": str(data_root), "DAWNBENCH_DATASETS_MANIFEST": str(manifest),
               "DAWNBENCH_REFERENCES": str(REPO / "references")}
        key = REFERENCES[PAIRED]
        sets = {**(SMOKE_SETS[key] if s.smoke else {}), "compile": "false", "steps_per_epoch": PAIRED_STEPS}
        if s.smoke:
            env["CUDA_VISIBLE_DEVICES"] = ""
        repeats = 1 if s.smoke else PAIRED_REPEATS
        f = overhead.paired(PAIRED, 1, 0, repeats, tuple(f"{k}={v}" for k, v in sets.items()), env,
                            log=lambda line: print(line, flush=True))
    tag = "lm_cost_" + f["isolation"].replace("-", "_").replace(",", "_")
    what = (f"{PAIRED}, eager, one epoch of {PAIRED_STEPS} steps of its global batch on synthetic shards, "
            f"{repeats} paired repeats; isolation {f['isolation']}")
    low, high = f["train_ratio_ci95"]
    r.figure(f"{tag}_train_ratio", f["train_ratio"], f"median of paired ratios of the train spans, 95% CI "
             f"{low:.3f}..{high:.3f}; " + what)
    r.figure(f"{tag}_train_ratio_ci95_low", low)
    r.figure(f"{tag}_train_ratio_ci95_high", high)
    r.figure(f"{tag}_bare_step_ms", 1000 * f["bare_train_seconds"] / PAIRED_STEPS, "median; the bare loop's epoch "
             "over its steps, the first included")
    r.figure(f"{tag}_harness_step_ms", 1000 * f["harness_train_seconds"] / PAIRED_STEPS, "median; the harness's "
             "train span over the steps, the first included")
    r.figure(f"{tag}_bare_setup_s", f["bare_setup_seconds"])
    r.figure(f"{tag}_harness_init_s", f["harness_init_seconds"])
    low, high = f["ratio_ci95"]
    r.figure(f"{tag}_ratio", f["ratio"], f"on-clock (init + train + harness spans) over the bare total, 95% CI "
             f"{low:.3f}..{high:.3f}")
    if not s.smoke:
        r.goal("lm_train_within_2pct", f["train_ratio"] <= 1.02,
               f"train spans {100 * (f['train_ratio'] - 1):+.1f}% against the bare loop's")


if __name__ == "__main__":
    raise SystemExit("run it as a part: python -m bench.gpu --parts lm_step,lm_cost")
