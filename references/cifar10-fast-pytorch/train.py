"""CIFAR-10 to 94% top-1 in seconds on one GPU: Keller Jordan's airbench94 recipe under the harness.

Read top to bottom; fork the directory and edit this file to make an entry of your own.
The anchor is KellerJordan/cifar10-airbench `legacy/airbench94.py` (commit f1c599c; the file was
`airbench94.py` at the top of the repository until 1b8f794 moved it unchanged). The code here is
written afresh; README.md maps every technique to the anchor's lines and lists each deviation.
  - the whole training set lives on the device as one float tensor. A random half of the images is
    mirrored once, at setup, and every image is padded by 2 pixels with reflected borders;
  - each epoch every image gets a random translation of up to 2 pixels (one gather per batch), and
    in every second epoch the whole set is mirrored: each image alternates between its two mirror
    images from one epoch to the next ("alternating flip");
  - the network: a 2x2 convolution whose filters whiten the pixel patches of the training set
    (computed from the data in `setup`, never trained; its bias is trained for 3 epochs, then frozen),
    GELU; three blocks of conv -> max-pool -> BN -> GELU -> conv -> BN -> GELU at 64, 256 and 256
    channels; global max pooling; a linear head whose output is scaled by 1/9. Batch norm scales are
    fixed at 1 (only the shifts train). Each 3x3 convolution starts as an identity on its first
    input-width filters (dirac init);
  - Nesterov SGD at batch 1024, with airbench's parametrization: the learning rate and the weight
    decay are given per 1024 examples and independent of the momentum; batch-norm shifts learn 64x
    faster (with the same decay per step). A linear warm-up then linear decay over 9.9 epochs;
    label smoothing 0.2;
  - Lookahead: every 5 steps the slow weights move toward the trained ones, and the trained ones are
    reset to them; the pull weakens as the run goes on. At the end of the schedule the network is
    the slow weights;
  - test-time augmentation over 6 views: the image and its mirror (weight 1/4 each), and both of
    them translated by one pixel up-left and down-right (1/8 each), in `predict` and in `infer`;
  - on a CUDA GPU: bf16 autocast (weights and batch-norm statistics stay float32) and
    channels_last; torch.compile is off (no faster on an H200, and its compilation is on the
    clock), and so is cuDNN's benchmark search (3.7 s of epoch 1 in a fresh HOME). Each is a
    switch in reference.toml: "auto" turns it on with CUDA and off on the CPU; "true" / "false"
    force it. `fp16 = "true"` autocasts to float16
    instead, with a dynamic loss scale (airbench94's own precision is float16).
The harness times and scores everything; this file never sees the test labels.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from common.loaders import load_cifar10, load_cifar10_images
from common.schedules import one_cycle
from common.torch_augment import crop_flip
from common.torch_base import TorchReference, resolve_switch, switch_precision

# Per-channel pixel statistics of the 50,000 CIFAR-10 training images (after scaling to [0, 1]).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
WHITEN_IMAGES = 5000                  # training images whose patches estimate the whitening (airbench94.py:402)
WHITEN_EPS = 5e-4                     # added to the patch second moment's eigenvalues (airbench94.py:253)
KILO = 1024                           # airbench's learning rate and weight decay are per 1024 examples
# The TTA views' weights: level 1 = the image and its mirror; level 2 = those two at 1/4 each, and
# both translated one pixel up-left and one pixel down-right at 1/8 each (airbench94.py:320-334).
TTA_WEIGHTS = {0: (1.0,), 1: (0.5, 0.5), 2: (0.25, 0.25, 0.125, 0.125, 0.125, 0.125)}


# ----------------------------------------------------------------------------------------------
# The network

def conv3x3(c_in: int, c_out: int) -> nn.Conv2d:
    """A 3x3 convolution that starts as the identity on its first c_in output channels (dirac) and
    with PyTorch's default random filters on the rest: the block passes its input through at the start."""
    conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[:c_in])
    return conv


