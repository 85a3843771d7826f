"""The King James Bible, byte by byte, to the CPU tier's bits per byte with a small GPT in PyTorch.

Read top to bottom; fork the directory and edit this file to make an entry of your own.
The network is a decoder-only transformer in the shape of nanoGPT's "baby GPT" (pre-norm blocks of
causal self-attention and a GELU MLP, learned positions, the output layer tied to the byte
embedding), made small enough to learn in about two minutes on two CPU cores (README, "Recipe
against its anchor"). It reads the training text as raw bytes: 256 symbols, no tokenizer.

An "epoch" is a fixed number of optimizer steps (`steps_per_epoch`), each on `batch_size` windows of
`block_size` + 1 bytes drawn at random offsets of the training text, as nanoGPT draws its batches: the
text is 3.7 MB, and the harness scores the model after every epoch.

The predictor gets the harness's validation windows, never the text itself: `predict(inputs)` takes
byte ids [N, T] and returns, for every position t, the log-probabilities of the byte that follows
inputs[:, :t + 1]. Causal by construction: position t's distribution reads bytes 0..t only, and which
of them it reads depends on t alone, never on T (the harness checks this on a prefix).
The harness times and scores everything; this file never sees the validation text.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.schedules import one_cycle
from common.torch_base import TorchReference, resolve_switch, switch_precision
from harness.errors import UsageError

VOCAB = 256                      # bytes
TRAIN_FILE = "kjv-train.txt"     # the training text; the predictor never has it
INIT_STD = 0.02                  # GPT-2's initialization, as nanoGPT's _init_weights


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        # is_causal: position t attends to positions 0..t only, which is what makes the model causal.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + MLP(norm(x)), the MLP 4x wide with GELU."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width, bias=False), nn.LayerNorm(width, bias=False)
        self.attn = CausalSelfAttention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width, bias=False), nn.GELU(),
                                 nn.Linear(4 * width, width, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ByteGPT(nn.Module):
    def __init__(self, layers: int, heads: int, width: int, block_size: int):
        super().__init__()
        self.block_size = block_size
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Embedding(block_size, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width, bias=False)
        self.head = nn.Linear(width, VOCAB, bias=False)
        self.head.weight = self.embed.weight        # tied: one 256 x width table reads and writes bytes
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                # GPT-2's scaled init of the projections into the residual stream, so that its variance
                # does not grow with depth.
                std = INIT_STD / math.sqrt(2 * layers) if name.endswith(("attn.proj.weight", "mlp.2.weight")) else INIT_STD
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, 256] of the byte after each position; T at most block_size."""
        x = self.embed(idx) + self.position(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def window_start(t: int, block: int) -> int:
    """Where the context window of position t starts when a row is longer than the network's block.

    Up to block - 1 a position reads the row from its start; after that the windows slide by half a
    block, so every position sees at least block / 2 bytes before it. It is a function of t alone:
    a prefix of a row gives each of its positions the window the whole row gives it (the harness's
    look-ahead audit compares the two)."""
    half = block // 2
    return 0 if t < block else ((t - block) // half + 1) * half


@torch.inference_mode()
def log_probs(net: ByteGPT, idx: torch.Tensor) -> torch.Tensor:
    """log-softmax of the next byte at every position of idx [B, T] (any T), float32: each position from
    its window (window_start), one forward pass per window for the positions it is the window of."""
    total = idx.shape[1]
    out = torch.empty(idx.shape[0], total, VOCAB, device=idx.device)
    t = 0
    while t < total:
        start = window_start(t, net.block_size)
        stop = min(start + net.block_size, total)      # positions t .. stop - 1 share this window
        out[:, t:stop] = F.log_softmax(net(idx[:, start:stop]).float(), dim=-1)[:, t - start:]
        t = stop
    return out


def random_windows(text: torch.Tensor, batch: int, block: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` windows of block + 1 bytes at random offsets: inputs and the same shifted by one byte."""
    starts = torch.randint(len(text) - block - 1, (batch,), generator=gen)
    rows = torch.stack([text[s:s + block + 1] for s in starts.tolist()]).long()
    return rows[:, :-1], rows[:, 1:]


class KJVByteGPT(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        self.net = ByteGPT(cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["block_size"]).to(self.device)
        if not ctx.trains:      # the predictor and infer's server: the model only; windows come with each call
            return
        if ctx.world_size > 1:
            raise UsageError(f"{type(self).__name__} trains on one process: run it without NPROC / torchrun")
        raw = (ctx.dataset_dir / TRAIN_FILE).read_bytes()
        self.text = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        self.gen = torch.Generator().manual_seed(ctx.seed)
        # AdamW, weight decay on the matrices only (the embedding, which is also the head, among them),
        # none on the norms' scales: nanoGPT's configure_optimizers.
        params = [p for p in self.net.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(
            [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg["weight_decay"]},
             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]))
        total = cfg["epochs"] * cfg["steps_per_epoch"]
        self.lr_at = lambda step: one_cycle(step, total, cfg["lr"], cfg["warmup_fraction"],
                                            cfg["lr_start_fraction"], cfg["lr_end_fraction"])
        self.step = 0
        self.bf16 = resolve_switch(cfg["bf16"], self.device)

    def train_precision(self):
        return switch_precision(self.ctx.config, self.device, bf16=self.bf16)

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        self.net.train()
        total_loss = torch.zeros(())
        steps = cfg["steps_per_epoch"]
        for _ in ctx.progress(range(steps), total=steps, desc=f"epoch {epoch}"):
            x, y = random_windows(self.text, cfg["batch_size"], cfg["block_size"], self.gen)
            total_loss += self.train_step(x.to(self.device), y.to(self.device))
        return {"loss": total_loss.item() / steps, "samples": steps * cfg["batch_size"], "lr": self.lr_at(self.step)}

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One AdamW step at the schedule's rate, gradients clipped to norm grad_clip; the loss (nats per byte)."""
        for group in self.opt.param_groups:
            group["lr"] = self.lr_at(self.step)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.net(x)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.ctx.config["grad_clip"] > 0:
            nn.utils.clip_grad_norm_(self.net.parameters(), self.ctx.config["grad_clip"])
        self.opt.step()
        self.step += 1
        return loss.detach()

    # save and load are TorchReference's (the weights and the hyperparameters). The predictor scores in
    # float32 whatever the training precision.

    def predict(self, inputs):
        """log-probabilities [N, T, 256] (float32) of the byte after each position of inputs [N, T]."""
        array = np.asarray(inputs)
        got = (f"an array of shape {array.shape}" if array.ndim != 2 else
               f"{array.dtype} values" if not np.issubdtype(array.dtype, np.integer) else
               f"ids from {array.min()} to {array.max()}" if array.size and (array.min() < 0 or array.max() >= VOCAB)
               else None)
        if got:
            raise UsageError(f"{type(self).__name__}.predict takes byte ids 0..255 in an array [N, T]; got {got}")
        idx = torch.from_numpy(array.astype(np.int64))      # a copy: the channel's arrays are read-only
        self.net.eval()
        step = self.ctx.config["eval_batch_size"]
        return torch.cat([log_probs(self.net, idx[i:i + step].to(self.device)).cpu()
                          for i in range(0, len(idx), step)] or [torch.empty(0, idx.shape[1], VOCAB)]).numpy()

    def infer(self, example):
        """One window [T] of byte ids -> its log-probabilities [T, 256]."""
        return self.predict(np.asarray(example)[None])[0]

    def eval_inputs(self):
        raise UsageError(f"{type(self).__name__} holds no eval inputs: the harness owns the validation "
                         f"text and gives predict() its windows")
