"""The `peer` part of `python -m bench.gpu`: airbench94, the recipe cifar10-fast-pytorch claims
(Keller Jordan's, as published on PyPI: `airbench==0.1.8`, which needs torchvision), and
cifar10-fast-pytorch itself, on the same synthetic CIFAR-format images on the same GPU.

Each trains its whole schedule, 9.9 epochs of batch 1024 (476 steps), once to warm up (cuDNN's
plans, compilation) and once timed, in this process. The ratio of the two timed schedules is the
figure that carries to another GPU; an absolute time holds for this one only. What each timed run
includes: airbench94's `train94` builds its network and whitening layer and normalizes the
images (its own timer counts the last two as well); cifar10-fast's `setup` (the data on the
device, the whitening layer) is outside its timed run. Accuracy is not measured: the images are
synthetic.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.gpu_common import REPO, NotMeasured, Report, Setting, one_line
from bench.reference_steps import learnable_images

AIRBENCH_PIN = "airbench==0.1.8"
TRAIN_IMAGES, TEST_IMAGES = 50_000, 10_000      # CIFAR-10's split sizes: 48 steps an epoch at 1024


@contextlib.contextmanager
def working_directory(path: Path):
    """airbench94's train() opens its test set at ./cifar10/test.pt, whatever loader it is given."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def write_airbench_data(torch, folder: Path, images, labels, test_images, test_labels) -> None:
    """The images in airbench's own cache format: {images uint8 NHWC, labels, classes} in train.pt and test.pt."""
    folder.mkdir(parents=True, exist_ok=True)
    classes = [str(i) for i in range(10)]
    torch.save({"images": torch.from_numpy(images), "labels": torch.from_numpy(labels), "classes": classes},
               folder / "train.pt")
    torch.save({"images": torch.from_numpy(test_images), "labels": torch.from_numpy(test_labels), "classes": classes},
               folder / "test.pt")


def airbench_schedule_seconds(s: Setting, airbench, work: Path) -> tuple[float, int]:
    """(seconds of airbench94's timed 9.9-epoch train94, its steps)."""
    loader = airbench.CifarLoader(str(work / "cifar10"), train=True, batch_size=1024,
                                  aug={"flip": True, "translate": 2}, altflip=True)
    with working_directory(work):
        airbench.train94(loader, verbose=False)                  # warm-up
        s.sync()
        start = time.perf_counter()
        airbench.train94(loader, verbose=False)
        s.sync()
        seconds = time.perf_counter() - start
    return seconds, math.ceil(len(loader) * 9.9)


def dynamo_graphs(torch) -> int:
    """Graphs torch.compile has made in this process (a recompilation in a timed run shows here)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"].get("unique_graphs", 0))
    except Exception:       # a private counter: its absence costs the check, never the figure
        return -1


def cifar_fast_schedule_seconds(s: Setting, images, labels, compiled: bool) -> tuple[float, int, int]:
    """(seconds of cifar10-fast-pytorch's timed schedule, its steps, graphs compiled while timed):
    its own setup and train_epoch on `images`, after a warm-up schedule of another instance."""
    from harness import registry
    from harness.reference import Context
    spec = registry.load_spec("cifar10-fast-pytorch", REPO / "references")
    cls = spec.load_entry_class()
    sys.modules[cls.__module__].load_cifar10 = lambda root, split: (images, labels)   # the data, never the recipe
    config = registry.resolve_hyperparameters(spec, [f"compile={'true' if compiled else 'false'}"])

    def fresh():
        ref = cls()
        ref.setup(Context(config=config, data_root=Path(tempfile.gettempdir()), seed=0, task=spec.task,
                          show_progress=False))
        return ref

    def schedule(ref) -> None:
        for epoch in range(1, math.ceil(config["epochs"]) + 1):
            ref.train_epoch(epoch)

    schedule(fresh())                                           # warm-up
    ref = fresh()
    graphs = dynamo_graphs(s.torch)
    ref.synchronize()
    start = time.perf_counter()
    schedule(ref)
    ref.synchronize()
    return time.perf_counter() - start, ref.step, dynamo_graphs(s.torch) - graphs


def part_peer(s: Setting, r: Report) -> None:
    if s.smoke:
        raise NotMeasured("airbench94 runs on CUDA only (it puts its network on the GPU in half precision)")
    try:
        import airbench
    except Exception as exc:
        raise NotMeasured(f"airbench94 does not import ({one_line(exc)}): pip install {AIRBENCH_PIN}") from None
    torch = s.torch
    images, labels = learnable_images(TRAIN_IMAGES, 32, 3, 10)
    test_images, test_labels = learnable_images(TEST_IMAGES, 32, 3, 10, seed=1)
    work = Path(tempfile.mkdtemp(prefix="bench-gpu-peer-"))
    write_airbench_data(torch, work / "cifar10", images, labels, test_images, test_labels)
    peer, peer_steps = airbench_schedule_seconds(s, airbench, work)
    r.figure("peer_airbench94_schedule_s", peer, f"{AIRBENCH_PIN}, train94: {peer_steps} steps of 1024, 9.9 epochs, "
             "fp16 weights, eager, synthetic 32x32 images; its network, whitening and normalization included")
    for compiled in (False, True):
        tag = "compiled" if compiled else "eager"
        try:
            ours, steps, graphs = cifar_fast_schedule_seconds(s, images, labels, compiled)
        except Exception as exc:
            r.skip(f"peer_cifar10_fast_{tag}", one_line(exc))
            continue
        note = f"{steps} steps of 1024, bf16 autocast, channels_last, the same images; setup excluded"
        if compiled:
            note += ("; no recompilation while timed" if graphs == 0 else
                     f"; {graphs} graph(s) compiled while timed, included" if graphs > 0 else "")
        r.figure(f"peer_cifar10_fast_schedule_s_{tag}", ours, note)
        r.figure(f"peer_ratio_cifar10_fast_{tag}_over_airbench94", ours / peer,
                 "goal <= 1.0 at equal epochs to 94% (both 9.9)")
        if compiled:
            r.goal("cifar10_fast_vs_airbench94", ours / peer <= 1.0,
                   f"{ours:.2f} s against airbench94's {peer:.2f} s on {s.name}, equal schedules")
