"""The `steps` part of `python -m bench.gpu`: each PyTorch reference's own training step, at its
real batch and input size, on synthetic data: seconds a step, peak device memory, and whether the
loss falls.

A reference is set up by its own `setup` (its loader swapped for synthetic data: the data, never
the recipe) and trained by its own `train_epoch` for two epochs of STEPS steps each: the first
warms up (cuDNN's autotuning, the allocator's growth), the second is timed. Every `train_step`
call's loss is kept. The images are learnable (a class is a colour under noise) and BiDAF cycles
a pool of four batches, so "the loss falls" is the check that the step learns, not an accuracy.

torch.compile is off in this part: the compiled steps are timed by the `resnet50` and
`cifar10_fast` parts, and compiling here would cost minutes of a short GPU lease.
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.gpu_common import REPO, NotMeasured, Report, Setting, cpu_only, load_reference_module, one_line

STEPS = 50                          # steps an epoch: the 50, timed in the second epoch
SMOKE_STEPS = 2
CIFAR_RESNETS = ("cifar10-resnet20-pytorch", "cifar10-resnet56-pytorch", "cifar10-resnet110-pytorch",
                 "cifar10-resnet164-pytorch", "cifar10-resnet164b-pytorch")
AUTO = "; bf16 and channels_last as its auto switches choose (on with CUDA)"
IMAGENET_PX = 224                   # the size; the recipe itself trains at 160 to 192 px
# BiDAF's SQuAD-length batch: 60 questions on contexts of 160 tokens (SQuAD's training contexts
# average about 140; a batch pads to its longest), questions of 12, 16 characters a word.
BIDAF = {"batch": 60, "context": 160, "question": 12, "word_chars": 16, "vocab": 90_000, "chars": 100}
BIDAF_SMOKE = {"batch": 4, "context": 20, "question": 5, "word_chars": 8, "vocab": 200, "chars": 30}


def learnable_images(n: int, size: int, channels: int, classes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 NHWC images, int64 labels): each class a colour of its own under uniform noise, so a
    network that learns at all lowers its loss within a few dozen steps."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n).astype(np.int64)
    palette = rng.integers(0, 128, (classes, channels)).astype(np.uint8)
    images = rng.integers(0, 128, (n, size, size, channels), dtype=np.uint8)
    images += palette[labels][:, None, None, :]
    return images, labels


class SyntheticImageNetLoader:
    """The ImageNet reference's loader interface (`epoch(e)` yields uint8 (B, 3, S, S) images and
    labels), from two learnable batches made once on the device."""

    def __init__(self, torch, device, batch: int, px: int, steps: int):
        self.steps, self.pool = steps, []
        for seed in range(2):
            images, labels = learnable_images(batch, px, 3, 1000, seed)
            self.pool.append((torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().to(device),
                              torch.from_numpy(labels).to(device)))

    def epoch(self, epoch: int):
        return (self.pool[i % 2] for i in range(self.steps))


def peak_mib(s: Setting) -> float | None:
    if s.device.type != "cuda":
        return None
    return s.torch.cuda.max_memory_allocated(s.device) / 2**20


def reset_peak(s: Setting) -> None:
    if s.device.type == "cuda":
        s.torch.cuda.empty_cache()
        s.torch.cuda.reset_peak_memory_stats(s.device)


def train_reference(s: Setting, name: str, overrides: list[str], data: dict, after_setup=None) -> dict:
    """`name` set up by its own setup, the module attributes in `data` replaced (its data loaders),
    then two epochs of its own train_epoch; the second timed. Returns its figures."""
    from harness import registry
    from harness.reference import Context
    spec = registry.load_spec(name, REPO / "references")
    cls = spec.load_entry_class()
    module = sys.modules[cls.__module__]
    for attr, value in data.items():
        setattr(module, attr, value)
    config = registry.resolve_hyperparameters(spec, overrides)
    reset_peak(s)
    with cpu_only(s.torch) if s.smoke else contextlib.nullcontext():
        ref = cls()
        ref.setup(Context(config=config, data_root=Path(tempfile.gettempdir()), seed=0, task=spec.task,
                          show_progress=False))
    if after_setup is not None:
        after_setup(ref)
    losses = []
    own_step = ref.train_step

    def kept_step(x, y):            # the reference's step; its loss kept (a device tensor: no sync)
        loss = own_step(x, y)
        losses.append(loss)
        return loss
    ref.train_step = kept_step
    ref.train_epoch(1)
    ref.synchronize()
    start = time.perf_counter()
    ref.train_epoch(2)
    ref.synchronize()
    seconds = time.perf_counter() - start
    return {"steps": len(losses) // 2, "step_s": seconds / (len(losses) // 2), "batch": config["batch_size"],
            "losses": [float(v) for v in losses], "peak_mib": peak_mib(s)}


def cifar_resnet(s: Setting, name: str, steps: int) -> dict:
    batch = 8 if s.smoke else 128
    images, labels = learnable_images(steps * batch, 32, 3, 10)
    overrides = [f"batch_size={batch}"]
    if s.smoke:         # the same blocks, shallowest: 6n + 2 basic, 9n + 2 bottleneck
        overrides.append("depth=11" if name == "cifar10-resnet164b-pytorch" else "depth=8")
    figures = train_reference(s, name, overrides, {"load_cifar10": lambda root, split: (images, labels)})
    return dict(figures, input="32x32 CIFAR-format uint8, the reference's crop and flip")


def cifar_fast(s: Setting, steps: int) -> dict:
    batch = 16 if s.smoke else 1024
    images, labels = learnable_images(steps * batch, 32, 3, 10)
    overrides = ["compile=false", f"batch_size={batch}"] + (["widths=16,32,32"] if s.smoke else [])
    figures = train_reference(s, "cifar10-fast-pytorch", overrides,
                              {"load_cifar10": lambda root, split: (images, labels)})
    return dict(figures, input="32x32 CIFAR-format uint8, the reference's translations and flips" + AUTO)


def fashion_mnist(s: Setting, steps: int) -> dict:
    batch = 8 if s.smoke else 256
    images, labels = learnable_images(steps * batch, 28, 1, 10)
    figures = train_reference(s, "fashion-mnist-cnn-pytorch", [f"batch_size={batch}"],
                              {"load_fashion_mnist": lambda root, split: (images[..., 0], labels)})
    return dict(figures, input="28x28 uint8, the reference's flips")


def imagenet_resnet50(s: Setting, steps: int) -> dict:
    torch = s.torch
    batch, px = (4, 32) if s.smoke else (1024, IMAGENET_PX)
    fake = ([f"synthetic/{i}.JPEG" for i in range(steps * batch)], np.zeros(steps * batch, np.int64), ["n0"])

    def synthetic_loader(ref):
        ref.loader = SyntheticImageNetLoader(torch, ref.device, batch, px, steps)
    overrides = ["compile=false", "data_loader=pil", f"batch_size={batch}"]
    figures = train_reference(s, "imagenet-resnet50-pytorch", overrides,
                              {"train_samples": lambda root: fake}, after_setup=synthetic_loader)
    return dict(figures, input=f"{px}x{px} uint8 on the device (no JPEG decoding)" + AUTO)


def squad_bidaf(s: Setting, steps: int) -> dict:
    """BiDAF's network, Adam and weight average through its module's own train_step (its setup
    reads SQuAD and GloVe, which a bare GPU machine lacks), on a pool of four synthetic batches."""
    import tomllib

    from common.squad import synthetic_batch
    torch = s.torch
    shapes = BIDAF_SMOKE if s.smoke else BIDAF
    train = load_reference_module("squad-bidaf-pytorch")
    config = tomllib.loads((REPO / "references" / "squad-bidaf-pytorch" / "reference.toml").read_text())["hyperparameters"]
    if s.smoke:
        config.update(hidden=8, char_filters=8, word_dim=8)
    rng = np.random.default_rng(0)
    pool = [synthetic_batch(shapes["batch"], shapes["context"], shapes["question"], shapes["word_chars"],
                            shapes["vocab"], shapes["chars"] + 2, rng) for _ in range(4)]
    reset_peak(s)
    torch.manual_seed(0)
    net = train.BiDAF(torch.randn(shapes["vocab"], config["word_dim"]), shapes["chars"] + 2, config).to(s.device).train()
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=config["lr"])
    ema = train.EMA(net, config["ema_decay"])
    losses = [train.train_step(net, opt, ema, pool[i % 4], s.device) for i in range(steps)]
    s.sync()
    start = time.perf_counter()
    losses += [train.train_step(net, opt, ema, pool[i % 4], s.device) for i in range(steps)]
    s.sync()
    return {"steps": steps, "step_s": (time.perf_counter() - start) / steps, "batch": shapes["batch"],
            "losses": [float(v) for v in losses], "peak_mib": peak_mib(s),
            "input": f"contexts of {shapes['context']} tokens, questions of {shapes['question']}, "
                     f"{shapes['word_chars']} characters a word; dropout {config['dropout']}, fp32"}


def loss_falls(losses: list[float]) -> tuple[float, float, bool]:
    """(mean of the first five losses, of the last five, whether the last are lower by 5% or more
    of the first: more than the noise of a batch that does not learn)."""
    k = min(5, max(1, len(losses) // 4))
    first, last = statistics.fmean(losses[:k]), statistics.fmean(losses[-k:])
    return first, last, bool(np.isfinite(last) and last <= 0.95 * first)


def part_steps(s: Setting, r: Report) -> None:
    steps = SMOKE_STEPS if s.smoke else STEPS
    runs = [(name, lambda name=name: cifar_resnet(s, name, steps)) for name in CIFAR_RESNETS]
    runs += [("cifar10-fast-pytorch", lambda: cifar_fast(s, steps)),
             ("fashion-mnist-cnn-pytorch", lambda: fashion_mnist(s, steps)),
             ("imagenet-resnet50-pytorch", lambda: imagenet_resnet50(s, steps)),
             ("squad-bidaf-pytorch", lambda: squad_bidaf(s, steps))]
    failed = []
    for name, run in runs:
        key = name.removesuffix("-pytorch").replace("-", "_")
        try:
            figures = run()
        except ModuleNotFoundError as exc:      # this environment lacks the reference's library: not a failure
            r.skip(f"steps_{key}", f"{exc.name} is not installed here (the reference's own environment has it)")
            continue
        except Exception as exc:        # a reference that fails on the device is a finding: its line
            r.skip(f"steps_{key}", one_line(exc))
            failed.append(name)
            continue
        first, last, falls = loss_falls(figures["losses"])
        r.figure(f"steps_{key}_step_ms", 1000 * figures["step_s"],
                 f"batch {figures['batch']}, {figures['input']}; mean of {figures['steps']} steps after "
                 f"{figures['steps']} warm-up steps, compile off")
        r.figure(f"steps_{key}_samples_per_s", figures["batch"] / figures["step_s"])
        if figures["peak_mib"] is not None:
            r.figure(f"steps_{key}_peak_mib", figures["peak_mib"], "torch.cuda.max_memory_allocated")
        r.figure(f"steps_{key}_loss_first5", first)
        r.figure(f"steps_{key}_loss_last5", last, "falls" if falls else "DOES NOT FALL")
        r.figure(f"steps_{key}_loss_falls", "yes" if falls else "no")
    if failed:
        raise NotMeasured(f"{len(failed)} reference(s) failed: {', '.join(failed)}")
