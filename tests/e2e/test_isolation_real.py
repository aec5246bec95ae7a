"""The quiet-host guard and API keys against the real llama-server, through the real workflow."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from conftest import finish, load, result_path, run_workflow, small_study
from specsweep.errors import InvalidResponse
from specsweep.measure import workload
from specsweep.records import store
from specsweep.servers import probes
from specsweep.servers.backends import get as get_backend
from specsweep.servers.process import ServerProcess
from specsweep.study import prompt_sets

LLAMA = get_backend("llama-server")

pytestmark = pytest.mark.e2e

HOG = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"  # bounded: 2 minutes


def guard_study(**overrides) -> dict:
    return small_study(grid={"budget": [0], "tp": [1], "context": [64]}, retries=0, **overrides)


def test_a_section_measured_beside_a_cpu_hog_fails_and_the_same_study_alone_passes(embedded, tmp_path):
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        rc, out = finish(run_workflow(tmp_path, guard_study()), timeout=600)
    finally:
        hog.kill()
        hog.wait()
    assert rc != 0, out
    name = "tp1-b0-ctx64"
    assert not result_path(tmp_path / "results/runs", name).exists()
    record = store.latest_failure(tmp_path / "results/failures", name).to_json()
    assert record["class"] == "noisy-host" and record["exit_code"] == 18 and record["transient"] is True
    assert "max_foreign_cores" in record["reason"] and "python" in record["reason"]
    assert "the server waited for a CPU" in record["reason"]  # contention, measured on its own threads

    rc, out = finish(run_workflow(tmp_path, guard_study()), timeout=600)  # the hog is gone
    assert rc == 0, out
    doc = load(result_path(tmp_path / "results/runs", name))
    for section in doc["sections"]:
        assert section["host_load"]["contended_cores"] <= doc["isolation"]["guard"]["max_foreign_cores"], \
            section["host_load"]


def test_a_cpu_hog_pinned_to_a_core_the_server_does_not_use_takes_nothing_from_it(embedded, tmp_path):
    """The guard judges contention, not activity: the hog ran a whole core all along, on the other one."""
    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "needs 2 CPUs: this suite's machines have them (docs/development.md, Testing)"
    study = guard_study()
    study["server"] = {**study["server"], "threads": 1,
                       "command": ["taskset", "-c", str(cpus[0]), *study["server"]["command"]]}
    hog = subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=lambda: os.sched_setaffinity(0, {cpus[1]}))
    try:
        rc, out = finish(run_workflow(tmp_path, study), timeout=600)
    finally:
        hog.kill()
        hog.wait()
    assert rc == 0, out
    doc = load(tmp_path / "results/runs/tp1-b0-ctx64/launch1.json")
    limit = doc["isolation"]["guard"]["max_foreign_cores"]
    for section in doc["sections"]:
        load_ = section["host_load"]
        assert load_["cores"] > 0.5 and any(p["name"].startswith("python") for p in load_["top"]), load_  # the hog
        assert load_["server_cpus"] == [cpus[0]] and load_["cores_on_server_cpus"] < limit, load_
        assert load_["method"] == "schedstat" and load_["contended_cores"] <= limit, load_


def test_an_api_key_server_works_and_no_written_file_holds_a_secret(embedded, tmp_path, monkeypatch):
    key, hf = "sk-planted-api-key-5f2e9c", "hf_planted_token_8d1a7b"
    monkeypatch.setenv("SPECSWEEP_TEST_API_KEY", key)
    monkeypatch.setenv("HF_TOKEN", hf)
    study = guard_study()
    study["server"] = {**study["server"], "api_key_env": "SPECSWEEP_TEST_API_KEY",
                       "command": study["server"]["command"] + ["--api-key", "{api_key}"]}
    rc, out = finish(run_workflow(tmp_path, study), timeout=600)
    assert rc == 0, out
    doc = load(tmp_path / "results/runs/tp1-b0-ctx64/launch1.json")
    assert doc["server"]["command"][-2:] == ["--api-key", "<redacted>"]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(".snakemake" in p.parts for p in written) and any("logs" in p.parts for p in written)
    for path in written:
        data = path.read_bytes()
        assert key.encode() not in data and hf.encode() not in data, path
    assert key not in out and hf not in out


def test_without_the_bearer_token_the_keyed_server_refuses(embedded, tmp_path):
    """The key is really enforced, so the passing study above really sent it."""
    port = probes.free_port()
    argv = [embedded["binary"], "-m", embedded["model"], "--host", probes.HOST, "--port", str(port),
            "-c", "256", "-t", "1", "--api-key", "k-123"]
    with ServerProcess(argv, port=port, log_path=tmp_path / "server.log", startup_timeout_s=60, backend=LLAMA,
                       api_key="k-123") as server:
        server.wait_ready()
        with pytest.raises(InvalidResponse, match="HTTP 401"):
            LLAMA.tokenize(server.base_url, "hello world")  # no bearer token
        assert len(workload.set_prompts(server, prompt_sets.default_source(), count=1, length=4)[0].tokens) == 4
        pid = server.pid
    assert "k-123" not in (tmp_path / "server.log").read_text()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
