"""cifar10-resnet164b-pytorch: ResNet-164 with pre-activation bottleneck blocks (n = 18 per stage, 1.7M parameters) on CIFAR-10
in PyTorch, trained with the DAWNBench seed recipe (He et al. 2016).

The five references cifar10-resnet{20,56,110,164}-pytorch (basic blocks) and
cifar10-resnet164b-pytorch (bottleneck blocks) each carry this same file; `depth` and `block`
are hyperparameters in their reference.toml. Read top to bottom; to fork, `cp -r` this directory
and edit this file.

The network ("Deep Residual Learning for Image Recognition", section 4.2, and, pre-activation,
"Identity Mappings in Deep Residual Networks"; `block` in reference.toml picks the form):
  - a 3x3 convolution to 16 channels, then three stages of n residual blocks at 16, 32 and 64
    channels (strides 1, 2, 2), global average pooling and one linear layer to 10 classes;
  - "basic" (ResNet-20, -56, -110: He et al. 2015's post-activation form): two 3x3 convolutions,
    depth = 6n + 2, batch norm after every convolution and ReLU after the addition (the stem's
    too), with parameter-free shortcuts (option A: subsample by 2 and pad the new channels with
    zeros), so the counts are the paper's: ResNet-20 0.27M, ResNet-56 0.85M, ResNet-110 1.7M;
  - "preact-basic" and "preact-bottleneck" (ResNet-164, the seed's preact164-basic and preact164:
    its PreActBlock and PreActBottleneck): batch norm and ReLU before every convolution of a block,
    nothing after its addition, none after the stem, and one batch norm and ReLU after the last
    block, before the pooling; two 3x3 convolutions (depth = 6n + 2) or 1x1, 3x3 (strided), 1x1
    with 4x expansion (depth = 9n + 2); where the shape changes the shortcut is a 1x1 convolution
    (no batch norm) of the block's pre-activated input, elsewhere the input itself;
  - He (fan-out) initialization, no dropout.
The seed recipe: SGD with momentum 0.9 and weight decay 5e-4 at batch 128; learning rate 0.01
for 1 warm-up epoch, 0.1 until epoch 91, 0.01 until epoch 136, then 0.001 to epoch 181 (the
schedule the seed entries ran, in both frameworks: their logs jump at epochs 92 and 137); random crops of
the image padded by 4 black pixels and random horizontal flips; per-channel normalization.
The whole training set lives on the device as one uint8 tensor and each batch is augmented there
with one gather (no per-image loader). The harness times and scores everything; this file never
sees the test labels.
"""
from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from common.loaders import load_cifar10, load_cifar10_images
from common.torch_augment import crop_flip
from common.torch_base import TorchReference

# Per-channel pixel statistics of the 50,000 CIFAR-10 training images (after scaling to [0, 1]).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
PAD = 4                               # pixels of zero padding around each image for random crops
WIDTHS = (16, 32, 64)                 # channels of the three stages (before bottleneck expansion)


# ----------------------------------------------------------------------------------------------
# The network

class BasicBlock(nn.Module):
    """Post-activation: two 3x3 convolutions, each followed by batch norm, ReLU after the addition;
    parameter-free shortcut (option A) when the shape changes."""
    expansion, layers, preactivation = 1, 2, False

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, width, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.stride, self.extra_channels = stride, width - c_in

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride != 1:
            x = x[:, :, ::self.stride, ::self.stride]
        if self.extra_channels:       # zero channels, split evenly before and after, as the paper
            half = self.extra_channels // 2
            x = F.pad(x, (0, 0, 0, 0, half, self.extra_channels - half))
        return x

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


def projection(c_in: int, c_out: int, stride: int) -> nn.Module | None:
    """The pre-activation blocks' shortcut where the shape changes: a bare 1x1 convolution, as the
    seed's (no batch norm: the input it projects is normalized already); None where it does not."""
    return nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False) if stride != 1 or c_in != c_out else None


