"""The `peer` part of `python -m bench.gpu`: the public CIFAR-10 frontier and cifar10-fast-pytorch
side by side, on the same synthetic CIFAR-format images (bench/synthetic_cifar.py) on the same GPU:

- airbench94, the recipe cifar10-fast-pytorch claims (Keller Jordan's, as published on PyPI:
  `airbench==0.1.8`, which needs torchvision): `train94`, its 9.9 epochs of batch 1024;
- airbench94_muon (KellerJordan/cifar10-airbench `airbench94_muon.py`, the file itself, given by
  $AIRBENCH94_MUON): its network, Muon and `main`, 8 epochs of batch 2000, compiled as the file
  does but in torch.compile's default mode (the file's max-autotune costs minutes of compilation a
  short lease cannot spare; PEER_MUON_COMPILE_MODE says which was used);
- cifar10-fast-pytorch: its own setup and train_epoch for its 9.9 epochs (476 steps), eager (its default);
- cifar10-airbench-muon-pytorch, airbench94_muon's recipe as this project's reference: its own setup
  and train_epoch for its 8 epochs (200 steps of 2,000), eager (its default).

Each warms up once (cuDNN's plans, compilation), then ROUNDS rounds time each whole schedule in
turn, so drift favours none. Seconds: airbench94's from outside `train94` (its network, whitening
and normalization included); airbench94_muon's from its own CUDA-event timer (whitening, training
and its final TTA evaluation; not its per-epoch evaluations), as its published 2.59 s is;
the two references' from outside their epochs (setup excluded). The ratios carry to another GPU; an
absolute time holds for this one only. Each recipe's held-out top-1 on the synthetic task (its own
TTA) says the four learn the same task comparably; it is no CIFAR-10 accuracy.

In a CPU smoke (`--cpu-smoke`) airbench94 and airbench94_muon cannot run (CUDA only); the two
references run their code paths at a tiny size (TINY) and report no goal.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import synthetic_cifar
from bench.gpu_common import REPO, NotMeasured, Report, Setting, cpu_only, one_line

AIRBENCH_PIN = "airbench==0.1.8"
MUON_ENV = "AIRBENCH94_MUON"
MUON_SOURCE = "KellerJordan/cifar10-airbench airbench94_muon.py"
PEER_MUON_COMPILE_MODE = "default"
TRAIN_IMAGES, TEST_IMAGES = 50_000, 10_000      # CIFAR-10's split sizes: 48 steps an epoch at 1024
ROUNDS = 3
# This project's references in the race: figure key -> reference directory.
# (a variant of a reference: its overrides, as `--set` gives them)
OURS = {"cifar10_fast": ("cifar10-fast-pytorch", ()),
        "cifar10_fast_fused": ("cifar10-fast-pytorch", ("fused_sgd=true",)),
        "cifar10_airbench_muon": ("cifar10-airbench-muon-pytorch", ())}
# A CPU smoke: each reference's code paths in seconds (2 epochs of 2 steps on 64 images, a narrow network).
TINY = {"images": 64, "test_images": 32, "rounds": 1,
        "overrides": ["batch_size=32", "epochs=2", "widths=8,16,16", "tta_level=1", "eval_batch_size=32"]}


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


class Airbench94:
    """airbench94 from PyPI: `train94` on the images in `work`/cifar10."""

    def __init__(self, s: Setting, airbench, work: Path):
        from airbench.utils import evaluate
        self.s, self.airbench, self.work, self.evaluate = s, airbench, work, evaluate
        self.loader = airbench.CifarLoader(str(work / "cifar10"), train=True, batch_size=1024,
                                           aug={"flip": True, "translate": 2}, altflip=True)
        self.steps = math.ceil(len(self.loader) * 9.9)

    def warm_up(self) -> None:
        with working_directory(self.work):
            self.airbench.train94(self.loader, verbose=False)

    def timed(self) -> tuple[float, float]:
        """(seconds of one whole train94, its held-out top-1 with TTA level 2)."""
        with working_directory(self.work):
            self.s.sync()
            start = time.perf_counter()
            model = self.airbench.train94(self.loader, verbose=False)
            self.s.sync()
            seconds = time.perf_counter() - start
            test = self.airbench.CifarLoader(str(self.work / "cifar10"), train=False, batch_size=2000)
            return seconds, self.evaluate(model, test, tta_level=2)


class Airbench94Muon:
    """airbench94_muon.py's network, Muon and `main`, the file loaded as a module."""

    def __init__(self, s: Setting, path: Path, work: Path):
        spec = importlib.util.spec_from_file_location("airbench94_muon", path)
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)        # its top level: imports and definitions only
        torch = s.torch
        self.work = work
        self.model = self.module.CifarNet().cuda().to(memory_format=torch.channels_last)
        self.model.compile(mode=PEER_MUON_COMPILE_MODE)

    def run(self, run) -> tuple[float, float]:
        """(its own timer's seconds, its held-out TTA top-1) of one `main`."""
        out = io.StringIO()
        with working_directory(self.work), contextlib.redirect_stdout(out):
            accuracy = self.module.main(run, self.model)
        rows = [line for line in out.getvalue().splitlines() if line.startswith("|") and "eval" in line]
        if not rows:
            raise RuntimeError("airbench94_muon printed no final row")
        seconds = float([cell.strip() for cell in rows[-1].strip("|").split("|")][-1])
        return seconds, float(accuracy)


