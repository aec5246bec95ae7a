"""Packing a study (analysis/archive.py): a folder whose results do not match its study is not
archived. Packing, verifying and rebuilding a real study: tests/e2e/test_study_archive.py."""

from __future__ import annotations

from factories import result_doc
from specsweep import study
from specsweep.analysis import archive
from specsweep.records import store


def test_an_inconsistent_folder_is_not_archived(tmp_path):
    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128]}})
    spec = study.expand_grid(cfg)[0]
    store.write_json_atomic(tmp_path / "results" / "runs" / f"{spec.name}.json", result_doc(spec))
    problems = archive.check_consistent(cfg, tmp_path)
    assert problems == ["tp1-b4-ctx128: launch 1 neither measured nor excluded (run the main command, or exclude it)"]
    other = study.validate_study({**cfg, "workload": {"seed": 7}})
    assert any("another configuration" in p for p in archive.check_consistent(other, tmp_path))
