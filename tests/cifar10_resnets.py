"""What the CIFAR-10 ResNet references must be, for the PyTorch and the TensorFlow tests alike:
both recipes build the same networks, so both are checked against these numbers. Each reference
carries its recipe in its own train.py; `recipe` loads it the way the harness does."""
import sys
from pathlib import Path
from types import ModuleType

from harness import registry

REPO = Path(__file__).resolve().parent.parent

# (depth, block) of each seed reference; the name ends in -pytorch or -tensorflow. ResNet-20, -56 and -110
# are He et al. 2015's post-activation networks ("basic"); the ResNet-164s are the seeds' pre-activation ones
# (the PyTorch seed's preact164-basic and preact164).
SEEDS = {
    "cifar10-resnet20": (20, "basic"),
    "cifar10-resnet56": (56, "basic"),
    "cifar10-resnet110": (110, "basic"),
    "cifar10-resnet164": (164, "preact-basic"),
    "cifar10-resnet164b": (164, "preact-bottleneck"),
}
# He et al. 2016, table 6: parameters of the CIFAR-10 ResNets with option-A shortcuts.
PUBLISHED = {20: 0.27e6, 56: 0.85e6, 110: 1.7e6}
# Exact trainable counts (convolution kernels, batch-norm scales and shifts, the last layer's
# weight and bias; not the batch-norm running statistics). The ResNet-164s' are the PyTorch seed's
# PreActResNet164Basic and PreActResNet164 (models/resnet.py@339261c, counted with its own code).
EXACT = {
    (20, "basic"): 269_722,
    (56, "basic"): 853_018,
    (110, "basic"): 1_727_962,
    (164, "preact-basic"): 2_605_466,
    (164, "preact-bottleneck"): 1_703_258,
}
CONVOLUTIONS_A_BLOCK = {"basic": 2, "preact-basic": 2, "preact-bottleneck": 3}


def layer_sequence(depth: int, block: str) -> list[str]:
    """The network's operations in the order they run, as tests/test_anchor_cifar10_resnets.py reads them
    off either framework's graph: `conv<k>[/<stride>]`, `bn`, `relu`, `pool`, `fc`, and each addition with
    its shortcut: `add+identity`, `add+zero-pad` (option A), `add+proj1[/2](relu)` (a 1x1 convolution of
    the block's pre-activated input) or `add+proj1[/2](input)` (of its raw input).
    "basic": He et al. 2015's post-activation order; "preact-*": the PyTorch seed's PreActBlock and
    PreActBottleneck in its ResNet (models/resnet.py@339261c: lines 88-121, 213-253, 256-312): no BN after
    the stem, BN and ReLU before every convolution, nothing after an addition, a final BN and ReLU."""
    convs = CONVOLUTIONS_A_BLOCK[block]
    n, rest = divmod(depth - 2, 3 * convs)
    assert n >= 1 and not rest, (depth, block)
    preact, expansion = block.startswith("preact-"), 4 if block == "preact-bottleneck" else 1
    seq, c_in = ["conv3"] + ([] if preact else ["bn", "relu"]), 16
    for stage, width in enumerate((16, 32, 64)):
        for j in range(n):
            s = "/2" if stage and not j else ""
            changes = bool(s) or c_in != width * expansion
            if not preact:
                seq += [f"conv3{s}", "bn", "relu", "conv3", "bn", "add+zero-pad" if changes else "add+identity", "relu"]
            else:
                for conv in (["conv1", f"conv3{s}", "conv1"] if expansion == 4 else [f"conv3{s}", "conv3"]):
                    seq += ["bn", "relu", conv]
                seq.append(f"add+proj1{s}(relu)" if changes else "add+identity")
            c_in = width * expansion
    return seq + (["bn", "relu"] if preact else []) + ["pool", "fc"]


def references(framework: str) -> dict[str, tuple[int, str]]:
    return {f"{name}-{framework}": shape for name, shape in SEEDS.items()}


def recipe(name: str) -> ModuleType:
    """The train.py module of reference `name`, imported through its reference.toml's entry."""
    return sys.modules[registry.load_spec(name).load_entry_class().__module__]


# ---- the seed entries' own logs ------------------------------------------------------------------
# The DAWNBench seed entries' TSVs (stanford-futuredata/dawn-bench-entries, CIFAR10/train/): ResNet-164
# with basic blocks is "nb" (no bottleneck), with bottleneck blocks "b"; one TSV per machine, per
# framework. ResNet-20, -56 and -110 were never entered, so no log of theirs is public.
ENTRIES = REPO / "tests" / "data" / "dawn-bench-entries" / "CIFAR10" / "train"
ENTRY_PREFIX = {"cifar10-resnet164": "dawn_resnet164_nb_", "cifar10-resnet164b": "dawn_resnet164_b_"}


def entry_logs(name: str) -> list[Path]:
    """The seed entries' TSVs that reference `name` (e.g. cifar10-resnet164-tensorflow) claims: its
    network, its framework; [] for the ResNets no entry ran."""
    seed, framework = name.rsplit("-", 1)
    if seed not in ENTRY_PREFIX:
        return []
    return sorted(p for p in ENTRIES.glob(f"{ENTRY_PREFIX[seed]}*_{framework}*.tsv"))


def entry_accuracies(path: Path) -> list[float]:
    """Test accuracy (%) after each epoch, epoch 1 first. The TensorFlow seed's epochs are 391 steps of
    128 (its TSV's epoch column reads 1.00096, 2.00192, ...): row k is the checkpoint after k of them."""
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == ["epoch", "hours", "top1Accuracy"], path
    rows = [line.split("\t") for line in lines[1:] if line.strip()]
    assert [round(float(r[0])) for r in rows] == list(range(1, len(rows) + 1)), path
    return [float(r[2]) for r in rows]


# How a rate drop shows in an entry's test accuracy (measured on the 16 seed TSVs, both frameworks):
# at the epoch after a tenfold drop the accuracy rises more than in any other epoch within 5 of it
# (5 to 17 points at the first drop, 1.0 to 4.0 at the second), and each of the 5 epochs from it beats
# each of the 5 before it, by 0.79 points at the least (4.85 at the first drop). Elsewhere after epoch
# 20 no epoch does both with a margin above 0.5 points (50 test images), so 0.5 separates the two.
# A fixed rise alone cannot: at rate 0.1 the accuracy swings by up to 18 points from one epoch to the
# next, more than the second drop's rise. In the first 20 epochs the network is still learning
# (40% to 85%) and rises of that shape happen without any change of rate, so they are not read.
DROP_WINDOW, DROP_MARGIN, SETTLED_FROM = 5, 0.5, 21


def drop_epochs(acc: list[float]) -> list[int]:
    """The epochs (from 1) whose accuracy shows a drop of the learning rate before them."""
    a = [None, *acc]                    # a[e]: after epoch e
    n, w, found = len(acc), DROP_WINDOW, []
    for e in range(SETTLED_FROM, n - w + 2):
        rises = {k: a[k] - a[k - 1] for k in range(e - w, min(n, e + w) + 1)}
        if max(rises, key=rises.get) == e and min(a[e:e + w]) - max(a[e - w:e]) > DROP_MARGIN:
            found.append(e)
    return found


def first_epoch_at(acc: list[float], threshold: float = 94.0) -> int | None:
    return next((e for e, value in enumerate(acc, 1) if value >= threshold), None)
