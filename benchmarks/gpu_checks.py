"""The GPU smoke check's study and its judgement (benchmarks/gpu_smoke.py runs them on the GPU
machine): the study the call measures, the GPU memory watched meanwhile, and every check, judged
on whatever launch results and server logs the study left."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))  # the checkout's specsweep

MEMORY_SLACK = 64 << 20  # bytes a GPU may hold above its level before the run: the driver's own
MEMORY_ROSE = 16 << 20  # a model on the GPU shows at least this much above that level


PROMPT_SET = "humaneval"  # real text, small enough to carry (164 problems, in gpu_carry.sh's cache)


# llama.cpp src/llama-model.cpp: "%s: %12s model buffer size = %8.2f MiB", one line per buffer, named by
# ggml_backend_buffer_name: the weights on the GPU are the CUDA<n> buffer's size. "offloaded %d/%d
# layers" prints min(n_gpu_layers, n_layer + 1), what was asked, and "CUDA0" appears in "using device
# CUDA0" whatever the placement: neither says where the weights are.
MODEL_BUFFER = re.compile(r"\bCUDA\d+ model buffer size =\s*([0-9.]+) MiB")


def smoke_study(binary: str, model: str, budget: int, *, gpu: bool) -> dict:
    """The backend's own command and ngram-mod drafts (servers/backends/llama_server.py), all
    layers on the GPU there; prompts from the carried prompt set."""
    from specsweep.servers.backends import llama_server

    server = llama_server.BACKEND
    return {
        "study": "gpu-smoke-llama-server", "backend": "llama-server",
        "model": {"name": "tiny-llama-random-gguf", "path": model, "context_limit": 4096},
        "server": {"binary": binary, "command": [*server.command, *(["-ngl", "99"] if gpu else [])],
                   "speculative_args": list(server.speculative_args), "gpu": gpu, "startup_timeout_s": 60,
                   "stall_timeout_s": 30},
        "grid": {"budget": [0, budget], "tp": [1], "context": [128]},
        # No "retries": the schema's default, as in any study. A transient failure (a section the
        # quiet-host guard refused, a crash) is retried within the pipeline stage's limit; a
        # deterministic one still stops at once with its own exit code (issue 40.5).
        # One repeat: a tiny model answers in milliseconds, where two repeats' spread is timer noise
        # (the guard's spread check would fail it); the contention check runs all the same.
        "workload": {"prompt_set": PROMPT_SET, "warmup_requests": 1, "warmup_output_tokens": 8, "repeats": 1,
                     "launches": 1, "sections": [{"name": "short", "output_tokens": 64, "requests": 2},
                                                 {"name": "long", "output_tokens": 256, "requests": 1}]},
    }


def gpu_memory() -> dict[str, int]:
    """Bytes in use on each GPU NVML sees; {} where it sees none."""
    from specsweep.host import gpu_pool, host_facts

    return {g: used for g in gpu_pool.host_gpus() if (used := host_facts.memory_used(g)) is not None}


class MemoryPeak(threading.Thread):
    """The most memory each GPU held while the pipeline ran."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak: dict[str, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            for gpu, used in gpu_memory().items():
                self.peak[gpu] = max(used, self.peak.get(gpu, 0))


def llama_processes(binary: str) -> list[dict]:
    """Processes running this binary: its path is the program, not a word anywhere in a command line
    (a path named in another program's arguments is not a server left running)."""
    import psutil

    target = os.path.realpath(binary)
    return [p.info for p in psutil.process_iter(["pid", "exe", "cmdline"])
            if target in {os.path.realpath(p.info["exe"] or "/"), os.path.realpath((p.info["cmdline"] or ["/"])[0])}]


def configuration_facts(path: Path) -> dict:
    """What one launch's result says of the server's counters, drafts, GPUs and their readings."""
    doc = json.loads(path.read_text())
    sections = [{
        "name": s["name"], "output_tokens": s["output_tokens"], "output_tok_s": round(s["output_tok_s"], 1),
        "server_counter": {k: v for k, v in s["counters"].items() if k.endswith("tokens_predicted_total")},
        "acceptance_length": s["acceptance_length"], "draft_tokens": s["draft_tokens"],
        "draft_accepted": s["draft_accepted"], "gpu_telemetry": s["quiet_host"].get("gpu_telemetry") or [],
        "energy": s.get("energy")}
        for s in doc["sections"]]
    return {"name": doc["name"], "sections": sections, "devices": doc["lease"]["devices"],
            "unchecked": (doc["server"].get("preflight") or {"unchecked": ["not recorded"]})["unchecked"],
            "hardware_gpus": doc["hardware"].get("gpus"), "gpu_driver": doc["hardware"].get("gpu_driver"),
            "server_version": doc["server"].get("version")}


