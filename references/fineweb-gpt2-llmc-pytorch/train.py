"""GPT-2 (124M) on FineWeb-10B's GPT-2 tokens to the speedrun's 3.28 nats per token, as karpathy/llm.c's
train_gpt2.py trains it (scripts/pyrun_gpt2_124M.sh), in the harness's contract.

Read top to bottom; fork the directory and edit this file to make an entry of your own.
The network is llm.c's GPT (OpenAI's GPT-2 small): 12 pre-norm blocks of causal self-attention (12 heads)
and a tanh-GELU MLP 4x wide, width 768, learned positions over a 1,024-token context, a final LayerNorm,
the output layer tied to the token embedding, biases everywhere: 124,439,808 parameters. AdamW
(betas 0.9 / 0.95, weight decay 0.1 on the matrices), 700 steps of linear warm-up to 6e-4, cosine decay to
0 at step 18,865, gradients clipped to norm 1, 524,288 tokens a step (README, "Recipe against its anchor").

The trainer reads the train shards the trainer's view holds (llm.c's `.bin` format, through the harness's
reader) in order, as llm.c's DistributedDataLoader does: rank r of W takes the rows at r*B*T, then every
W*B*T tokens, shard after shard. One epoch is the plan's 18,865 steps (9.89B tokens, 96% of the 103
shards): the harness's eval bound counts an epoch as a pass over the training set, and the schedule ends
with the rate at 0, so nothing is gained after it. On one GPU the steps accumulate 16 micro-batches of
32 x 1,024 tokens; on 8 (`make run NPROC=8`), 2 on each rank: the same 524,288 tokens a step either way.

The predictor never has the validation shard. The task's reply is "next" (docs/RULES.md, "Language-model
tasks"): `predict(inputs)` gets chunks [N, T + 1] and returns [N, T], the log-probability of each next
token; the audit's fresh predictor gets `next_distribution(rows, lengths)` and returns [K, V], the
distribution after each prefix. Both run the same causal network in float32 (TF32 matmuls on a GPU, as
llm.c evaluates), so a prefix gets the same answer in both.
The harness times and scores everything; this file never sees the validation tokens.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from common.torch_base import TorchReference, resolve_switch, switch_precision
from harness.errors import UsageError
from harness.token_shards import read_shard

VOCAB = 50257                        # GPT-2's tokens; the shards' ids are below it (50256 ends a document)
TRAIN_SHARDS = "fineweb_train_*.bin"  # the trainer's view; the predictor's holds no shard
INIT_STD = 0.02                      # GPT-2's initialization, llm.c's _init_weights


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, layers: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.c_proj.residual_layers = layers         # GPT-2's scaled init of a projection into the residual stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        # is_causal: position t attends to positions 0..t only (llm.c's --flash 1 path), which makes the model
        # causal and the audit's prefix answer the first pass's.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm: x + attention(ln_1(x)), then x + MLP(ln_2(x)), the MLP 4x wide with the tanh GELU."""

    def __init__(self, width: int, heads: int, layers: int):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, layers)
        self.c_fc, self.c_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.c_proj.residual_layers = layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        # llm.c's NewGELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's tanh approximation
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers: int, heads: int, width: int, block_size: int, generator: torch.Generator):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(VOCAB, width)
        self.wpe = nn.Embedding(block_size, width)
        self.h = nn.ModuleList(Block(width, heads, layers) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight            # tied: one 50,257 x width table reads and writes tokens
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.lm_head:
                std = INIT_STD / math.sqrt(2 * module.residual_layers) if hasattr(module, "residual_layers") else INIT_STD
                nn.init.normal_(module.weight, 0.0, std, generator=generator)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, INIT_STD, generator=generator)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """The final hidden state [B, T, width] of each position (T at most block_size)."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] of the token after each position."""
        return self.lm_head(self.hidden(idx))


class ShardStream:
    """llm.c's DistributedDataLoader: the shards in name order; rank r reads B*T + 1 tokens at r*B*T, then
    moves W*B*T on; past a shard's end, the next shard (after the last, the first again)."""

    def __init__(self, paths, batch: int, length: int, rank: int, world: int):
        self.paths, self.batch, self.length, self.rank, self.world = paths, batch, length, rank, world
        self.shard = -1
        self._next_shard()

    def _next_shard(self) -> None:
        self.shard = (self.shard + 1) % len(self.paths)
        self.tokens = read_shard(self.paths[self.shard])
        need = self.world * self.batch * self.length + 1
        if len(self.tokens) < need:
            raise UsageError(f"{self.paths[self.shard].name} holds {len(self.tokens):,} tokens, fewer than one step's "
                             f"{need:,} (micro_batch x sequence_length x processes + 1): lower micro_batch")
        self.position = self.rank * self.batch * self.length

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        span = self.batch * self.length
        rows = torch.from_numpy(self.tokens[self.position:self.position + span + 1].astype(np.int64))
        self.position += span * self.world
        if self.position + span * self.world + 1 > len(self.tokens):
            self._next_shard()
        return rows[:-1].view(self.batch, self.length), rows[1:].view(self.batch, self.length)


