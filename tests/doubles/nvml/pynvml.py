"""A stand-in for pynvml (the nvidia-ml-py package) over a table of GPUs, for tests that need a
GPU's answers from a process specsweep starts (the CLI): this folder goes first on PYTHONPATH and
$FAKE_NVML names a JSON file of the GPUs, read again at every call so a test can change it.

Every function answers as nvidia-ml-py 13.615.71's pynvml.py does: handles are opaque, names and
UUIDs and the driver version come as str (``convertStrBytes``), nvmlDeviceGetPciInfo returns a
struct whose ``busId`` is bytes (a c_char array), power is in milliwatts, clock-event reasons a
bit mask of nvmlClocksEventReason*, topology levels nvmlGpuTopologyLevel_t values (0-50), and
a call the device does not support raises NVMLError(NVML_ERROR_NOT_SUPPORTED).

The table: {"driver": "...", "gpus": [{"uuid", "name", "pci_bus_id", "memory_total",
"memory_used" (held by processes), "memory_reserved" (the driver's and firmware's, default 0),
"memory_v2" (default true), "cc": [major, minor], "pids": [...], "sm_clock_mhz", "temperature_c",
"power_mw", "reasons", "energy_mj" (the total-energy counter; absent: a GPU without one)}],
"nvlink": [[i, j], ...] (pairs joined by NVLink), "ancestor":
{"i,j": level} (others: 50, SYSTEM)}.
"""

from __future__ import annotations

import json
import os
import types

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
nvmlMemory_v2 = 0x02000028  # pynvml.py: the v2 structure's version word
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5  # NVML_P2P_STATUS_NOT_SUPPORTED in pynvml.py
NVML_TOPOLOGY_SYSTEM = 50


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _table() -> dict:
    with open(os.environ["FAKE_NVML"]) as f:
        return json.load(f)


def _gpu(handle: int) -> dict:
    return _table()["gpus"][handle]


def nvmlInit():
    _table()


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion() -> str:
    return _table().get("driver", "580.95.05")


def nvmlDeviceGetCount() -> int:
    return len(_table()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
    return index


def nvmlDeviceGetHandleByUUID(uuid: str) -> int:
    for i, gpu in enumerate(_table()["gpus"]):
        if gpu["uuid"] == uuid:
            return i
    raise NVMLError(6)  # NVML_ERROR_NOT_FOUND


def nvmlDeviceGetName(handle) -> str:
    return _gpu(handle)["name"]


def nvmlDeviceGetUUID(handle) -> str:
    return _gpu(handle)["uuid"]


def nvmlDeviceGetPciInfo(handle):
    return types.SimpleNamespace(busId=_gpu(handle)["pci_bus_id"].encode())


def nvmlDeviceGetMemoryInfo(handle, version=None):
    """As pynvml.py: v1 (c_nvmlMemory_t: total, free, used, where used = total - free counts the
    reserved memory) without a version, v2 (c_nvmlMemory_v2_t: version, total, reserved, free, used,
    reserved apart) through nvmlDeviceGetMemoryInfo_v2 with version=nvmlMemory_v2; a driver
    without v2 ("memory_v2": false) answers NVML_ERROR_FUNCTION_NOT_FOUND there."""
    gpu = _gpu(handle)
    total, used, reserved = gpu["memory_total"], gpu["memory_used"], gpu.get("memory_reserved", 0)
    if not version:
        return types.SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)
    if not gpu.get("memory_v2", True):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    return types.SimpleNamespace(version=version, total=total, reserved=reserved, used=used,
                                 free=total - used - reserved)


def nvmlDeviceGetCudaComputeCapability(handle):
    return tuple(_gpu(handle)["cc"])


def nvmlDeviceGetComputeRunningProcesses(handle):
    return [types.SimpleNamespace(pid=pid, usedGpuMemory=None) for pid in _gpu(handle).get("pids", [])]


def nvmlDeviceGetClockInfo(handle, clock_type: int) -> int:
    if clock_type != NVML_CLOCK_SM:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _gpu(handle)["sm_clock_mhz"]


def nvmlDeviceGetTemperature(handle, sensor: int) -> int:
    return _gpu(handle)["temperature_c"]


def nvmlDeviceGetPowerUsage(handle) -> int:
    return _gpu(handle)["power_mw"]


def nvmlDeviceGetTotalEnergyConsumption(handle) -> int:
    """mJ since the driver loaded (Volta and later); NOT_SUPPORTED on a GPU without the counter."""
    gpu = _gpu(handle)
    if "energy_mj" not in gpu:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu["energy_mj"]


def nvmlDeviceGetCurrentClocksEventReasons(handle) -> int:
    return _gpu(handle)["reasons"]


def nvmlDeviceGetP2PStatus(a, b, index: int) -> int:
    if index != NVML_P2P_CAPS_INDEX_NVLINK:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    pairs = {tuple(sorted(p)) for p in _table().get("nvlink", [])}
    return NVML_P2P_STATUS_OK if tuple(sorted((a, b))) in pairs else NVML_P2P_STATUS_NOT_SUPPORTED


def nvmlDeviceGetTopologyCommonAncestor(a, b) -> int:
    levels = _table().get("ancestor", {})
    return levels.get(f"{min(a, b)},{max(a, b)}", NVML_TOPOLOGY_SYSTEM)
