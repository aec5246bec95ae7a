"""Every default of a study is the schema's (workflow/specsweep/schemas/config.schema.yaml): no
dataclass, function or command option that takes a study's setting carries a default of its own
that could disagree with it."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
import yaml

from specsweep import cli, spec
from specsweep.analysis import aggregate, answer, compare, plot
from specsweep.host import quiet_host
from specsweep.study import loading


def own_defaults(cls) -> dict:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


@pytest.mark.parametrize("cls", [spec.LaunchSpec, spec.Objective, quiet_host.Settings, plot.Facets])
def test_a_dataclass_made_from_a_study_has_no_defaults_of_its_own(cls):
    assert own_defaults(cls) == {}


def test_a_sections_defaults_are_the_schemas():
    """Section keeps two (the warmup is built in code), equal to the schema's."""
    schema = yaml.safe_load(loading.schema_path().read_text())
    items = schema["properties"]["workload"]["properties"]["sections"]["items"]["properties"]
    assert own_defaults(spec.Section) == {k: items[k]["default"] for k in own_defaults(spec.Section)}


@pytest.mark.parametrize(("function", "setting"), [
    (aggregate.add_speedup, "settings"), (answer.best_table, "settings"), (compare.compare, "alpha"),
    (plot.Facets.of, "x"), (plot.Facets.of, "line"), (plot.Facets.of, "column"),
])
def test_a_function_given_a_study_setting_has_no_default_for_it(function, setting):
    assert inspect.signature(function).parameters[setting].default is inspect.Parameter.empty


def test_a_spec_written_before_a_field_is_read_as_what_it_measured_not_as_the_schemas_default():
    assert spec.WRITTEN_BEFORE["repeats"] == 1 != loading.defaults("workload")["repeats"]
    doc = spec.LaunchSpec.from_dict(json_of_a_spec())
    assert doc.repeats == 1 and doc.launch == 1 and doc.preflight == "record"


def json_of_a_spec() -> dict:
    config = loading.validate_study({"grid": {"budget": [0], "tp": [1], "context": [64]}})
    doc = json.loads(loading.expand_grid(config)[0].to_json())
    for key in ("repeats", "preflight", "max_schedule_lag_s"):
        del doc[key]  # as a spec written before these existed
    return doc


@pytest.mark.parametrize(("argv", "section"), [(["compare", "a", "b"], "compare"), (["plot"], "plot")])
def test_a_commands_options_default_to_the_schemas_settings(argv, section):
    args = cli._parser().parse_args(argv)
    given = {k: getattr(args, k) for k in loading.defaults(section) if hasattr(args, k)}
    assert given and all(v is None for v in given.values()), given  # filled from the schema when run
