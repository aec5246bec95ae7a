"""Failures inferred instead of paid for (infer_failures, records/inferred.py), through the real
Snakemake workflow on the fault server: a context that runs out of memory at startup (llama.cpp's
std::bad_alloc, tests/doubles/fault_server.py --oom-above-ctx) keeps every longer context, all
else equal, from being launched, and each is shown as inferred with the record it rests on; the
same study without the key launches them all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from conftest import FAULT_SERVER, SHARED_GUARD, finish, run_workflow
from specsweep.servers import backends
from specsweep.study import expand_grid, validate_study


def study(tmp_path: Path, **keys) -> dict:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"stand-in")
    doc = {
        "model": {"path": str(model)},
        "server": {"binary": sys.executable,
                   "command": ["{binary}", FAULT_SERVER, "--port", "{port}", "-c", "{ctx_size}",
                               "--token-delay", "0.002", "--starts", str(tmp_path / "starts")],
                   "speculative_args": ["--budget", "{budget}"], "stall_timeout_s": 2},
        "grid": {"budget": [0, 2], "tp": [1], "context": [16, 32, 64]},
        "quiet_host": SHARED_GUARD,
        "retries": 0,
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 1, "launches": 1,
                     "sections": [{"name": "short", "output_tokens": 8, "requests": 1}]},
        **keys,
    }
    # Out of memory above the largest context size a 16-token configuration asks for: every
    # configuration at 32 and 64 runs out when it starts.
    fits = max(backends.get("llama-server").ctx_size(s) for s in expand_grid(validate_study(json.loads(
        json.dumps(doc)))) if s.context == 16)
    doc["server"]["command"] += ["--oom-above-ctx", str(fits)]
    return doc


def starts(tmp_path: Path) -> int:
    return int((tmp_path / "starts").read_text())


def test_a_longer_context_than_one_out_of_memory_is_inferred_not_launched(tmp_path):
    doc = study(tmp_path, infer_failures={"out_of_memory": True})
    rc, out = finish(run_workflow(tmp_path, doc), timeout=300)
    assert rc != 0  # context 32 ran out of memory: the study has no answer yet
    assert starts(tmp_path) == 4  # context 16 and 32 at both budgets; context 64 never started
    assert not (tmp_path / "logs/server/tp1-b0-ctx64").exists()
    partial = pd.read_csv(tmp_path / "results/partial/summary.csv")
    status = dict(zip(partial["name"], partial["status"]))
    assert status == {"tp1-b0-ctx16": "ok", "tp1-b2-ctx16": "ok", "tp1-b0-ctx32": "failed",
                      "tp1-b2-ctx32": "failed", "tp1-b0-ctx64": "inferred", "tp1-b2-ctx64": "inferred"}
    reason = partial.set_index("name")["reason"]["tp1-b2-ctx64"]
    assert reason.startswith("out of memory at context 32 (tp1-b2-ctx32, failure record results/failures/"
                             "tp1-b2-ctx32/") and reason.endswith(".json)")
    # The job planned for it refused at once, with its own class and the record it rests on.
    record = json.loads(next((tmp_path / "results/failures/tp1-b2-ctx64").glob("*.json")).read_text())
    assert record["class"] == "inferred-oom" and record["evidence"][0].startswith("results/failures/tp1-b2-ctx32/")
    assert partial[partial["status"] == "inferred"]["output_tok_s"].isna().all()  # never a zero
    assert "Next, for inferred-oom (tp1-b0-ctx64, tp1-b2-ctx64)" in out

    # The next run's plan leaves them out and says so; the dry run lists them, and no longer the
    # job that refused.
    rc, out = finish(run_workflow(tmp_path, doc, extra=("-n",)), timeout=300)
    assert rc == 0, out
    assert "inferred to fail, not launched (infer_failures): tp1-b0-ctx64: out of memory at context 32" in out
    assert "launches/tp1-b0-ctx64/" not in out and "launches/tp1-b0-ctx32/launch1.json" in out

    # Measured anyway on request: that one is launched (and runs out of memory, as it would).
    doc["infer_failures"]["measure_anyway"] = ["tp1-b0-ctx64"]
    rc, out = finish(run_workflow(tmp_path, doc), timeout=300)
    assert rc != 0 and starts(tmp_path) == 4 + 3  # ctx32's two again, and tp1-b0-ctx64
    partial = pd.read_csv(tmp_path / "results/partial/summary.csv")
    assert dict(zip(partial["name"], partial["status"]))["tp1-b0-ctx64"] == "failed"
    assert dict(zip(partial["name"], partial["status"]))["tp1-b2-ctx64"] == "inferred"


def test_without_the_key_every_configuration_is_launched(tmp_path):
    rc, out = finish(run_workflow(tmp_path, study(tmp_path)), timeout=300)
    assert rc != 0 and starts(tmp_path) == 6
    partial = pd.read_csv(tmp_path / "results/partial/summary.csv")
    assert "inferred" not in set(partial["status"])
    assert set(partial[partial["context"] > 16]["status"]) == {"failed"}


def test_a_configuration_named_to_measure_anyway_must_be_in_the_grid(tmp_path):
    doc = study(tmp_path, infer_failures={"out_of_memory": True})
    doc["infer_failures"]["measure_anyway"] = ["tp1-b9-ctx64"]
    rc, out = finish(run_workflow(tmp_path, doc, extra=("-n",)), timeout=300)
    assert rc != 0 and "infer_failures.measure_anyway: tp1-b9-ctx64 is not a configuration" in out
