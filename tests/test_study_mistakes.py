"""Every study mistake is refused before anything is planned or launched, by `snakemake -n` and by
`specsweep grid`, with one line that names the key and the fix; never a traceback."""

from __future__ import annotations

import subprocess
import sys

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
                          {"short.jsonl": LONG_PROMPT + '{"prompt": "too short"}\n'},
                          ["prompt 2 has 9 bytes", "grid.context"]),
    "literal secret": ({"server": {"command": ["{binary}", "--port", "{port}", "--api-key", "sk-1"]}}, {},
                       ["--api-key is given a literal value", "api_key_env"]),
    "remote bind": ({"server": {"command": ["{binary}", "--port", "{port}", "--host", "0.0.0.0"]}}, {},
                    ["--host 0.0.0.0 exposes the server", "allow_remote_bind"]),
    "api key without variable": ({"server": {"command": ["{binary}", "--port", "{port}", "--api-key", "{api_key}"]}},
                                 {}, ["server.api_key_env is not set"]),
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
