"""The GPU smoke check: on a GPU machine, what holds end to end, in one JSON, in a few minutes.

    python benchmarks/gpu_smoke.py [--python PYTHON] [--out gpu_smoke.json] [--budget 4]

1. `specsweep doctor` for each backend found (`vllm`, `sglang` importable by --python, default
   this interpreter; whichever of the two is installed there).
2. For each: a tiny random-weight Llama built locally with that Python (the pipeline's own
   make_tiny_model.py: no hub), then two configurations through the real CLI
   (`python -m specsweep run`: budget 0 and --budget with n-gram drafts, tp 1, 128-token
   prompts, short sections), on one GPU with the device leases and the quiet-host guard on.
3. Per configuration: the exit code; per section the server's token counter against the
   responses' tokens, the acceptance length and the drafts; after teardown, processes of the
   server still alive, /dev/shm files left, and the GPU's memory in use by NVML.

Writes the JSON to --out and prints it; exits nonzero when anything did not hold. Meant to
finish in under 8 minutes (model build about a minute, each launch one to two).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SPECULATIVE = {
    "vllm": ["--speculative-config",
             '{{"method": "ngram", "num_speculative_tokens": {budget}, "prompt_lookup_max": 4, '
             '"prompt_lookup_min": 2}}'],
    "sglang": ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "{budget}"],
}
COMMAND = {
    "vllm": ["{binary}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}", "--max-model-len",
             "{ctx_size}", "--host", "{host}", "--port", "{port}", "--enforce-eager", "--gpu-memory-utilization",
             "0.3", "--disable-uvicorn-access-log"],
    "sglang": ["{binary}", "-m", "sglang.launch_server", "--model-path", "{model}", "--tp", "{tp}",
               "--context-length", "{ctx_size}", "--host", "{host}", "--port", "{port}", "--mem-fraction-static",
               "0.3", "--enable-metrics", "--disable-cuda-graph"],
}


def installed(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=300).returncode == 0


def study(backend: str, python: str, model: Path, budget: int) -> dict:
    return {
        "study": f"gpu-smoke-{backend}", "backend": backend,
        "model": {"name": "tiny-llama-random", "path": str(model), "context_limit": 4096},
        "server": {"binary": python, "command": COMMAND[backend], "speculative_args": SPECULATIVE[backend],
                   "gpu": True, "startup_timeout_s": 300, "stall_timeout_s": 60,
                   "env": {"HF_HUB_OFFLINE": "1", "TMPDIR": "{scratch}"}},
        "grid": {"budget": [0, budget], "tp": [1], "context": [128]},
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 8, "repeats": 2, "sections": [
            {"name": "short", "output_tokens": 32, "requests": 2},
            {"name": "long", "output_tokens": 128, "requests": 1}]},
    }


def shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def gpu_memory() -> dict:
    from specsweep.measure import host_facts, leases

    return {g: host_facts.memory_used(g) for g in leases.host_gpus()}


def run_configuration(folder: Path, study_file: Path, name: str) -> dict:
    import psutil

    before_shm, t0 = shm(), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "specsweep", "run", "--config", str(study_file), "--name", name,
                           "--out", str(folder / f"{name}.json"), "--server-log", str(folder / f"{name}.log"),
                           "--failures-dir", str(folder / "failures")], capture_output=True, text=True, timeout=900)
    out = {"name": name, "exit_code": done.returncode, "seconds": round(time.monotonic() - t0, 1),
           "stderr_tail": done.stderr[-1500:]}
    time.sleep(2)  # teardown is synchronous; this is only for NVML's view to settle
    out["left_processes"] = [p.info for p in psutil.process_iter(["pid", "cmdline"])
                             if any(m in " ".join(p.info["cmdline"] or []) for m in (str(folder), "launch_server",
                                                                                     "api_server"))]
    out["left_shm"] = sorted(shm() - before_shm)
    out["gpu_memory_after"] = gpu_memory()
    if done.returncode == 0:
        doc = json.loads((folder / f"{name}.json").read_text())
        out["sections"] = [{
            "name": s["name"], "output_tokens": s["output_tokens"], "output_tok_s": round(s["output_tok_s"], 1),
            "server_counter": {k: v for k, v in s["counters"].items() if "generation_tokens" in k},
            "acceptance_length": s["acceptance_length"], "draft_tokens": s["draft_tokens"],
            "draft_accepted": s["draft_accepted"], "gpu_telemetry": s["host_load"].get("gpu_telemetry")}
            for s in doc["sections"]]
        out["devices"] = doc["isolation"]["devices"]
        out["hardware_gpus"] = doc["hardware"].get("gpus")
        out["gpu_link"] = doc["hardware"].get("gpu_link")
    return out


def held(result: dict) -> bool:
    counted = all(sum(s["server_counter"].values()) == s["output_tokens"] for s in result.get("sections", []))
    return (result["exit_code"] == 0 and counted and not result["left_processes"] and not result["left_shm"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the Python that has vLLM and/or SGLang")
    parser.add_argument("--out", type=Path, default=Path("gpu_smoke.json"))
    parser.add_argument("--budget", type=int, default=4)
    args = parser.parse_args()
    report: dict = {"python": args.python, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "backends": {}}
    found = [b for b in ("vllm", "sglang") if installed(args.python, b)]
    report["found"] = found
    with tempfile.TemporaryDirectory(prefix="specsweep-gpu-smoke-") as tmp:
        tmp = Path(tmp)
        if found:
            script = REPO / "workflow" / "specsweep" / "data" / "make_tiny_model.py"
            built = subprocess.run([args.python, str(script), str(tmp / "model")], capture_output=True, text=True,
                                   timeout=600)
            report["tiny_model"] = built.stdout.strip()[-300:] or built.stderr[-600:]
        for backend in found:
            folder = tmp / backend
            folder.mkdir()
            study_file = folder / "study.yaml"
            study_file.write_text(yaml.safe_dump(study(backend, args.python, tmp / "model", args.budget)))
            doctor = subprocess.run([sys.executable, "-m", "specsweep", "doctor", "--config", str(study_file)],
                                    capture_output=True, text=True, timeout=300)
            entry = {"doctor": doctor.stdout.splitlines(), "doctor_exit": doctor.returncode, "gpu_memory_before":
                     gpu_memory(), "configurations": []}
            for name in ("tp1-b0-ctx128", f"tp1-b{args.budget}-ctx128"):
                entry["configurations"].append(run_configuration(folder, study_file, name))
            entry["held"] = entry["doctor_exit"] == 0 and all(held(c) for c in entry["configurations"])
            report["backends"][backend] = entry
    report["held"] = bool(found) and all(b["held"] for b in report["backends"].values())
    text = json.dumps(report, indent=1, default=str)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if report["held"] else 1


if __name__ == "__main__":
    sys.exit(main())
