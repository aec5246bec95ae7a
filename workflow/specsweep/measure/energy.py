"""Energy per token of one section, on the GPUs a launch held.

Where the GPU has NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ since
the driver loaded; Volta and later), a GPU's energy over the section is the counter's delta
between the section's first and last samples (gpu_watch.Sampler reads both ends of the exact
window). Without the counter, or where it went backwards inside the window (a driver reload
resets it), the energy is the power readings integrated over time (trapezoids), a figure less
exact: NVML's power is a trailing average. Each GPU's figure says which it is (``source``), as
AIPerf's energy analysis does. Above idle subtracts what each GPU drew before its server
started (its idle power, read once per launch) over the same window. A host without NVML (a CPU
study) has no energy: the section says ``None``, never 0.
"""

from __future__ import annotations

import time

from specsweep.measure import host_facts

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


def section_energy(per_gpu: list[dict], idle_w: dict[str, float], *, output_tokens: int,
                   prompt_tokens: int) -> dict | None:
    """The section's energy over every GPU (``per_gpu``: gpu_watch.telemetry's rows) and what a
    token cost; None where no GPU measured any."""
    measured = [g for g in per_gpu if g.get("energy_j") is not None]
    if not measured or output_tokens <= 0:
        return None
    joules = sum(g["energy_j"] for g in measured)
    idle = sum(idle_w[g["gpu"]] * g["energy_window_s"] for g in measured) if all(
        g["gpu"] in idle_w for g in measured) else None
    sources = sorted({g["energy_source"] for g in measured})
    return {
        "joules": round(joules, 3), "source": " + ".join(sources), "gpus": len(measured),
        "j_per_output_token": joules / output_tokens,
        "j_per_output_token_above_idle": (joules - idle) / output_tokens if idle is not None else None,
        "j_per_token": joules / (output_tokens + prompt_tokens),
        "output_tokens_per_j": output_tokens / joules if joules > 0 else None,
    }
