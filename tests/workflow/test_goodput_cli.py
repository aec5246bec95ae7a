"""The goodput search end to end: the real CLI against the fault server's load model
(tests/doubles/fault_server.py --busy-above), whose sustainable rate is known, and against one that
dies mid-search. The search's arithmetic alone is in tests/unit/measure/test_goodput.py."""

from __future__ import annotations

import statistics

import pytest

from conftest import NAME, goodput_study, launch_cli, load
from factories import as_version_4
from specsweep.records import store
from specsweep.records.result import Result


@pytest.mark.alone  # the rate found is compared with the request durations: a timing neighbours would disturb
def test_the_search_finds_the_stand_ins_sustainable_rate_on_one_launch(tmp_path, model):
    rc, err = launch_cli(tmp_path, goodput_study(model))
    assert rc == 0, err
    doc = load(tmp_path / "launches" / f"{NAME}.json")
    result = Result.from_json(doc)  # the search's own checks hold
    # As version 4 wrote it (each step's quiet-host figures as host_load), read back the same.
    assert Result.from_json(as_version_4(doc)).to_json() == doc
    search = doc["search"]
    assert err.count("server pid") == 1  # every step on the one launch
    met = [s for s in search["steps"] if s["meets"]]
    # The true rate, from the stand-in's rule (K / D) and the durations its requests had.
    durations = [r["e2e_s"] for d in search["sections"] for r in d["records"] if d["request_rate"] in
                 {s["rate"] for s in met}]
    true_rate = 2 / statistics.median(durations)
    assert search["converged"] and len(search["steps"]) <= 8
    assert true_rate / 1.1 * 0.95 <= search["sustained_rate_rps"] <= true_rate * 1.05, (search["steps"], true_rate)
    # Each step is open loop at its rate, evenly spaced, fresh prompts, its verdict its p99 TTFT's.
    for step, section in zip(search["steps"], search["sections"]):
        assert section["request_rate"] == step["rate"] and len(section["records"]) == 12
        assert step["meets"] == (section["ttft_s"]["p99"] <= 0.2)
    assert any(not s["meets"] for s in search["steps"])  # the bracket closed from above
    best = max(met, key=lambda s: s["rate"])
    assert search["goodput_tok_s"] == best["output_tok_s"]
    rows = result.summary_rows()
    assert [(r["section"], r["load"]) for r in rows] == [("short", "c1"), ("short", "slo")]
    assert rows[-1]["sustained_rate_rps"] == search["sustained_rate_rps"]
    assert rows[-1]["output_tok_s"] == search["goodput_tok_s"]
    assert "search: sustains" in err


def test_a_result_whose_search_verdicts_were_edited_is_refused(tmp_path, model):
    rc, err = launch_cli(tmp_path, goodput_study(model, max_steps=3))
    assert rc == 0, err
    doc = load(tmp_path / "launches" / f"{NAME}.json")
    step = doc["search"]["steps"][0]
    step["meets"] = not step["meets"]
    with pytest.raises(store.InvalidResult, match="p99s say otherwise"):
        Result.from_json(doc)


def test_a_server_that_dies_mid_search_fails_the_configuration(tmp_path, model):
    # Warmup 1, the section 2-13, the search's first step 14-25: request 18 kills the server.
    rc, err = launch_cli(tmp_path, goodput_study(model, "die-at-request:18"))
    assert rc == 12, err
    assert not (tmp_path / "launches" / f"{NAME}.json").exists()
    record = store.latest_failure(tmp_path / "failures", NAME)
    assert record.failure_class == "server-died" and record.section == "search step 1"


def test_a_search_that_met_nothing_gives_a_row_without_figures_not_zero(tmp_path, model):
    rc, err = launch_cli(tmp_path, goodput_study(model, ttft_p99_s=1e-6, max_steps=2))  # no TTFT is a microsecond
    assert rc == 0, err
    result = Result.from_json(load(tmp_path / "launches" / f"{NAME}.json"))
    assert result.best_search_step() is None and not any(s["meets"] for s in result.search["steps"])
    row = result.summary_rows()[-1]
    assert row["load"] == "slo" and row["sustained_rate_rps"] is None and row["goodput_tok_s"] is None
    assert "output_tok_s" not in row and row["search_steps"] == 2


def test_a_check_that_fails_in_a_search_step_names_the_step_not_the_section(tmp_path, model):
    # Request 18 is in the search's first step (see above); the server counts one token too many.
    rc, err = launch_cli(tmp_path, goodput_study(model, "miscount-at-request:18"))
    assert rc == 14, err
    record = store.latest_failure(tmp_path / "failures", NAME)
    assert record.failure_class == "invalid-response" and record.section == "search step 1"
    assert record.reason.startswith("search step 1: server counted "), record.reason


def test_a_search_the_spec_did_not_ask_for_is_refused(tmp_path, model):
    rc, err = launch_cli(tmp_path, goodput_study(model, max_steps=2))
    assert rc == 0, err
    doc = load(tmp_path / "launches" / f"{NAME}.json")
    doc["spec"]["objective"] = None
    with pytest.raises(store.InvalidResult, match="goodput search does not match the spec's objective"):
        Result.from_json(doc)

