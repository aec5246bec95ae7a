"""`specsweep doctor` through the real CLI: the default study passes on this machine, the seed's GPU
study fails with one clear line for each missing piece. Its checks one by one: tests/unit/measure/test_doctor.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

# doctor judges this host (is it quiet now, is the embedded server built): alone, after the builds.
pytestmark = pytest.mark.alone


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

