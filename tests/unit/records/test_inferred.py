"""Which failure implies which (records/inferred.py, infer_failures): an out-of-memory record at a
shorter context, every other axis equal, and nothing else; and the launch that refuses on it
(measure/before_start.refuse_inferred)."""

from __future__ import annotations

import pytest

from specsweep.errors import InferredToFail, ServerStartError
from specsweep.measure import before_start
from specsweep.records import inferred, store

VALUES = {"tp": 1, "budget": 4, "context": 512}
STUDY = {"grid": {"context": [1024, 128, 512, 256]}, "infer_failures": {"out_of_memory": True, "measure_anyway": []}}


def _fail(failures, name: str, context: int, signature: str | None, at: str = "2026-12-07T10:00:00.000Z") -> str:
    error = ServerStartError("server exited during startup", signature=signature)
    record = store.failure_record(name=name, spec={"context": context}, error=error, started_at=at, attempt=1,
                                  server_log=None, log_tail="")
    record.failed_at = at
    return str(store.write_failure(failures, record))


def test_the_sources_are_the_shorter_contexts_all_else_equal_shortest_first():
    assert inferred.shorter(VALUES, [1024, 128, 512, 256]) == ["tp1-b4-ctx128", "tp1-b4-ctx256"]
    assert inferred.shorter({**VALUES, "kv": "q8_0"}, [128, 512]) == ["tp1-b4-ctx128-kvq8_0"]
    assert inferred.shorter({**VALUES, "context": 128}, [128, 512]) == []


def test_only_a_study_that_opts_in_infers_and_measure_anyway_is_measured():
    assert inferred.sources(STUDY, VALUES) == ["tp1-b4-ctx128", "tp1-b4-ctx256"]
    assert inferred.sources({**STUDY, "infer_failures": {"out_of_memory": False}}, VALUES) == []
    assert inferred.sources({**STUDY, "infer_failures": {}}, VALUES) == []
    # A study read without the schema's defaults (by hand): no list of names to measure anyway.
    assert inferred.sources({**STUDY, "infer_failures": {"out_of_memory": True}}, VALUES) == [
        "tp1-b4-ctx128", "tp1-b4-ctx256"]
    anyway = {**STUDY, "infer_failures": {"out_of_memory": True, "measure_anyway": ["tp1-b4-ctx512"]}}
    assert inferred.sources(anyway, VALUES) == [] and inferred.sources(anyway, {**VALUES, "context": 1024})


@pytest.mark.parametrize("signature", ["gpu-oom", "host-oom"])
def test_an_out_of_memory_record_is_inferred_from(tmp_path, signature):
    record = _fail(tmp_path / "failures", "tp1-b4-ctx256", 256, signature)
    found = inferred.inferred(["tp1-b4-ctx128", "tp1-b4-ctx256"], tmp_path / "failures", tmp_path / "launches")
    assert found == inferred.Inference(source="tp1-b4-ctx256", context=256, record=record)
    assert found.reason == f"out of memory at context 256 (tp1-b4-ctx256, failure record {record})"


def test_another_failure_a_later_one_or_a_result_since_is_not(tmp_path):
    failures, launches = tmp_path / "failures", tmp_path / "launches"
    _fail(failures, "tp1-b4-ctx128", 128, "cuda-illegal-instruction")
    _fail(failures, "tp1-b4-ctx256", 256, "gpu-oom", at="2026-12-07T10:00:00.000Z")
    _fail(failures, "tp1-b4-ctx256", 256, None, at="2026-12-07T11:00:00.000Z")  # the newest says otherwise
    assert inferred.inferred(["tp1-b4-ctx128", "tp1-b4-ctx256"], failures, launches) is None
    _fail(failures, "tp1-b4-ctx128", 128, "host-oom", at="2026-12-07T12:00:00.000Z")
    assert inferred.inferred(["tp1-b4-ctx128"], failures, launches).source == "tp1-b4-ctx128"
    (launches / "tp1-b4-ctx128").mkdir(parents=True)
    (launches / "tp1-b4-ctx128" / "launch1.json").write_text("{}")  # measured since: it did not run out
    assert inferred.inferred(["tp1-b4-ctx128"], failures, launches) is None
    assert inferred.inferred([], failures, launches) is None


def test_the_first_source_that_ran_out_is_named(tmp_path):
    failures = tmp_path / "failures"
    _fail(failures, "tp1-b4-ctx128", 128, "gpu-oom")
    _fail(failures, "tp1-b4-ctx256", 256, "gpu-oom")
    found = inferred.inferred(["tp1-b4-ctx128", "tp1-b4-ctx256"], failures, tmp_path / "launches")
    assert (found.source, found.context) == ("tp1-b4-ctx128", 128)


def test_a_launch_refuses_on_it_with_its_class_and_the_record_as_evidence(tmp_path):
    failures, launches = tmp_path / "failures", tmp_path / "launches"
    before_start.refuse_inferred(["tp1-b4-ctx128"], failures, launches)  # nothing recorded: it goes on
    record = _fail(failures, "tp1-b4-ctx128", 128, "gpu-oom")
    with pytest.raises(InferredToFail) as caught:
        before_start.refuse_inferred(["tp1-b4-ctx128"], failures, launches)
    assert caught.value.evidence == [record] and caught.value.exit_code == 29
    assert caught.value.reason.startswith("inferred: out of memory at context 128 (tp1-b4-ctx128")
    assert not caught.value.transient
    (launches / "tp1-b4-ctx128").mkdir(parents=True)
    (launches / "tp1-b4-ctx128" / "launch1.json").write_text("{}")  # measured since, in this study's folder
    before_start.refuse_inferred(["tp1-b4-ctx128"], failures, launches)
