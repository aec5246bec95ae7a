"""Load levels and the goodput search through the main command on the real llama-server: one
launch per configuration, a summary row per level and one for the search, the report's answer
per load, the trade-off figure, and compare pairing by load."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from conftest import finish, result_path, run_workflow, small_study
from specsweep.records import paths

pytestmark = pytest.mark.e2e


def test_load_levels_and_an_objective_run_end_to_end(embedded, tmp_path):
    study = small_study()
    study["workload"].update(repeats=1, sections=[{"name": "chat", "output_tokens": 16, "requests": 4}],
                             load_levels={"concurrency": [1, 2]},
                             objective={"section": "chat", "ttft_p99_s": 5.0, "tpot_p99_s": 0.5, "start_rate": 2.0,
                                        "max_steps": 3})
    rc, out = finish(run_workflow(tmp_path, study))
    assert rc == 0, out
    for name in ("tp1-b0-ctx64", "tp1-b4-ctx64"):
        doc = json.loads(result_path(tmp_path / "results/launches", name).read_text())
        assert [(s["name"], s["load"], s["concurrency"]) for s in doc["sections"]] == [("chat", "c1", 1),
                                                                                      ("chat", "c2", 2)]
        search = doc["search"]
        assert 1 <= len(search["steps"]) <= 3 and search["steps"][0]["rate"] == 2.0
        met = [s["rate"] for s in search["steps"] if s["meets"]]
        assert search["sustained_rate_rps"] == (max(met) if met else None)
        # The server's own count of the requests it ran at once (llama-server's busy slots per decode,
        # from its counters) is each closed-loop level's concurrency, as the client's Little's-law
        # count is: the level measured the batch it names.
        for section in doc["sections"]:
            held = section["in_flight"]
            assert held["judged"] and "n_busy_slots_per_decode" in held["server_from"], held
            assert held["server"] == pytest.approx(section["concurrency"], rel=0.15), held
        # One launch measured every level and every step.
        log = (tmp_path / "logs/launches" / name / "launch1.log").read_text()
        assert log.count("server pid") == 1 and log.count("search step 1:") == 2, log
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert list(summary.columns[:6]) == ["name", "tp", "budget", "context", "section", "load"]
    assert list(summary["load"]) == ["c1", "c2", "slo"] * 2 and set(summary["status"]) == {"ok"}
    slo = summary[summary["load"] == "slo"].set_index("name")
    assert {"sustained_rate_rps", "goodput_tok_s"} <= set(summary.columns)
    assert (slo["output_tok_s"].isna() | (slo["output_tok_s"] == slo["goodput_tok_s"])).all()
    levels = summary[summary["load"] != "slo"].set_index(["name", "load"])
    assert levels.loc[("tp1-b4-ctx64", "c2"), "speedup"] == pytest.approx(
        levels.loc[("tp1-b4-ctx64", "c2"), "output_tok_s"] / levels.loc[("tp1-b0-ctx64", "c2"), "output_tok_s"])
    assert summary.loc[summary["load"] == "c2", "server_batch"].between(1.7, 2.3).all()
    best = pd.read_csv(tmp_path / "results/best.csv")
    # The draft schedule: every level named in best.csv placed at the batch the server ran, the rest
    # listed with why; nothing past the largest batch measured.
    plan = json.loads((tmp_path / "results/deploy/schedule.json").read_text())
    (one,) = plan["schedules"]
    named = best[best["verdict"].isin(["decided", "tied"]) & (best["load"] != "slo")]
    assert len([e for e in one["levels"] if "batch" in e]) == len(named)
    assert len(one["unfilled"]) == 2 - len(named)
    assert all(int(size) <= round(one["largest_batch"]) for c in one["by_context"] for size in c["vllm_per_batch_size"])
    assert list(zip(best["section"], best["load"])) == [("chat", "c1"), ("chat", "c2"), ("chat", "slo")]
    assert "Best draft budget per tp, context, section and load" in out
    front = (tmp_path / "results/report/front.rst").read_text()
    assert "Load slo is the goodput search" in front and "p99 TTFT <= 5 s and p99 TPOT <= 500 ms" in front
    for figure in ("summary.png", "tradeoff.png"):
        assert (tmp_path / "results" / figure).read_bytes()[:4] == b"\x89PNG"
    assert "Traceback" not in (tmp_path / paths.SUMMARY_LOG).read_text()  # the summary job draws the figures
    csv = tmp_path / "compare.csv"
    done = subprocess.run([sys.executable, "-m", "specsweep", "compare", "results", "results", "--csv", str(csv)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pairs = pd.read_csv(csv)
    assert list(zip(pairs["name"], pairs["load"])) == list(zip(summary["name"], summary["load"]))
