"""Faults through the real Snakemake workflow (with tests/doubles/fault_server.py as the server):
retries, exclusions, and results of other configurations left byte for byte as they were."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from conftest import FAULT_SERVER, SHARED_GUARD, finish, run_workflow


def study(tmp_path: Path, fault: str, **extra) -> dict:
    """Budget 0 behaves; every budget above 0 gets the fault (speculative_args carry it)."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"stand-in")
    doc = {
        "model": {"path": str(model)},
        "server": {"binary": sys.executable,
                   "command": ["{binary}", FAULT_SERVER, "--port", "{port}"],
                   "speculative_args": ["--fault", fault, "--budget", "{budget}"],
                   "stall_timeout_s": 2},
        "grid": {"budget": [0, 2, 4], "tp": [1], "context": [16]},
        "quiet_host": SHARED_GUARD,  # mechanics, beside other tests (conftest.SHARED_GUARD)
        "retries": 1,
        "exclude": [{"budget": 4, "reason": "known crash on this GPU"}],
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 1, "sections": [
            {"name": "short", "output_tokens": 8, "requests": 2},
            {"name": "medium", "output_tokens": 8, "requests": 2}]},
    }
    doc.update(extra)
    return doc


def records(workdir: Path, name: str) -> list[dict]:
    folder = workdir / "results/failures" / name
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_transient_failure_is_retried_and_excluded_config_is_shown(tmp_path):
    rc, out = finish(run_workflow(tmp_path, study(tmp_path, "die-at-request:4")), timeout=300)
    assert rc != 0
    assert (tmp_path / "results/launches/tp1-b0-ctx16/launch1.json").exists()
    assert not (tmp_path / "results/launches/tp1-b2-ctx16/launch1.json").exists()
    assert not (tmp_path / "results/launches/tp1-b4-ctx16/launch1.json").exists()  # excluded: never run
    attempts = records(tmp_path, "tp1-b2-ctx16")
    assert [r["attempt"] for r in attempts] == [1, 2] and {r["class"] for r in attempts} == {"server-died"}
    partial = pd.read_csv(tmp_path / "results/partial/summary.csv")
    status = dict(zip(partial["name"], partial["status"]))
    assert status == {"tp1-b0-ctx16": "ok", "tp1-b2-ctx16": "failed", "tp1-b4-ctx16": "excluded"}
    assert "known crash on this GPU" in set(partial["reason"].fillna(""))
    assert "tp1-b2-ctx16" in out and "[server-died]" in out


def test_deterministic_failure_is_not_retried_and_others_stay_untouched(tmp_path):
    first = study(tmp_path, "short-at-request:2")
    rc, out = finish(run_workflow(tmp_path, first), timeout=300)
    assert rc != 0
    assert len(records(tmp_path, "tp1-b2-ctx16")) == 1  # the retry exited without a new attempt
    assert "not retried" in (tmp_path / "logs/launches/tp1-b2-ctx16/launch1.log").read_text()
    good = tmp_path / "results/launches/tp1-b0-ctx16/launch1.json"
    before = (good.read_bytes(), good.stat().st_mtime_ns)

    rc, out = finish(run_workflow(tmp_path, first), timeout=300)  # same command again
    assert rc != 0
    assert (good.read_bytes(), good.stat().st_mtime_ns) == before
    assert len(records(tmp_path, "tp1-b2-ctx16")) == 2  # one new attempt in the new run

    fixed = study(tmp_path, "none")
    rc, out = finish(run_workflow(tmp_path, fixed), timeout=300)
    assert rc == 0, out
    assert (good.read_bytes(), good.stat().st_mtime_ns) == before
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert dict(zip(summary["name"], summary["status"]))["tp1-b2-ctx16"] == "ok"
    assert not (tmp_path / "results/failed.csv").exists()
