"""Secrets never written, through the real CLI and the fault server: a key variable that is not set
fails before any launch, the key is kept out of failure records, and an earlier attempt's log
lines never name this failure. The redaction itself is tests/unit/servers/test_templates.py."""

from __future__ import annotations

import pytest

from conftest import NAME, fault_study, launch_cli
from specsweep.records import store


def test_missing_api_key_variable_fails_before_any_launch(tmp_path, model, monkeypatch):
    monkeypatch.delenv("SPECSWEEP_TEST_NO_SUCH_KEY", raising=False)
    study = fault_study(model, api_key_env="SPECSWEEP_TEST_NO_SUCH_KEY")
    study["server"]["command"] += ["--api-key", "{api_key}"]
    rc, err = launch_cli(tmp_path, study)
    assert rc == 2 and "SPECSWEEP_TEST_NO_SUCH_KEY" in err and "not set" in err
    assert "server pid" not in err


def test_a_failure_record_never_holds_the_key(tmp_path, model, monkeypatch):
    key = "sk-planted-0123456789"
    monkeypatch.setenv("SPECSWEEP_TEST_KEY", key)
    study = fault_study(model, "die-at-request:2", api_key_env="SPECSWEEP_TEST_KEY")
    study["server"]["command"] += ["--api-key", "{api_key}", "--echo-args"]  # the server prints its argv
    rc, err = launch_cli(tmp_path, study)
    assert rc == 12, err
    assert "--api-key <redacted>" in err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path


# --- the cause of this attempt only -------------------------------------------------------------

@pytest.mark.parametrize("earlier", ["cuda-crash", "bind-error"])
def test_an_earlier_attempts_log_lines_never_name_this_failure(tmp_path, model, earlier):
    if earlier == "cuda-crash":
        rc, _ = launch_cli(tmp_path, fault_study(model, "crash-at-request:2"))
        assert rc == 12
        assert store.latest_failure(tmp_path / "failures", NAME).to_json()["signature"] == "cuda-illegal-instruction"
    else:
        (tmp_path / "server.log").write_text("error: couldn't bind HTTP server socket, hostname: 127.0.0.1\n")
    rc, err = launch_cli(tmp_path, fault_study(model, "exit-at-startup"), "--attempt", "2")
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert rc == 10, err
    assert record["class"] == "server-start" and record["transient"] is False
    assert record["signature"] == "bad-arguments"
    assert "illegal instruction" not in record["server_log_tail"] and "couldn't bind" not in record["server_log_tail"]
    assert "the argument has been removed" in record["server_log_tail"]
