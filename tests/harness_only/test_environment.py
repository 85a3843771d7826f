"""env.json's system description: on a GPU machine it records the driver and the CUDA, cuDNN and
NCCL versions. No GPU here: a stand-in `nvidia-smi` prints what the real one prints."""
from __future__ import annotations

import importlib.metadata

import pytest

from harness import environment

pytestmark = pytest.mark.harness

NVIDIA_SMI = """#!/bin/sh
if [ "$1" = "--query-gpu=name,driver_version,memory.total" ]; then
    echo "NVIDIA H100 80GB HBM3, 580.95.05, 81559 MiB"
    exit 0
fi
cat <<'OUT'
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------------------------------------------------------+
OUT
"""


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(NVIDIA_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")


def test_gpu_machine_records_driver_cuda_cudnn_nccl(fake_gpu, monkeypatch):
    # As in nvidia/cuda:*-cudnn-runtime images, and PyTorch's bundled CUDA wheels.
    monkeypatch.setenv("CUDA_VERSION", "13.0.2")
    monkeypatch.setenv("NV_CUDNN_VERSION", "9.13.0.50-1")
    monkeypatch.setenv("NCCL_VERSION", "2.28.3-1")
    real_version = importlib.metadata.version
    wheels = {"nvidia-cuda-runtime": "13.0.96", "nvidia-cudnn-cu13": "9.20.0.48", "nvidia-nccl-cu13": "2.29.7"}

    def version(name):
        if name in wheels:
            return wheels[name]
        if name.startswith("nvidia-"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    system = environment.describe_system()
    assert system["gpus"] == [{"name": "NVIDIA H100 80GB HBM3", "driver": "580.95.05", "memory": "81559 MiB"}]
    assert system["cuda"] == {
        "driver": "580.95.05", "driver_cuda": "13.0",
        "image": {"cuda": "13.0.2", "cudnn": "9.13.0.50-1", "nccl": "2.28.3-1"},
        "wheels": {"cuda_runtime": "nvidia-cuda-runtime==13.0.96", "cudnn": "nvidia-cudnn-cu13==9.20.0.48",
                   "nccl": "nvidia-nccl-cu13==2.29.7"}}
    assert environment.hardware_label(system, 1) == "1 x NVIDIA H100 80GB HBM3"


def test_no_gpu_no_cuda_record(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))       # no nvidia-smi
    system = environment.describe_system()
    assert system["gpus"] == [] and system["cuda"] is None