class PreActBlock(nn.Module):
    """Pre-activation (the seed's PreActBlock): BN, ReLU, 3x3 conv (strided), BN, ReLU, 3x3 conv,
    plus the shortcut; nothing after the addition."""
    expansion, layers, preactivation = 1, 2, True

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(c_in)
        self.conv1 = nn.Conv2d(c_in, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.shortcut = projection(c_in, width, stride)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        out = self.conv2(F.relu(self.bn2(self.conv1(pre)), inplace=True))
        # A projection takes the pre-activated input (the seed's `inputs = H`); identity, the raw one.
        return out + (x if self.shortcut is None else self.shortcut(pre))


class PreActBottleneck(nn.Module):
    """Pre-activation (the seed's PreActBottleneck): BN, ReLU, 1x1 conv; BN, ReLU, 3x3 conv
    (strided); BN, ReLU, 1x1 conv expanding by 4; plus the shortcut; nothing after the addition."""
    expansion, layers, preactivation = 4, 3, True

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(c_in)
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * self.expansion, 1, bias=False)
        self.shortcut = projection(c_in, width * self.expansion, stride)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        out = self.conv2(F.relu(self.bn2(self.conv1(pre)), inplace=True))
        out = self.conv3(F.relu(self.bn3(out), inplace=True))
        return out + (x if self.shortcut is None else self.shortcut(pre))


BLOCKS = {"basic": BasicBlock, "preact-basic": PreActBlock, "preact-bottleneck": PreActBottleneck}


def blocks_per_stage(depth: int, block: str) -> int:
    """n in depth = 6n + 2 (2 convolutions a block) or 9n + 2 (bottlenecks: 3 a block)."""
    if block not in BLOCKS:
        raise ValueError(f"block {block!r}: expected one of {', '.join(BLOCKS)}")
    layers = BLOCKS[block].layers
    n, rest = divmod(depth - 2, 3 * layers)
    if rest or n < 1:
        raise ValueError(f"depth {depth} with {block} blocks: depth must be {3 * layers}n + 2, n >= 1")
    return n


