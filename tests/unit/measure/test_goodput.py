"""The goodput search: its bracket and bisection against known thresholds, then end to end through
the real CLI against the fault server's load model (tests/doubles/fault_server.py --busy-above),
whose sustainable rate is known, and against one that dies mid-search."""

from __future__ import annotations

import math
import statistics

import pytest
import yaml

from conftest import NAME, fault_study, load, run_cli
from factories import as_version_4
from specsweep.measure.goodput import Search
from specsweep.records import store
from specsweep.records.result import Result
from specsweep.spec import Objective
from specsweep.study import loading


def objective(**given) -> Objective:
    """An objective with the schema's defaults (the only ones) for what a test leaves out."""
    schema = yaml.safe_load(loading.schema_path().read_text())
    fields = schema["properties"]["workload"]["properties"]["objective"]["properties"]
    return Objective(**{**{k: v["default"] for k, v in fields.items() if "default" in v}, "section": "s", **given})


def test_the_schema_gives_every_objective_field_but_the_section_a_default():
    assert objective() == Objective(section="s", ttft_p99_s=None, tpot_p99_s=None, start_rate=1.0, precision=0.1,
                                    max_steps=8, arrival="poisson")


def search_against(true_rate: float, **given) -> Search:
    bound = objective(ttft_p99_s=1.0, **given)
    return Search(bound).run(lambda _n, rate: {"meets": rate <= true_rate})


@pytest.mark.parametrize("true_rate", [0.013, 0.7, 1.0, 1.9, 3.3, 47.0])
@pytest.mark.parametrize("precision", [0.05, 0.1, 0.25])
def test_the_found_rate_is_within_precision_below_the_true_one(true_rate, precision):
    start = 1.0
    search = search_against(true_rate, precision=precision, max_steps=30)
    assert search.converged()
    assert search.met <= true_rate < search.missed <= search.met * (1 + precision)
    # The documented step count: |log2(true/start)| + 1 (rounded up) to bracket, then the bisection.
    bracket = math.floor(abs(math.log2(true_rate / start))) + 2
    bisect = math.ceil(math.log2(math.log(2) / math.log(1 + precision)))
    assert len(search.steps) <= bracket + bisect
    assert [s["step"] for s in search.steps] == list(range(1, len(search.steps) + 1))


def test_a_search_out_of_steps_says_so_and_keeps_a_lower_bound():
    search = search_against(40.0, max_steps=3)  # 1, 2, 4: all met, the bracket never closed
    assert len(search.steps) == 3 and not search.converged()
    assert search.met == 4.0 and search.missed is None
    doc = search.to_json({"output_tok_s": 12.0})
    assert doc["sustained_rate_rps"] == 4.0 and doc["converged"] is False and doc["goodput_tok_s"] == 12.0


def test_no_rate_within_the_objective_is_no_rate_not_zero():
    search = search_against(0.001, max_steps=4)  # 1, 0.5, 0.25, 0.125: none met
    assert search.met is None and search.missed == 0.125 and not search.converged()
    assert search.to_json(None)["sustained_rate_rps"] is None and search.to_json(None)["goodput_tok_s"] is None


def test_objective_is_met_only_by_measured_figures_within_every_bound():
    both = objective(ttft_p99_s=0.5, tpot_p99_s=0.02)
    assert both.met_by(0.5, 0.02) and not both.met_by(0.51, 0.01) and not both.met_by(0.1, 0.03)
    assert not both.met_by(0.1, None)  # a TPOT never measured (one-token answers) is not within a bound
    assert objective(ttft_p99_s=0.5).met_by(0.4, None)


def load_study(model, fault: str = "none", **objective) -> dict:
    # Requests of 10 tokens at 20 ms a token: D is about 0.2 s, so with 2 in flight allowed before
    # the 0.4 s wait the sustainable rate is about 2 / 0.2 = 10 requests/s.
    study = fault_study(model, fault, token_delay=0.02)
    study["server"]["command"] += ["--busy-above", "2", "--slow-ttft", "0.4"]
    study["workload"]["sections"] = [{"name": "short", "output_tokens": 10, "requests": 12, "concurrency": 1,
                                      "request_rate": None}]
    study["workload"]["objective"] = {"section": "short", "ttft_p99_s": 0.2, "tpot_p99_s": None, "start_rate": 3.0,
                                      "precision": 0.1, "max_steps": 8, "arrival": "constant", **objective}
    return study


