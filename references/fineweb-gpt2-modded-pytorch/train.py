"""FineWeb-10B to 3.28 validation cross-entropy with the nanoGPT speedrun's record #11 recipe, in PyTorch.

Read top to bottom; fork the directory and edit this file to make an entry of your own.
The recipe is KellerJordan/modded-nanogpt's record of 2024-11-10 ("U-net pattern skip connections &
double lr", 7.2 minutes on 8 H100s; README, "Recipe against its anchor"), the last record whose
attention is PyTorch's dense causal `scaled_dot_product_attention` (the next one moved to
FlexAttention, which PyTorch's CPU build cannot run): so the same file trains on 8 GPUs and runs its
conformance tests on a CPU. The network: a 12-layer GPT with rotary positions, QK-norm, ReLU^2 MLPs,
zero-initialized output projections, a value residual from the first layer, the embedding mixed back
into every block (x0), U-net skips from the first six blocks to the last six, an untied head and a
tanh soft cap on the logits. The optimizer: Muon on the blocks' matrices, Adam on the embedding, the
head and the scalars, constant then a linear warm-down to zero.

An epoch is the record's whole plan (`steps_per_epoch` = 3,000 steps of 512 x 1,024 tokens): the
record is scored once, at its end, and its rate reaches zero there, so a second epoch could not
help (`max_epochs` = 1).

Ranks: `make run NPROC=8` starts 8 trainers (the harness's rank launcher), each reading its own
stride of the token stream as the record's DistributedDataLoader does; one GPU accumulates the same
512 sequences in 8 micro-batches of `device_batch_size` (64). The global batch, and so the
training, is the same in both forms.

The predictor gets the harness's validation windows, never the validation shard: `predict(inputs)`
takes windows [N, T + 1] of token ids and returns [N, T], entry [i, t] = log p(inputs[i, t + 1] |
inputs[i, :t + 1]); `next_distribution(rows, lengths)` returns the whole log-distribution of the
token after each prefix, for the harness's look-ahead audit. Both normalize over the 50,257 GPT-2
tokens (the network's 50,304 outputs are GPT-2's vocabulary padded to a multiple of 128 for speed;
the 47 extra ids never occur).
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from common.torch_base import TorchReference, resolve_switch
from harness.errors import UsageError
from harness.token_shards import read_shard

VOCAB = 50257                    # GPT-2's tokens: what the predictor's distributions are over
TRAIN_PATTERN = "fineweb_train_"  # the training shards, fineweb_train_000001.bin ...; the predictor never has them
# The quintic Newton-Schulz iteration's coefficients (record: zeropower_via_newtonschulz5): the steepest
# slope at 0, so that 5 steps bring every singular value of the normalized update to roughly 0.5 to 1.5.
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7
SOFTCAP = 30.0                   # logits = 30 tanh(logits / 30) (record: GPT.forward)


# ----------------------------------------------------------------------------------------------
# Muon

def orthogonalize(g: torch.Tensor, steps: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """A matrix near the orthogonal factor U V^T of g = U S V^T: g scaled to Frobenius norm 1 (every
    singular value at most 1), then `steps` quintic Newton-Schulz iterations X <- aX + (bA + cA^2)X,
    A = X X^T, on the wide orientation. Each singular value s goes to p(s) = as + bs^3 + cs^5, `steps`
    times; the singular vectors stay g's. The record runs it in bfloat16 (`dtype`); float32 on a CPU,
    where bfloat16 matrix products are emulated and slow."""
    a, b, c = NS_COEFFICIENTS
    x = g.to(dtype)
    x = x / (x.norm() + NS_EPS)
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton-Schulz, for 2-D weights. Per step, for each matrix p (rows x cols)
    with gradient g:  buf <- momentum buf + g;  u = g + momentum buf (Nesterov);
    p <- p - lr max(1, rows / cols)^0.5 orthogonalize(u).
    Under several ranks each rank orthogonalizes every world_size-th matrix and one all-reduce of a flat
    buffer shares the updates (the record's scheme: 12 layers' matrices spread evenly over 8 GPUs)."""

    def __init__(self, params, lr: float, momentum: float, nesterov: bool = True, ns_steps: int = 5,
                 dtype: torch.dtype = torch.bfloat16):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps))
        self.dtype = dtype

    @torch.no_grad()
    def step(self, closure=None):
        ranked = dist.is_available() and dist.is_initialized()
        rank, world = (dist.get_rank(), dist.get_world_size()) if ranked else (0, 1)
        for group in self.param_groups:
            params = group["params"]
            flat = torch.zeros(sum(p.numel() for p in params), device=params[0].device, dtype=self.dtype)
            at = 0
            for i, p in enumerate(params):
                if i % world == rank:
                    g = p.grad
                    buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(g))
                    buf.mul_(group["momentum"]).add_(g)
                    u = g.add(buf, alpha=group["momentum"]) if group["nesterov"] else buf
                    u = orthogonalize(u, group["ns_steps"], self.dtype) * max(1, p.shape[0] / p.shape[1]) ** 0.5
                    flat[at:at + p.numel()] = u.flatten()
                at += p.numel()
            if ranked:
                dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            at = 0
            for p in params:
                p.add_(flat[at:at + p.numel()].view_as(p).type_as(p), alpha=-group["lr"])
                at += p.numel()


