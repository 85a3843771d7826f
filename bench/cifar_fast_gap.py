"""Where cifar10-fast-pytorch's epoch loses time against airbench94's on one GPU:
`python -m bench.cifar_fast_gap [--epochs N]`.

The `peer` part of bench.gpu measures the gap (the whole 9.9-epoch schedule of each); this finds
its cause. On the same synthetic CIFAR-format images it prints:
  - ms a step of the reference as it is, and of variants that each change one thing in this
    process only (the recipe's file is untouched): the augmentation left out (one batch made
    ahead, reused), the training images kept in bf16 and channels_last (the batch's gather and
    layout change on fewer bytes), the whole network in bf16 with autocast off (airbench94 keeps
    its weights in fp16), the last two together, and the reference compiled;
  - airbench94's ms a step, from its train94 over the same epochs;
  - torch.profiler over one epoch of each: the device's busy time, the kernel launches, and the
    busiest device kernels and host operators.
A variant's figure is a lead, not a recipe: the ones that keep the recipe's numerics get into
train.py only with a test that says so. Needs CUDA and `pip install airbench==0.1.8`.
"""
from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

from bench.airbench_peer import TEST_IMAGES, TRAIN_IMAGES, working_directory, write_airbench_data
from bench.gpu_common import REPO, one_line
from bench.reference_steps import learnable_images
from harness.arguments import Parser, reports_errors, whole

ROWS = 12


def reference(torch, images, labels, overrides=()):
    """cifar10-fast-pytorch set up by its own setup on `images` (compile off unless an override
    turns it on)."""
    from harness import registry
    from harness.reference import Context
    spec = registry.load_spec("cifar10-fast-pytorch", REPO / "references")
    cls = spec.load_entry_class()
    sys.modules[cls.__module__].load_cifar10 = lambda root, split: (images, labels)
    sets = {"compile": "compile=false", **{o.partition("=")[0]: o for o in overrides}}    # a key once: a variant's wins
    config = registry.resolve_hyperparameters(spec, list(sets.values()))
    ref = cls()
    ref.setup(Context(config=config, data_root=Path(tempfile.gettempdir()), seed=0, task=spec.task,
                      show_progress=False))
    return ref


def no_augmentation(torch, ref):
    """The step alone: one augmented batch made ahead and fed every step."""
    idx = torch.arange(ref.batch, device=ref.device)
    shifts = torch.full((2, ref.batch), ref.ctx.config["crop_pad"], device=ref.device)
    fixed = ref.augment(idx, shifts, 1)
    ref.augment = lambda idx, shifts, epoch: fixed


def bf16_images(torch, ref):
    """The padded training images stored in bf16, channels_last: the gather moves half the bytes."""
    ref.train_x = ref.train_x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)


def bf16_network(torch, ref):
    """The network's weights in bf16 (batch norm in float32, as airbench94 keeps it), autocast off,
    the batch cast to bf16 at the step. Lookahead's slow copies still follow the float32 tensors
    they were taken from: a timing variant only."""
    ref.net.to(torch.bfloat16)
    for module in ref.net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.float()
    ref.use_bf16 = False
    own = ref.train_step
    ref.train_step = lambda x, y: own(x.to(torch.bfloat16), y)


VARIANTS = {        # name: (hyperparameter overrides, changes after setup)
    "as it is": ((), []),
    "no augmentation": ((), [no_augmentation]),
    "bf16 channels_last images": ((), [bf16_images]),
    "bf16 network, no autocast": ((), [bf16_network]),
    "bf16 images and network": ((), [bf16_images, bf16_network]),
    "fused SGD": (("fused_sgd=true",), []),
    "fused SGD, bf16 network": (("fused_sgd=true",), [bf16_network]),
    "as it is, compiled": (("compile=true",), []),
}


def step_ms(torch, ref, epochs: int) -> float:
    ref.train_epoch(1)                     # warm-up: cuDNN's plans, the allocator
    torch.cuda.synchronize()
    start, steps = time.perf_counter(), ref.step
    for epoch in range(2, 2 + epochs):
        ref.train_epoch(epoch)
    torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - start) / (ref.step - steps)


