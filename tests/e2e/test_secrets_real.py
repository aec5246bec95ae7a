"""API keys against the real llama-server: the key is really enforced, so a keyed study that was
measured really sent it (the suite's shared study is one: tests/e2e/test_study_archive.py finds no
secret in anything it wrote or printed)."""

from __future__ import annotations

import psutil
import pytest

from specsweep.errors import InvalidResponse
from specsweep.measure import workload
from specsweep.servers import probes
from specsweep.servers.backends import get as get_backend
from specsweep.servers.process import ServerProcess
from specsweep.study import loading

LLAMA = get_backend("llama-server")

pytestmark = pytest.mark.e2e


def test_without_the_bearer_token_the_keyed_server_refuses(embedded, tmp_path):
    port = probes.free_port()
    argv = [embedded["binary"], "-m", embedded["model"], "--host", probes.HOST, "--port", str(port),
            "-c", "256", "-t", "1", "--api-key", "k-123"]
    with ServerProcess(argv, port=port, log_path=tmp_path / "server.log", startup_timeout_s=60, backend=LLAMA,
                       api_key="k-123") as server:
        server.wait_ready()
        with pytest.raises(InvalidResponse, match="HTTP 401"):
            LLAMA.tokenize(server.base_url, "hello world")  # no bearer token
        assert len(workload.set_prompts(server, loading.default_prompts(), count=1, length=4)[0].tokens) == 4
        pid = server.pid
    assert "k-123" not in (tmp_path / "server.log").read_text()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