def batch_norm(width: int, momentum: float, eps: float) -> nn.BatchNorm2d:
    # `momentum` in airbench's sense: the share of the running statistics kept at each step
    # (PyTorch's is the share replaced). The scale is fixed at 1: only the shift is trained.
    norm = nn.BatchNorm2d(width, eps=eps, momentum=1 - momentum)
    norm.weight.requires_grad_(False)
    return norm


class ConvGroup(nn.Module):
    """conv -> max-pool -> BN -> GELU -> conv -> BN -> GELU. Pool right after the first convolution:
    batch norm and the activation then touch 4x fewer values."""

    def __init__(self, c_in: int, c_out: int, bn_momentum: float, bn_eps: float):
        super().__init__()
        self.conv1, self.pool = conv3x3(c_in, c_out), nn.MaxPool2d(2)
        self.norm1 = batch_norm(c_out, bn_momentum, bn_eps)
        self.conv2, self.norm2 = conv3x3(c_out, c_out), batch_norm(c_out, bn_momentum, bn_eps)

    def forward(self, x):
        x = F.gelu(self.norm1(self.pool(self.conv1(x))))
        return F.gelu(self.norm2(self.conv2(x)))


class FastNet(nn.Module):
    def __init__(self, widths=(64, 256, 256), stem_kernel=2, bn_momentum=0.6, bn_eps=1e-12,
                 head_scale=1 / 9, num_classes=10):
        super().__init__()
        # The stem's width is twice the patch dimension: the whitening filters and their negatives.
        # Its filters are fixed (set from the data in setup); its bias starts at 0 and trains briefly.
        self.whiten = nn.Conv2d(3, 2 * 3 * stem_kernel * stem_kernel, stem_kernel, bias=True)   # 32 -> 31
        self.whiten.weight.requires_grad_(False)
        nn.init.zeros_(self.whiten.bias)
        c_in, blocks = self.whiten.out_channels, []
        for width in widths:                                                   # 31 -> 15 -> 7 -> 3
            blocks.append(ConvGroup(c_in, width, bn_momentum, bn_eps))
            c_in = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c_in, num_classes, bias=False)
        self.head_scale = head_scale

    def forward(self, x):
        x = self.blocks(F.gelu(self.whiten(x)))
        return self.head(x.amax(dim=(2, 3))) * self.head_scale      # global max pool, scaled head


def net_from_config(cfg: dict) -> FastNet:
    return FastNet(cfg["widths"], cfg["stem_kernel"], cfg["bn_momentum"], cfg["bn_eps"], cfg["head_scale"])


@torch.no_grad()
def whitening_filters(images: torch.Tensor, kernel: int, eps: float = WHITEN_EPS) -> torch.Tensor:
    """Convolution filters (2d, 3, k, k), d = 3k^2, that decorrelate the k x k patches of `images`
    (normalized, N x 3 x H x W) and scale every direction to unit second moment: the eigenvectors of
    the patches' (uncentered) second-moment matrix, largest eigenvalue first, each divided by the
    square root of its eigenvalue; then their negatives."""
    patches = images.unfold(2, kernel, 1).unfold(3, kernel, 1)           # N, 3, H', W', k, k
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, 3 * kernel * kernel).double()
    moment = (patches.T @ patches / len(patches)).cpu()                  # d x d: the rest is tiny
    eigenvalues, eigenvectors = torch.linalg.eigh(moment)                # ascending; columns are eigenvectors
    eigenvalues, eigenvectors = eigenvalues.flip(0), eigenvectors.flip(1)
    filters = (eigenvectors.T / (eigenvalues + eps).sqrt()[:, None]).view(-1, 3, kernel, kernel)
    return torch.cat([filters, -filters]).float()


def count_parameters(**model_kwargs) -> tuple[int, int]:
    """(trainable, fixed) parameters of FastNet. Fixed: the whitening filters and the batch-norm
    scales. The whitening bias counts as trainable (it trains for the first epochs)."""
    params = list(FastNet(**model_kwargs).parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params if not p.requires_grad)


# ----------------------------------------------------------------------------------------------
# Lookahead and the schedules