def telemetry_figures(configuration: dict) -> list[dict]:
    """What the telemetry check judged, per section: the GPUs by name, the driver, and each GPU's
    highest SM clock, power and memory in use."""
    names = [g.get("name") for g in configuration["hardware_gpus"] or []]
    return [{"section": f"{configuration['name']}/{s['name']}", "gpus": names, "driver": configuration["gpu_driver"],
             "readings": [{"gpu": g["gpu"], "sm_clock_mhz_max": g["sm_clock_mhz"]["max"],
                           "power_w_max": g["power_w"]["max"], "memory_used_mib_max": g.get("memory_used_mib_max")}
                          for g in s["gpu_telemetry"]]} for s in configuration["sections"]]


def telemetry_complete(gpu: dict) -> bool:
    return (gpu["sm_clock_mhz"]["max"] > 0 and gpu["power_w"]["max"] > 0
            and gpu.get("memory_used_mib_max") is not None)


def offloaded(log: Path) -> bool:
    """The server log says the weights are on the GPU: a CUDA model buffer of more than 0 MiB."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    return any(float(size) > 0 for size in MODEL_BUFFER.findall(text))


def judge(study: Path, binary: str, memory: dict, *, gpu: bool) -> list[dict]:
    """Every check, each {"check", "held": True | False | None, "detail"}: None where it does not
    apply (--cpu) or could not be judged (no launch result was written), the detail saying why."""
    configurations = [configuration_facts(p) for p in sorted((study / "results/launches").glob("*/launch*.json"))]
    sections = [s for c in configurations for s in c["sections"]]
    drafted = [s for c in configurations[1:] for s in c["sections"] if s["draft_tokens"]]
    left = llama_processes(binary)
    checks = [
        ("both configurations measured", len(configurations) == 2, [c["name"] for c in configurations]),
        ("tokens are the server's counter's", bool(sections) and all(
            sum(s["server_counter"].values()) == s["output_tokens"] for s in sections), None),
        ("the budget configuration drafted", bool(drafted) and all(s["acceptance_length"] >= 1 for s in drafted),
         [(s["name"], s["draft_tokens"], s["acceptance_length"]) for s in drafted]),
        ("the server said its limits before measuring", bool(configurations) and not any(
            c["unchecked"] for c in configurations), [u for c in configurations for u in c["unchecked"]]),
        ("no llama-server process left", not left, left),
    ]
    # What needs a launch result (or a server log) cannot be judged without one: said, not failed.
    from_results = {"tokens are the server's counter's", "the budget configuration drafted",
                    "the server said its limits before measuring",
                    "each section's telemetry holds clocks, power and memory",
                    "each section records its energy per output token",
                    "the server logs show the model's weights in a CUDA buffer"}
    before, peak, after = memory["before"], memory["peak"], memory["after"]
    logs = sorted((study / "logs/server").glob("*/launch*.log"))
    gpu_checks = [
        ("NVML sees a GPU", bool(before), sorted(before)),
        ("each section's telemetry holds clocks, power and memory", bool(sections) and all(
            s["gpu_telemetry"] and all(telemetry_complete(g) for g in s["gpu_telemetry"]) for s in sections),
         [f for c in configurations for f in telemetry_figures(c)]),
        # Energy per token from the GPU's own counter or its power: positive, and (a model on a GPU
        # draws above idle while it generates) above idle where an idle reading was taken.
        ("each section records its energy per output token", bool(sections) and all(
            s["energy"] and s["energy"]["j_per_output_token"] > 0 for s in sections),
         [(s["name"], (s["energy"] or {}).get("j_per_output_token"), (s["energy"] or {}).get(
             "j_per_output_token_above_idle"), (s["energy"] or {}).get("source")) for s in sections]),
        ("the server logs show the model's weights in a CUDA buffer", bool(logs) and all(offloaded(p) for p in logs),
         [p.parent.name for p in logs]),
        ("GPU memory rose during the run", any(peak.get(g, 0) > used + MEMORY_ROSE for g, used in before.items()),
         {g: peak.get(g, 0) - used for g, used in before.items()}),
        ("GPU memory came back after it", bool(before) and all(
            after.get(g, used + MEMORY_SLACK + 1) <= used + MEMORY_SLACK for g, used in before.items()),
         {g: after.get(g, 0) - used for g, used in before.items()}),
    ]
    out = [{"check": name, "held": held, "detail": detail} for name, held, detail in checks]
    out += [{"check": name, "held": held if gpu else None, "detail": detail if gpu else "not applicable: --cpu"}
            for name, held, detail in gpu_checks]
    if not configurations:
        why = "not judged: no launch result was written (study-results/failures in the logs' archive says why)"
        out = [{**c, "held": None, "detail": why} if c["check"] in from_results and c["held"] is not None else c
               for c in out]
    return out