# ----------------------------------------------------------------------------------------------
# The network

def rotary(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of x [B, T, heads, head_dim]: each pair (i, i + d/2) of a head's
    channels turned by the angle t base^(-2i/d) at position t (the record's Rotary, apply_rotary_emb)."""
    t, d = x.shape[1], x.shape[3]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(t, device=x.device, dtype=torch.float32), inv_freq)
    cos, sin = freqs.cos()[None, :, None, :].to(x.dtype), freqs.sin()[None, :, None, :].to(x.dtype)
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos], 3)


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


class CastedLinear(nn.Linear):
    """A linear layer whose float32 weight is cast to its input's type (bf16 on the GPU), as the record's."""

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype))


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.c_q, self.c_k, self.c_v = (CastedLinear(width, width, bias=False) for _ in range(3))
        self.c_proj = CastedLinear(width, width, bias=False)
        self.c_proj.weight.data.zero_()                  # zero init: each block starts as the identity
        self.lamb = nn.Parameter(torch.tensor(0.5))      # the value residual's mix with the first layer's values

    def forward(self, x: torch.Tensor, v1: torch.Tensor | None):
        b, t, c = x.shape
        q = self.c_q(x).view(b, t, self.heads, self.head_dim)
        k = self.c_k(x).view(b, t, self.heads, self.head_dim)
        v = self.c_v(x).view(b, t, self.heads, self.head_dim)
        v1 = v if v1 is None else v1
        v = (1 - self.lamb) * v + self.lamb * v1.view_as(v)
        q, k = rotary(rms_norm(q)), rotary(rms_norm(k))  # QK-norm, then positions
        # is_causal: position t attends to 0..t only, which is what makes the model causal.
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c)), v1


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.c_fc = CastedLinear(width, 4 * width, bias=False)
        self.c_proj = CastedLinear(4 * width, width, bias=False)
        self.c_proj.weight.data.zero_()

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())     # ReLU^2


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.attn = CausalSelfAttention(width, heads)
        self.mlp = MLP(width)
        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))  # the mix of the stream and the embedding x0

    def forward(self, x, v1, x0):
        x = self.lambdas[0] * x + self.lambdas[1] * x0
        y, v1 = self.attn(rms_norm(x), v1)
        x = x + y
        return x + self.mlp(rms_norm(x)), v1


