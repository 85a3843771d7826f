"""What PyTorch references share: device choice, seeding, torch.distributed, the clock hooks,
and the default predict / save / load / eval_inputs / infer of a classifier.

A PyTorch reference subclasses TorchReference instead of harness.Reference, calls
`self.init_torch(ctx)` first thing in `setup`, and there sets `self.ctx` and `self.net` (the bare
network: not wrapped in DistributedDataParallel or torch.compile) in both roles; then, in the
trainer (`ctx.trains`), the training data and what training needs, in the predictor
`self.eval_x` (the eval images, ready for the network, on the device), and in the server of timed
inference requests (`ctx.serves`) nothing more: each example comes with its request, as an array
that `example_from_wire` puts on the device. It then writes only
`setup` and `train_epoch`, and overrides `scores` for test-time augmentation or `evaluated` for
averaged weights. The trainer's `save` writes `evaluated()`'s weights; the predictor's `load`
reads them back into it, so whatever predict and infer need must be in that state dict.
`SETUP_SETS` declares what setup must set; the worker checks it after setup and names what is missing.

For `dawnbench infer --runtime onnxruntime|openvino` the predictor exports `scores` (test-time
augmentation included) to ONNX and hands over the eval inputs as the network takes them
(`export_onnx`, `export_inputs`); for int8 the trainer hands over training examples prepared the
same way (`calibration_inputs`, which needs the reference's `calibration_batch`).
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

from harness.errors import UsageError
from harness.reference import Context, Reference, SetupSets
from harness.registry import switch_value

MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
EVAL_BATCH_SIZE = 1000          # when the reference.toml names no eval_batch_size


def native_bf16(device: torch.device) -> bool:
    """Whether the device multiplies bf16 in hardware: a CUDA GPU that supports it, or a CPU with
    AVX512-BF16 or AMX (elsewhere oneDNN converts to float32 and bf16 is slower than float32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_switch(value, device: torch.device) -> bool:
    """A reference.toml switch (compile, bf16, channels_last, ...): "auto" is on with a CUDA device and
    off otherwise; "native" (for bf16) is on where the device computes bf16 in hardware
    (`native_bf16`); else true / false. Its words are the harness's (harness.registry.switch_value),
    which refuses any other --set of a hyperparameter that [choices] declares a switch before the run."""
    setting = switch_value(value)
    if setting == "auto":
        return device.type == "cuda"
    if setting == "native":
        return native_bf16(device)
    return setting


def switch_precision(config: dict, device: torch.device, *, bf16: bool, fp16: bool = False) -> tuple[str, str]:
    """(precision, why) for `train_precision`: what the resolved bf16 (and fp16) switches chose on `device`,
    autocast to that type with the weights and the optimizer in float32, or float32."""
    settings = ", ".join(f"{k} = {json.dumps(config[k])}" for k in ("bf16", "fp16") if k in config)
    if fp16:
        return "fp16", f"{settings} on {device.type}: float16 autocast with a dynamic loss scale (weights float32)"
    if bf16:
        return "bf16", f"{settings} on {device.type}: bf16 autocast (weights float32)"
    native = switch_value(config.get("bf16", False)) == "native"
    return "fp32", f"{settings} on {device.type}: float32" + (", bf16 not in this device's hardware" if native else "")


class TorchReference(Reference):
    device: torch.device = torch.device("cpu")
    ctx: Context
    net: torch.nn.Module
    eval_x: torch.Tensor
    train_x: torch.Tensor
    SETUP_SETS = (
        SetupSets("ctx", ("train", "predict", "serve"), what="ctx (the Context setup gets)"),
        # The trainer's: a predictor may build its network in load.
        SetupSets("net", ("train",), ("evaluated",),
                  what="the bare network (not wrapped in DistributedDataParallel or torch.compile)"),
        SetupSets("eval_x", ("predict",), ("predict", "eval_inputs"),
                  what="the eval images as the network takes them, on the device"),
        SetupSets("train_x", ("train",), ("calibration_inputs",), only_with="calibration_batch",
                  what="the training examples calibration_batch indexes"),
    )

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

    def example_from_wire(self, example):
        """A timed request's example (eval_inputs()'s tensor, sent as an array) as a tensor on the device."""
        if isinstance(example, np.ndarray):
            return torch.from_numpy(example).to(self.device)
        return example

    # Export for the harness's inference runtimes (dawnbench infer --runtime onnxruntime|openvino)

    def export_onnx(self, path: Path) -> None:
        """Write `scores` (the evaluated network, test-time augmentation included) as ONNX: input
        "input", a batch of eval examples as `export_inputs` gives them (batch axis dynamic), output
        "scores". In the predictor, after `load`."""
        sample = self._export_batch(self.eval_inputs(), range(1))
        module = _Scores(self).eval()      # eval mode: the exporter restores the wrapper's mode on every submodule
        torch.onnx.export(module, (sample,), str(path), dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["scores"],
                          dynamic_axes={"input": {0: "batch"}, "scores": {0: "batch"}})

    def export_inputs(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The eval examples `start` to `stop` as the exported network takes them, in canonical order."""
        inputs = self.eval_inputs()
        return self._export_batch(inputs, range(*slice(start, stop).indices(len(inputs)))).numpy()

    def calibration_inputs(self, n: int) -> np.ndarray:
        """`n` training examples (drawn with the run's seed), prepared as `export_inputs` prepares the
        eval examples: the int8 calibration set. In the trainer, which sees the training files only."""
        total = len(self.train_x)
        gen = torch.Generator().manual_seed(self.ctx.seed)
        indices = torch.randperm(total, generator=gen)[:min(n, total)].sort().values.to(self.train_x.device)
        x = self.calibration_batch(indices)
        return x.detach().float().cpu().contiguous().numpy() if x.is_floating_point() else x.cpu().contiguous().numpy()

    def calibration_batch(self, indices: torch.Tensor) -> torch.Tensor:
        """The training examples at `indices`, unaugmented and prepared exactly as the eval images
        are for the network (what `scores` takes). Each reference that supports int8 says how."""
        raise UsageError(f"{type(self).__name__} does not support int8 yet: it defines no "
                                  f"calibration_batch(indices) (its training examples prepared as the eval images)")

    def _export_batch(self, inputs, indices) -> torch.Tensor:
        if isinstance(inputs, torch.Tensor):
            x = inputs[indices.start:indices.stop] if isinstance(indices, range) else inputs[indices]
        else:
            x = torch.stack([torch.as_tensor(inputs[i]) for i in indices])
        x = x.detach().cpu()
        return (x.float() if x.is_floating_point() else x).contiguous()

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


class _Scores(torch.nn.Module):
    """The reference's `scores` as one module, for the ONNX exporter's trace."""

    def __init__(self, ref: TorchReference):
        super().__init__()
        self.ref = ref
        self.net = ref.evaluated()    # registered, so eval() reaches it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ref.scores(x.to(self.ref.device))
