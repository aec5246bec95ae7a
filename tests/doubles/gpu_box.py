"""A shared box of four H100s with NVML faked at its boundary (tests/doubles/nvml/pynvml.py, answering
as nvidia-ml-py's pynvml.py does): the table each test edits, seen by this process and every process
it starts."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

DOUBLES = Path(__file__).resolve().parent
HW_THERMAL, SW_POWER_CAP, IDLE = 0x40, 0x4, 0x1  # NVML's clocks-event reasons


def h100(i: int, **given) -> dict:
    return {"uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", "name": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": f"00000000:{0x18 + 0x20 * i:02X}:00.0", "memory_total": 80 << 30, "memory_used": 0,
            "cc": [9, 0], "pids": [], "sm_clock_mhz": 1980, "temperature_c": 41, "power_mw": 118_000, "reasons": 0,
            **given}


def box(**gpu0) -> dict:
    """Four GPUs: NVLink joins 0-3 and 1-2; 0-1 and 2-3 share a PCIe switch tree (PXB); others cross the CPUs."""
    return {"gpus": [h100(0, **gpu0), h100(1), h100(2), h100(3)], "nvlink": [[0, 3], [1, 2]],
            "ancestor": {"0,1": 20, "2,3": 20}}


@pytest.fixture
def nvml(tmp_path, monkeypatch):
    """Write the table; this process and every process it starts see it as NVML."""
    table = tmp_path / "nvml.json"

    def write(doc: dict) -> None:
        table.write_text(json.dumps(doc))

    write(box())
    monkeypatch.setenv("FAKE_NVML", str(table))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(DOUBLES / "nvml"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("SPECSWEEP_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = importlib.util.spec_from_file_location("pynvml", DOUBLES / "nvml" / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return write
