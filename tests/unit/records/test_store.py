"""Result documents: what is valid, what is refused, and atomic writes that never leave a part."""

import copy
import json
from pathlib import Path

import pytest

from factories import as_version_4, result_doc
from specsweep import study
from specsweep.errors import ResultWriteError
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


def test_atomic_write_replaces_whole_file(tmp_path, spec):
    path = tmp_path / "runs" / "r.json"
    store.write_json_atomic(path, result_doc(spec))
    assert store.read_result(path).to_json()["name"] == spec.name
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left


def test_failed_write_leaves_no_file(tmp_path, spec):
    blocker = tmp_path / "runs"
    blocker.write_text("a file where a directory should be")
    with pytest.raises(ResultWriteError, match="cannot write"):
        store.write_json_atomic(blocker / "r.json", result_doc(spec))
    assert blocker.read_text() == "a file where a directory should be"


def test_a_failed_rename_keeps_the_old_result_and_leaves_no_temp_file(tmp_path, spec, monkeypatch):
    path = tmp_path / "r.json"
    store.write_json_atomic(path, result_doc(spec, tok_s=100))
    before = path.read_bytes()

    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, "replace", disk_full)
    with pytest.raises(ResultWriteError, match="No space left"):
        store.write_json_atomic(path, result_doc(spec, tok_s=50))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_archive_links_each_distinct_result_once(tmp_path, spec):
    runs, history = tmp_path / "runs", tmp_path / "history"
    store.write_json_atomic(runs / "a.json", result_doc(spec, tok_s=100))
    assert store.copy_to_history(runs, history) == 1
    assert store.copy_to_history(runs, history) == 0  # same bytes: nothing new
    store.write_json_atomic(runs / "a.json", result_doc(spec, tok_s=50))
    assert store.copy_to_history(runs, history) == 1
    kept = sorted((history / "a").iterdir())
    assert len(kept) == 2 and {json.loads(p.read_text())["name"] for p in kept} == {spec.name}


def test_failure_records_accumulate_and_latest_wins(tmp_path, spec):
    from specsweep.errors import ServerDied

    for attempt, reason in [(1, "first"), (2, "second")]:
        err = ServerDied(reason, section="medium", evidence=["Killed"], signature="killed")
        rec = store.failure_record(name=spec.name, spec={}, error=err, started_at="t", attempt=attempt,
                                     server_log="x.log", log_tail="tail")
        rec.failed_at = f"2026-01-0{attempt}T00:00:00.000+00:00"
        store.write_failure(tmp_path, rec)
    assert store.next_attempt(tmp_path, spec.name) == 3
    latest = store.latest_failure(tmp_path, spec.name)
    assert latest.reason == "second" and latest.failure_class == "server-died" and latest.section == "medium"
    written = json.loads(next((tmp_path / spec.name).iterdir()).read_text())
    assert written["schema"] == "specsweep.failure" and written["class"] == "server-died"
    assert store.Failure.from_json(written).to_json() == written  # one reader and one writer, round trip


# --- the quiet-host guard's one name: older documents read under it ----------------------------

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


def test_a_failure_record_of_the_old_class_name_is_read_under_the_new_one(tmp_path, spec):
    from specsweep import errors
    from specsweep.records import failure

    old = {"schema": "specsweep.failure", "schema_version": 1, "name": spec.name, "class": "noisy-host",
           "exit_code": 18, "transient": True, "reason": "other processes took 0.9 cores"}
    record = store.Failure.from_json(old)
    assert record.failure_class == errors.HostNotQuiet.failure_class == "host-not-quiet"
    assert record.to_json()["schema_version"] == 2 and record.to_json()["class"] == "host-not-quiet"
    # Every rename leads to a class errors.py raises today, under the exit code it had.
    classes = {c.failure_class: c.exit_code for c in errors.classes()}
    assert set(failure.RENAMED_CLASSES.values()) <= set(classes) and classes["host-not-quiet"] == 18
