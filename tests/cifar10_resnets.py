"""What the CIFAR-10 ResNet references must be, for the PyTorch and the TensorFlow tests alike:
both recipes build the same networks, so both are checked against these numbers. Each reference
carries its recipe in its own train.py; `recipe` loads it the way the harness does."""
import sys
from types import ModuleType

from harness import registry

# (depth, block) of each seed reference; the name ends in -pytorch or -tensorflow.
SEEDS = {
    "cifar10-resnet20": (20, "basic"),
    "cifar10-resnet56": (56, "basic"),
    "cifar10-resnet110": (110, "basic"),
    "cifar10-resnet164": (164, "basic"),
    "cifar10-resnet164b": (164, "bottleneck"),
}
# He et al. 2016, table 6: parameters of the CIFAR-10 ResNets with option-A shortcuts.
PUBLISHED = {20: 0.27e6, 56: 0.85e6, 110: 1.7e6}
# Exact trainable counts (convolution kernels, batch-norm scales and shifts, the last layer's
# weight and bias; not the batch-norm running statistics).
EXACT = {
    (20, "basic"): 269_722,
    (56, "basic"): 853_018,
    (110, "basic"): 1_727_962,
    (164, "basic"): 2_602_906,
    (164, "bottleneck"): 1_704_154,
}


def references(framework: str) -> dict[str, tuple[int, str]]:
    return {f"{name}-{framework}": shape for name, shape in SEEDS.items()}


def recipe(name: str) -> ModuleType:
    """The train.py module of reference `name`, imported through its reference.toml's entry."""
    return sys.modules[registry.load_spec(name).load_entry_class().__module__]
