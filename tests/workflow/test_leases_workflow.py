"""Device leases through the real Snakemake workflow (tests/doubles/fault_server.py as the server): one
measurement at a time per device set across --cores N and across invocations, disjoint GPUs on a
simulated GPU host, and a result file aggregation refuses is rerun, never summarised."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd

from conftest import FAULT_SERVER, SHARED_GUARD, finish, run_workflow

# The jobs queued at the lock start up (imports, Snakemake's own work) while another measures:
# these tests are about who measures when, so the quiet-host guard is set out of the way here.


def study(tmp_path: Path, *, budgets=(0, 2, 4), tps=(1,), token_delay=0.02) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"stand-in")
    return {
        "model": {"path": str(model)},
        "server": {"binary": sys.executable,
                   "command": ["{binary}", FAULT_SERVER, "--port", "{port}", "--tp", "{tp}",
                               "--token-delay", str(token_delay)],
                   "speculative_args": ["--budget", "{budget}"],
                   # One thread a job, so that Snakemake starts several at once and the device
                   # lock, not Snakemake's core count, is what keeps them apart.
                   "threads": 1},
        "grid": {"budget": list(budgets), "tp": list(tps), "context": [16]},
        "quiet_host": SHARED_GUARD,
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 1, "sections": [
            {"name": "short", "output_tokens": 8, "requests": 2},
            {"name": "medium", "output_tokens": 8, "requests": 2}]},
    }


def intervals(workdir: Path) -> dict[str, tuple[datetime, datetime]]:
    """Per configuration: first section start to last section end, from the results themselves."""
    out = {}
    for path in sorted((workdir / "results/launches").glob("*/launch1.json")):
        sections = json.loads(path.read_text())["sections"]
        out[f"{workdir.name}/{path.parent.name}"] = (datetime.fromisoformat(sections[0]["started_at"]),
                                              datetime.fromisoformat(sections[-1]["finished_at"]))
    return out


def overlapping(spans: dict) -> list[tuple[str, str]]:
    return [(a, b) for (a, (s1, e1)), (b, (s2, e2)) in itertools.combinations(spans.items(), 2)
            if s1 < e2 and s2 < e1]


def test_two_configurations_under_two_cores_are_never_measured_at_once(tmp_path):
    rc, out = finish(run_workflow(tmp_path, study(tmp_path), extra=("--cores", "2")), timeout=300)
    assert rc == 0, out
    spans = intervals(tmp_path)
    assert len(spans) == 3 and overlapping(spans) == []
    assert "waiting for device(s): host held by tp1-b" in out  # shown on the terminal


def test_two_invocations_in_two_folders_are_never_measured_at_once(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    procs = [run_workflow(a, study(a)), run_workflow(b, study(b))]
    for proc in procs:
        rc, out = finish(proc, timeout=300)
        assert rc == 0, out
    spans = {**intervals(a), **intervals(b)}
    assert len(spans) == 6 and overlapping(spans) == []


def test_jobs_on_a_gpu_host_get_disjoint_gpus_and_run_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_GPUS", "0,1,2,3")  # simulated ids: the lock is what is tested
    doc = study(tmp_path, budgets=(0, 2, 4), tps=(1, 2), token_delay=0.05)
    doc["server"]["gpu"] = True
    rc, out = finish(run_workflow(tmp_path, doc, extra=("--resources", "gpu=4", "--cores", "4")), timeout=300)
    assert rc == 0, out
    assert re.search(r"resources: .*gpu=2", out) and re.search(r"resources: .*gpu=1", out)  # declared per tp
    spans = intervals(tmp_path)
    seen = {}
    for key in spans:
        name = key.split("/")[1]
        log = (tmp_path / "logs/server" / name / "launch1.log").read_text()
        visible = re.findall(r"CUDA_VISIBLE_DEVICES=([\d,]*)", log)[-1].split(",")
        result = json.loads((tmp_path / "results/launches" / name / "launch1.json").read_text())
        assert result["lease"]["devices"] == visible
        assert len(visible) == int(name[2])  # tp GPUs, as the name's tp says
        seen[key] = set(visible)
    pairs = overlapping(spans)
    assert pairs, "on 3 GPUs, some jobs must have run at the same time"
    for a, b in pairs:
        assert seen[a].isdisjoint(seen[b]), (a, seen[a], b, seen[b])


def _corrupt(path: Path, how: str) -> None:
    if how == "not-json":
        path.write_text('{"schema": "specsweep.result", "truncat')
    else:
        doc = json.loads(path.read_text())
        doc["schema_version"] = 99
        path.write_text(json.dumps(doc))


def test_a_refused_result_is_measured_again_by_the_very_next_run(tmp_path):
    doc = study(tmp_path, budgets=(0, 2, 4))
    rc, out = finish(run_workflow(tmp_path, doc), timeout=300)
    assert rc == 0, out
    runs = tmp_path / "results/launches"
    _corrupt(runs / "tp1-b2-ctx16/launch1.json", "not-json")
    _corrupt(runs / "tp1-b4-ctx16/launch1.json", "version")
    (tmp_path / "results/summary.png").unlink()  # even without the figure, the table must not stand

    rc, out = finish(run_workflow(tmp_path, doc), timeout=300)
    assert rc == 0, out
    assert "results/launches/tp1-b2-ctx16/launch1.json: " in out and "schema version 99" in out
    assert "moved to results/set-aside/results" in out
    assert re.search(r"launch_configuration\s+2\b", out), out  # exactly the two refused ones
    kept = sorted(p.name for p in (tmp_path / "results/set-aside/results").iterdir())
    assert [re.sub(r"-\d{4}-\d\d-\d\dT.*", "", k) for k in kept] == ["tp1-b2-ctx16", "tp1-b4-ctx16"]  # kept
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert set(summary["status"]) == {"ok"} and (tmp_path / "results/summary.png").exists()
    assert {json.loads((tmp_path / "results/failures" / n / f).read_text())["class"]
            for n in ("tp1-b2-ctx16", "tp1-b4-ctx16") for f in os.listdir(tmp_path / "results/failures" / n)
            } == {"invalid-result"}

    # Aggregation refuses too (a file damaged after the plan): it fails naming the file and moves
    # it aside, so the next run measures it again (the summary job's outputs Snakemake deletes).
    _corrupt(runs / "tp1-b2-ctx16/launch1.json", "version")
    proc = subprocess.run([sys.executable, "-m", "specsweep", "aggregate", "--config", "results/study/config.yaml",
                           "--launches", "results/launches", "--failures", "results/failures",
                           "--set-aside", "results/set-aside/results",
                           "--csv", str(tmp_path / "x.csv")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 19 and "1 result file(s) cannot be aggregated" in proc.stderr, proc.stderr
    assert not (runs / "tp1-b2-ctx16/launch1.json").exists()
