"""A damaged archive through the real CLI: verify and compare name it, with their exit codes and
no traceback. The archive's round trip on a real study: tests/e2e/test_study_archive.py."""

from __future__ import annotations

import subprocess
import sys
import tarfile

from specsweep.analysis import archive


def test_a_truncated_archive_is_named_by_verify_and_compare_without_a_traceback(tmp_path):
    folder = tmp_path / "study"
    (folder / "results").mkdir(parents=True)
    (folder / "results" / "summary.csv").write_text("name,status\n" + "x,ok\n" * 20000)
    (folder / archive.CHECKSUMS).write_text("")
    whole = tmp_path / "study.tar.gz"
    with tarfile.open(whole, "w:gz") as tar:
        tar.add(folder, arcname="study")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    for argv, code in ((["verify", str(cut)], 25), (["compare", str(cut), str(cut)], 2)):
        proc = subprocess.run([sys.executable, "-m", "specsweep", *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stderr
        assert f"{cut} cannot be unpacked" in proc.stderr and "damaged or truncated" in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    missing = subprocess.run([sys.executable, "-m", "specsweep", "compare", str(tmp_path / "old"), str(folder)],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and f"{tmp_path / 'old'} does not exist" in missing.stderr
