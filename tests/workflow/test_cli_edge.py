"""The CLI's edge, through the real CLI: a malformed manifest is a clear error, never a traceback."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_a_manifest_that_is_not_an_object_is_a_clear_error(tmp_path):
    (tmp_path / "server.json").write_text("[1, 2]")
    (tmp_path / "model.json").write_text('{"model": "/m.gguf"}')
    proc = subprocess.run([sys.executable, "-m", "specsweep", "launch", "--config", "config/config.yaml",
                           "--name", "tp1-b0-ctx128", "--binary-manifest", str(tmp_path / "server.json"),
                           "--model-manifest", str(tmp_path / "model.json")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    assert "must be a JSON object" in proc.stderr and "Traceback" not in proc.stderr

