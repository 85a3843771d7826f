"""The `precision` part of `python -m bench.gpu`: cifar10-fast-pytorch's whole schedule in bf16
autocast (its default on CUDA), in fp16 autocast with a dynamic loss scale (`fp16 = "true"`,
airbench94's own precision is float16) and in float32, on the same learnable synthetic CIFAR-10
(bench/synthetic_cifar.py: 50,000 training and 10,000 held-out images).

Per precision and seed: the median seconds of an epoch (epochs 2 to 9, each synchronized; the
first carries cuDNN's autotuning, the 10th is partial), the whole schedule's seconds, and the top-1
accuracy of the trained network on the held-out images through the reference's own `scores` (its
6-view test-time augmentation). A warm-up schedule in each precision runs first. Seeds are
interleaved with precisions, so a machine that drifts favours none.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import synthetic_cifar
from bench.gpu_common import REPO, Report, Setting, cpu_only

PRECISIONS = {"bf16": ["bf16=true", "fp16=false"], "fp16": ["fp16=true"], "fp32": ["bf16=false", "fp16=false"]}
SEEDS = (0, 1)
# The CPU smoke: two epochs of two steps a precision (the CPU's bf16 and fp16 are emulated, and three epochs
# of four steps were a minute of CI's smoke: tests/test_bench_gpu.py)
SMOKE = {"train": 256, "test": 200, "sets": ["batch_size=128", "widths=8,16,16", "epochs=2", "tta_level=1"]}


def train_and_score(s: Setting, cls, config: dict, task, train, test, seed: int) -> tuple[list[float], float, float]:
    """(each epoch's seconds, the schedule's seconds, held-out top-1) of one fresh run."""
    import math

    from harness.reference import Context
    torch = s.torch
    module = sys.modules[cls.__module__]
    with cpu_only(torch) if s.smoke else contextlib.nullcontext():
        ref = cls()
        ref.setup(Context(config=config, data_root=Path(tempfile.gettempdir()), seed=seed, task=task,
                          show_progress=False))
    epochs = []
    for epoch in range(1, math.ceil(config["epochs"]) + 1):
        ref.synchronize()
        start = time.perf_counter()
        ref.train_epoch(epoch)
        ref.synchronize()
        epochs.append(time.perf_counter() - start)
    x = module.to_device_images(test[0], ref.device).contiguous(memory_format=ref.memory_format)
    labels = torch.from_numpy(test[1]).to(ref.device)
    ref.net.eval()
    correct = sum(int((ref.scores(chunk).argmax(1) == y).sum()) for chunk, y in
                  zip(x.split(config["eval_batch_size"]), labels.split(config["eval_batch_size"])))
    return epochs, sum(epochs), correct / len(labels)


def part_precision(s: Setting, r: Report) -> None:
    from harness import registry
    spec = registry.load_spec("cifar10-fast-pytorch", REPO / "references")
    cls = spec.load_entry_class()
    n_train, n_test = (SMOKE["train"], SMOKE["test"]) if s.smoke else (50_000, 10_000)
    train = synthetic_cifar.template_images(n_train, seed=1)
    test = synthetic_cifar.template_images(n_test, seed=2)
    sys.modules[cls.__module__].load_cifar10 = lambda root, split: train      # the data, never the recipe
    extra = SMOKE["sets"] if s.smoke else []
    configs = {name: registry.resolve_hyperparameters(spec, [*sets, *extra]) for name, sets in PRECISIONS.items()}
    if not s.smoke:                                   # warm-up: cuDNN's plans for each precision's kernels
        for config in configs.values():
            train_and_score(s, cls, config, spec.task, train, test, seed=99)
    found: dict[str, list[tuple[list[float], float, float]]] = {name: [] for name in configs}
    for seed in SEEDS[:1] if s.smoke else SEEDS:
        for name, config in configs.items():
            found[name].append(train_and_score(s, cls, config, spec.task, train, test, seed))
    data = f"synthetic CIFAR-10 ({n_train:,} train, {n_test:,} held out, template amplitude " \
           f"{synthetic_cifar.TEMPLATE_AMPLITUDE:g} over noise {synthetic_cifar.NOISE_STD:g})"
    for name, runs in found.items():
        middle = [e for epochs, _, _ in runs for e in (epochs[1:-1] or epochs)]
        r.figure(f"precision_{name}_epoch_s", statistics.median(middle),
                 f"median of the full epochs after the first, {len(runs)} seed(s)")
        r.figure(f"precision_{name}_schedule_s", statistics.median(total for _, total, _ in runs),
                 "median over seeds; setup and eval excluded")
        accuracies = [acc for _, _, acc in runs]
        r.figure(f"precision_{name}_top1", statistics.fmean(accuracies),
                 f"mean over seeds {', '.join(f'{a:.4f}' for a in accuracies)}; 6-view TTA; {data}")
    base = statistics.median(e for epochs, _, _ in found["bf16"] for e in (epochs[1:-1] or epochs))
    for name in ("fp16", "fp32"):
        mine = statistics.median(e for epochs, _, _ in found[name] for e in (epochs[1:-1] or epochs))
        r.figure(f"precision_epoch_ratio_{name}_over_bf16", mine / base)
