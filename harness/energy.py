"""The energy the machine's devices reported over a run's train spans: information, never ranked.

Read by the harness (never the reference) around each train span, where the machine reports it:

    NVML      NVIDIA GPUs, through nvidia-ml-py (requirements/energy-nvml.txt; used only where it is
              installed in the harness's environment): each GPU's total energy counter
              (nvmlDeviceGetTotalEnergyConsumption, Volta and newer) read at each span's ends; a GPU
              without the counter has its power sampled (nvmlDeviceGetPowerUsage) at SAMPLE_HZ during
              the spans, and the samples integrated (the rate is recorded).
    RAPL      CPU packages, through powercap (/sys/class/powercap/intel-rapl:N/energy_uj, the package
              domains; psys, which overlaps them, and the subdomains are left out), read at each
              span's ends; a counter that wrapped (passed max_energy_range_uj) is counted across the
              wrap. A span longer than one whole range (hours on a big server) would lose a range: not
              detectable from two readings, so the record says the method's limit.
    otherwise "not available", with the reason.

On a machine with GPUs only the GPUs are read (the CPU's share is not what a GPU run is asked about);
on one without, the CPU packages. result.json's `energy` holds the record (docs/RULES.md: informative).
"""
from __future__ import annotations

import glob
import importlib
import re
import threading
import time
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
SAMPLE_HZ = 10.0
RAPL_LIMIT = ("RAPL counters wrap at max_energy_range_uj; a wrap is counted, but a span longer than one "
              "whole range between two readings would lose a range")


class Meter:
    """Joules per device over the spans between begin() and end(); record() says what was read."""

    def __init__(self, powercap: Path = POWERCAP, nvml=None):
        self.devices: list[_Counter] = []
        self.method, self.why_not, self.rate_hz, self.spans, self.open = None, [], None, 0, False
        gpus = _nvml_counters(nvml) if nvml is not False else ([], "not looked for")
        if gpus[0]:
            self.devices, self.method = gpus[0], "nvml"
            sampled = [d for d in self.devices if isinstance(d, _Sampled)]
            self.rate_hz = SAMPLE_HZ if sampled else None
            return
        self.why_not.append(f"NVML: {gpus[1]}")
        packages = _rapl_counters(Path(powercap))
        if packages[0]:
            self.devices, self.method = packages[0], "rapl"
        else:
            self.why_not.append(f"RAPL: {packages[1]}")

    def begin(self) -> None:
        self.open = True
        for d in self.devices:
            d.begin()

    def end(self) -> None:
        """The span's end; nothing when none is open (a run that failed between spans)."""
        if not self.open:
            return
        self.open = False
        self.spans += 1
        for d in self.devices:
            d.end()

    def record(self) -> dict:
        if not self.devices:
            return {"available": False, "reason": "; ".join(self.why_not) or "no device reports energy",
                    "ranked": False}
        how = {"nvml": "NVML, read by the harness at each train span's ends" + (
            f"; GPUs without the energy counter: power sampled at {SAMPLE_HZ:g} Hz during the spans, integrated"
            if self.rate_hz else ""),
               "rapl": "RAPL package energy (powercap energy_uj), read by the harness at each train span's ends"}
        joules = [d.joules for d in self.devices]
        return {"available": True, "joules": round(sum(joules), 3), "method": self.method,
                "how": how[self.method], "sample_rate_hz": self.rate_hz, "train_spans": self.spans,
                "devices": [{"name": d.name, "joules": round(j, 3), "reading": d.reading} for d, j in zip(self.devices, joules)],
                **({"limit": RAPL_LIMIT} if self.method == "rapl" else {}), "ranked": False}

    def close(self) -> None:
        for d in self.devices:
            d.close()


class _Counter:
    """A cumulative energy counter read at each span's ends."""
    reading = "counter"

    def __init__(self, name: str, read, wrap: float | None = None):
        self.name, self.read, self.wrap = name, read, wrap
        self.joules, self.start = 0.0, None

    def begin(self) -> None:
        self.start = self.read()

    def end(self) -> None:
        if self.start is None:
            return
        now = self.read()
        delta = now - self.start
        if delta < 0 and self.wrap:        # the counter passed its range and began again at zero
            delta += self.wrap
        self.joules += max(delta, 0.0)
        self.start = None

    def close(self) -> None:
        pass


def _rapl_counters(root: Path) -> tuple[list[_Counter], str]:
    zones = sorted(p for p in glob.glob(str(root / "intel-rapl:*")) if re.fullmatch(r"intel-rapl:\d+", Path(p).name))
    if not zones:
        return [], f"no package domain in {root} (no intel-rapl:N: the CPU or kernel exposes none)"
    counters, problems = [], []
    for zone in map(Path, zones):
        try:
            name = (zone / "name").read_text().strip()
            if name == "psys":          # the platform domain: it holds the packages too
                continue
            wrap = int((zone / "max_energy_range_uj").read_text()) / 1e6
            (zone / "energy_uj").read_text()
        except PermissionError:
            problems.append(f"{zone / 'energy_uj'} is readable by root only (Linux made it so for CVE-2020-8694)")
            continue
        except (OSError, ValueError) as e:
            problems.append(f"{zone}: {e}")
            continue
        counters.append(_Counter(f"{name} ({zone.name})", lambda f=zone / "energy_uj": int(f.read_text()) / 1e6, wrap))
    return counters, "; ".join(problems) or "no package domain"


class _Sampled(_Counter):
    """A GPU without the energy counter: its power sampled at SAMPLE_HZ in a thread during the spans."""
    reading = f"power sampled at {SAMPLE_HZ:g} Hz"

    def __init__(self, name: str, watts):
        super().__init__(name, None)
        self.watts, self.stop, self.thread = watts, threading.Event(), None

    def begin(self) -> None:
        self.stop.clear()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        last = time.perf_counter()
        while not self.stop.wait(1.0 / SAMPLE_HZ):
            now = time.perf_counter()
            self.joules += self.watts() * (now - last)
            last = now

    def end(self) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            self.thread = None


def _nvml_counters(nvml) -> tuple[list[_Counter], str]:
    if nvml is None:
        try:       # by name: nvidia-ml-py is optional (requirements/energy-nvml.txt)
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return [], "nvidia-ml-py is not installed in the harness's environment (requirements/energy-nvml.txt)"
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
    except Exception as e:     # noqa: BLE001 - no driver, no GPU: NVML's own error, as the reason
        return [], f"NVML did not start ({type(e).__name__}: {e})"
    if not count:
        return [], "no NVIDIA GPU"
    counters = []
    for i in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        name = nvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)       # millijoules since the driver loaded
            counters.append(_Counter(f"{name} (GPU {i})",
                                     lambda h=handle: nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3))
        except Exception:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED before Volta
            counters.append(_Sampled(f"{name} (GPU {i})", lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h) / 1e3))
    return counters, ""
