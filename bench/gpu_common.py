"""What every part of `python -m bench.gpu` shares: the device setting, the report it prints,
the one-line "not measured" reason, and how a part reaches a reference's own code."""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Peak dense bf16 tensor FLOP/s by device name (NVIDIA's data sheets, without sparsity); a device
# not in the table gets no utilization figure rather than a wrong one. Checked in order.
PEAK_BF16_TFLOPS = (("H100", "PCIe", 756.0), ("H100", "HBM3", 989.0), ("H100", "SXM", 989.0),
                    ("H200", "", 989.0), ("A100", "", 312.0))


class NotMeasured(Exception):
    """A part this machine cannot run: its one-line reason is printed and recorded."""



def peak_bf16_flops(name: str) -> float:
    for family, variant, tflops in PEAK_BF16_TFLOPS:
        if family in name and variant in name:
            return tflops * 1e12
    raise NotMeasured(f"no peak bf16 FLOP/s on record for {name!r} (bench/gpu_common.py PEAK_BF16_TFLOPS)")


class Report:
    """name=value lines on stdout, and the same figures for the JSON."""

    def __init__(self, label: str):
        self.label = label
        self.figures: dict[str, float | str] = {}
        self.not_measured: dict[str, str] = {}
        self.goals: dict[str, str] = {}
        self.notes: dict[str, str] = {}

    def figure(self, name: str, value, note: str = "") -> None:
        value = round(value, 4) if isinstance(value, float) else value
        self.figures[name] = value
        if note:
            self.notes[name] = note
        print(f"{name}={value}" + (f"  [{self.label}]" if self.label != "cuda" else "") + (f"  ({note})" if note else ""),
              flush=True)

    def skip(self, part: str, reason: str) -> None:
        self.not_measured[part] = reason
        print(f"{part}: not measured: {reason}", flush=True)

    def goal(self, name: str, met: bool, text: str) -> None:
        self.goals[name] = "met" if met else "not met"
        print(f"goal {name}: {'met' if met else 'not met'} ({text})", flush=True)

# ----------------------------------------------------------------------------------------------
# Setting: the device, the sizes, timing

class Setting:
    def __init__(self, torch, smoke: bool, quick: bool):
        self.torch, self.smoke, self.quick = torch, smoke, quick
        self.device = torch.device("cpu" if smoke else "cuda")
        self.name = "cpu" if smoke else torch.cuda.get_device_name(self.device)
        if smoke:       # tiny: every code path, in seconds
            self.sizes, self.batch, self.warmup, self.steps = (32,), 2, 1, 1
            self.latency_runs, self.latency_warmup, self.compile_backend = 3, 1, "eager"
        else:
            self.sizes = (224,) if quick else (160, 192, 224)
            self.batch, self.warmup, self.steps = 256, (5 if quick else 15), (10 if quick else 40)
            self.latency_runs, self.latency_warmup = (50 if quick else 200), 20
            self.compile_backend = "inductor"

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def compile(self, module):
        return self.torch.compile(module, backend=self.compile_backend, dynamic=False)



def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__

def load_reference_module(name: str, file: str = "train.py"):
    """A reference's own file, by path (reference folders are not packages)."""
    spec = importlib.util.spec_from_file_location(name.replace("-", "_") + "_reference", REPO / "references" / name / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smoke_references(root: Path, name: str, eval_from_epoch: int) -> Path:
    """A references folder under `root` holding a copy of `name` whose first evaluated epoch is
    `eval_from_epoch` (its [budget] line rewritten), for a CPU smoke that runs the harness's path through
    an evaluated epoch: cifar10-fast evaluates from epoch 10, and ten epochs are most of a smoke's time."""
    import re
    import shutil
    references = root / "smoke-references"
    shutil.copytree(REPO / "references" / name, references / name, ignore=shutil.ignore_patterns("__pycache__"))
    toml = references / name / "reference.toml"
    text, found = re.subn(r"^eval_from_epoch = \d+", f"eval_from_epoch = {eval_from_epoch}", toml.read_text(), flags=re.M)
    if found != 1:
        raise RuntimeError(f"{toml}: no one [budget] eval_from_epoch line to lower for the smoke")
    toml.write_text(text)
    return references


def reference_defaults(name: str) -> dict:
    import tomllib
    return tomllib.loads((REPO / "references" / name / "reference.toml").read_text())["hyperparameters"]



@contextlib.contextmanager
def cpu_only(torch):
    """While the reference sets up in a CPU smoke: no CUDA (its "auto" switches and device follow
    it), and torch.compile with the "eager" backend (no C++ toolchain); both restored after."""
    is_available, real_compile = torch.cuda.is_available, torch.compile
    torch.cuda.is_available = lambda: False
    torch.compile = lambda model, **kw: real_compile(model, backend="eager")
    try:
        yield
    finally:
        torch.cuda.is_available, torch.compile = is_available, real_compile