def test_the_search_finds_the_stand_ins_sustainable_rate_on_one_launch(tmp_path, model):
    rc, err = run_cli(tmp_path, load_study(model))
    assert rc == 0, err
    doc = load(tmp_path / "runs" / f"{NAME}.json")
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
    rc, err = run_cli(tmp_path, load_study(model, max_steps=3))
    assert rc == 0, err
    doc = load(tmp_path / "runs" / f"{NAME}.json")
    step = doc["search"]["steps"][0]
    step["meets"] = not step["meets"]
    with pytest.raises(store.InvalidResult, match="p99s say otherwise"):
        Result.from_json(doc)


def test_a_server_that_dies_mid_search_fails_the_configuration(tmp_path, model):
    # Warmup 1, the section 2-13, the search's first step 14-25: request 18 kills the server.
    rc, err = run_cli(tmp_path, load_study(model, "die-at-request:18"))
    assert rc == 12, err
    assert not (tmp_path / "runs" / f"{NAME}.json").exists()
    record = store.latest_failure(tmp_path / "failures", NAME)
    assert record.failure_class == "server-died" and record.section == "search step 1"


def test_a_search_that_met_nothing_gives_a_row_without_figures_not_zero(tmp_path, model):
    rc, err = run_cli(tmp_path, load_study(model, ttft_p99_s=1e-6, max_steps=2))  # no TTFT is a microsecond
    assert rc == 0, err
    result = Result.from_json(load(tmp_path / "runs" / f"{NAME}.json"))
    assert result.best_search_step() is None and not any(s["meets"] for s in result.search["steps"])
    row = result.summary_rows()[-1]
    assert row["load"] == "slo" and row["sustained_rate_rps"] is None and row["goodput_tok_s"] is None
    assert "output_tok_s" not in row and row["search_steps"] == 2


def test_a_check_that_fails_in_a_search_step_names_the_step_not_the_section(tmp_path, model):
    # Request 18 is in the search's first step (see above); the server counts one token too many.
    rc, err = run_cli(tmp_path, load_study(model, "miscount-at-request:18"))
    assert rc == 14, err
    record = store.latest_failure(tmp_path / "failures", NAME)
    assert record.failure_class == "invalid-response" and record.section == "search step 1"
    assert record.reason.startswith("search step 1: server counted "), record.reason


def test_an_objective_travels_with_the_spec_and_a_study_without_one_keeps_its_params(model):
    from specsweep.spec import RunSpec
    from specsweep.study.grid import expand_grid

    spec = expand_grid(load_study(model))[0]
    assert RunSpec.from_dict(__import__("json").loads(spec.to_json())) == spec
    assert spec.prompts_needed == 1 + 12 + 8 * 12  # warmup, the section, every step the search may take
    plain = expand_grid(fault_study(model))[0]
    assert '"objective"' not in plain.to_json()  # left out at its default: finished results stay fresh


@pytest.mark.parametrize("objective, words", [
    ({"section": "nope", "ttft_p99_s": 1.0}, "workload.objective.section is 'nope', not a section"),
    ({"section": "short"}, "sets neither ttft_p99_s nor tpot_p99_s"),
])
def test_an_objective_that_cannot_be_searched_is_refused_with_the_fix(model, objective, words):
    from specsweep.errors import ConfigError
    from specsweep.study.loading import check_study

    study = fault_study(model)
    study["workload"]["objective"] = {"ttft_p99_s": None, "tpot_p99_s": None, **objective}
    with pytest.raises(ConfigError, match=words):
        check_study(study)


def test_the_bounds_are_kept_whatever_order_the_steps_come_in():
    search = Search(objective(ttft_p99_s=1.0, precision=1.0))
    for rate, meets in ((4.0, True), (2.0, True), (16.0, False), (32.0, False)):
        search.record(rate, {"meets": meets})
    assert (search.met, search.missed) == (4.0, 16.0) and not search.converged()
    search.record(8.0, {"meets": False})
    # missed = met x (1 + precision) exactly: within the precision, so done.
    assert search.missed == 8.0 and search.converged() and search.next_rate() is None


def test_a_search_the_spec_did_not_ask_for_is_refused(tmp_path, model):
    rc, err = run_cli(tmp_path, load_study(model, max_steps=2))
    assert rc == 0, err
    doc = load(tmp_path / "runs" / f"{NAME}.json")
    doc["spec"]["objective"] = None
    with pytest.raises(store.InvalidResult, match="goodput search does not match the spec's objective"):
        Result.from_json(doc)
