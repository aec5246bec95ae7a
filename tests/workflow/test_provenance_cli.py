"""Where a result came from, through the real CLI and git: the commit and a dirty tree, the
package versions, the invocation and the environment (secrets redacted), kept in history at
once; and results of different models refused by aggregation, by the CLI's exit code."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from conftest import NAME, REPO, fault_study, launch_cli, load
from factories import result_doc
from specsweep import study
from specsweep.analysis import aggregate
from specsweep.errors import IncomparableResults
from specsweep.measure import provenance
from specsweep.records import store


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_provenance_names_the_commit_and_detects_a_dirty_tree(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    git("init", "-q", cwd=src)
    (src / "f.py").write_text("x = 1\n")
    git("add", "f.py", cwd=src)
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one", cwd=src)
    monkeypatch.setattr(provenance, "source_root", lambda: src)
    clean = provenance.code()
    assert clean["git_commit"] == git("rev-parse", "HEAD", cwd=src) and clean["git_dirty"] is False
    (src / "f.py").write_text("x = 2\n")
    assert provenance.code()["git_dirty"] is True


def test_a_result_records_where_it_came_from(tmp_path, model, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "planted-secret-in-env")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    relaxed = json.dumps({"max_foreign_cores": 100.0, "max_repeat_spread": 10.0})  # provenance, not the quiet host
    code, err = launch_cli(tmp_path, fault_study(model), "--quiet-host", relaxed)
    assert code == 0, err
    doc = load(tmp_path / "launches" / f"{NAME}.json")
    assert doc["schema_version"] == store.RESULT_VERSION
    prov = doc["provenance"]
    assert prov["code"]["git_commit"] == git("rev-parse", "HEAD")
    assert prov["code"]["git_dirty"] == bool(git("status", "--porcelain", "--untracked-files=no"))
    assert doc["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert prov["packages"]["snakemake"] == metadata.version("snakemake")
    assert prov["packages"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert " launch --spec " in prov["invocation"]
    assert prov["environment"]["OMP_NUM_THREADS"] == "1" and prov["environment"]["VLLM_API_KEY"] == "<redacted>"
    assert doc["hardware"]["cpu_model"] and doc["hardware"]["memory_bytes"] > 0
    assert doc["started_at"] < doc["finished_at"]
    kept = list((tmp_path / "history" / NAME).glob("*.json"))  # kept at once, not at the next run
    assert len(kept) == 1 and kept[0].read_bytes() == (tmp_path / "launches" / f"{NAME}.json").read_bytes()


def test_results_of_different_models_are_refused_by_aggregation(tmp_path):
    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128]}})
    runs = tmp_path / "launches"
    for spec in study.expand_grid(cfg):
        doc = result_doc(spec)
        doc["model"]["sha256"] = ("a" if spec.budget == 0 else "b") * 64
        store.write_json_atomic(runs / spec.name / "launch1.json", doc)
    differ = r"model: 'a{64}' in launches/tp1-b0-ctx128/launch1.json; 'b{64}' in launches/tp1-b4-ctx128/launch1.json"
    with pytest.raises(IncomparableResults, match=differ):
        aggregate.check_comparable(cfg, runs)
    proc = subprocess.run([sys.executable, "-m", "specsweep", "aggregate", "--config-json", json.dumps(cfg),
                           "--launches", str(runs), "--csv", str(tmp_path / "s.csv")], capture_output=True, text=True)
    assert proc.returncode == 23 and "different provenance" in proc.stderr
