"""Study validation and grid expansion: bad input is refused with a message naming the fix."""

import json

import pytest
import yaml

from conftest import REPO
from specsweep import study
from specsweep.analysis import ledger
from specsweep.errors import ConfigError

# A multi-tp grid needs {tp} in the command (else tp1 and tp2 would be the same server).
TP_SERVER = {"command": ["{binary}", "--port", "{port}", "--tensor-parallel-size", "{tp}"]}


def test_empty_study_gets_every_default():
    cfg = study.validate_study({})
    assert cfg["backend"] == "llama-server"
    assert cfg["grid"] == {"budget": [0, 2, 4, 8], "tp": [1], "context": [128, 1024]}
    assert [s["name"] for s in cfg["workload"]["sections"]] == ["short", "medium", "long"]
    assert cfg["workload"]["sections"][0]["concurrency"] == 1
    assert cfg["exclude"] == []


def test_default_config_file_is_valid_and_expands_to_the_full_grid(default_config):
    specs = study.expand_grid(default_config)
    grid = default_config["grid"]
    assert len(specs) == len(grid["budget"]) * len(grid["tp"]) * len(grid["context"])
    assert len({s.name for s in specs}) == len(specs)
    assert 0 in grid["budget"] and len([b for b in grid["budget"] if b > 0]) >= 3
    assert len(grid["context"]) >= 2


def test_grid_names_are_readable_and_ordered():
    cfg = study.validate_study({"grid": {"budget": [0, 8], "tp": [1, 2], "context": [256]}, "server": TP_SERVER})
    assert [s.name for s in study.expand_grid(cfg)] == [
        "tp1-b0-ctx256", "tp1-b8-ctx256", "tp2-b0-ctx256", "tp2-b8-ctx256",
    ]


def test_the_schema_is_a_valid_draft_2020_12_schema():
    """The validator is built without checking the schema on every command (loading._validator): here, once."""
    from jsonschema import Draft202012Validator

    from specsweep.study.loading import schema_path

    Draft202012Validator.check_schema(yaml.safe_load(schema_path().read_text()))


def test_a_study_that_changes_a_default_list_leaves_the_next_studys_default_alone():
    """One validator per process fills in every study's defaults: each gets its own copy."""
    first = study.validate_study({})
    first["grid"]["budget"].append(99)
    first["workload"]["sections"].clear()
    again = study.validate_study({})
    assert again["grid"]["budget"] == [0, 2, 4, 8] and len(again["workload"]["sections"]) == 3


def test_a_value_of_the_wrong_type_is_named_not_crashed_on():
    """A mapping's defaults are filled only where the value is a mapping; a string there is a schema error."""
    with pytest.raises(ConfigError, match=r"^invalid study configuration: grid: 'big' is not of type 'object'"):
        study.validate_study({"grid": "big"})


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"grid": {"budget": [-1]}}, ["-1"]),
        ({"grid": {"budget": []}}, ["budget"]),
        ({"grid": {"tp": [0]}}, ["0"]),
        ({"backend": "tgi"}, ["tgi"]),
        ({"workload": {"sections": [{"name": "x", "requests": 1}]}}, ["output_tokens"]),
        ({"unknown_key": 1}, ["unknown_key"]),
        ({"exclude": [{"budget": 8}]}, ["reason"]),
    ],
)
def test_schema_errors_name_the_problem(bad, words):
    with pytest.raises(ConfigError) as err:
        study.validate_study(bad)
    for word in words:
        assert word in err.value.reason


def test_context_that_cannot_fit_names_both_numbers():
    with pytest.raises(ConfigError) as err:
        study.validate_study({"model": {"context_limit": 1000}, "grid": {"context": [900]}})
    assert "900" in err.value.reason and "1000" in err.value.reason and "256" in err.value.reason


def test_duplicate_section_names_are_refused():
    sections = [{"name": "a", "output_tokens": 4, "requests": 1}] * 2
    with pytest.raises(ConfigError, match="unique"):
        study.validate_study({"workload": {"sections": sections}})


def test_speculative_args_must_use_the_budget():
    with pytest.raises(ConfigError, match="budget"):
        study.validate_study({"server": {"speculative_args": ["--spec-type", "ngram-mod"]}})


def test_find_spec_lists_known_names():
    cfg = study.validate_study({})
    assert study.find_spec(cfg, "tp1-b4-ctx1024").budget == 4
    with pytest.raises(ConfigError, match="tp1-b0-ctx128"):
        study.find_spec(cfg, "tp9-b4-ctx1024")


def test_spec_round_trips_through_json():
    spec = study.expand_grid(study.validate_study({}))[3]
    again = study.LaunchSpec.from_dict(json.loads(spec.to_json()))
    assert again == spec


def test_spec_from_incomplete_json_is_a_config_error():
    with pytest.raises(ConfigError, match="incomplete"):
        study.LaunchSpec.from_dict({"study": "x"})


def test_exclusion_rules_match_every_named_axis():
    cfg = study.validate_study({
        "server": TP_SERVER,
        "grid": {"budget": [0, 8, 12], "tp": [1, 2], "context": [128]},
        "exclude": [{"budget": [8, 12], "tp": 2, "reason": "CUDA illegal instruction on SM120"}],
    })
    reasons = {s.name: ledger.exclusion_reason(cfg, s) for s in study.expand_grid(cfg)}
    assert reasons["tp2-b8-ctx128"] == "CUDA illegal instruction on SM120"
    assert reasons["tp2-b12-ctx128"] == "CUDA illegal instruction on SM120"
    assert reasons["tp1-b8-ctx128"] is None and reasons["tp2-b0-ctx128"] is None


def test_a_study_written_with_the_old_guard_key_is_read_as_quiet_host_with_a_note(capsys):
    cfg = study.validate_study({"guard": {"max_foreign_cores": 0.5}})
    assert "guard" not in cfg and cfg["quiet_host"]["max_foreign_cores"] == 0.5
    assert cfg["quiet_host"]["retry_pause_s"] == 30  # the rest from the schema's defaults
    assert "guard: is now called quiet_host:" in capsys.readouterr().err
    assert study.validate_study({"quiet_host": {"max_foreign_cores": 0.5}}) == cfg  # the same study
    assert capsys.readouterr().err == ""


def test_a_study_that_spells_the_quiet_host_key_both_ways_is_refused():
    with pytest.raises(ConfigError, match="both guard: and quiet_host:.*keep quiet_host: alone"):
        study.validate_study({"guard": {"max_foreign_cores": 0.5}, "quiet_host": {"max_foreign_cores": 1.0}})


def test_the_default_study_file_states_its_choices_not_the_schemas_defaults():
    """config/config.yaml names the study, its server and its grid (what a reader looks for first)
    and otherwise only what differs from the schema: no default restated, none to drift."""
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    schema_defaults = study.validate_study({})
    restated = [f"{section}.{key}" for section, value in raw.items() if isinstance(value, dict)
                for key, chosen in value.items() if section != "grid" and schema_defaults[section][key] == chosen]
    restated += [key for key, value in raw.items()
                 if not isinstance(value, dict) and key not in ("study", "backend") and schema_defaults[key] == value]
    assert restated == []
