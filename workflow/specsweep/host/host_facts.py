"""What the measurement ran on: CPU, memory, OS and, by NVML, the GPUs a job held.

The one owner of NVML calls for facts and memory (the quiet-host guard asks it for processes).
NVML is optional (``pynvml``, from the nvidia-ml-py package, on GPU hosts): without it, or on
simulated GPUs (``SPECSWEEP_GPUS``), GPU facts are left empty, never guessed.
"""

from __future__ import annotations

import functools
import itertools
import os
import platform
import time
from dataclasses import dataclass
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


def handle(lib, gpu: str):
    """NVML's handle of a GPU named by index or by UUID (CUDA_VISIBLE_DEVICES may hold either)."""
    if gpu.startswith(("GPU-", "MIG-")):
        return lib.nvmlDeviceGetHandleByUUID(gpu)
    return lib.nvmlDeviceGetHandleByIndex(int(gpu))


def gpu_facts(gpus: tuple[str, ...] | list[str]) -> list[dict]:
    """Name, UUID, PCI bus id, memory and compute capability (e.g. "12.0" on SM120) of each GPU
    given. The UUID names a GPU for good: indices differ between NVML, CUDA's default order and
    another host."""
    lib = nvml()
    out = []
    for gpu in gpus:
        entry: dict = {"index": gpu}
        if lib is not None:
            try:
                h = handle(lib, gpu)
                major, minor = lib.nvmlDeviceGetCudaComputeCapability(h)
                entry.update(name=_text(lib.nvmlDeviceGetName(h)), uuid=_text(lib.nvmlDeviceGetUUID(h)),
                             memory_bytes=int(lib.nvmlDeviceGetMemoryInfo(h).total),
                             compute_capability=f"{major}.{minor}")
                entry["pci_bus_id"] = _text(lib.nvmlDeviceGetPciInfo(h).busId)
            except Exception:  # what NVML cannot say about a GPU is left out, never guessed
                pass
        out.append(entry)
    return out


