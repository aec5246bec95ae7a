"""vLLM through the real CLI against the vLLM stand-in (tests/doubles/vllm_standin.py), for what
the real CPU build will not do on demand: a scheduler that runs fewer requests than the client
keeps in flight (its running-request gauge says so), and an engine that logs another speculative
configuration than its command asked for. The real vLLM runs in tests/e2e/test_vllm_real.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import SHARED_GUARD, VLLM_STANDIN, load

NAME = "tp1-b4-ctx64"
# Four in flight for about 2.4 s a repeat (8 requests of 120 tokens at 10 ms a token): the gauge is
# sampled a dozen times a repeat.
FOUR_IN_FLIGHT = [{"name": "busy", "output_tokens": 120, "requests": 8, "concurrency": 4}]


def vllm_study(tmp_path: Path, *extra: str) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"stand-in": true}')
    doc = {
        "backend": "vllm",
        "model": {"name": "stand-in", "path": str(model), "context_limit": 4096},
        "server": {"binary": sys.executable,
                   "command": ["{binary}", VLLM_STANDIN, "--model", "{model}", "--max-model-len", "{ctx_size}",
                               "--host", "{host}", "--port", "{port}", "--token-delay", "0.01", *extra],
                   "speculative_args": ["--speculative-config",
                                        '{{"method": "ngram", "num_speculative_tokens": {budget}}}'],
                   # A queued request gets no byte until a place frees: 3.6 s at one place, longer beside the
                   # shared tier; the level, not a hang, is what these tests judge.
                   "startup_timeout_s": 30, "stall_timeout_s": 60},
        "grid": {"budget": [4], "tp": [1], "context": [64]},
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 2, "sections": FOUR_IN_FLIGHT},
        "quiet_host": SHARED_GUARD,  # these tests are about what the server says; the guard has its own
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def launch(tmp_path: Path, *extra: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-m", "specsweep", "launch", "--config", str(vllm_study(tmp_path, *extra)),
                          "--name", NAME, "--out", str(tmp_path / "launches" / f"{NAME}.json"),
                          "--server-log", str(tmp_path / f"{NAME}.log"), "--failures-dir", str(tmp_path / "failures")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180, env=dict(os.environ))
    return out.returncode, out.stderr


def failure(tmp_path: Path) -> dict:
    assert not (tmp_path / "launches" / f"{NAME}.json").exists()
    return load(next((tmp_path / "failures" / NAME).glob("*.json")))


def test_the_batch_vllm_ran_is_its_running_gauge_and_its_logged_config_is_checked(tmp_path):
    code, err = launch(tmp_path)
    assert code == 0, err
    doc = load(tmp_path / "launches" / f"{NAME}.json")
    held = doc["sections"][0]["in_flight"]
    assert held["judged"] and held["samples"] >= 10 and "vllm:num_requests_running" in held["server_from"]
    assert held["client"] == pytest.approx(4, rel=0.1) and held["server"] == pytest.approx(4, rel=0.5)
    assert doc["server"]["reported"]["speculative_config"] == {"method": "ngram", "num_spec_tokens": 4}
    assert ("speculative_config: ngram, 4 drafted tokens a step, as --speculative-config asked"
            in doc["server"]["preflight"]["checked"])


def test_a_level_vllm_queued_is_refused_by_littles_law(tmp_path):
    code, err = launch(tmp_path, "--max-num-seqs", "1")
    assert code == 31, err
    record = failure(tmp_path)
    assert record["class"] == "load-not-held" and "vllm:num_requests_running" in record["reason"]
    ran = float(re.search(r"the server ran ([0-9.]+) at once", record["reason"]).group(1))
    assert 0.5 <= ran <= 1.0 and "it queued the rest" in record["reason"]  # one at a time, the rest waited


def test_an_engine_that_resolved_another_draft_length_is_refused(tmp_path):
    code, err = launch(tmp_path, "--resolve-num-spec-tokens", "2")
    assert code == 30, err
    record = failure(tmp_path)
    assert record["class"] == "setting-not-applied" and record["reason"] == (
        "--speculative-config asked for num_speculative_tokens 4, the engine logs speculative_config with "
        "num_spec_tokens=2")