class GPT(nn.Module):
    def __init__(self, vocab: int, layers: int, heads: int, width: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)           # nn.Embedding's N(0, 1) init, as the record's
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.encoder_layers = layers // 2
        self.skip_weights = nn.Parameter(torch.ones(layers - self.encoder_layers))
        self.lm_head = CastedLinear(width, vocab, bias=False)
        self.lm_head.weight.data.zero_()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Soft-capped logits [B, T, padded vocab] of the token after each position of idx [B, T]."""
        return self.logits(self.features(idx))

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return SOFTCAP * torch.tanh(self.lm_head(features).float() / SOFTCAP)

    def features(self, idx: torch.Tensor) -> torch.Tensor:
        """The final RMS-normed stream [B, T, width], which the head reads."""
        x = x0 = rms_norm(self.embed(idx))
        v1, skips = None, []
        for block in self.blocks[:self.encoder_layers]:
            x, v1 = block(x, v1, x0)
            skips.append(x)
        for weight, block in zip(self.skip_weights, self.blocks[self.encoder_layers:]):
            x, v1 = block(x + weight * skips.pop(), v1, x0)   # U-net: the last encoder output to the first decoder
        return rms_norm(x)


def log_distribution(net: GPT, idx: torch.Tensor, last_only: bool = False) -> torch.Tensor:
    """log-softmax over GPT-2's 50,257 tokens [B, T, VOCAB], float32, at every position of idx [B, T]; with
    `last_only`, at the last position only [B, 1, VOCAB] (the head, 50,304 x width, read once, not T times)."""
    features = net.features(idx)
    return F.log_softmax(net.logits(features[:, -1:] if last_only else features)[..., :VOCAB].float(), dim=-1)


def warmdown(step: int, steps: int, warmdown_steps: int) -> float:
    """The rate's share at step `step` of a plan of `steps`: 1, then linear to 0 over the last
    `warmdown_steps` (the record's get_lr with warmup_iters = 0), 0 after the plan."""
    return max(0.0, min(1.0, (steps - step) / warmdown_steps)) if warmdown_steps > 0 else float(step < steps)


def micro_batches(batch: int, device_batch: int, world: int) -> int:
    """Micro-batches a rank accumulates a step so that `world` ranks of `device_batch` sequences make the
    global `batch`: 8 on one GPU, 1 on eight (the record's train_accumulation_steps)."""
    if batch % (device_batch * world):
        raise UsageError(f"batch_size {batch} is not a multiple of device_batch_size {device_batch} x {world} "
                         f"ranks: --set device_batch_size=N with N x {world} dividing {batch}")
    return batch // (device_batch * world)


# ----------------------------------------------------------------------------------------------
# Data: the training stream, in this rank's stride

class TokenStream:
    """The record's DistributedDataLoader: the shards in order, each read front to back; a micro-batch is
    the next batch x seq + 1 tokens of this rank's stride (rank r starts r x batch x seq tokens in and every
    rank moves world x batch x seq per micro-batch); a shard too short for the next one moves on to the
    next shard, and after the last back to the first."""

    def __init__(self, files, batch: int, seq: int, rank: int, world: int):
        self.files, self.batch, self.seq, self.rank, self.world = files, batch, seq, rank, world
        self.shard = -1
        self.advance()

    def advance(self):
        self.shard = (self.shard + 1) % len(self.files)
        self.tokens = read_shard(self.files[self.shard])
        if len(self.tokens) < self.world * self.batch * self.seq + 1:
            raise UsageError(f"{self.files[self.shard].name} holds {len(self.tokens)} tokens, fewer than one step's "
                             f"{self.world} x {self.batch} x {self.seq} + 1: lower device_batch_size or sequence_length")
        self.at = self.rank * self.batch * self.seq

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.batch * self.seq
        buf = torch.from_numpy(self.tokens[self.at:self.at + n + 1].astype(np.int64))
        self.at += n * self.world
        if self.at + n * self.world + 1 > len(self.tokens):
            self.advance()
        return buf[:-1].view(self.batch, self.seq), buf[1:].view(self.batch, self.seq)


# ----------------------------------------------------------------------------------------------
# The entry

class FineWebModdedGPT(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        self.bf16 = resolve_switch(cfg["bf16"], self.device)
        self.net = GPT(cfg["vocab_size"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"]).to(self.device)
        if not ctx.trains:
            # The predictor: the model only (windows come with each call), in float32 whatever the training
            # precision: the audit holds a prefix's forward pass to the whole window's within 0.001 nats,
            # which bf16's rounding (3 significant digits) would not keep.
            return
        if self.bf16:   # the record's precision: bf16 embedding and scalars, float32 linear weights cast per use
            self.net.bfloat16()
            for m in self.net.modules():
                if isinstance(m, CastedLinear):
                    m.float()
        world = max(1, ctx.world_size)
        self.accumulation = micro_batches(cfg["batch_size"], cfg["device_batch_size"], world)
        files = sorted(ctx.dataset_dir.glob(TRAIN_PATTERN + "*.bin"))
        if not files:
            raise UsageError(f"no {TRAIN_PATTERN}*.bin in {ctx.dataset_dir}: dawnbench data fetch {ctx.task.dataset}")
        self.stream = TokenStream(files, cfg["device_batch_size"], cfg["sequence_length"], ctx.rank, world)
        self.model = self.net
        if resolve_switch(cfg["compile"], self.device):
            self.model = torch.compile(self.model)
        if world > 1:
            self.model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        # The record's four optimizers: Adam on the embedding, on the head and on the scalars, Muon on
        # the blocks' matrices; betas (0.9, 0.95), no weight decay anywhere.
        betas = (cfg["beta1"], cfg["beta2"])
        matrices = [p for p in self.net.blocks.parameters() if p.ndim == 2]
        scalars = [p for p in self.net.blocks.parameters() if p.ndim < 2] + [self.net.skip_weights]
        self.optimizers = [
            torch.optim.Adam([self.net.embed.weight], lr=cfg["embed_lr"], betas=betas),
            torch.optim.Adam([self.net.lm_head.weight], lr=cfg["head_lr"], betas=betas),
            Muon(matrices, lr=cfg["muon_lr"], momentum=cfg["muon_momentum"], ns_steps=cfg["ns_steps"],
                 dtype=torch.bfloat16 if self.device.type == "cuda" else torch.float32),
            torch.optim.Adam(scalars, lr=cfg["scalar_lr"], betas=betas),
        ]
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["peak_lr"] = group["lr"]
        self.plan = cfg["epochs"] * cfg["steps_per_epoch"]
        self.step = 0

    def train_precision(self):
        setting = f"bf16 = {self.ctx.config['bf16']!r} on {self.device.type}"
        if self.bf16:
            return "bf16", (f"{setting}: the record's cast (embedding, scalars and activations bf16; linear weights "
                            f"float32, cast to bf16 where used; Muon's iteration in bf16), no autocast")
        return "fp32", f"{setting}: float32"

    def train_epoch(self, epoch):
        cfg = self.ctx.config
        self.model.train()
        total = torch.zeros((), device=self.device)
        steps = cfg["steps_per_epoch"]
        for _ in self.ctx.progress(range(steps), total=steps, desc=f"epoch {epoch}"):
            total += self.train_step()
        return {"loss": total.item() / steps, "samples": steps * cfg["batch_size"] // max(1, self.ctx.world_size),
                "lr_share": warmdown(self.step, self.plan, cfg["warmdown_steps"])}

    def train_step(self) -> torch.Tensor:
        """One step of the global batch: `accumulation` micro-batches (gradients all-reduced on the last),
        Muon's momentum warmed from 0.85 to 0.95 over the first 500 steps, every rate at its warm-down
        share. Returns the last micro-batch's loss (nats per token), as the record logs it."""
        cfg = self.ctx.config
        for i in range(1, self.accumulation + 1):
            x, y = (t.to(self.device) for t in self.stream.next_batch())
            sync = i == self.accumulation or not isinstance(self.model, nn.parallel.DistributedDataParallel)
            with contextlib.nullcontext() if sync else self.model.no_sync():
                # The record's loss: over all 50,304 outputs (the 47 padding ids are never a target).
                loss = F.cross_entropy(self.model(x).view(-1, cfg["vocab_size"]), y.reshape(-1))
                loss.backward()
        for p in self.net.parameters():
            p.grad /= self.accumulation
        frac = min(self.step / cfg["muon_momentum_warmup_steps"], 1)
        self.optimizers[2].param_groups[0]["momentum"] = (1 - frac) * cfg["muon_momentum_start"] + frac * cfg["muon_momentum"]
        share = warmdown(self.step, self.plan, cfg["warmdown_steps"])
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = group["peak_lr"] * share
            opt.step()
        self.net.zero_grad(set_to_none=True)
        self.step += 1
        return loss.detach().float()

    # save and load are TorchReference's (the weights and the hyperparameters).

    def _ids(self, array, what: str, min_width: int) -> torch.Tensor:
        array = np.asarray(array)
        got = (f"an array of shape {array.shape}" if array.ndim != 2 or array.shape[1] < min_width else
               f"{array.dtype} values" if not np.issubdtype(array.dtype, np.integer) else
               f"ids from {array.min()} to {array.max()}" if array.size and (array.min() < 0 or array.max() >= VOCAB)
               else None)
        if got:
            raise UsageError(f"{type(self).__name__}.{what} takes GPT-2 token ids 0..{VOCAB - 1} in an array "
                             f"[N, T] with T >= {min_width}; got {got}")
        return torch.from_numpy(array.astype(np.int64))     # a copy: the channel's arrays are read-only

    @torch.inference_mode()
    def predict(self, inputs):
        """inputs [N, T + 1] -> float32 [N, T]: [i, t] = log p(inputs[i, t + 1] | inputs[i, :t + 1])."""
        idx = self._ids(inputs, "predict", 2)
        self.net.eval()
        step = self.ctx.config["eval_batch_size"]
        out = []
        for i in range(0, len(idx), step):
            rows = idx[i:i + step].to(self.device)
            logp = log_distribution(self.net, rows[:, :-1])
            out.append(logp.gather(-1, rows[:, 1:, None])[..., 0].cpu())
        return torch.cat(out).numpy() if out else np.zeros((0, idx.shape[1] - 1), np.float32)

    @torch.inference_mode()
    def next_distribution(self, rows, lengths):
        """rows [K, T], lengths [K] in 1..T -> float32 [K, VOCAB]: the log-distribution of the token after
        rows[j, :lengths[j]], each from that prefix alone (the network never sees the rest of the row)."""
        idx = self._ids(rows, "next_distribution", 1)
        lengths = np.asarray(lengths)
        if lengths.shape != (len(idx),) or not np.issubdtype(lengths.dtype, np.integer) or (
                len(lengths) and (lengths.min() < 1 or lengths.max() > idx.shape[1])):
            raise UsageError(f"{type(self).__name__}.next_distribution takes one length in 1..{idx.shape[1]} a row; "
                             f"got {lengths.dtype} values of shape {lengths.shape}")
        self.net.eval()
        out = torch.empty(len(idx), VOCAB)
        for j, n in enumerate(lengths.tolist()):
            out[j] = log_distribution(self.net, idx[j:j + 1, :n].to(self.device), last_only=True)[0, -1].cpu()
        return out.numpy()

    def infer(self, example):
        """One window [T + 1] of token ids -> the log-probabilities [T] of its tokens after the first."""
        return self.predict(np.asarray(example)[None])[0]

    def eval_inputs(self):
        raise UsageError(f"{type(self).__name__} holds no eval inputs: the harness owns the validation "
                         f"stream and gives predict() its windows")

