"""CIFAR-10 to 94% top-1 in seconds on one GPU: Keller Jordan's airbench94_muon recipe under the harness.

Read top to bottom; fork the directory and edit this file to make an entry of your own.
The anchor is KellerJordan/cifar10-airbench `airbench94_muon.py` ("am:N" below is its line N); the
code here is written afresh, and README.md maps every technique to the anchor's lines and lists
each deviation. What it does:
  - the whole training set lives on the device as one float tensor. A random half of the images is
    mirrored once, at setup, and every image is padded by 2 pixels with reflected borders; each
    epoch every image gets a random translation of up to 2 pixels, and in every second epoch the
    whole set is mirrored ("alternating flip"), as in airbench94 (am:94-176);
  - the network (am:183-261): a 2x2 convolution whose 24 filters whiten the pixel patches of the
    training set (set from the data in `setup`, never trained; its bias, drawn as PyTorch draws a
    convolution's, trains for 3 epochs, then stops), GELU; three blocks of conv -> max-pool -> BN ->
    GELU -> conv -> BN -> GELU at 64, 256 and 256 channels; global max pooling; a bias-free linear
    head drawn at unit standard deviation whose output is divided by its input width (256). Batch
    norm scales are fixed at 1; each 3x3 convolution starts as the identity on its first filters;
  - two optimizers (am:340-409): Muon for the six 3x3 convolutions' filters (lr 0.24, Nesterov
    momentum 0.6: each step renormalizes the filter tensor to norm sqrt(out channels), then moves it
    by the momentum's update made near-orthogonal by 3 Newton-Schulz iterations in bf16); Nesterov
    SGD (momentum 0.85) for the rest: batch-norm shifts and the whitening bias at lr 0.053, the head
    at 0.67, all with the same weight decay per step, 2e-6 x the batch. The loss is the batch's sum
    (label smoothing 0.2); every rate falls linearly to 0 over the 8 epochs (batch 2,000: 200 steps),
    the whitening bias's over its 3 epochs;
  - test-time augmentation over 6 views: the image and its mirror (weight 1/4 each), and both of
    them translated by one pixel up-left and down-right (1/8 each), in `predict` and in `infer`;
  - on a CUDA GPU: bf16 autocast (weights and batch-norm statistics stay float32) and channels_last;
    torch.compile is a switch, off (not yet measured on a GPU here; its compilation is on the clock).
    "auto" turns a switch on with CUDA and off on the CPU; "true" / "false" force it.
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
from common.torch_augment import crop_flip
from common.torch_base import TorchReference, resolve_switch, switch_precision

# Per-channel pixel statistics of the 50,000 CIFAR-10 training images (after scaling to [0, 1]) (am:91-92).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
WHITEN_IMAGES = 5000                  # training images whose patches estimate the whitening (am:385)
WHITEN_EPS = 5e-4                     # added to the patch second moment's eigenvalues (am:247)
# The quintic Newton-Schulz iteration's coefficients (am:43): chosen for the steepest slope at 0,
# so that 3 steps bring every singular value of the normalized update near 1 (not exactly 1).
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7                         # keeps the normalization finite for a zero update (am:32)
# The TTA views' weights: level 1 = the image and its mirror; level 2 = those two at 1/4 each, and
# both translated one pixel up-left and one pixel down-right at 1/8 each (am:310-324).
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


class MuonNet(nn.Module):
    def __init__(self, widths=(64, 256, 256), stem_kernel=2, bn_momentum=0.6, bn_eps=1e-12, num_classes=10):
        super().__init__()
        # The stem's width is twice the patch dimension: the whitening filters and their negatives.
        # Its filters are fixed (set from the data in setup); its bias keeps PyTorch's default draw
        # (uniform in +-1/sqrt(3 k^2)), as airbench94_muon's plain nn.Conv2d does, and trains briefly.
        self.whiten = nn.Conv2d(3, 2 * 3 * stem_kernel * stem_kernel, stem_kernel, bias=True)   # 32 -> 31
        self.whiten.weight.requires_grad_(False)
        c_in, blocks = self.whiten.out_channels, []
        for width in widths:                                                   # 31 -> 15 -> 7 -> 3
            blocks.append(ConvGroup(c_in, width, bn_momentum, bn_eps))
            c_in = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(c_in, num_classes, bias=False)
        with torch.no_grad():
            self.head.weight /= self.head.weight.std()       # unit standard deviation (am:244-245)

    def forward(self, x):
        # Global max pooling as a pooling layer (the anchor's MaxPool2d(3) on the 3x3 map): where
        # several positions tie, the gradient goes to one of them, as the anchor's does, not split.
        x = F.adaptive_max_pool2d(self.blocks(F.gelu(self.whiten(x))), 1).flatten(1)
        return self.head(x) / x.shape[-1]       # a fixed temperature: the logits over the width (am:261)


def net_from_config(cfg: dict) -> MuonNet:
    return MuonNet(cfg["widths"], cfg["stem_kernel"], cfg["bn_momentum"], cfg["bn_eps"])


@torch.no_grad()
def whitening_filters(images: torch.Tensor, kernel: int, eps: float = WHITEN_EPS) -> torch.Tensor:
    """Convolution filters (2d, 3, k, k), d = 3k^2, that decorrelate the k x k patches of `images`
    (normalized, N x 3 x H x W) and scale every direction to unit second moment: the eigenvectors of
    the patches' (uncentered) second-moment matrix, smallest eigenvalue first as the anchor orders
    them, each divided by the square root of its eigenvalue; then their negatives."""
    patches = images.unfold(2, kernel, 1).unfold(3, kernel, 1)           # N, 3, H', W', k, k
    patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, 3 * kernel * kernel).double()
    moment = (patches.T @ patches / len(patches)).cpu()                  # d x d: the rest is tiny
    eigenvalues, eigenvectors = torch.linalg.eigh(moment)                # ascending; columns are eigenvectors
    filters = (eigenvectors.T / (eigenvalues + eps).sqrt()[:, None]).view(-1, 3, kernel, kernel)
    return torch.cat([filters, -filters]).float()


def count_parameters(**model_kwargs) -> tuple[int, int]:
    """(trainable, fixed) parameters of MuonNet. Fixed: the whitening filters and the batch-norm scales."""
    params = list(MuonNet(**model_kwargs).parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params if not p.requires_grad)


# ----------------------------------------------------------------------------------------------
# Muon

def orthogonalize(g: torch.Tensor, steps: int) -> torch.Tensor:
    """A matrix near the orthogonal factor U V^T of g = U S V^T: g scaled to Frobenius norm 1 (so
    every singular value is at most 1), then `steps` quintic Newton-Schulz iterations
    X <- aX + (bA + cA^2)X, A = X X^T, in bfloat16, on the wide orientation (A is the smaller
    Gram matrix). Each singular value s goes to p(s) = as + bs^3 + cs^5, repeatedly: 3 steps leave
    them spread around 1 (roughly 0.5 to 1.5), which trains as well as exact orthogonalization."""
    a, b, c = NS_COEFFICIENTS
    x = g.bfloat16()
    x = x / (x.norm() + NS_EPS)
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


class Muon(torch.optim.Optimizer):
    """Momentum, then an orthogonalized step, for convolution filters (each flattened to
    out_channels x the rest). Per step, for each tensor p with gradient g:
        buf <- momentum * buf + g;  u = g + momentum * buf (Nesterov) or buf
        p <- p * sqrt(out_channels) / |p|         (the filters back to a fixed norm: no weight decay)
        p <- p - lr * orthogonalize(u)"""

    def __init__(self, params, lr: float, momentum: float, nesterov: bool = True, ns_steps: int = 3):
        if lr < 0 or momentum < 0 or (nesterov and momentum <= 0) or ns_steps < 1:
            raise ValueError(f"Muon: lr {lr} and momentum {momentum} must be >= 0, Nesterov needs a momentum > 0, "
                             f"ns_steps {ns_steps} must be >= 1")
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            if group["lr"] == 0:      # frozen, the rescaling included (the anchor never steps at rate 0)
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(g))
                buf.mul_(group["momentum"]).add_(g)
                update = g.add(buf, alpha=group["momentum"]) if group["nesterov"] else buf
                p.mul_(len(p) ** 0.5 / p.norm())
                p.add_(orthogonalize(update.reshape(len(update), -1), group["ns_steps"]).view_as(p), alpha=-group["lr"])


def linear_to_zero(step: int, steps: int) -> float:
    """The learning rate's share before step `step` (from 0) of a schedule of `steps` steps: 1 at
    the start, falling linearly to 0 at `steps`, then 0: a run the harness continues past the
    schedule changes no weight (only batch-norm's running statistics follow the data)."""
    return max(0.0, 1.0 - step / steps) if steps > 0 else 0.0


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

class CifarMuon(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        if cfg["batch_size"] % ctx.world_size:
            raise ValueError(f"batch_size {cfg['batch_size']} is not divisible by {ctx.world_size} processes")
        if cfg["tta_level"] not in TTA_WEIGHTS:
            raise ValueError(f"tta_level {cfg['tta_level']}: expected 0, 1 or 2")
        self.use_compile = resolve_switch(cfg["compile"], self.device)
        self.use_bf16 = resolve_switch(cfg["bf16"], self.device)
        self.memory_format = (torch.channels_last if resolve_switch(cfg["channels_last"], self.device)
                              else torch.contiguous_format)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True
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

        self.model = DistributedDataParallel(self.net) if self.distributed else self.net
        if self.use_compile:
            self.model = torch.compile(self.model)
        self.batch = cfg["batch_size"] // ctx.world_size             # per rank; the global batch is fixed
        # Full batches only (the last partial one of an epoch is dropped), as airbench's loader does.
        self.steps_per_epoch = len(self.train_x) // cfg["batch_size"]
        if self.steps_per_epoch == 0:
            raise ValueError(f"batch_size {cfg['batch_size']} is more than the {len(self.train_x)} training images: "
                             f"set a smaller one (--set batch_size=N)")
        self.total_steps = math.ceil(cfg["epochs"] * self.steps_per_epoch)
        self.whiten_bias_steps = math.ceil(cfg["whiten_bias_epochs"] * self.steps_per_epoch)

        # Muon takes the 3x3 filters; SGD the rest. Its rates act on the batch's summed loss, so the
        # step grows with the batch; the weight decay (weight_decay x lr per step) is the same for
        # every group: 2e-6 x the batch. The whitening bias is frozen by its rate reaching 0 at its
        # own schedule's end, not by detaching it (am:398): DistributedDataParallel sets up its
        # gradient hooks once, and torch.compile would recompile.
        filters = [p for p in self.net.parameters() if p.ndim == 4 and p.requires_grad]
        norm_biases = [m.bias for m in self.net.modules() if isinstance(m, nn.BatchNorm2d)]
        decay = cfg["weight_decay"] * cfg["batch_size"]

        def sgd_group(params, lr):      # a rate of 0 freezes the group, decay included
            return {"params": params, "lr": lr, "weight_decay": decay / lr if lr else 0.0}
        self.sgd = torch.optim.SGD([sgd_group([self.net.whiten.bias], cfg["bias_lr"]),
                                    sgd_group(norm_biases, cfg["bias_lr"]),
                                    sgd_group([self.net.head.weight], cfg["head_lr"])],
                                   momentum=cfg["sgd_momentum"], nesterov=True)
        self.muon = Muon(filters, lr=cfg["muon_lr"], momentum=cfg["muon_momentum"], nesterov=True,
                         ns_steps=cfg["ns_steps"])
        for opt in (self.sgd, self.muon):
            for group in opt.param_groups:
                group["initial_lr"] = group["lr"]
        self.step = 0

    def set_rates(self, step: int) -> None:
        """The rates before step `step`: the whitening bias's over its own steps, the rest over the schedule's."""
        whiten_group, *others = self.sgd.param_groups
        whiten_group["lr"] = whiten_group["initial_lr"] * linear_to_zero(step, self.whiten_bias_steps)
        for group in others + self.muon.param_groups:
            group["lr"] = group["initial_lr"] * linear_to_zero(step, self.total_steps)

    def augment(self, idx: torch.Tensor, shifts: torch.Tensor, epoch: int) -> torch.Tensor:
        """The training images `idx` as a batch: translated by `shifts` (2, B): the crop's corner in
        the padded image, rows then columns; all mirrored in even epochs (the harness counts from 1)."""
        mirror = torch.full((len(idx),), epoch % 2 == 0, device=self.device)
        return crop_flip(self.train_x[idx], shifts[0], shifts[1], mirror).contiguous(memory_format=self.memory_format)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One step of both optimizers on a prepared batch at the schedule's rates; the batch's mean loss."""
        cfg = self.ctx.config
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=cfg["label_smoothing"], reduction="sum")
        # DistributedDataParallel averages the ranks' gradients: x world_size makes it the global batch's sum.
        (loss * self.ctx.world_size).backward()
        self.set_rates(self.step)
        self.sgd.step()
        self.muon.step()
        self.model.zero_grad(set_to_none=True)
        self.step += 1
        return loss.detach() / len(y)

    def train_precision(self):
        return switch_precision(self.ctx.config, self.device, bf16=self.use_bf16)

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        self.model.train()
        # Every rank draws the same order and takes its own slice of each global batch.
        gen = torch.Generator().manual_seed(ctx.seed * 1000 + epoch)
        n, pad = len(self.train_x), cfg["crop_pad"]
        order = torch.randperm(n, generator=gen).to(self.device)
        shifts = torch.randint(0, 2 * pad + 1, (2, n), generator=gen).to(self.device)   # one copy an epoch
        steps = self.steps_per_epoch
        total_loss = torch.zeros((), device=self.device)
        for i in ctx.progress(range(steps), total=steps, desc=f"epoch {epoch}"):
            start = i * cfg["batch_size"] + ctx.rank * self.batch
            idx, batch_shifts = order[start:start + self.batch], shifts[:, start:start + self.batch]
            total_loss += self.train_step(self.augment(idx, batch_shifts, epoch), self.train_y[idx])
        lr = self.muon.param_groups[0]["initial_lr"] * linear_to_zero(self.step, self.total_steps)
        return {"loss": total_loss.item() / steps, "samples": steps * self.batch, "lr": lr}

    # predict, save, load and infer are TorchReference's, on self.net, with the test-time
    # augmentation of `scores`.

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
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
            logits = self.net(torch.cat(tta_views(x, level))).float()
        w = torch.tensor(weights, device=logits.device).view(-1, 1, 1)
        return (w * logits.unflatten(0, (len(weights), -1))).sum(0)
