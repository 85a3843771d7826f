"""What PyTorch references share: device choice, seeding, torch.distributed, the clock hooks.

A PyTorch reference subclasses TorchReference instead of harness.Reference and calls
`self.init_torch(ctx)` first thing in `setup`.
"""
from __future__ import annotations

import os
import random
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from harness.reference import Context, Reference


class TorchReference(Reference):
    device: torch.device = torch.device("cpu")

    def init_torch(self, ctx: Context) -> torch.device:
        """Pick the device, seed every generator, and join the process group under torchrun."""
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
        if ctx.world_size > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo")
        return self.device

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
        return versions

    def close(self) -> None:
        if self.distributed:
            dist.destroy_process_group()
