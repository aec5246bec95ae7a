"""Device leases through the real CLI: the pool is the inherited CUDA_VISIBLE_DEVICES. The leases
themselves: tests/unit/host/test_leases.py."""

from __future__ import annotations

import json
import re

import pytest

from conftest import NAME, fault_study, launch_cli
from specsweep.errors import ConfigError
from specsweep.host import gpu_pool, leases


def test_the_pool_is_the_inherited_cuda_visible_devices(monkeypatch, tmp_path, model):
    """A scheduler (or a colleague) allotted GPUs 2 and 3: jobs use those and the server sees only them."""
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("SPECSWEEP_GPUS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpu_pool.host_gpus() == ["2", "3"]
    with pytest.raises(ConfigError, match=r"tp 4 needs 4 GPUs, this host has 2 \(2,3\)"):
        leases.acquire(4, holder="x", announce=print, gpu=True)
    rc, err = launch_cli(tmp_path, fault_study(model, gpu=True))
    assert rc == 0, err
    log = (tmp_path / "server.log").read_text()
    assert re.findall(r"CUDA_VISIBLE_DEVICES=([\d,]*)", log) == ["2"], log
    doc = json.loads((tmp_path / "launches" / f"{NAME}.json").read_text())
    assert doc["lease"]["devices"] == ["2"] and doc["server"]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"

