"""The GPU smoke check's own logic, on this machine's CPU: the same script, built for the CPU from
the same carried source archive, a GGUF made by llama.cpp's gguf-py, the real pipeline, and the
teardown checks (benchmarks/gpu_smoke.py --cpu). On the GPU machine it builds with CUDA instead."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO
from specsweep import study
from specsweep.servers.backends import llama_server


@pytest.mark.e2e
def test_the_gpu_smoke_check_runs_end_to_end_on_the_cpu_build(tmp_path, embedded):
    pins = study.load_study(REPO / "config" / "config.yaml")["provision"]
    source = tmp_path / "carry" / "llama-source.tar.xz"
    manifest = llama_server.source_archive(pins["llama_cpp_python_version"], pins["llama_cpp_python_sha256"], source)
    assert manifest["bytes"] < 32 << 20  # well inside what travels to the GPU machine (64 MiB)
    out = tmp_path / "gpu_smoke.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_smoke.py"), "--cpu", "--llama-source",
                           str(source), "--out", str(out)], capture_output=True, text=True, timeout=1500)
    report = json.loads(out.read_text())
    llama = report["llama_server"]
    assert done.returncode == 0 and report["held"] and llama["held"], done.stdout[-4000:] + done.stderr[-2000:]
    assert llama["cuda_arch"] is None and "-DGGML_CUDA=ON" not in llama["build"]["cmake_flags"]
    assert "tiny GGUF" in llama["model"] and llama["pipeline"]["exit_code"] == 0
    names = [c["name"] for c in llama["configurations"]]
    assert names == ["tp1-b0-ctx128", "tp1-b4-ctx128"]
    for configuration in llama["configurations"]:  # the server's own counter, section by section
        assert configuration["counted"] and configuration["devices"] == ["host"]
        assert all(s["server_counter"] for s in configuration["sections"])
    drafted = [s for s in llama["configurations"][1]["sections"] if s["draft_tokens"]]  # budget 4 drafted
    assert drafted and all(s["acceptance_length"] >= 1 for s in drafted)
    assert llama["left_processes"] == [] and llama["gpu_memory_back"]
    assert llama["verdicts"][0].startswith("tp,context,section,load,best_budget,verdict")
