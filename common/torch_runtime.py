"""What PyTorch references share: device choice, seeding, torch.distributed, the clock hooks,
and the default predict / save / load / eval_inputs / infer of a classifier.

A PyTorch reference subclasses TorchReference instead of harness.Reference, calls
`self.init_torch(ctx)` first thing in `setup`, and there sets `self.ctx` and `self.net` (the bare
network: not wrapped in DistributedDataParallel or torch.compile) in both roles; then, in the
trainer (`ctx.trains`), the training data and what training needs, and in the predictor
`self.eval_x` (the eval images, ready for the network, on the device). It then writes only
`setup` and `train_epoch`, and overrides `scores` for test-time augmentation or `evaluated` for
averaged weights. The trainer's `save` writes `evaluated()`'s weights; the predictor's `load`
reads them back into it, so whatever predict and infer need must be in that state dict.
"""
from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from harness.reference import Context, Reference

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
EVAL_BATCH_SIZE = 1000          # when the reference.toml names no eval_batch_size


def resolve_switch(value, device: torch.device) -> bool:
    """A reference.toml switch (compile, bf16, channels_last, ...): "auto" is on with a CUDA device and
    off otherwise; else true / false."""
    text = str(value).strip().lower()
    if text == "auto":
        return device.type == "cuda"
    if text in ("true", "on", "1", "yes"):
        return True
    if text in ("false", "off", "0", "no"):
        return False
    raise ValueError(f"switch value {value!r}: expected \"auto\", \"true\" or \"false\"")


class TorchReference(Reference):
    device: torch.device = torch.device("cpu")
    ctx: Context
    net: torch.nn.Module
    eval_x: torch.Tensor

    def init_torch(self, ctx: Context) -> torch.device:
        """Pick the device, seed every generator, and join the process group under torchrun (the
        trainers only: the predictor is one process, next to rank 0)."""
        random.seed(ctx.seed)
        np.random.seed(ctx.seed)
        torch.manual_seed(ctx.seed)
        if torch.cuda.is_available():
            self.device = torch.device("cuda", ctx.local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
            if ctx.world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
                # torchrun sets OMP_NUM_THREADS=1 itself; keep ranks from fighting over cores.
                torch.set_num_threads(max(1, (os.cpu_count() or 1) // ctx.world_size))
        if ctx.trains and ctx.world_size > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo")
        return self.device

    # The evaluated network and its scores: what predict, infer and save use.

    def evaluated(self) -> torch.nn.Module:
        """The network that predicts, infers and is saved: `self.net`, unless the reference keeps
        other weights for that (an average of the trained ones, say)."""
        return self.net

    @torch.inference_mode()
    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Class scores of a batch of eval images (the network in eval mode)."""
        return self.evaluated()(x)

    def predict(self):
        self.evaluated().eval()
        step = self.ctx.config.get("eval_batch_size", EVAL_BATCH_SIZE)
        return torch.cat([self.scores(self.eval_x[i:i + step])
                          for i in range(0, len(self.eval_x), step)]).float().cpu().numpy()

    def save(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.evaluated().state_dict(), path / MODEL_FILE)
        # The hyperparameters next to the weights, so a model folder copied alone still says what it is.
        (path / CONFIG_FILE).write_text(json.dumps(self.ctx.config, indent=2))

    def load(self, path: Path) -> None:
        net = self.evaluated()
        net.load_state_dict(torch.load(Path(path) / MODEL_FILE, map_location=self.device))
        net.eval()

    def eval_inputs(self):
        return self.eval_x

    def infer(self, example):
        return self.scores(example.unsqueeze(0))[0].float().cpu().numpy()

    # Processes and devices

    @property
    def distributed(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def all_max(self, values: Sequence[float]) -> list[float]:
        if not self.distributed:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64,
                         device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def framework_versions(self) -> dict[str, str]:
        versions = {"torch": torch.__version__, "threads": str(torch.get_num_threads())}
        if torch.cuda.is_available():
            versions["cuda"] = str(torch.version.cuda)
            versions["cudnn"] = str(torch.backends.cudnn.version())
            if torch.distributed.is_nccl_available():
                versions["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        return versions

    def close(self) -> None:
        if self.distributed:
            dist.destroy_process_group()
