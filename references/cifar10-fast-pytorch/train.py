"""CIFAR-10 to 94% top-1 in seconds on one GPU: a compact residual network and a short recipe.

Read top to bottom; fork the directory and edit this file to make an entry of your own.
The ideas are the ones behind the fast public CIFAR-10 runs (Page's ResNet-9 for DAWNBench,
and the later "airbench" line), written afresh here:
  - the whole training set lives on the device as one float tensor, padded once; every batch
    is cropped and mirrored there with one gather: no per-image loader, no host round trip;
  - a fixed first layer: 2x2 convolution filters that whiten the pixel patches of the training
    set (computed from the data in `setup`, never trained), then batch norm and GELU;
  - three stages of conv -> max-pool -> batch norm -> GELU, each followed by a residual pair of
    conv-BN-GELU layers, at 64, 256 and 256 channels; global max pooling; a linear head whose
    output is scaled down (a fixed temperature) so the logits start small;
  - Nesterov SGD with a short one-cycle schedule (linear warm-up, linear decay) over 10 epochs,
    label smoothing 0.2, weight decay on the convolution and linear weights only;
  - an exponential moving average (EMA) of the weights: evaluation, inference and the saved
    model all use the averaged weights;
  - random translations of up to 2 pixels (reflect padding) and "alternating" horizontal flips:
    a random half of the images is mirrored in odd epochs, the other half in even epochs;
  - flip test-time augmentation: the logits of each image and its mirror are averaged, in
    `predict` and in `infer` (there as one batch of 2);
  - on a CUDA GPU: bf16 autocast (weights and batch-norm statistics stay float32),
    channels_last and torch.compile. Each is a switch in reference.toml: "auto" turns it on
    with CUDA and off on the CPU; "true" / "false" force it.
The harness times and scores everything; this file never sees the test labels.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from common.datasets import load_cifar10, load_cifar10_images
from common.schedules import one_cycle
from common.torch_augment import crop_flip
from common.torch_runtime import TorchReference, resolve_switch

# Per-channel pixel statistics of the 50,000 CIFAR-10 training images (after scaling to [0, 1]).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
WHITEN_IMAGES = 5000                  # training images whose patches estimate the whitening
WHITEN_EPS = 5e-4                     # added to the patch covariance's eigenvalues
ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


# ----------------------------------------------------------------------------------------------
# The network

def conv_bn_act(c_in: int, c_out: int, act: type[nn.Module], pool: bool = False) -> nn.Sequential:
    # Pool right after the convolution: batch norm and the activation then touch 4x fewer values.
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                         nn.MaxPool2d(2) if pool else nn.Identity(),
                         nn.BatchNorm2d(c_out), act())


class Residual(nn.Module):
    """x + f(x), f = two conv-BN-activation layers at the same width."""

    def __init__(self, width: int, act: type[nn.Module]):
        super().__init__()
        self.body = nn.Sequential(conv_bn_act(width, width, act), conv_bn_act(width, width, act))

    def forward(self, x):
        return x + self.body(x)


class FastNet(nn.Module):
    def __init__(self, widths=(64, 256, 256), residual_stages=(1, 2, 3), activation="gelu",
                 stem_kernel=2, head_scale=0.125, num_classes=10):
        super().__init__()
        act = ACTIVATIONS[activation]
        # The stem's width is twice the patch dimension: the whitening filters and their negatives.
        stem_width = 2 * 3 * stem_kernel * stem_kernel
        self.stem = nn.Sequential(nn.Conv2d(3, stem_width, stem_kernel, bias=False),   # 32 -> 31
                                  nn.BatchNorm2d(stem_width), act())
        layers, c_in = [], stem_width
        for stage, width in enumerate(widths, start=1):
            layers.append(conv_bn_act(c_in, width, act, pool=True))                   # 31 -> 15 -> 7 -> 3
            layers.append(Residual(width, act) if stage in residual_stages else nn.Identity())
            c_in = width
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes, bias=False)
        self.head_scale = head_scale

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.head(x.amax(dim=(2, 3))) * self.head_scale      # global max pool, scaled head


@torch.no_grad()
def whitening_filters(images: torch.Tensor, kernel: int, eps: float = WHITEN_EPS) -> torch.Tensor:
    """Convolution filters (2d, 3, k, k), d = 3k^2, that decorrelate the k x k patches of `images`
    (normalized, N x 3 x H x W) and scale every direction to unit variance: the eigenvectors of the
    patch covariance divided by the square roots of their eigenvalues, and their negatives."""
    patches = images.unfold(2, kernel, 1).unfold(3, kernel, 1)           # N, 3, H', W', k, k
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, 3 * kernel * kernel).double()
    patches = patches - patches.mean(0)
    cov = (patches.T @ patches / len(patches)).cpu()                    # d x d: the rest is tiny
    eigenvalues, eigenvectors = torch.linalg.eigh(cov)                    # columns are eigenvectors
    filters = (eigenvectors.T / (eigenvalues + eps).sqrt()[:, None]).view(-1, 3, kernel, kernel)
    return torch.cat([filters, -filters]).float()


def count_parameters(**model_kwargs) -> tuple[int, int]:
    """(trainable, fixed) parameters of FastNet: the fixed ones are the whitening filters."""
    net = FastNet(**model_kwargs)
    net.stem[0].weight.requires_grad_(False)
    params = list(net.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params if not p.requires_grad)


# ----------------------------------------------------------------------------------------------
# Data: normalized images on the device, augmented a batch at a time

def to_device_images(images: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 (N, 32, 32, 3) HWC -> float32 (N, 3, 32, 32), per-channel standardized, on `device`.
    The uint8 array goes over (4x fewer bytes than float); the conversion runs on the device."""
    x = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    return ((x - mean) / std).contiguous()


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class CifarFast(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        if cfg["batch_size"] % ctx.world_size:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {ctx.world_size} processes")
        self.use_compile = resolve_switch(cfg["compile"], self.device)
        self.use_bf16 = resolve_switch(cfg["bf16"], self.device)
        self.memory_format = (torch.channels_last if resolve_switch(cfg["channels_last"], self.device)
                              else torch.contiguous_format)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
        self.net = FastNet(cfg["widths"], cfg["residual_stages"], cfg["activation"], cfg["stem_kernel"],
                           cfg["head_scale"])
        if not ctx.trains:      # a predictor: the eval images only; load() brings the averaged weights
            self.net.to(self.device, memory_format=self.memory_format)
            self.ema = self.net
            self.eval_x = to_device_images(load_cifar10_images(ctx.data_root, "test"), self.device) \
                .contiguous(memory_format=self.memory_format)
            return

        # The training set, padded once (reflected borders) for the random translations.
        images, labels = load_cifar10(ctx.data_root, "train")
        train = to_device_images(images, self.device)
        pad = cfg["crop_pad"]
        self.train_x = F.pad(train, (pad, pad, pad, pad), mode="reflect") if pad else train
        self.train_y = torch.from_numpy(labels).to(self.device)
        # Alternating flips: which half of the images is mirrored in odd epochs (the rest in even).
        gen = torch.Generator().manual_seed(ctx.seed)
        self.flip_odd = (torch.rand(len(train), generator=gen) < 0.5).to(self.device)

        stem = self.net.stem[0]
        if cfg["whiten"]:
            stem.weight.data.copy_(whitening_filters(train[:WHITEN_IMAGES], cfg["stem_kernel"]))
            stem.weight.requires_grad_(False)                         # a fixed first layer
        del train
        self.net.to(self.device, memory_format=self.memory_format)
        # The averaged weights: evaluated, used for inference and saved. Never trained directly.
        self.ema = copy.deepcopy(self.net).eval().requires_grad_(False) if cfg["ema_decay"] > 0 else self.net
        self._ema_pairs = list(zip(self.ema.state_dict().values(), self.net.state_dict().values()))
        self.ema_updates = 0

        self.model = DistributedDataParallel(self.net) if self.distributed else self.net
        if self.use_compile:
            self.model = torch.compile(self.model)
        self.batch = cfg["batch_size"] // ctx.world_size             # per rank; the global batch is fixed
        self.steps_per_epoch = len(self.train_x) // cfg["batch_size"]
        trainable = [(n, p) for n, p in self.net.named_parameters() if p.requires_grad]
        decay = [p for n, p in trainable if p.ndim > 1]                  # conv and linear weights
        no_decay = [p for n, p in trainable if p.ndim <= 1]              # batch-norm scales and shifts
        self.opt = torch.optim.SGD([{"params": decay, "weight_decay": cfg["weight_decay"]},
                                    {"params": no_decay, "weight_decay": 0.0}],
                                   lr=cfg["lr"], momentum=cfg["momentum"], nesterov=True)
        # One cycle: linear warm-up to the peak, then linear decay to the planned last step.
        total = cfg["epochs"] * self.steps_per_epoch
        self.lr_at = lambda step: one_cycle(step, total, cfg["lr"], cfg["warmup_fraction"],
                                            cfg["lr_start_fraction"], cfg["lr_end_fraction"])
        self.step = 0

    def augment(self, idx: torch.Tensor, shifts: torch.Tensor, epoch: int) -> torch.Tensor:
        """The training images `idx` as a batch: translated by `shifts` (2, B): the crop's corner in
        the padded image, rows then columns; mirrored as the alternating flips say for `epoch`."""
        flip = self.flip_odd[idx] ^ (epoch % 2 == 0)
        return crop_flip(self.train_x[idx], shifts[0], shifts[1], flip).contiguous(memory_format=self.memory_format)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step on a prepared batch (at the current learning rate); the loss."""
        cfg = self.ctx.config
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=cfg["label_smoothing"])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.step += 1
        if self.ema is not self.net and self.step % cfg["ema_every"] == 0:
            self.update_ema()
        return loss.detach()

    @torch.no_grad()
    def update_ema(self):
        # Weights and batch-norm statistics move toward the trained ones; early on, the decay is
        # lower ((1 + n) / (10 + n) after n updates) so the random start is quickly forgotten.
        self.ema_updates += 1
        decay = min(self.ctx.config["ema_decay"], (1 + self.ema_updates) / (10 + self.ema_updates))
        for averaged, trained in self._ema_pairs:
            if averaged.is_floating_point():
                averaged.lerp_(trained, 1 - decay)
            else:
                averaged.copy_(trained)                                  # batch counters

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        self.model.train()
        # Every rank draws the same order and takes its own slice of each global batch.
        gen = torch.Generator().manual_seed(ctx.seed * 1000 + epoch)
        n, pad = len(self.train_x), cfg["crop_pad"]
        order = torch.randperm(n, generator=gen).to(self.device)
        shifts = torch.randint(0, 2 * pad + 1, (2, n), generator=gen).to(self.device)   # one copy an epoch
        total_loss = torch.zeros((), device=self.device)
        for i in ctx.progress(range(self.steps_per_epoch), total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            start = i * cfg["batch_size"] + ctx.rank * self.batch
            idx, batch_shifts = order[start:start + self.batch], shifts[:, start:start + self.batch]
            for group in self.opt.param_groups:
                group["lr"] = self.lr_at(self.step)
            total_loss += self.train_step(self.augment(idx, batch_shifts, epoch), self.train_y[idx])
        return {"loss": total_loss.item() / self.steps_per_epoch,
                "samples": self.steps_per_epoch * self.batch, "lr": self.lr_at(self.step)}

    # predict, save, load and infer are TorchReference's, on the averaged weights (the trainer
    # saves them, the predictor loads them into its one network) and with flip test-time augmentation.

    def evaluated(self) -> nn.Module:
        return self.ema

    def calibration_batch(self, indices: torch.Tensor) -> torch.Tensor:
        # int8 calibration (dawnbench infer --precision int8): training images as the eval images
        # are prepared (the padding for random translations cut off, no augmentation).
        pad = self.ctx.config["crop_pad"]
        x = self.train_x[indices]
        return (x[:, :, pad:-pad, pad:-pad] if pad else x).contiguous()

    @torch.inference_mode()
    def scores(self, x: torch.Tensor) -> torch.Tensor:
        # Flip test-time augmentation: the image and its mirror in one batch, logits averaged.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = self.ema(torch.cat([x, x.flip(3)])).float()
        return (logits[:len(x)] + logits[len(x):]) / 2
