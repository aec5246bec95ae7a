"""Packing a study (analysis/archive.py): a folder whose results do not match its study is not
archived; verify checks every file against SHA256SUMS. Packing, verifying and rebuilding a real
study: tests/e2e/test_study_archive.py."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from factories import result_doc
from specsweep import study
from specsweep.analysis import archive
from specsweep.errors import VerifyFailed
from specsweep.records import migrations, store


def test_an_inconsistent_folder_is_not_archived(tmp_path):
    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128]}})
    spec = study.expand_grid(cfg)[0]
    store.write_json_atomic(tmp_path / "results" / "launches" / spec.name / "launch1.json", result_doc(spec))
    problems = archive.check_consistent(cfg, tmp_path)
    assert problems == ["tp1-b4-ctx128: launch 1 neither measured nor excluded (run the main command, or exclude it)"]
    other = study.validate_study({**cfg, "workload": {"seed": 7}})
    assert any("another configuration" in p for p in archive.check_consistent(other, tmp_path))


def test_verify_reads_sha256sums_and_an_archive_made_before_under_its_old_name(tmp_path):
    summary = b"name,status\nx,ok\n"
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "summary.csv").write_bytes(summary)
    (tmp_path / archive.CHECKSUMS).write_text(f"{hashlib.sha256(summary).hexdigest()}  results/summary.csv\n")
    assert archive.verify(tmp_path) == archive.Verified(1, ())
    # the format `sha256sum -c` reads, as REPRODUCE.md and the docs say
    assert subprocess.run(["sha256sum", "-c", archive.CHECKSUMS], cwd=tmp_path, capture_output=True).returncode == 0
    (tmp_path / archive.CHECKSUMS).rename(tmp_path / migrations.CHECKSUMS_BEFORE)
    assert archive.verify(tmp_path) == archive.Verified(1, ())
    (tmp_path / "results" / "summary.csv").write_bytes(b"name,status\nx,failed\n")
    with pytest.raises(VerifyFailed, match="results/summary.csv: content differs from its checksum in MANIFEST.sha256"):
        archive.verify(tmp_path)
    (tmp_path / migrations.CHECKSUMS_BEFORE).unlink()
    with pytest.raises(VerifyFailed, match="SHA256SUMS is missing"):
        archive.verify(tmp_path)
