"""What the measurement ran on: CPU, memory, OS and, by NVML, the GPUs a job held.

The one owner of NVML calls for facts and memory (the quiet-host guard asks it for processes).
NVML is optional (``pynvml``, from the nvidia-ml-py package, on GPU hosts): without it, or on
simulated GPUs (``SPECSWEEP_GPUS``), GPU facts are left empty, never guessed.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

import psutil


def nvml():
    """The initialised pynvml module, or None on a host without NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no device
        return None
    return pynvml


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_facts(gpus: tuple[str, ...] | list[str]) -> list[dict]:
    """Name, memory and compute capability (e.g. "12.0" on SM120) of each GPU index given."""
    lib = nvml()
    out = []
    for gpu in gpus:
        entry: dict = {"index": gpu}
        if lib is not None:
            try:
                handle = lib.nvmlDeviceGetHandleByIndex(int(gpu))
                major, minor = lib.nvmlDeviceGetCudaComputeCapability(handle)
                entry.update(name=_text(lib.nvmlDeviceGetName(handle)),
                             memory_bytes=int(lib.nvmlDeviceGetMemoryInfo(handle).total),
                             compute_capability=f"{major}.{minor}")
            except Exception:  # a GPU NVML cannot describe keeps its index only
                pass
        out.append(entry)
    return out


def facts(gpus: tuple[str, ...] = ()) -> dict:
    """The hardware block of a result: this host, and the GPUs this job held."""
    lib = nvml()
    driver = None
    if lib is not None:
        try:
            driver = _text(lib.nvmlSystemGetDriverVersion())
        except Exception:
            pass
    held = gpu_facts(gpus)
    caps = sorted({g["compute_capability"] for g in held if "compute_capability" in g})
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "os": platform.platform(),
        "gpu_count": len(held),
        "gpus": held,
        "gpu_driver": driver,
        "compute_capability": caps[0] if len(caps) == 1 else (",".join(caps) or None),
    }


@functools.lru_cache(maxsize=1)
def local_compute_capability() -> str | None:
    """The compute capability of this host's GPUs (the first one's), for planning exclusions."""
    lib = nvml()
    if lib is None:
        return None
    try:
        major, minor = lib.nvmlDeviceGetCudaComputeCapability(lib.nvmlDeviceGetHandleByIndex(0))
    except Exception:
        return None
    return f"{major}.{minor}"


def memory_used(gpu: str) -> int | None:
    """Bytes in use on one GPU by NVML; None where unknown (simulated GPU, no NVML)."""
    lib = nvml()
    if lib is None:
        return None
    try:
        return int(lib.nvmlDeviceGetMemoryInfo(lib.nvmlDeviceGetHandleByIndex(int(gpu))).used)
    except Exception:
        return None


def gpu_pids(gpu: str) -> list[int]:
    """Processes NVML sees computing on one GPU."""
    lib = nvml()
    if lib is None:
        return []
    try:
        return [p.pid for p in lib.nvmlDeviceGetComputeRunningProcesses(lib.nvmlDeviceGetHandleByIndex(int(gpu)))]
    except Exception:
        return []