class Lookahead:
    """Slow weights that follow the trained ("fast") ones: an update moves each slow tensor toward
    its fast one, slow <- decay * slow + (1 - decay) * fast, then sets the fast one to it. Batch-norm
    running statistics are included; integer buffers (batch counters) are left alone."""

    def __init__(self, net: nn.Module):
        # state_dict's tensors share storage with the network's: writing them writes the network.
        self.pairs = [(t.detach().clone(), t) for t in net.state_dict().values() if t.is_floating_point()]

        self.slow, self.fast = [s for s, _ in self.pairs], [f for _, f in self.pairs]

    @torch.no_grad()
    def update(self, decay: float) -> None:
        # two multi-tensor kernels for all the tensors, not two launches per tensor (the step is host-bound)
        torch._foreach_lerp_(self.slow, self.fast, 1 - decay)
        torch._foreach_copy_(self.fast, self.slow)


def plan_steps(n_train: int, batch_size: int, epochs: float) -> tuple[int, int]:
    """(optimizer steps per epoch, steps of the whole schedule): full batches only (the last partial
    batch of an epoch is dropped), and the schedule ends inside an epoch when `epochs` is fractional."""
    per_epoch = n_train // batch_size
    return per_epoch, math.ceil(per_epoch * epochs)


def sgd_settings(cfg: dict, batch_size: int) -> tuple[float, float]:
    """(learning rate, weight decay removed per step) for PyTorch's SGD on the batch's mean loss,
    from airbench's batch-size-free hyperparameters. With Nesterov momentum m, a constant gradient
    makes steps 1 + 1/(1 - m) times the learning rate; dividing by that decouples the step size from
    m. Both the step and the decay grow linearly with the batch."""
    kilostep = KILO * (1 + 1 / (1 - cfg["momentum"]))
    return cfg["lr"] * batch_size / kilostep, cfg["weight_decay"] * batch_size / kilostep


# ----------------------------------------------------------------------------------------------
# Data: normalized images on the device, augmented a batch at a time

