"""The goodput search: its bracket and bisection against known thresholds, and the objective as the
schema and the spec carry it. End to end through the real CLI: tests/workflow/test_goodput_cli.py."""

from __future__ import annotations

import math

import pytest
import yaml

from conftest import fault_study, goodput_study
from specsweep.measure.goodput import Search
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


def test_an_objective_travels_with_the_spec_and_a_study_without_one_keeps_its_params(model):
    from specsweep.spec import LaunchSpec
    from specsweep.study.grid import expand_grid

    spec = expand_grid(goodput_study(model))[0]
    assert LaunchSpec.from_dict(__import__("json").loads(spec.to_json())) == spec
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


