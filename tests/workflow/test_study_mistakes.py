"""Every study mistake is refused before anything is planned or launched, by `snakemake -n` and by
`specsweep grid`, with one line that names the key and the fix; never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

LONG_PROMPT = '{"prompt": "' + "word " * 400 + '"}\n'
CASES = {
    # name: (study, files to write, words the message must hold)
    "unknown placeholder": ({"server": {"command": ["{binary}", "--port", "{port}", "-m", "{modle}"]}}, {},
                            ["unknown placeholder {modle}", "known:"]),
    "no port": ({"server": {"command": ["{binary}", "-m", "{model}"]}}, {}, ["no {port} placeholder", "--port {port}"]),
    "tp missing": ({"grid": {"tp": [1, 2]}}, {}, ["grid.tp has 2 values", "{tp}"]),
    "prompts missing": ({"workload": {"prompts_file": "none.jsonl"}}, {}, ["cannot read prompts file none.jsonl"]),
    "prompts malformed": ({"workload": {"prompts_file": "bad.jsonl"}}, {"bad.jsonl": LONG_PROMPT + "[1, 2]\n"},
                          ["bad.jsonl line 2", '{"prompt": "..."}']),
    "prompts too short": ({"workload": {"prompts_file": "short.jsonl"}},
                          {"short.jsonl": LONG_PROMPT + '{"prompt": "too short"}\n' + LONG_PROMPT * 10},
                          ["prompt 2 has 9 bytes", "grid.context"]),
    "prompts too few": ({"workload": {"prompts_file": "few.jsonl"}}, {"few.jsonl": LONG_PROMPT * 3},
                        ["few.jsonl holds 3 prompts, and each configuration sends 11 that its server has not seen",
                         "workload.reuse_prompts: true"]),
    "literal secret": ({"server": {"command": ["{binary}", "--port", "{port}", "--api-key", "sk-1"]}}, {},
                       ["--api-key is given a literal value", "api_key_env"]),
    "remote bind": ({"server": {"command": ["{binary}", "--port", "{port}", "--host", "0.0.0.0"]}}, {},
                    ["--host 0.0.0.0 exposes the server", "allow_remote_bind"]),
    "api key without variable": ({"server": {"command": ["{binary}", "--port", "{port}", "--api-key", "{api_key}"]}},
                                 {}, ["server.api_key_env is not set"]),
}


# Paths on this machine: a real run refuses a typo before any job, not minutes into the sweep; a
# dry run and the grid listing plan anyway (a GPU study is planned elsewhere) and warn.
PATH_CASES = {
    "model file missing": ({"model": {"path": "models/smollm.gguf"}}, {},
                           ["model.path: model file models/smollm.gguf does not exist"]),
    "binary missing": ({"server": {"binary": "/opt/llama/bin/llama-servr"}}, {},
                       ["server.binary /opt/llama/bin/llama-servr does not exist"]),
    "binary not on PATH": ({"server": {"binary": "llama-servr"}}, {}, ["server.binary llama-servr is not on PATH"]),
    "binary not executable": ({"server": {"binary": "./server.sh"}}, {"server.sh": "#!/bin/sh\n"},
                              ["server.binary ./server.sh is not executable", "chmod +x"]),
    "baseline missing": ({"compare": {"baseline": "old/results"}}, {}, ["compare.baseline old/results does not exist"]),
}


def write(tmp_path, study, files) -> str:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "study.yaml"
    path.write_text(study if isinstance(study, str) else yaml.safe_dump(study))
    return str(path)


@pytest.mark.parametrize("case", CASES)
def test_specsweep_grid_refuses_the_mistake(tmp_path, case):
    study, files, words = CASES[case]
    proc = subprocess.run([sys.executable, "-m", "specsweep", "grid", "--config", write(tmp_path, study, files)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    for word in words:
        assert word in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("case", CASES)
def test_a_dry_run_refuses_the_mistake(tmp_path, case):
    study, files, words = CASES[case]
    path = write(tmp_path, study, files)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
                           str(tmp_path), "-n", "--cores", "1", "results/summary.png", "--configfile", path],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "config error: " in proc.stderr
    for word in words:
        assert word in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_study_that_is_not_a_mapping_is_refused_without_a_traceback(tmp_path):
    path = write(tmp_path, "- budget: 4\n- budget: 8\n", {})
    grid = subprocess.run([sys.executable, "-m", "specsweep", "grid", "--config", path], capture_output=True,
                          text=True, timeout=60)
    assert grid.returncode == 2 and "must be a mapping of keys" in grid.stderr and "list" in grid.stderr
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
                          str(tmp_path), "-n", "--cores", "1", "results/summary.png", "--configfile", path],
                         capture_output=True, text=True, timeout=120)
    said = dry.stdout + dry.stderr  # this one is Snakemake's own message, on stdout
    assert dry.returncode != 0 and "keys at top level" in said and "Traceback" not in said


@pytest.mark.parametrize("which", ["study", "prompts"])
def test_a_file_that_is_not_utf8_is_named_without_a_traceback(tmp_path, which):
    """A study or prompts file saved in Latin-1: one line naming the file, the byte and the fix."""
    latin1 = '{"prompt": "caf\xe9 ' + "word " * 400 + '"}\n'
    if which == "prompts":
        (tmp_path / "p.jsonl").write_bytes(latin1.encode("latin-1"))
        path = write(tmp_path, {"workload": {"prompts_file": "p.jsonl"}}, {})
        words = ["prompts file p.jsonl is not UTF-8 text (byte 0xe9 at offset 15)"]
    else:
        path = str(tmp_path / "study.yaml")
        Path(path).write_bytes("study: caf\xe9\n".encode("latin-1"))
        words = [f"study config {path} is not UTF-8 text (byte 0xe9 at offset 10)"]
    proc = subprocess.run([sys.executable, "-m", "specsweep", "grid", "--config", path], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "save it as UTF-8" in proc.stderr, proc.stderr
    assert all(w in proc.stderr for w in words) and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", PATH_CASES)
def test_a_path_missing_here_is_refused_by_a_real_run_and_named_by_a_dry_run(tmp_path, case):
    study, files, words = PATH_CASES[case]
    path = write(tmp_path, study, files)
    base = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
            "--cores", "1", "results/summary.png", "--configfile", path]
    real = subprocess.run(base, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert real.returncode != 0 and "config error: " in real.stderr and "Traceback" not in real.stderr
    assert all(w in real.stderr for w in words), real.stderr
    assert not (tmp_path / "results" / "provision").exists()  # refused before any job
    for argv in (base + ["-n"], [sys.executable, "-m", "specsweep", "grid", "--config", path]):
        planned = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert planned.returncode == 0, planned.stderr
        assert "specsweep: warning: " in planned.stderr and all(w in planned.stderr for w in words), planned.stderr