def to_device_images(images: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 (N, 32, 32, 3) HWC -> float32 (N, 3, 32, 32), per-channel standardized, on `device`.
    The uint8 array goes over (4x fewer bytes than float); the conversion runs on the device."""
    x = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    return ((x - mean) / std).contiguous()


def tta_views(x: torch.Tensor, level: int) -> list[torch.Tensor]:
    """The views TTA_WEIGHTS[level] weighs: x; its mirror; then x shifted by one pixel down-right
    (content moves toward the bottom right) and up-left, each with its mirror. Reflected borders."""
    views = [x, x.flip(3)][:level + 1]
    if level >= 2:
        padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
        for shifted in (padded[:, :, :-2, :-2], padded[:, :, 2:, 2:]):
            views += [shifted, shifted.flip(3)]
    return views


# ----------------------------------------------------------------------------------------------
# The reference the harness drives

class CifarFast(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        if cfg["batch_size"] % ctx.world_size:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {ctx.world_size} processes")
        if cfg["tta_level"] not in TTA_WEIGHTS:
            raise ValueError(f"tta_level {cfg['tta_level']}: expected 0, 1 or 2")
        self.use_compile = resolve_switch(cfg["compile"], self.device)
        self.use_fp16 = resolve_switch(cfg["fp16"], self.device)
        # fp16 replaces bf16: float16's narrow range needs the loss scaled (GradScaler skips a step
        # whose gradients overflowed and lowers the scale); bf16 has float32's range and needs none.
        self.use_bf16 = resolve_switch(cfg["bf16"], self.device) and not self.use_fp16
        self.amp_dtype = torch.float16 if self.use_fp16 else torch.bfloat16
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.use_fp16)
        self.memory_format = (torch.channels_last if resolve_switch(cfg["channels_last"], self.device)
                              else torch.contiguous_format)
        if self.device.type == "cuda":
            # Off by default: the worker's HOME is fresh every run, so the search and the kernels it
            # compiles (cached under ~/.nv only between runs of one HOME) land in epoch 1 every time
            torch.backends.cudnn.benchmark = resolve_switch(cfg["cudnn_benchmark"], self.device)
        self.net = net_from_config(cfg)
        if not ctx.trains:      # a predictor: the eval images only; load() brings the weights
            self.net.to(self.device, memory_format=self.memory_format)
            if ctx.serves:      # infer's timed server: the model only, each example comes with its request
                return
            self.eval_x = to_device_images(load_cifar10_images(ctx.data_root, "test"), self.device) \
                .contiguous(memory_format=self.memory_format)
            return

        images, labels = load_cifar10(ctx.data_root, "train")
        train = to_device_images(images, self.device)
        self.net.whiten.weight.data.copy_(whitening_filters(train[:WHITEN_IMAGES], cfg["stem_kernel"]))
        # A random half of the images is stored mirrored; the set as a whole is mirrored in every
        # second epoch (augment), so each image alternates between its two mirror images.
        gen = torch.Generator().manual_seed(ctx.seed)
        self.flipped = (torch.rand(len(train), generator=gen) < 0.5).to(self.device)
        train = torch.where(self.flipped.view(-1, 1, 1, 1), train.flip(3), train)
        pad = cfg["crop_pad"]      # padded once (reflected borders) for the random translations
        self.train_x = F.pad(train, (pad, pad, pad, pad), mode="reflect") if pad else train
        self.train_y = torch.from_numpy(labels).to(self.device)
        del train
        self.net.to(self.device, memory_format=self.memory_format)
        self.lookahead = Lookahead(self.net)         # after the whitening filters are in place

        self.model = DistributedDataParallel(self.net) if self.distributed else self.net
        if self.use_compile:
            self.model = torch.compile(self.model)
        self.batch = cfg["batch_size"] // ctx.world_size             # per rank; the global batch is fixed
        self.steps_per_epoch, self.total_steps = plan_steps(len(self.train_x), cfg["batch_size"], cfg["epochs"])
        self.base_lr, decay = sgd_settings(cfg, cfg["batch_size"])
        # Every group loses the same share of its weights to decay per step (weight_decay x lr);
        # batch-norm shifts take 64x larger gradient steps. The whitening bias has a group of its
        # own, frozen by a learning rate of 0 (lr_scale): airbench toggles requires_grad instead,
        # but DistributedDataParallel sets up its gradient hooks once, at construction, and
        # torch.compile would recompile its graph.
        norm_biases = [m.bias for m in self.net.modules() if isinstance(m, nn.BatchNorm2d)]
        whiten_bias = self.net.whiten.bias
        special = {id(p) for p in norm_biases} | {id(whiten_bias)}
        others = [p for p in self.net.parameters() if p.requires_grad and id(p) not in special]
        scale = cfg["bias_lr_scale"]
        self.opt = torch.optim.SGD(
            [{"params": norm_biases, "lr_scale": scale, "weight_decay": decay / (self.base_lr * scale)},
             {"params": others, "lr_scale": 1.0, "weight_decay": decay / self.base_lr},
             {"params": [whiten_bias], "lr_scale": 1.0, "weight_decay": decay / self.base_lr}],
            lr=self.base_lr, momentum=cfg["momentum"], nesterov=True,
            **({"fused": True} if resolve_switch(cfg["fused_sgd"], self.device) else {}))
        self.whiten_bias_group = self.opt.param_groups[2]
        # Linear warm-up from 0.2x to the peak over 23% of the steps, linear decay to 0.07x at the
        # schedule's last step, then held (a run the harness continues goes on at the final rate).
        self.lr_at = lambda step: one_cycle(step, self.total_steps, self.base_lr, cfg["warmup_fraction"],
                                            cfg["lr_start_fraction"], cfg["lr_end_fraction"])
        self.step = 0

    def lookahead_decay(self, step: int) -> float:
        """The slow weights' decay at an update after `step` steps: near 0 early (the slow weights
        jump to the trained ones), rising as the cube of progress to decay**every at the end."""
        cfg = self.ctx.config
        progress = min(step, self.total_steps) / self.total_steps
        return cfg["lookahead_decay"] ** cfg["lookahead_every"] * progress ** 3

    def augment(self, idx: torch.Tensor, shifts: torch.Tensor, epoch: int) -> torch.Tensor:
        """The training images `idx` as a batch: translated by `shifts` (2, B): the crop's corner in
        the padded image, rows then columns; all mirrored in even epochs (the harness counts from 1)."""
        mirror = torch.full((len(idx),), epoch % 2 == 0, device=self.device)
        return crop_flip(self.train_x[idx], shifts[0], shifts[1], mirror).contiguous(memory_format=self.memory_format)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step on a prepared batch at the schedule's learning rate, then Lookahead; the loss."""
        cfg = self.ctx.config
        lr = self.lr_at(self.step)
        for group in self.opt.param_groups:
            group["lr"] = lr * group["lr_scale"]
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.use_bf16 or self.use_fp16):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=cfg["label_smoothing"])
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()      # with fp16 off, the scaler passes everything through
        self.scaler.step(self.opt)
        self.scaler.update()
        self.step += 1
        if self.step % cfg["lookahead_every"] == 0:
            self.lookahead.update(self.lookahead_decay(self.step))
        if self.step == self.total_steps:
            self.lookahead.update(1.0)            # the schedule's end: the network becomes the slow weights
        return loss.detach()

    def train_precision(self):
        return switch_precision(self.ctx.config, self.device, bf16=self.use_bf16, fp16=self.use_fp16)

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        self.model.train()
        if epoch > cfg["whiten_bias_epochs"]:
            self.whiten_bias_group["lr_scale"] = 0.0
        # Every rank draws the same order and takes its own slice of each global batch.
        gen = torch.Generator().manual_seed(ctx.seed * 1000 + epoch)
        n, pad = len(self.train_x), cfg["crop_pad"]
        order = torch.randperm(n, generator=gen).to(self.device)
        shifts = torch.randint(0, 2 * pad + 1, (2, n), generator=gen).to(self.device)   # one copy an epoch
        # The schedule's last epoch stops at its last step (airbench94's 9.9 epochs: 44 of 48 steps).
        left = self.total_steps - self.step
        steps = min(self.steps_per_epoch, left) if left > 0 else self.steps_per_epoch
        total_loss = torch.zeros((), device=self.device)
        for i in ctx.progress(range(steps), total=steps, desc=f"epoch {epoch}"):
            start = i * cfg["batch_size"] + ctx.rank * self.batch
            idx, batch_shifts = order[start:start + self.batch], shifts[:, start:start + self.batch]
            total_loss += self.train_step(self.augment(idx, batch_shifts, epoch), self.train_y[idx])
        return {"loss": total_loss.item() / steps, "samples": steps * self.batch, "lr": self.lr_at(self.step)}

    # predict, save, load and infer are TorchReference's, on self.net (the slow weights once the
    # schedule has ended) and with the test-time augmentation of `scores`.

    def calibration_batch(self, indices: torch.Tensor) -> torch.Tensor:
        # int8 calibration (dawnbench infer --precision int8): training images as the eval images
        # are prepared (the padding cut off, the stored mirroring undone, no augmentation).
        pad = self.ctx.config["crop_pad"]
        x = self.train_x[indices]
        x = x[:, :, pad:-pad, pad:-pad] if pad else x
        return torch.where(self.flipped[indices].view(-1, 1, 1, 1), x.flip(3), x).contiguous()

    @torch.inference_mode()
    def scores(self, x: torch.Tensor) -> torch.Tensor:
        # All the views of a batch go through the network as one batch; their logits are weighted.
        # (unflatten with -1, not split(len(x)): the ONNX export keeps the batch size free.)
        level = self.ctx.config["tta_level"]
        weights = TTA_WEIGHTS[level]
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.use_bf16 or self.use_fp16):
            logits = self.net(torch.cat(tta_views(x, level))).float()
        w = torch.tensor(weights, device=logits.device).view(-1, 1, 1)
        return (w * logits.unflatten(0, (len(weights), -1))).sum(0)