class CifarResNetModel(nn.Module):
    def __init__(self, depth: int, block: str = "basic", num_classes: int = 10):
        super().__init__()
        n, Block = blocks_per_stage(depth, block), BLOCKS[block]
        stem = [nn.Conv2d(3, WIDTHS[0], 3, padding=1, bias=False)]
        if not Block.preactivation:       # pre-activation: the first block normalizes the stem's output
            stem += [nn.BatchNorm2d(WIDTHS[0]), nn.ReLU(inplace=True)]
        self.stem = nn.Sequential(*stem)
        stages, c_in = [], WIDTHS[0]
        for i, width in enumerate(WIDTHS):
            blocks = []
            for j in range(n):
                blocks.append(Block(c_in, width, stride=2 if i > 0 and j == 0 else 1))
                c_in = width * Block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        # Pre-activation: the last block's sum is normalized and activated once, before the pooling.
        self.head = nn.Sequential(nn.BatchNorm2d(c_in), nn.ReLU(inplace=True)) if Block.preactivation \
            else nn.Identity()
        self.fc = nn.Linear(c_in, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.head(self.stages(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def count_parameters(depth: int, block: str = "basic") -> int:
    """Trainable parameters: convolutions, batch-norm scales and shifts, the linear layer (not the
    batch-norm running statistics). ResNet-20/56/110 (basic): 269,722 / 853,018 / 1,727,962."""
    return sum(p.numel() for p in CifarResNetModel(depth, block).parameters() if p.requires_grad)


# ----------------------------------------------------------------------------------------------
# Data: uint8 images on the device, augmented (common.torch_augment) and normalized a batch at a time

def to_padded_chw(images) -> torch.Tensor:
    """uint8 (N, 32, 32, 3) HWC -> uint8 (N, 3, 40, 40) with PAD black pixels on every side."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2)
    return F.pad(x, (PAD, PAD, PAD, PAD)).contiguous()


@functools.cache
def _pixel_stats(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    # Made once per device: a host-to-device copy every batch would stall the GPU's queue.
    return (torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255,
            torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255)


def normalize(x: torch.Tensor) -> torch.Tensor:
    """uint8 (B, 3, H, W) -> float, per-channel standardized, channels_last."""
    mean, std = _pixel_stats(x.device)
    return ((x.float() - mean) / std).contiguous(memory_format=torch.channels_last)


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class CifarResNet(TorchReference):
    # predict, save, load and infer are TorchReference's: this network's scores, no test-time
    # augmentation (the seed recipe had none).

    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        if len(cfg["lr_values"]) != len(cfg["lr_boundaries"]) + 1:
            raise ValueError(f"lr_values {cfg['lr_values']} needs one more entry than "
                             f"lr_boundaries {cfg['lr_boundaries']}")
        if cfg["batch_size"] % ctx.world_size:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {ctx.world_size} processes")
        torch.backends.cudnn.benchmark = True
        self.net = CifarResNetModel(cfg["depth"], cfg["block"])
        self.net = self.net.to(self.device, memory_format=torch.channels_last)
        if ctx.serves:      # infer's timed server: the model only, each example comes with its request
            return
        if not ctx.trains:      # a predictor: the eval images only
            self.eval_x = normalize(torch.from_numpy(load_cifar10_images(ctx.data_root, "test"))
                                    .permute(0, 3, 1, 2).to(self.device))
            return

        images, labels = load_cifar10(ctx.data_root, "train")
        self.train_x = to_padded_chw(images).to(self.device)
        self.train_y = torch.from_numpy(labels).to(self.device)
        self.model = DistributedDataParallel(self.net) if self.distributed else self.net
        self.batch = cfg["batch_size"] // ctx.world_size         # per rank; the global batch is fixed
        self.steps_per_epoch = len(self.train_x) // cfg["batch_size"]
        self.opt = torch.optim.SGD(self.net.parameters(), lr=cfg["lr_values"][0], momentum=cfg["momentum"],
                                   nesterov=cfg["nesterov"], weight_decay=cfg["weight_decay"])

    def calibration_batch(self, indices: torch.Tensor) -> torch.Tensor:
        # int8 calibration (dawnbench infer --precision int8): training images as the eval images
        # are prepared: the padding cut off, no augmentation, normalized.
        return normalize(self.train_x[indices][:, :, PAD:-PAD, PAD:-PAD])

    def lr_at(self, epoch: int) -> float:
        """Piecewise constant: lr_values[k], k = how many lr_boundaries lie before `epoch` (from 1)."""
        cfg = self.ctx.config
        return cfg["lr_values"][sum(epoch > b for b in cfg["lr_boundaries"])]

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        self.model.train()
        lr = self.lr_at(epoch)
        for group in self.opt.param_groups:
            group["lr"] = lr
        # Every rank draws the same order and augmentation and takes its slice of each global batch.
        n = len(self.train_x)
        gen = torch.Generator().manual_seed(ctx.seed * 1000 + epoch)
        order = torch.randperm(n, generator=gen).to(self.device)
        dx = torch.randint(0, 2 * PAD + 1, (n,), generator=gen).to(self.device)
        dy = torch.randint(0, 2 * PAD + 1, (n,), generator=gen).to(self.device)
        flips = (torch.rand(n, generator=gen) < 0.5).to(self.device)
        total_loss = torch.zeros((), device=self.device)
        for i in ctx.progress(range(self.steps_per_epoch), total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            start = i * cfg["batch_size"] + ctx.rank * self.batch
            idx = order[start:start + self.batch]
            x = normalize(crop_flip(self.train_x[idx], dy[idx], dx[idx], flips[idx]))
            total_loss += self.train_step(x, self.train_y[idx])
        return {"loss": total_loss.item() / self.steps_per_epoch,
                "samples": self.steps_per_epoch * self.batch, "lr": lr}

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One SGD step on the augmented, normalized batch (x, y) at the optimizer's current rate;
        its own method so a test can feed fixed batches through the step the run takes."""
        loss = F.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()
