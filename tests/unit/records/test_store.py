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


def test_launches_read_the_older_runs_layout_where_launches_has_none_of_that_index(tmp_path):
    """paths.launch_results: launches/<name>/launch<k>.json first, then runs/<name>/launch<k>.json,
    then the oldest runs/<name>.json as launch 1; legacy_result names the older file a launch path
    will hold, and nothing where there is none."""
    from specsweep.records import paths

    launches, runs = tmp_path / "results/launches", tmp_path / "results/runs"
    for path in (launches / "a/launch2.json", runs / "a/launch2.json", runs / "a/launch3.json", runs / "a.json",
                 runs / "b/launch1.json", runs / "b.json", runs / "c.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    assert paths.launch_results(launches, "a") == {1: runs / "a.json", 2: launches / "a/launch2.json",
                                                   3: runs / "a/launch3.json"}
    assert paths.launch_results(launches, "b") == {1: runs / "b/launch1.json"}
    assert paths.legacy_result(launches / "b/launch1.json") == runs / "b/launch1.json"
    assert paths.legacy_result(launches / "c/launch1.json") == runs / "c.json"
    assert paths.legacy_result(launches / "c/launch2.json") is None  # the flat file is launch 1 alone
    assert paths.legacy_result(launches / "d/launch1.json") is None
    assert paths.launch_of(runs / "c.json") == 1 and paths.launch_of(runs / "a/launch3.json") == 3


def test_a_carried_result_keeps_its_bytes_and_the_emptied_older_folders_go(tmp_path, spec):
    from specsweep.records import paths

    launches, runs = tmp_path / "results/launches", tmp_path / "results/runs"
    store.write_json_atomic(runs / "a/launch1.json", result_doc(spec, tok_s=100))
    store.write_json_atomic(runs / "b.json", result_doc(spec, tok_s=50))
    kept = {name: path.read_bytes() for name, path in (("a", runs / "a/launch1.json"), ("b", runs / "b.json"))}

    assert store.adopt_legacy(launches / "a/launch1.json") == runs / "a/launch1.json"
    assert (launches / "a/launch1.json").read_bytes() == kept["a"]
    assert not (runs / "a").exists() and runs.is_dir()  # runs/a/ emptied; b.json keeps runs/
    store.adopt_legacy(launches / "b/launch1.json")
    assert (launches / "b/launch1.json").read_bytes() == kept["b"] and not runs.exists()
    with pytest.raises(ResultWriteError, match="holds no result of it to carry over"):
        store.adopt_legacy(launches / "b/launch2.json")

    store.write_json_atomic(launches / "c/launch1.json", result_doc(spec))
    (launches / "c/launch1.json").unlink()
    store.prune_legacy(launches / "c/launch1.json")  # the current layout is never pruned
    assert (launches / "c").is_dir() and paths.launches_of(launches / "c/launch1.json") == launches