def learning_rate(step: int, cfg: dict) -> float:
    """llm.c's get_lr: linear warm-up to lr over warmup_steps (step + 1 of them), cosine decay to
    lr x lr_end_fraction at total_steps, held there after."""
    peak, warm, total = cfg["lr"], cfg["warmup_steps"], cfg["epochs"] * cfg["steps_per_epoch"]
    floor = peak * cfg["lr_end_fraction"]
    if step < warm:
        return peak * (step + 1) / warm
    if step > total:
        return floor
    return floor + 0.5 * (1.0 + math.cos(math.pi * (step - warm) / (total - warm))) * (peak - floor)


def tokens_in(array, rows: int | None, who: str) -> torch.Tensor:
    """The harness's token ids as an int64 tensor [n, T], or one line saying what is wrong with them."""
    array = np.asarray(array)
    got = (f"an array of shape {array.shape}" if array.ndim != 2 else
           f"{array.dtype} values" if not np.issubdtype(array.dtype, np.integer) else
           f"ids from {array.min()} to {array.max()}" if array.size and (array.min() < 0 or array.max() >= VOCAB) else
           f"{len(array)} rows for {rows} lengths" if rows is not None and len(array) != rows else None)
    if got:
        raise UsageError(f"{who} takes GPT-2 token ids 0..{VOCAB - 1} in an array [N, T]; got {got}")
    return torch.from_numpy(array.astype(np.int64))      # a copy: the channel's arrays are read-only


