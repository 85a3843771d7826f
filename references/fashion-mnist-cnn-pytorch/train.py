"""Fashion-MNIST to 92% top-1 with a small CNN in PyTorch, tuned for a 2-core CPU.

Read top to bottom; fork the directory and edit this file to make an entry of your own.
What makes it fast on a CPU:
  - the whole training set lives in memory as one normalized tensor: no per-image loader;
  - a narrow network that pools right after its first two convolutions, so batch norm and
    ReLU run at 14x14 and 7x7;
  - channels_last, which oneDNN runs much faster than NCHW on CPU;
  - bf16 autocast where the CPU multiplies bf16 in hardware (AVX512-BF16, AMX): 0.64 of
    float32's step time on this project's 2-core machine (README); the weights, the optimizer and
    the evaluation stay float32, and elsewhere the recipe trains in float32;
  - a one-cycle learning rate with Nesterov SGD and label smoothing: few epochs, no tuning per run;
  - random horizontal flips for training, and flip test-time augmentation at eval.
The harness times and scores everything; this file never sees the test labels.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from common.loaders import load_fashion_mnist, load_fashion_mnist_images
from common.schedules import one_cycle
from common.torch_base import TorchReference, resolve_switch, switch_precision

# Pixel statistics of the Fashion-MNIST training set (after scaling to [0, 1]).
MEAN, STD = 0.2860, 0.3530


def conv_block(c_in: int, c_out: int, pool: bool) -> nn.Sequential:
    # Pool right after the convolution: batch norm and ReLU then touch 4x fewer values, and on a
    # CPU those memory-bound passes cost as much as the convolutions.
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                         nn.MaxPool2d(2) if pool else nn.Identity(),
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


def build_model(widths: list[int]) -> nn.Module:
    w1, w2, w3 = widths
    return nn.Sequential(
        conv_block(1, w1, pool=True),          # 28x28 -> 14x14
        conv_block(w1, w2, pool=True),         # 14x14 -> 7x7
        conv_block(w2, w3, pool=False),        # 7x7
        nn.Flatten(), nn.Linear(w3 * 7 * 7, 10),
    )


def epoch_draw(n: int, seed: int, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The epoch's order of the n training images, and which of them to flip (each with p = 0.5)."""
    gen = torch.Generator().manual_seed(seed * 1000 + epoch)
    return torch.randperm(n, generator=gen), torch.rand(n, generator=gen) < 0.5


def flip(x: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
    """The training augmentation: the images (N, 1, 28, 28) where `which` is true mirrored left to right."""
    return torch.where(which.view(-1, 1, 1, 1), x.flip(3), x)


def to_input(images: np.ndarray) -> torch.Tensor:
    x = torch.from_numpy(images).float().div_(255).sub_(MEAN).div_(STD).unsqueeze(1)
    return x.contiguous(memory_format=torch.channels_last)


class FashionCNN(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        self.net = build_model(cfg["widths"]).to(self.device, memory_format=torch.channels_last)
        if ctx.serves:      # infer's timed server: the model only, each example comes with its request
            return
        if not ctx.trains:      # a predictor: the eval images only
            self.eval_x = to_input(load_fashion_mnist_images(ctx.data_root, "test")).to(self.device)
            return
        images, labels = load_fashion_mnist(ctx.data_root, "train")
        self.train_x, self.train_y = to_input(images).to(self.device), torch.from_numpy(labels).to(self.device)
        self.model = DistributedDataParallel(self.net) if self.distributed else self.net
        self.batch = cfg["batch_size"] // ctx.world_size          # per rank; global batch is fixed
        self.steps_per_epoch = len(self.train_x) // cfg["batch_size"]
        self.opt = torch.optim.SGD(self.net.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                                   nesterov=True, weight_decay=cfg["weight_decay"])
        # One cycle: linear warm-up to the peak, then linear decay to ~0 at the planned last epoch.
        total = cfg["epochs"] * self.steps_per_epoch
        self.lr_at = lambda step: one_cycle(step, total, cfg["lr"], cfg["warmup_fraction"],
                                            cfg["lr_start_fraction"], cfg["lr_end_fraction"])
        self.step = 0
        self.bf16 = resolve_switch(cfg["bf16"], self.device)

    def train_precision(self):
        return switch_precision(self.ctx.config, self.device, bf16=self.bf16)

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        self.model.train()
        # Every rank draws the same permutation and takes its own slice of each global batch.
        order, flips = (t.to(self.device) for t in epoch_draw(len(self.train_x), ctx.seed, epoch))
        total_loss = torch.zeros((), device=self.device)
        for i in ctx.progress(range(self.steps_per_epoch), total=self.steps_per_epoch, desc=f"epoch {epoch}"):
            start = i * cfg["batch_size"] + ctx.rank * self.batch
            idx = order[start:start + self.batch]
            x = flip(self.train_x[idx], flips[idx]) if cfg["flip"] else self.train_x[idx]
            total_loss += self.train_step(x, self.train_y[idx])
        return {"loss": total_loss.item() / self.steps_per_epoch,
                "samples": self.steps_per_epoch * self.batch, "lr": self.lr_at(self.step)}

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step on an augmented batch at the schedule's learning rate; the loss."""
        for group in self.opt.param_groups:
            group["lr"] = self.lr_at(self.step)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            loss = F.cross_entropy(self.model(x), y, label_smoothing=self.ctx.config["label_smoothing"])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.step += 1
        return loss.detach()

    def calibration_batch(self, indices):
        # int8 calibration (dawnbench infer --precision int8): training images, unflipped, are
        # already prepared as the eval images are.
        return self.train_x[indices]

    # predict, save, load and infer are TorchReference's, with flip test-time augmentation.

    @torch.inference_mode()
    def scores(self, x: torch.Tensor) -> torch.Tensor:
        # Flip test-time augmentation: average the logits of the image and its mirror.
        if not self.ctx.config["flip_tta"]:
            return self.net(x)
        return (self.net(x) + self.net(x.flip(3))) / 2
