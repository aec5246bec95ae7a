"""API keys against the real llama-server, through the real workflow: a keyed server is measured,
no written file holds a secret, and the key is really enforced."""

from __future__ import annotations

import psutil
import pytest

from conftest import finish, load, run_workflow, small_study
from specsweep.errors import InvalidResponse
from specsweep.measure import workload
from specsweep.servers import probes
from specsweep.servers.backends import get as get_backend
from specsweep.servers.process import ServerProcess
from specsweep.study import prompt_sets

LLAMA = get_backend("llama-server")

pytestmark = pytest.mark.e2e


def one_configuration_study() -> dict:
    return small_study(grid={"budget": [0], "tp": [1], "context": [64]}, retries=0)


def test_an_api_key_server_works_and_no_written_file_holds_a_secret(embedded, tmp_path, monkeypatch):
    key, hf = "sk-planted-api-key-5f2e9c", "hf_planted_token_8d1a7b"
    monkeypatch.setenv("SPECSWEEP_TEST_API_KEY", key)
    monkeypatch.setenv("HF_TOKEN", hf)
    study = one_configuration_study()
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