class FineWebGPT2(TorchReference):
    def setup(self, ctx):
        self.ctx, cfg = ctx, ctx.config
        self.init_torch(ctx)
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = resolve_switch(cfg["tf32"], self.device)    # llm.c's --tensorcores 1
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32
        init = torch.Generator().manual_seed(ctx.seed)
        self.net = GPT(cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["block_size"], init).to(self.device)
        if not ctx.trains:      # the predictor: the model only; the harness gives the tokens with each call
            return
        per_step = cfg["micro_batch"] * cfg["sequence_length"] * ctx.world_size
        if cfg["total_batch_tokens"] % per_step or cfg["sequence_length"] > cfg["block_size"]:
            raise UsageError(f"total_batch_tokens {cfg['total_batch_tokens']} must be a multiple of micro_batch x "
                             f"sequence_length x processes = {per_step}, and sequence_length at most block_size "
                             f"{cfg['block_size']}: set micro_batch for this process count")
        self.accumulate = cfg["total_batch_tokens"] // per_step
        shards = sorted(ctx.dataset_dir.glob(TRAIN_SHARDS))
        if not shards:
            raise UsageError(f"no {TRAIN_SHARDS} in {ctx.dataset_dir}: run `dawnbench data fetch fineweb10B`")
        self.stream = ShardStream(shards, cfg["micro_batch"], cfg["sequence_length"], ctx.rank, ctx.world_size)
        # compiled, then wrapped, in llm.c's order (train_gpt2.py:670, 706-707): the wrapper's
        # require_backward_grad_sync below is DistributedDataParallel's own attribute
        self.model = torch.compile(self.net) if resolve_switch(cfg["compile"], self.device) else self.net
        if self.distributed:
            self.model = DistributedDataParallel(self.model, device_ids=[self.device.index]
                                                 if self.device.type == "cuda" else None)
        # AdamW, weight decay on the matrices and the embeddings (the tied head among them), none on biases and
        # the LayerNorms: llm.c's configure_optimizers; fused on CUDA as there.
        params = [p for p in self.net.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(
            [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg["weight_decay"]},
             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"], fused=self.device.type == "cuda")
        self.bf16 = resolve_switch(cfg["bf16"], self.device)
        self.step = 0

    def train_precision(self):
        return switch_precision(self.ctx.config, self.device, bf16=self.bf16)

    def train_epoch(self, epoch):
        cfg, ctx = self.ctx.config, self.ctx
        self.net.train()
        total_loss = torch.zeros((), device=self.device)
        steps = cfg["steps_per_epoch"]
        for _ in ctx.progress(range(steps), total=steps, desc=f"epoch {epoch}", unit="step"):
            total_loss += self.train_step()
        tokens = steps * self.accumulate * cfg["micro_batch"] * cfg["sequence_length"]
        return {"loss": total_loss.item() / steps, "samples": tokens, "lr": learning_rate(self.step, cfg)}

    def train_step(self) -> torch.Tensor:
        """One AdamW step on total_batch_tokens: `accumulate` micro-batches, the gradients averaged across ranks
        on the last (DDP), clipped to norm grad_clip, at llm.c's rate for this step. The mean loss (nats/token)."""
        cfg = self.ctx.config
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(self.accumulate):
            x, y = (t.to(self.device, non_blocking=True) for t in self.stream.next_batch())
            if self.distributed:
                self.model.require_backward_grad_sync = micro == self.accumulate - 1
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                logits = self.model(x)
                loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1)) / self.accumulate
            loss.backward()
            loss_sum += loss.detach()
        nn.utils.clip_grad_norm_(self.net.parameters(), cfg["grad_clip"])
        for group in self.opt.param_groups:
            group["lr"] = learning_rate(self.step, cfg)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        return loss_sum

    # save and load are TorchReference's (the weights and the hyperparameters).

    def _hidden(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.shape[1] > self.net.block_size:
            raise UsageError(f"{type(self).__name__} reads {self.net.block_size} tokens of context; the task's windows "
                             f"are {idx.shape[1]}: set block_size to the task's window")
        return self.net.hidden(idx.to(self.device))

    @torch.inference_mode()
    def predict(self, inputs):
        """Reply "next": chunks [N, T + 1] -> float32 [N, T], entry [i, t] the log-probability of chunk[i, t + 1]
        after chunk[i, :t + 1]; the network in float32, eval_batch_size chunks at a time."""
        chunks = tokens_in(inputs, None, f"{type(self).__name__}.predict")
        self.net.eval()
        out = []
        for i in range(0, len(chunks), self.ctx.config["eval_batch_size"]):
            part = chunks[i:i + self.ctx.config["eval_batch_size"]]
            logits = self.net.lm_head(self._hidden(part[:, :-1])).float()
            target = part[:, 1:].to(self.device)
            out.append(-F.cross_entropy(logits.view(-1, VOCAB), target.reshape(-1), reduction="none")
                       .view(target.shape).cpu())
        return torch.cat(out).numpy() if out else np.zeros((0, chunks.shape[1] - 1), np.float32)

    @torch.inference_mode()
    def next_distribution(self, rows, lengths):
        """The audit: rows [K, T], lengths [K] -> float32 [K, V], the log-distribution after rows[j, :lengths[j]].
        The rows go through the network shortest first, eval_batch_size at a time, each batch cut to its
        longest prefix: causal attention keeps the tokens after a position out of it, so the cut changes no
        answer (in float32 the kernels' order of sums differs by about 1e-6 nats, under the task's 0.001) and
        halves the audit's work on a 1,024-token window."""
        lengths = np.asarray(lengths)
        idx = tokens_in(rows, len(lengths), f"{type(self).__name__}.next_distribution")
        if len(lengths) and (lengths.min() < 1 or lengths.max() > idx.shape[1]):
            raise UsageError(f"next_distribution's lengths must be 1..{idx.shape[1]}; got {lengths.min()}..{lengths.max()}")
        self.net.eval()
        out = torch.empty(len(idx), VOCAB)
        order = np.argsort(lengths, kind="stable")
        for i in range(0, len(idx), self.ctx.config["eval_batch_size"]):
            picked = order[i:i + self.ctx.config["eval_batch_size"]]
            hidden = self._hidden(idx[picked, :int(lengths[picked].max())])
            at = torch.as_tensor(lengths[picked] - 1, device=self.device)
            out[picked] = F.log_softmax(self.net.lm_head(hidden[torch.arange(len(picked), device=self.device), at])
                                        .float(), dim=-1).cpu()
        return out.numpy()

    def infer(self, example):
        raise UsageError(f"{type(self).__name__} has no per-example inference: the harness scores a language model "
                         f"on its stream")

    def eval_inputs(self):
        raise UsageError(f"{type(self).__name__} holds no eval inputs: the harness owns the validation stream and "
                         f"gives predict() its windows")
