"""The system description of a run (env.json) and the provenance fields of result.json."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from harness import worker_env
from harness.sandbox import kernel

# Distribution names whose versions a reader needs to reproduce a result.
PACKAGES = ("numpy", "tqdm", "torch", "torchvision", "tensorflow", "tensorflow-cpu", "keras",
            "mxnet", "nvidia-dali-cuda120", "nvidia-dali-cuda110", "jax", "jaxlib")
FRAMEWORK_PACKAGES = {"pytorch": ("torch",), "tensorflow": ("tensorflow", "tensorflow-cpu"),
                      "mxnet": ("mxnet",), "jax": ("jax",)}
FRAMEWORK_NAMES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "mxnet": "MXNet", "jax": "JAX"}


def package_versions(worker: dict | None = None) -> dict[str, str]:
    """The versions of PACKAGES in the workers' environment (`worker`, harness.worker_env's record),
    else in this process's own."""
    if worker is not None:
        held = {str(d.get("name", "")).lower().replace("_", "-"): str(d.get("version"))
                for d in worker.get("distributions") or ()}
        return {name: held[name] for name in PACKAGES if name in held}
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def framework_label(framework: str, packages: dict[str, str] | None = None) -> str:
    """'PyTorch 2.13.0', as DAWNBench entries write the framework field: the version in `packages`
    (env.json's, the workers' environment: the harness's own has no framework), else this process's."""
    for dist in FRAMEWORK_PACKAGES.get(framework, ()):
        if packages is not None:
            if dist in packages:
                return f"{FRAMEWORK_NAMES.get(framework, framework)} {packages[dist]}"
            continue
        try:
            return f"{FRAMEWORK_NAMES.get(framework, framework)} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return FRAMEWORK_NAMES.get(framework, framework)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_bf16() -> bool | None:
    """Whether the CPU multiplies bf16 in hardware (AVX512-BF16 or AMX-BF16 in /proc/cpuinfo's
    flags): read by the harness, so an analysis can tell what a reference's bf16 = "native" ran in;
    None where the flags cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return bool({"avx512_bf16", "amx_bf16"} & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _gpus() -> list[dict]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
                             preexec_fn=kernel.dies_with_harness())
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return gpus


# The CUDA stack as the image or environment carries it, read without importing a framework:
# the pip wheels the frameworks pull (PyTorch bundles its CUDA libraries this way), and the
# variables NVIDIA's CUDA base images set for the libraries they hold.
CUDA_WHEELS = {"cuda_runtime": ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12"),
               "cudnn": ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"),
               "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12")}
CUDA_IMAGE_VARIABLES = {"cuda": "CUDA_VERSION", "cudnn": "NV_CUDNN_VERSION", "nccl": "NCCL_VERSION"}


def _driver_cuda() -> str | None:
    """The newest CUDA the driver supports, from nvidia-smi's header ("CUDA Version: 13.0")."""
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20,
                             preexec_fn=kernel.dies_with_harness()).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    marker = "CUDA Version:"
    if marker not in out:
        return None
    return out.split(marker, 1)[1].split()[0].strip("|") or None


def cuda_stack(gpus: list[dict]) -> dict | None:
    """CUDA, cuDNN, NCCL and driver versions, when a GPU is present (None otherwise). The
    framework's own view (torch.version.cuda, ...) is in env.json's framework_extra."""
    if not gpus:
        return None
    wheels = {}
    for part, names in CUDA_WHEELS.items():
        for name in names:
            try:
                wheels[part] = f"{name}=={importlib.metadata.version(name)}"
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return {"driver": gpus[0]["driver"], "driver_cuda": _driver_cuda(),
            "image": {part: os.environ[var] for part, var in CUDA_IMAGE_VARIABLES.items() if os.environ.get(var)},
            "wheels": wheels}


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def network_interfaces() -> list[str] | None:
    """The interfaces this process can see: ["lo"] alone is a run without a network (a container
    started with network mode none). Asked of the kernel for this process's network namespace:
    /sys/class/net shows the namespace of whoever mounted /sys."""
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return None


def describe_system(data_root: Path | None = None, worker: dict | None = None) -> dict:
    """env.json: the machine, the workers' environment (`worker`, harness.worker_env.describe's record,
    read now when not given) and the harness's own; `packages` and `cuda` are the workers'."""
    gpus = _gpus()
    worker = worker if worker is not None else worker_env.describe()
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": {"model": _cpu_model(), "logical_cores": os.cpu_count(), "usable_cores": usable_cpus(),
                "bf16": _cpu_bf16()},
        "memory_gib": _memory_gib(),
        "gpus": gpus,
        "cuda": cuda_stack(gpus),
        "packages": package_versions(worker),
        "worker_environment": worker,
        "harness_environment": {**worker_env.harness_record(worker), "packages": package_versions()},
        "image_digest": os.environ.get("DAWNBENCH_IMAGE_DIGEST"),
        "container": os.environ.get("DAWNBENCH_IMAGE"),
        # As the process saw them: a container's user and whether its data mount was read-only.
        "process": {"uid": os.getuid(), "gid": os.getgid()},
        "data": {"root": str(data_root), "read_only": _read_only(data_root)} if data_root else None,
        "network_interfaces": network_interfaces(),
    }


def hardware_label(system: dict, world_size: int, nodes: int = 1) -> str:
    """A short hardware description for the DAWNBench `hardware` field. `system` is rank 0's machine;
    with several nodes (`--nodes`, every one alike) the label counts them all."""
    many = f", {nodes} nodes" if nodes > 1 else ""
    if system["gpus"]:
        names = [g["name"] for g in system["gpus"]]
        return f"{nodes * len(names)} x {names[0]}" + (f" ({nodes} nodes)" if nodes > 1 else "")
    cpu = system["cpu"]
    procs = f", {world_size} processes" if world_size > 1 else ""
    return f"{cpu['model']} ({cpu['usable_cores']} cores{procs}{many})"


def git_commit(repo: Path, paths: list[Path] | tuple = ()) -> dict:
    """The commit of the git repository holding `repo`, and whether it has local changes (in `paths`
    only, when given), untracked files included. Never read from the environment: a run's commit is
    harness.provenance's business."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, preexec_fn=kernel.dies_with_harness())
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all",
                                 "--", *(str(p) for p in paths)],
                                capture_output=True, text=True, timeout=10, preexec_fn=kernel.dies_with_harness())
        if status.returncode != 0:
            return {"commit": head.stdout.strip(), "dirty": None}
        return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}