def profile_table(torch, run, label: str, key: str) -> None:
    """torch.profiler over `run`: the device's busy time and the kernel launches (a step that
    launches many small kernels waits on the host), then the busiest kernels and host operators."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    events = prof.key_averages()
    device_us = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) for e in events)
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC"))
    print(f"{key}_profile_device_ms={device_us / 1000:.1f}", flush=True)
    print(f"{key}_profile_kernel_launches={launches}", flush=True)
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            print(f"--- {label}: busiest device kernels (self time)\n"
                  + events.table(sort_by=key, row_limit=ROWS, max_name_column_width=60), flush=True)
            break
        except (AttributeError, KeyError, ValueError):
            continue
    print(f"--- {label}: busiest host operators (self CPU time)\n"
          + events.table(sort_by="self_cpu_time_total", row_limit=ROWS, max_name_column_width=60), flush=True)


@reports_errors("python -m bench.cifar_fast_gap")
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m bench.cifar_fast_gap", description=__doc__.splitlines()[0])
    # Not --max-epochs: each variant trains exactly this many (timed) epochs; there is no threshold to stop at.
    p.add_argument("--epochs", type=whole("--epochs", 1, 1000, 3), default=3,
                   help="timed epochs per variant, after one warm-up")
    p.add_argument("--no-profile", action="store_true", help="the step times only")
    a = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("python -m bench.cifar_fast_gap: error: needs CUDA (airbench94 runs on CUDA only)", file=sys.stderr)
        return 2
    try:
        import airbench
    except Exception as exc:
        print(f"python -m bench.cifar_fast_gap: error: airbench94 does not import ({one_line(exc)}): "
              f"pip install airbench==0.1.8", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    print(f"device={torch.cuda.get_device_name()} torch={torch.__version__}", flush=True)
    images, labels = learnable_images(TRAIN_IMAGES, 32, 3, 10)
    test_images, test_labels = learnable_images(TEST_IMAGES, 32, 3, 10, seed=1)
    for name, (overrides, changes) in VARIANTS.items():
        try:
            ref = reference(torch, images, labels, overrides)
            for change in changes:
                change(torch, ref)
            print(f"cifar10_fast_step_ms[{name}]={step_ms(torch, ref, a.epochs):.3f}", flush=True)
        except Exception as exc:
            print(f"cifar10_fast_step_ms[{name}]: not measured: {one_line(exc)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="cifar-fast-gap-"))
    write_airbench_data(torch, work / "cifar10", images, labels, test_images, test_labels)
    loader = airbench.CifarLoader(str(work / "cifar10"), train=True, batch_size=1024,
                                  aug={"flip": True, "translate": 2}, altflip=True)
    with working_directory(work):
        airbench.train94(loader, epochs=1, verbose=False)                          # warm-up
        for epochs in (1, 1 + a.epochs):        # the difference: epochs alone, setup cancelled out
            torch.cuda.synchronize()
            start = time.perf_counter()
            airbench.train94(loader, epochs=epochs, verbose=False)
            torch.cuda.synchronize()
            if epochs == 1:
                one = time.perf_counter() - start
            else:
                more = time.perf_counter() - start
        steps = math.ceil(len(loader) * (1 + a.epochs)) - len(loader)
        print(f"airbench94_step_ms={1000 * (more - one) / steps:.3f}", flush=True)
        if not a.no_profile:
            profile_table(torch, lambda: airbench.train94(loader, epochs=1, verbose=False),
                          "airbench94, one epoch (train94: its setup included)", "airbench94")
    if not a.no_profile:
        ref = reference(torch, images, labels)
        ref.train_epoch(1)
        profile_table(torch, lambda: ref.train_epoch(2), "cifar10-fast-pytorch, one epoch", "cifar10_fast")
        ref = reference(torch, images, labels, ("fused_sgd=true",))
        ref.train_epoch(1)
        profile_table(torch, lambda: ref.train_epoch(2), "cifar10-fast-pytorch fused_sgd=true, one epoch",
                      "cifar10_fast_fused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
