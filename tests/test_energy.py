"""The devices' energy over the train spans (harness/energy.py): RAPL from a powercap tree (with a
counter that wraps), NVML's counter and its sampled fallback, and "not available" with a reason."""
from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import pytest

from harness import energy

SCHEMA = json.loads((Path(energy.__file__).parent / "data" / "result.schema.json").read_text())["properties"]["energy"]


def zone(root: Path, name: str, label: str, uj: int, max_uj: int) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "name").write_text(label + "\n")
    (folder / "energy_uj").write_text(f"{uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return folder / "energy_uj"


def test_rapl_packages_over_spans_with_a_wraparound(tmp_path):
    pkg0 = zone(tmp_path, "intel-rapl:0", "package-0", 999_000_000, 1_000_000_000)     # 1 s from its 1000 J wrap
    core = zone(tmp_path, "intel-rapl:0:0", "core", 5, 1_000_000_000)                  # inside package-0
    psys = zone(tmp_path, "intel-rapl:1", "psys", 5, 1_000_000_000)                    # holds the packages
    pkg1 = zone(tmp_path, "intel-rapl:2", "package-1", 5_000_000, 262_143_328_850)
    meter = energy.Meter(powercap=tmp_path, nvml=False)
    meter.begin()
    pkg0.write_text("2000000\n")          # wrapped: (1000 - 999) + 2 = 3 J
    pkg1.write_text("12000000\n")         # 7 J
    core.write_text("900000000\n")        # never read: a subdomain
    psys.write_text("900000000\n")
    meter.end()
    pkg1.write_text("50000000\n")          # between the spans (an eval): not counted
    meter.begin()
    pkg0.write_text("4000000\n")           # 2 J
    pkg1.write_text("51000000\n")          # 1 J
    meter.end()
    meter.end()                            # no span open: nothing
    record = meter.record()
    assert record["available"] and record["method"] == "rapl" and record["train_spans"] == 2
    assert record["joules"] == pytest.approx(3 + 7 + 2 + 1)
    assert [(d["name"], d["joules"]) for d in record["devices"]] == [("package-0 (intel-rapl:0)", pytest.approx(5.0)),
                                                                     ("package-1 (intel-rapl:2)", pytest.approx(8.0))]
    assert "wrap" in record["limit"] and record["ranked"] is False
    jsonschema.validate(record, SCHEMA)


def test_rapl_readable_by_root_only_says_so(tmp_path, monkeypatch):
    zone(tmp_path, "intel-rapl:0", "package-0", 1, 10)
    real = Path.read_text

    def refuse(path, *args, **kwargs):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)
    monkeypatch.setattr(Path, "read_text", refuse)
    record = energy.Meter(powercap=tmp_path, nvml=False).record()
    assert not record["available"] and "root only" in record["reason"]


def test_not_available_on_this_machine():
    """This machine: no NVIDIA GPU (or no nvidia-ml-py) and no powercap package domain; the record
    says both, and the run goes on."""
    record = energy.Meter().record()
    if record["available"]:
        pytest.skip(f"this machine reports energy ({record['method']})")
    assert record["reason"].startswith("NVML: ") and "; RAPL: " in record["reason"]
    jsonschema.validate(record, SCHEMA)


class FakeNVML:
    """Two GPUs: one with the total energy counter (Volta and newer), one without (power only)."""

    def __init__(self):
        self.millijoules = 1_000_000

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, handle):
        return [b"NVIDIA H100 80GB HBM3", "Tesla P100-PCIE-16GB"][handle]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if handle == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.millijoules

    def nvmlDeviceGetPowerUsage(self, handle):
        return 250_000          # milliwatts


def test_nvml_counter_and_power_sampled_where_the_counter_is_missing(tmp_path):
    nvml = FakeNVML()
    meter = energy.Meter(powercap=tmp_path, nvml=nvml)
    meter.begin()
    started = time.perf_counter()
    nvml.millijoules += 123_456           # 123.456 J on the counter
    time.sleep(0.6)
    meter.end()
    seconds = time.perf_counter() - started
    record = meter.record()
    assert record["method"] == "nvml" and record["sample_rate_hz"] == energy.SAMPLE_HZ
    counted, sampled = record["devices"]
    assert counted == {"name": "NVIDIA H100 80GB HBM3 (GPU 0)", "joules": 123.456, "reading": "counter"}
    # 250 W for the span, sampled every 0.1 s: the samples cover the span but its last partial tenth
    assert sampled["reading"] == "power sampled at 10 Hz"
    assert 250 * (seconds - 0.2) <= sampled["joules"] <= 250 * seconds
    assert "10 Hz" in record["how"]
    jsonschema.validate(record, SCHEMA)


def test_nvml_that_does_not_start_falls_back_to_rapl(tmp_path):
    class Broken(FakeNVML):
        def nvmlInit(self):
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")
    zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000, 10_000_000)
    record = energy.Meter(powercap=tmp_path, nvml=Broken()).record()
    assert record["method"] == "rapl"


def test_a_real_run_records_its_energy_or_why_not(default_run):
    result = json.loads((default_run / "result.json").read_text())
    record = result["energy"]
    assert record["ranked"] is False
    if record["available"]:
        assert record["train_spans"] == result["epochs"] and record["joules"] > 0
    else:
        assert "NVML" in record["reason"] and "RAPL" in record["reason"]
    jsonschema.validate(record, SCHEMA)
