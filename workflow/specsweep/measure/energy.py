"""Energy per token of one section, on the GPUs a launch held.

Each GPU's energy over the section is read by the host (host/gpu_watch.py: NVML's counter delta,
else power integrated, with its ``source``, as AIPerf's energy analysis does). Here it is summed
over the GPUs and divided by the section's tokens. Above idle subtracts what each GPU drew before
its server started (gpu_watch.idle_power, read once per launch) over the same window. A host
without NVML (a CPU study) has no energy: the section says ``None``, never 0.
"""

from __future__ import annotations


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
