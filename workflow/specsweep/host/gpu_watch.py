"""What the quiet-host guard reads of the job's GPUs through one section, by NVML: the other
processes on them, and each GPU's SM clock, heat, power, memory and clock-event reasons, sampled
on a thread of its own and summed up per GPU (``sections[].quiet_host.gpu_telemetry``). Judging
the figures is the guard's (quiet_host.check); reading NVML is host_facts'.
"""

from __future__ import annotations

import functools
import operator
import statistics
import threading
import time

import psutil

from specsweep.host import host_facts


def foreign(gpus: tuple[str, ...], own: set[int]) -> list[dict]:
    """Processes on the job's GPUs other than its own, by NVML; [] without NVML or GPUs.

    Inside a container NVML may report host pids that mean nothing here: those are listed with
    ``visible: false`` and do not fail a section, since they cannot be told apart from our own.
    """
    lib = host_facts.nvml() if gpus else None
    if lib is None:
        return []
    found = []
    try:
        for gpu in gpus:
            for proc in lib.nvmlDeviceGetComputeRunningProcesses(host_facts.handle(lib, gpu)):
                if proc.pid not in own:
                    found.append({"gpu": gpu, "pid": proc.pid, "visible": psutil.pid_exists(proc.pid),
                                  "used_memory": getattr(proc, "usedGpuMemory", None)})
    except Exception:  # NVML errors never fail a measurement; they only leave the list short
        return found
    return found


# A GPU's energy over a window (AIPerf's energy analysis): NVML's total-energy counter
# (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded; Volta and later) read at
# both ends of the exact window; without it, or where it went backwards inside the window (a
# driver reload resets it), the power readings integrated over time (trapezoids), a figure less
# exact: NVML's power is a trailing average. Each figure says which it is (``source``).
COUNTER, POWER = "counter", "power"
IDLE_SAMPLES, IDLE_EVERY_S = 5, 0.1  # half a second of readings: NVML's power is a 1 s trailing average


def idle_power(gpus: tuple[str, ...]) -> dict[str, float]:
    """Each GPU's mean power (W) before the server starts; {} without NVML or GPUs."""
    readings: dict[str, list[float]] = {}
    for i in range(IDLE_SAMPLES if gpus else 0):
        for sample in host_facts.gpu_sample(gpus):
            readings.setdefault(sample["gpu"], []).append(sample["power_w"])
        if i + 1 < IDLE_SAMPLES:
            time.sleep(IDLE_EVERY_S)
    return {gpu: round(sum(ws) / len(ws), 3) for gpu, ws in readings.items() if ws}


def gpu_energy(samples: list[dict]) -> dict | None:
    """One GPU's energy over its samples (ordered in time): {joules, source, window_s}; None with
    fewer than two samples (nothing measured a window)."""
    if len(samples) < 2:
        return None
    window = samples[-1]["at_s"] - samples[0]["at_s"]
    counter = [s.get("energy_mj") for s in samples]
    steady = None not in counter and all(b >= a for a, b in zip(counter, counter[1:]))
    if steady:
        return {"joules": (counter[-1] - counter[0]) / 1000.0, "source": COUNTER, "window_s": window}
    joules = sum((b["at_s"] - a["at_s"]) * (a["power_w"] + b["power_w"]) / 2 for a, b in zip(samples, samples[1:]))
    why = POWER if None in counter else f"{POWER} (the counter went backwards: reset)"
    return {"joules": joules, "source": why, "window_s": window}


# How often a held GPU is read during a section: often enough that a throttled stretch of a
# second shows, seldom enough (one NVML call set per GPU) to take nothing from the server.
SAMPLE_EVERY_S = 0.2


class Sampler:
    """Each held GPU's SM clock, temperature, power, memory and clock-event reasons through one
    section, read every SAMPLE_EVERY_S on a thread of its own (and once at each end)."""

    def __init__(self, gpus: tuple[str, ...]):
        self.gpus = gpus
        self.samples: list[dict] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.samples, self._thread = host_facts.gpu_sample(self.gpus), None
        self._done.clear()
        if self.samples:  # nothing NVML can read (no GPU, simulated ones): no thread
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(SAMPLE_EVERY_S):
            self.samples.extend(host_facts.gpu_sample(self.gpus))

    def stop(self) -> list[dict]:
        if self._thread is not None:
            self._done.set()
            self._thread.join()
            self.samples.extend(host_facts.gpu_sample(self.gpus))
        return telemetry(self.samples)


def telemetry(samples: list[dict]) -> list[dict]:
    """Per GPU: its samples' SM clock (min, mean, max), hottest temperature, power (mean, max),
    most memory in use, the share of samples slowed for heat or power (host_facts.SLOWED) and at
    the power cap, every clock-event reason seen, and its energy over the window (gpu_energy:
    the counter's delta, else power integrated; absent where the samples carry no time)."""
    out = []
    for gpu in dict.fromkeys(s["gpu"] for s in samples):
        mine = [s for s in samples if s["gpu"] == gpu]
        clocks, power = [s["sm_clock_mhz"] for s in mine], [s["power_w"] for s in mine]
        seen = functools.reduce(operator.or_, (s["reasons"] for s in mine), 0)
        memory = [s["memory_used_mib"] for s in mine if "memory_used_mib" in s]  # not in results before 2026-12
        out.append({
            "gpu": gpu, "samples": len(mine),
            "sm_clock_mhz": {"min": min(clocks), "mean": round(statistics.fmean(clocks), 1), "max": max(clocks)},
            "temperature_c_max": max(s["temperature_c"] for s in mine),
            "power_w": {"mean": round(statistics.fmean(power), 1), "max": round(max(power), 1)},
            "memory_used_mib_max": max(memory) if memory else None,
            "slowed_share": round(sum(bool(s["reasons"] & host_facts.SLOWED) for s in mine) / len(mine), 4),
            "power_capped_share": round(sum(bool(s["reasons"] & host_facts.POWER_CAP) for s in mine) / len(mine), 4),
            "reasons": host_facts.clock_events(seen),
            **_energy_of(mine),
        })
    return out


def _energy_of(samples: list[dict]) -> dict:
    if not all("at_s" in s for s in samples):  # samples written before energy was read
        return {}
    found = gpu_energy(samples)
    if found is None:
        return {"energy_j": None, "energy_source": None, "energy_window_s": None}
    return {"energy_j": round(found["joules"], 3), "energy_source": found["source"],
            "energy_window_s": round(found["window_s"], 4)}
