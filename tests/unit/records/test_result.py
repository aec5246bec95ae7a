"""The result document (records/result.py): what is valid, what is refused, and older versions
read under today's names."""

import copy
import json
from pathlib import Path

import pytest

from factories import as_version_4, result_doc
from specsweep import study
from specsweep.records import store
from specsweep.records.result import Result


@pytest.fixture
def spec():
    return study.expand_grid(study.validate_study({}))[0]


def test_a_complete_result_validates(spec):
    doc = result_doc(spec)
    Result.from_json(doc)
    assert doc["schema_version"] == store.RESULT_VERSION
    assert [s["name"] for s in doc["sections"]] == ["short", "medium", "long"]


def _broken(doc, how):
    doc = copy.deepcopy(doc)
    section = doc["sections"][1]
    if how == "too-few-tokens":
        section["records"][0]["output_tokens"] -= 1
    elif how == "zero-throughput":
        section["output_tok_s"] = 0.0
    elif how == "missing-section":
        doc["sections"].pop()
    elif how == "missing-record":
        section["records"].pop()
    elif how == "token-sum-mismatch":
        section["output_tokens"] += 5
    elif how == "old-version":
        doc["schema_version"] = 0
    elif how == "not-ours":
        doc["schema"] = "guidellm"
    elif how == "section-not-a-mapping":
        doc["sections"][1] = "medium"
    elif how == "record-without-tokens":
        del section["records"][0]["output_tokens"]
    elif how == "version-4-section-not-a-mapping":
        doc = as_version_4(doc)
        doc["sections"][1] = "medium"
    return doc


@pytest.mark.parametrize("how", ["too-few-tokens", "zero-throughput", "missing-section", "missing-record",
                                 "token-sum-mismatch", "old-version", "not-ours", "section-not-a-mapping",
                                 "record-without-tokens", "version-4-section-not-a-mapping"])
def test_broken_results_are_refused(spec, how):
    with pytest.raises(store.InvalidResult):
        Result.from_json(_broken(result_doc(spec), how))


def test_a_version_4_result_is_read_under_the_quiet_host_names_with_its_figures_unchanged(spec):
    doc = result_doc(spec)
    doc["lease"] = {"devices": ["host"], "waited_s": 0.5, "port": 8080, "lock_dir": "/tmp/l"}
    doc["quiet_host"] = {"max_foreign_cores": 0.25, "max_repeat_spread": 0.5, "retry_pause_s": 30,
                         "max_gpu_slowed_share": 0.05}
    for n, section in enumerate(doc["sections"]):
        section["quiet_host"] = {"cpu_s": 0.01 * n, "contended_cores": 0.001 * n, "gpu_telemetry": []}
    assert store.Result.from_json(copy.deepcopy(doc)).to_json() == doc  # version 5 as it is
    bare = result_doc(spec)  # no lease, no settings: version 4 wrote no isolation either
    assert store.Result.from_json(as_version_4(bare)).to_json() == bare
    old = as_version_4(doc)
    assert "host_load" in old["sections"][0] and "guard" in old["isolation"]
    read = store.Result.from_json(old).to_json()
    assert read == doc  # the same document, under the new names and version


def test_a_version_3_result_of_main_at_3546885_reads_its_lease_and_quiet_host_figures():
    path = Path(__file__).parents[2] / "data/results-3546885/results/runs/tp1-b0-ctx64.json"
    raw = json.loads(path.read_text())
    result = store.Result.from_json(copy.deepcopy(raw))
    assert result.quiet_host == raw["isolation"]["guard"] and result.quiet_host["max_foreign_cores"] == 0.25
    assert result.lease == {k: v for k, v in raw["isolation"].items() if k != "guard"} and result.lease["devices"]
    for section, before in zip(result.sections, raw["sections"]):
        assert section["quiet_host"] == before["host_load"] and "host_load" not in section


def test_a_version_5_result_reads_its_servers_slot_context_as_max_context(spec):
    doc = result_doc(spec)
    doc["server"]["max_context"] = 4096
    old = {**doc, "schema_version": 5, "server": {("slot_context" if k == "max_context" else k): v
                                                   for k, v in doc["server"].items()}}
    assert "max_context" not in old["server"]
    assert store.Result.from_json(old).to_json() == doc  # the same document, under the new name
    raw = json.loads((Path(__file__).parents[2] / "data/results-3546885/results/runs/tp1-b0-ctx64.json").read_text())
    assert store.Result.from_json(raw).server["max_context"] == raw["server"]["slot_context"] == 256


def test_an_older_result_is_migrated_and_a_newer_one_refused():
    spec = study.expand_grid(study.validate_study({}))[0]
    doc = result_doc(spec)
    old = {k: v for k, v in doc.items() if k not in ("provenance", "hardware")} | {"schema_version": 1}
    migrated = Result.from_json(old)
    assert migrated.provenance == {"migrated_from": 1} and migrated.to_json()["schema_version"] == 6
    with pytest.raises(store.InvalidResult, match="schema version 99"):
        Result.from_json({**doc, "schema_version": 99})
    assert Result.from_json(doc).summary_rows()[0]["output_tok_s"] == doc["sections"][0]["output_tok_s"]
