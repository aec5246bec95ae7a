"""Time from a fault to the exit of the job that must notice it, over repeated trials.

  kill-mid-section      the real llama-server SIGKILLed 0.3 s into section "medium"
  stop-mid-section      the real llama-server SIGSTOPped (a hang) 0.3 s into "medium";
                        reported as time past the stall timeout. The stall clock runs from the
                        last byte received, so a stop during a prefill (no bytes flowing) can be
                        caught slightly sooner than the stall timeout after the stop: a negative
                        figure is that, not an error.
  kill-between-sections tests/doubles/fault_server.py SIGKILLs itself right after the last request of
                        "short" (a real server cannot be killed on cue between two sections)

Usage: python benchmarks/fault_detection.py [--trials 5] [--stall 2]
Prints one JSON line per trial and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specsweep.study.grid import expand_grid
from specsweep.study.loading import load_study, validate_study
from specsweep.study.targets import provision_embedded

REPO = Path(__file__).resolve().parents[1]
FAULT_SERVER = REPO / "tests" / "doubles" / "fault_server.py"
SECTIONS = [{"name": "short", "output_tokens": 32, "requests": 2},
            {"name": "medium", "output_tokens": 256, "requests": 2},
            {"name": "long", "output_tokens": 32, "requests": 1}]


def real_study(stall: float) -> dict:
    config = load_study(REPO / "config" / "config.yaml")
    build_log = Path(tempfile.gettempdir()) / "specsweep-build.log"
    embedded = provision_embedded(config, build_log)
    binary, model = embedded["binary"], embedded["model"]
    return validate_study({"model": {"path": model}, "server": {"binary": binary, "stall_timeout_s": stall},
                           "grid": {"budget": [0], "context": [64]},
                           "workload": {"warmup_requests": 1, "repeats": 1, "sections": SECTIONS}})


def fault_study(fault: str, fault_log: Path, model: Path) -> dict:
    return validate_study({
        "model": {"path": str(model)},
        "server": {"binary": sys.executable,
                   "command": ["{binary}", str(FAULT_SERVER), "--port", "{port}", "--fault", fault,
                               "--fault-log", str(fault_log)],
                   "speculative_args": ["{budget}"]},
        "grid": {"budget": [0], "context": [64]},
        "workload": {"warmup_requests": 1, "repeats": 1, "sections": SECTIONS},
    })


def start(study: dict, workdir: Path) -> tuple[subprocess.Popen, Path]:
    spec = expand_grid(study)[0]
    log = workdir / "cli.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "specsweep", "launch", "--spec", spec.to_json()],
                                cwd=workdir, stderr=err, start_new_session=True)
    return proc, log


def wait_for(log: Path, text: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = log.read_text()
        if text in content:
            return content
        time.sleep(0.01)
    raise RuntimeError(f"never saw {text!r} in {log}")


def signal_mid_section(study: dict, sig: signal.Signals) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, log = start(study, Path(tmp))
        content = wait_for(log, "section medium: start")
        pid = int(content.split("server pid ")[1].split(",")[0])
        time.sleep(0.3)
        t_fault = time.time()
        os.kill(pid, sig)
        proc.wait(timeout=120)
        return time.time() - t_fault, proc.returncode


def self_kill_between_sections() -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "model.gguf").write_bytes(b"stand-in")
        fault_log = tmp / "fault.log"
        # Requests: warmup 1, short 2-3: die right after request 3, between short and medium.
        proc, _ = start(fault_study("die-after-request:3", fault_log, tmp / "model.gguf"), tmp)
        proc.wait(timeout=120)
        t_exit = time.time()
        t_fault = float(fault_log.read_text().split()[1])
        return t_exit - t_fault, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--stall", type=float, default=2.0, help="stall timeout for the hang trials")
    args = parser.parse_args()
    study = real_study(args.stall)
    kinds = {
        "kill-mid-section": lambda: signal_mid_section(study, signal.SIGKILL),
        "stop-mid-section": lambda: signal_mid_section(study, signal.SIGSTOP),
        "kill-between-sections": self_kill_between_sections,
    }
    medians = {}
    for kind, trial in kinds.items():
        times = []
        for n in range(args.trials):
            seconds, rc = trial()
            past = seconds - args.stall if kind == "stop-mid-section" else seconds
            times.append(past)
            print(json.dumps({"kind": kind, "trial": n, "fault_to_exit_s": round(seconds, 3),
                              "reported_s": round(past, 3), "exit_code": rc}), flush=True)
        medians[kind] = statistics.median(times)
    print("median seconds from fault to job exit (stop-mid-section: past the stall timeout):")
    for kind, value in medians.items():
        print(f"  {kind:<22} {value:.3f}")


if __name__ == "__main__":
    main()