def dynamo_graphs(torch) -> int:
    """Graphs torch.compile has made in this process (a recompilation in a timed run shows here)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"].get("unique_graphs", 0))
    except Exception:       # a private counter: its absence costs the check, never the figure
        return -1


class OurReference:
    """A reference's own setup and train_epoch on the synthetic images (its loader swapped: the data,
    never the recipe); its own `scores` (its TTA) on the held-out ones."""

    def __init__(self, s: Setting, name: str, train, test, overrides=()):
        from harness import registry
        self.s, self.train, self.test = s, train, test
        self.spec = registry.load_spec(name, REPO / "references")
        self.cls = self.spec.load_entry_class()
        self.module = sys.modules[self.cls.__module__]
        self.config = registry.resolve_hyperparameters(self.spec, list(overrides))

    def fresh(self, seed: int = 0):
        from harness.reference import Context
        ref = self.cls()
        # The loader swapped for setup only: the module is shared with anything else in this process.
        original, self.module.load_cifar10 = self.module.load_cifar10, lambda root, split: self.train
        try:
            ref.setup(Context(config=self.config, data_root=Path(tempfile.gettempdir()), seed=seed,
                              task=self.spec.task, show_progress=False))
        finally:
            self.module.load_cifar10 = original
        return ref

    def schedule(self, ref) -> None:
        for epoch in range(1, math.ceil(self.config["epochs"]) + 1):
            ref.train_epoch(epoch)

    def warm_up(self) -> None:
        self.schedule(self.fresh(seed=99))

    def timed(self, seed: int) -> tuple[float, float, int, int]:
        """(seconds of the schedule, held-out top-1, steps, graphs compiled while timed)."""
        torch = self.s.torch
        ref = self.fresh(seed)
        graphs = dynamo_graphs(torch)
        ref.synchronize()
        start = time.perf_counter()
        self.schedule(ref)
        ref.synchronize()
        seconds = time.perf_counter() - start
        x = self.module.to_device_images(self.test[0], ref.device).contiguous(memory_format=ref.memory_format)
        y = torch.from_numpy(self.test[1]).to(ref.device)
        ref.net.eval()
        correct = sum(int((ref.scores(a).argmax(1) == b).sum()) for a, b in zip(x.split(1000), y.split(1000)))
        return seconds, correct / len(y), ref.step, dynamo_graphs(torch) - graphs


def part_peer(s: Setting, r: Report) -> None:
    if s.smoke:
        r.skip("peer", "airbench94 runs on CUDA only (it puts its network on the GPU in half precision), and so "
                       "does airbench94_muon; this project's references ran at a tiny size")
        with cpu_only(s.torch):
            ours_tiny(s, r)
        return
    try:
        import airbench
    except Exception as exc:
        raise NotMeasured(f"airbench94 does not import ({one_line(exc)}): pip install {AIRBENCH_PIN}") from None
    with tempfile.TemporaryDirectory(prefix="bench-gpu-peer-") as work:
        side_by_side(s, r, airbench, Path(work))


def ours_tiny(s: Setting, r: Report) -> dict[str, tuple[float, float, int]]:
    """The CPU smoke: one timed tiny schedule of each of OURS, cold (no warm-up: the code paths, not a
    figure); {key: (seconds, top-1, steps)}."""
    train = synthetic_cifar.template_images(TINY["images"], seed=1)
    test = synthetic_cifar.template_images(TINY["test_images"], seed=2)
    results = {}
    for key, (name, overrides) in OURS.items():
        recipe = OurReference(s, name, train, test, (*TINY["overrides"], *overrides))
        seconds, accuracy, steps, _ = recipe.timed(seed=0)
        results[key] = (seconds, accuracy, steps)
        r.figure(f"peer_{key}_schedule_s", seconds, f"{name}: {steps} steps at {', '.join(TINY['overrides'])}")
        r.figure(f"peer_{key}_top1", accuracy, f"{TINY['test_images']} held-out synthetic images, its own TTA")
    return results


def side_by_side(s: Setting, r: Report, airbench, work: Path) -> None:
    torch = s.torch
    train = synthetic_cifar.template_images(TRAIN_IMAGES, seed=1)
    test = synthetic_cifar.template_images(TEST_IMAGES, seed=2)
    write_airbench_data(torch, work / "cifar10", *train, *test)
    recipes = {"airbench94": Airbench94(s, airbench, work),
               **{key: OurReference(s, name, train, test, overrides) for key, (name, overrides) in OURS.items()}}
    muon_path = os.environ.get(MUON_ENV)
    if not muon_path or not Path(muon_path).is_file():
        r.skip("peer_airbench94_muon", f"${MUON_ENV} names no file: set it to a copy of {MUON_SOURCE}")
    else:
        try:
            recipes["airbench94_muon"] = Airbench94Muon(s, Path(muon_path), work)
        except Exception as exc:
            r.skip("peer_airbench94_muon", one_line(exc))
    warm = {"airbench94": recipes["airbench94"].warm_up, **{key: recipes[key].warm_up for key in OURS}}
    if "airbench94_muon" in recipes:
        warm["airbench94_muon"] = lambda: recipes["airbench94_muon"].run("warmup")
    for name, fn in list(warm.items()):
        start = time.perf_counter()
        try:
            fn()
        except Exception as exc:
            r.skip(f"peer_{name}", one_line(exc))
            recipes.pop(name)
            continue
        r.figure(f"peer_{name}_warm_up_s", time.perf_counter() - start, "the first schedule: compilation and autotuning")
    seconds: dict[str, list[float]] = {name: [] for name in recipes}
    accuracy: dict[str, list[float]] = {name: [] for name in recipes}
    graphs = {key: 0 for key in OURS}
    for round_ in range(ROUNDS):
        for name, recipe in recipes.items():
            if name in OURS:
                t, acc, steps, new_graphs = recipe.timed(seed=round_)
                graphs[name] += max(new_graphs, 0)
            elif name == "airbench94_muon":
                t, acc = recipe.run(round_)
            else:
                t, acc = recipe.timed()
            seconds[name].append(t)
            accuracy[name].append(acc)
            print(f"peer round {round_}: {name} {t:.3f} s, top-1 {acc:.4f}", flush=True)
    notes = {"airbench94": f"{AIRBENCH_PIN}, train94: {recipes['airbench94'].steps} steps of 1024, 9.9 epochs, fp16 "
                           "weights, eager; its network, whitening and normalization included",
             "airbench94_muon": f"{MUON_SOURCE}: 8 epochs of batch 2000, Muon, torch.compile mode "
                                f"{PEER_MUON_COMPILE_MODE!r} (the file's own: max-autotune); its own timer",
             "cifar10_fast": "476 steps of 1024, bf16 autocast, channels_last, eager; setup excluded",
             "cifar10_fast_fused": "cifar10_fast with SGD's fused kernel (fused_sgd=true)",
             "cifar10_airbench_muon": "200 steps of 2000, bf16 autocast, channels_last, eager; setup excluded"}
    for key in OURS:
        notes[key] += "; no recompilation while timed" if graphs[key] == 0 else f"; {graphs[key]} graph(s) compiled while timed"
    medians = {}
    for name in recipes:
        medians[name] = statistics.median(seconds[name])
        r.figure(f"peer_{name}_schedule_s", medians[name],
                 f"median of {ROUNDS}: {', '.join(f'{t:.3f}' for t in seconds[name])}; {notes[name]}")
        r.figure(f"peer_{name}_top1", statistics.fmean(accuracy[name]),
                 f"mean of {ROUNDS} on the synthetic held-out set, its own TTA")
    for ours, theirs in (("cifar10_fast", "airbench94"), ("cifar10_fast", "airbench94_muon"),
                         ("airbench94", "airbench94_muon"), ("cifar10_airbench_muon", "airbench94_muon"),
                         ("cifar10_airbench_muon", "cifar10_fast"), ("cifar10_fast_fused", "cifar10_fast"),
                         ("cifar10_fast_fused", "airbench94"), ("cifar10_fast_fused", "airbench94_muon")):
        if ours in medians and theirs in medians:
            paired = [a / b for a, b in zip(seconds[ours], seconds[theirs])]
            r.figure(f"peer_ratio_{ours}_over_{theirs}", statistics.median(paired),
                     f"median of {ROUNDS} rounds' ratios")
    if "airbench94_muon" in medians and "cifar10_airbench_muon" in medians:
        ratio = medians["cifar10_airbench_muon"] / medians["airbench94_muon"]
        r.goal("cifar10_airbench_muon_vs_airbench94_muon", ratio <= 1.0,
               f"{medians['cifar10_airbench_muon']:.2f} s against airbench94_muon's {medians['airbench94_muon']:.2f} s "
               f"on {s.name}")
    if "airbench94" in medians and "cifar10_fast" in medians:
        ratio = medians["cifar10_fast"] / medians["airbench94"]
        r.goal("cifar10_fast_vs_airbench94", ratio <= 1.0,
               f"{medians['cifar10_fast']:.2f} s against airbench94's {medians['airbench94']:.2f} s on {s.name}")
