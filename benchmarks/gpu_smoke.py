"""The GPU smoke check: on a GPU machine, what holds end to end, in one JSON, in a few minutes.

    python benchmarks/gpu_smoke.py --llama-source SOURCE.tar.xz [--cpu] [--python PYTHON]
        [--out gpu_smoke.json] [--budget 4]

Needs only what the GPU machine this project is lent has (CUDA's compiler, CMake, numpy; no
package index): SOURCE is the llama.cpp source cut from the pinned llama-cpp-python sdist
(`specsweep provision llama-source --version V --sha256 S --out SOURCE.tar.xz`, a few MB, with
its manifest SOURCE.tar.xz.json beside it), carried there with the working tree.

1. llama-server: built from SOURCE with CUDA for Hopper (GGML_CUDA=ON, architecture 90; all
   cores), or for the CPU with --cpu (the same build as the embedded default: this is how the
   script's own logic is tested on a machine without a GPU). The build time is recorded.
2. A tiny random-weight Llama GGUF written by llama.cpp's own gguf-py from SOURCE (no hub, no
   torch: workflow/specsweep/data/make_tiny_gguf.py).
3. The real pipeline on it (`snakemake --cores 1 results/summary.png` on a study of budgets 0 and
   --budget with ngram-mod drafts, tp 1, 128-token prompts, the GPU lease and NVML telemetry on,
   -ngl 99), then per configuration the server's token counter against the responses' tokens, the
   acceptance, each section's GPU clocks, heat and power, and after the run: llama-server
   processes left and each GPU's memory against its level before.
4. If vLLM or SGLang is importable by --python (default this interpreter): `specsweep doctor` and
   two configurations through the real CLI on a tiny model built with that Python, as before.

Writes the JSON to --out and prints it; exits nonzero when anything did not hold. Meant to
finish well inside 8 minutes on the H200 machine, the CUDA build included.
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


MEMORY_SLACK = 64 << 20  # bytes a GPU may hold above its level before the run: the driver's own


def llama_study(binary: str, model: Path, budget: int, *, gpu: bool) -> dict:
    """The backend's own command and ngram-mod drafts (servers/backends/llama_server.py), all
    layers on the GPU there."""
    from specsweep.servers.backends import llama_server

    server = llama_server.BACKEND
    return {
        "study": "gpu-smoke-llama-server", "backend": "llama-server",
        "model": {"name": "tiny-llama-random-gguf", "path": str(model), "context_limit": 4096},
        "server": {"binary": binary, "command": [*server.command, *(["-ngl", "99"] if gpu else [])],
                   "speculative_args": list(server.speculative_args), "gpu": gpu, "startup_timeout_s": 120,
                   "stall_timeout_s": 30},
        "grid": {"budget": [0, budget], "tp": [1], "context": [128]},
        "retries": 0,
        # One repeat: a tiny model answers in milliseconds, where two repeats' spread is timer noise
        # (the guard's spread check would fail it); the contention check runs all the same.
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 8, "repeats": 1, "launches": 1, "sections": [
            {"name": "short", "output_tokens": 64, "requests": 2},
            {"name": "long", "output_tokens": 256, "requests": 1}]},
    }


def llama_processes(binary: str) -> list[dict]:
    import psutil

    return [p.info for p in psutil.process_iter(["pid", "cmdline"]) if binary in " ".join(p.info["cmdline"] or [])]


def check_llama_server(source: Path, tmp: Path, *, budget: int, cpu: bool) -> dict:
    """Build llama-server from the carried source, make a GGUF without a hub, run the pipeline on it."""
    from specsweep.servers.backends import llama_server
    from specsweep.study import loading

    pins = loading.load_study(REPO / "config" / "config.yaml")["provision"]
    out: dict = {"source": str(source), "cuda_arch": None if cpu else "90"}
    t0 = time.monotonic()
    server = llama_server.provision_server(pins["llama_cpp_python_version"], pins["llama_cpp_python_sha256"],
                                           log_path=tmp / "build.log", source=source, cuda_arch=out["cuda_arch"])
    # seconds_here well below build_seconds: the build came from the cache (built_at says when).
    out["build"] = {"seconds_here": round(time.monotonic() - t0, 1), "build_seconds": server.get("build_seconds"),
                    "built_at": server.get("built_at"), "cmake_flags": server["cmake_flags"], "cores": os.cpu_count()}
    model = llama_server.provision_tiny_gguf(source, tmp / "tiny.gguf")
    out["model"] = model["made"]
    folder = tmp / "llama-server"
    folder.mkdir()
    (folder / "study.yaml").write_text(yaml.safe_dump(llama_study(server["binary"], tmp / "tiny.gguf", budget,
                                                                  gpu=not cpu)))
    out["gpu_memory_before"] = {} if cpu else gpu_memory()
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
                           str(folder), "--configfile", str(folder / "study.yaml"), "--cores", "1",
                           "results/summary.png"], capture_output=True, text=True, timeout=420,
                          env={**os.environ, "SPECSWEEP_LOCK_DIR": str(folder / "locks")})
    out["pipeline"] = {"exit_code": done.returncode, "seconds": round(time.monotonic() - t0, 1),
                       "tail": (done.stdout + done.stderr)[-2500:]}
    time.sleep(2)  # teardown is synchronous; this is only for NVML's view to settle
    out["left_processes"] = llama_processes(server["binary"])
    out["gpu_memory_after"] = {} if cpu else gpu_memory()
    out["gpu_memory_back"] = all(out["gpu_memory_after"].get(g, 0) <= used + MEMORY_SLACK
                                 for g, used in out["gpu_memory_before"].items())
    out["configurations"] = [configuration_facts(p) for p in sorted((folder / "results/runs").glob("*/launch*.json"))]
    best = folder / "results" / "best.csv"
    out["verdicts"] = best.read_text().splitlines() if best.is_file() else []
    out["held"] = (done.returncode == 0 and len(out["configurations"]) == 2 and not out["left_processes"]
                   and out["gpu_memory_back"] and all(c["counted"] for c in out["configurations"]))
    return out


def configuration_facts(path: Path) -> dict:
    """What one launch's result says of the server's counters, drafts, GPUs and their readings."""
    doc = json.loads(path.read_text())
    sections = [{
        "name": s["name"], "output_tokens": s["output_tokens"], "output_tok_s": round(s["output_tok_s"], 1),
        "server_counter": {k: v for k, v in s["counters"].items() if k.endswith("tokens_predicted_total")},
        "acceptance_length": s["acceptance_length"], "draft_tokens": s["draft_tokens"],
        "draft_accepted": s["draft_accepted"], "gpu_telemetry": s["quiet_host"].get("gpu_telemetry")}
        for s in doc["sections"]]
    return {"name": doc["name"], "sections": sections, "devices": doc["lease"]["devices"],
            "hardware_gpus": doc["hardware"].get("gpus"), "server_version": doc["server"].get("version"),
            "counted": all(sum(s["server_counter"].values()) == s["output_tokens"] for s in sections)}


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
            "draft_accepted": s["draft_accepted"], "gpu_telemetry": s["quiet_host"].get("gpu_telemetry")}
            for s in doc["sections"]]
        out["devices"] = doc["lease"]["devices"]
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
    parser.add_argument("--llama-source", type=Path, required=True,
                        help="the llama.cpp source archive (specsweep provision llama-source)")
    parser.add_argument("--cpu", action="store_true", help="build and run llama-server on the CPU (no GPU here)")
    args = parser.parse_args()
    report: dict = {"python": args.python, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "backends": {}}
    found = [b for b in ("vllm", "sglang") if installed(args.python, b)]
    report["found"] = found
    with tempfile.TemporaryDirectory(prefix="specsweep-gpu-smoke-") as tmp:
        tmp = Path(tmp)
        try:
            report["llama_server"] = check_llama_server(args.llama_source.resolve(), tmp, budget=args.budget,
                                                        cpu=args.cpu)
        except Exception as exc:  # a failed build or model is a finding, written like the others
            report["llama_server"] = {"held": False, "error": f"{type(exc).__name__}: {exc}"}
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
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    report["held"] = report["llama_server"]["held"] and all(b["held"] for b in report["backends"].values())
    text = json.dumps(report, indent=1, default=str)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if report["held"] else 1


if __name__ == "__main__":
    sys.exit(main())
