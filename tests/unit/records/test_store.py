"""The store (records/store.py): atomic writes that never leave a part, the history's links, and
failure records that accumulate."""

import json

import pytest

from factories import result_doc
from specsweep import study
from specsweep.errors import ResultWriteError
from specsweep.records import store


@pytest.fixture
def spec():
    return study.expand_grid(study.validate_study({}))[0]


def test_atomic_write_replaces_whole_file(tmp_path, spec):
    path = tmp_path / "launches" / "r.json"
    store.write_json_atomic(path, result_doc(spec))
    assert store.read_result(path).to_json()["name"] == spec.name
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left


def test_failed_write_leaves_no_file(tmp_path, spec):
    blocker = tmp_path / "launches"
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
    runs, history = tmp_path / "launches", tmp_path / "history"
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