# How two GPUs talk, best first: NVLink (NVML's P2P status over NVLINK is OK), else the PCIe path
# through their closest common ancestor (nvmlGpuTopologyLevel_t: INTERNAL 0, SINGLE 10, MULTIPLE
# 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50 in nvidia-ml-py's pynvml.py), named as nvidia-smi topo -m
# names them. tp > 1 moves every layer's activations over this link.
LINKS = ("NVLINK", "BOARD", "PIX", "PXB", "PHB", "NODE", "SYS")
_ANCESTORS = {0: "BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def link(a: str, b: str) -> str | None:
    """The link between two GPUs (one of LINKS); None where NVML cannot say (simulated GPUs)."""
    lib = nvml()
    if lib is None:
        return None
    try:
        ha, hb = handle(lib, a), handle(lib, b)
    except Exception:
        return None
    try:
        if lib.nvmlDeviceGetP2PStatus(ha, hb, lib.NVML_P2P_CAPS_INDEX_NVLINK) == lib.NVML_P2P_STATUS_OK:
            return "NVLINK"
    except Exception:  # no NVLink on this system: NVML answers NOT_SUPPORTED
        pass
    try:
        return _ANCESTORS.get(int(lib.nvmlDeviceGetTopologyCommonAncestor(ha, hb)))
    except Exception:
        return None


def pairs(gpus) -> list[tuple[str, str]]:
    """Every pair of the GPUs, in their order: the links a tp group's all-reduce crosses."""
    return list(itertools.combinations(gpus, 2))


def link_rank(name: str | None) -> int:
    """Smaller is better; an unknown link ranks as all others do, so order alone decides."""
    return LINKS.index(name) if name in LINKS else 0


def worst_link(links) -> str | None:
    """The slowest of some links (what a tp group's all-reduce waits for); None if none is known."""
    known = [found for found in links if found is not None]
    return max(known, key=LINKS.index) if known else None


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
    links = [{"gpus": [a, b], "link": link(a, b)} for a, b in pairs(gpus)]
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "os": platform.platform(),
        "gpu_count": len(held),
        "gpus": held,
        "gpu_links": links,  # every pair of held GPUs (tp > 1)
        "gpu_link": worst_link(p["link"] for p in links),
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
        major, minor = lib.nvmlDeviceGetCudaComputeCapability(lib.nvmlDeviceGetHandleByIndex(0))  # the host's first
    except Exception:
        return None
    return f"{major}.{minor}"


@dataclass(frozen=True)
class MemoryReading:
    """One GPU's memory as NVML reports it, in bytes. ``reserved``: what the driver and firmware
    set aside, which the v2 structure reports apart from ``used`` and v1 counts in it (None where
    only v1 answers: an older driver)."""

    total: int
    used: int
    reserved: int | None
    structure: str


def memory_reading(gpu: str) -> MemoryReading | None:
    """NVML's memory figures of one GPU, from nvmlDeviceGetMemoryInfo's v2 structure
    (nvidia-ml-py: ``nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)``, the driver's
    nvmlDeviceGetMemoryInfo_v2), else v1; None where unknown (simulated GPU, no NVML). An idle
    Hopper GPU reads a few hundred MiB to about 1 GiB "used" under v1: its reserved memory."""
    lib = nvml()
    if lib is None:
        return None
    try:
        device = handle(lib, gpu)
    except Exception:
        return None
    try:
        info = lib.nvmlDeviceGetMemoryInfo(device, version=lib.nvmlMemory_v2)
        return MemoryReading(int(info.total), int(info.used), int(info.reserved), "v2")
    except Exception:  # a driver before v2, or a binding without it
        pass
    try:
        info = lib.nvmlDeviceGetMemoryInfo(device)
        return MemoryReading(int(info.total), int(info.used), None, "v1")
    except Exception:
        return None


def memory_used(gpu: str) -> int | None:
    """Bytes in use on one GPU by NVML, reserved memory apart where the driver says it (v2);
    None where unknown (simulated GPU, no NVML)."""
    reading = memory_reading(gpu)
    return reading.used if reading else None


def uuid(gpu: str) -> str | None:
    """The GPU's NVML UUID, which names it for good whatever index or UUID a job was handed; None
    where NVML cannot say (simulated GPUs, no NVML)."""
    lib = nvml()
    if lib is None:
        return None
    try:
        return _text(lib.nvmlDeviceGetUUID(handle(lib, gpu)))
    except Exception:
        return None


def gpu_processes(gpu: str) -> list[dict]:
    """Who computes on one GPU, by NVML: {pid, memory_mib, name, user} (name and user by psutil,
    "?" where the process is another user's and hidden, or gone)."""
    lib = nvml()
    if lib is None:
        return []
    try:
        found = lib.nvmlDeviceGetComputeRunningProcesses(handle(lib, gpu))
    except Exception:
        return []
    out = []
    for p in found:
        try:
            proc = psutil.Process(p.pid)
            name, user = proc.name(), proc.username()
        except (psutil.Error, KeyError):
            name, user = "?", "?"
        used = getattr(p, "usedGpuMemory", None)
        out.append({"pid": p.pid, "memory_mib": used >> 20 if isinstance(used, int) else None,
                    "name": name, "user": user})
    return out


def gpu_pids(gpu: str) -> list[int]:
    """Processes NVML sees computing on one GPU."""
    return [p["pid"] for p in gpu_processes(gpu)]


# NVML's clock-event (formerly "throttle") reason bits, nvmlClocksEventReason* in nvidia-ml-py's
# pynvml.py. Those in SLOWED make a GPU's pace its own state rather than the configuration's:
# heat a previous job left, a failing fan, the chassis's power brake. The software power cap is
# the configuration's own draw meeting the board's limit (a larger budget draws more): recorded,
# never a failure.
CLOCK_EVENTS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                0x100: "display_clocks"}
SLOWED = 0x8 | 0x20 | 0x40 | 0x80
POWER_CAP = 0x4


def clock_events(bits: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENTS.items() if bits & bit]


def gpu_sample(gpus: tuple[str, ...]) -> list[dict]:
    """One reading per GPU NVML can read: SM clock (MHz), temperature (C), power (W), memory in
    use (MiB), the clock-event reason bits in force, the total-energy counter (mJ; None where the
    GPU has none) and when (``at_s``, monotonic); [] without NVML (simulated GPUs)."""
    lib = nvml() if gpus else None
    if lib is None:
        return []
    out = []
    for gpu in gpus:
        try:
            h = handle(lib, gpu)
            reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                lib.nvmlDeviceGetCurrentClocksThrottleReasons  # the older name, deprecated in CUDA 13
            out.append({"gpu": gpu, "sm_clock_mhz": int(lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_SM)),
                        "temperature_c": int(lib.nvmlDeviceGetTemperature(h, lib.NVML_TEMPERATURE_GPU)),
                        "power_w": lib.nvmlDeviceGetPowerUsage(h) / 1000.0, "reasons": int(reasons(h)),
                        "memory_used_mib": int(lib.nvmlDeviceGetMemoryInfo(h).used) >> 20,
                        "energy_mj": _energy_mj(lib, h), "at_s": time.monotonic()})
        except Exception:  # a GPU that cannot be read this time leaves a sample out, never a guess
            continue
    return out


def _energy_mj(lib, h) -> int | None:
    """NVML's total energy since the driver loaded (mJ), or None where the GPU has no such counter
    (before Volta: NVML_ERROR_NOT_SUPPORTED)."""
    try:
        return int(lib.nvmlDeviceGetTotalEnergyConsumption(h))
    except Exception:
        return None
