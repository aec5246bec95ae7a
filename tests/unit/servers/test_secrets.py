"""Secrets never written: redaction, a literal secret refused, binds beyond loopback, the key
kept out of failure records; and an earlier attempt's log lines never naming this failure."""

from __future__ import annotations

import pytest

from conftest import NAME, fault_study, run_cli
from specsweep.errors import ConfigError
from specsweep.records import store
from specsweep.servers import templates

# --- secrets and exposure ---------------------------------------------------------------------

def test_redact_hides_secret_flags_variables_and_known_values():
    argv = ["srv", "--api-key", "sk-1", "--hf-token=abc", "HF_TOKEN=xyz", "--tokenizer", "tok",
            "--num-speculative-tokens", "4", "--token-delay", "0.1", "--note", "has sk-1 inside"]
    assert templates.redact(argv, ("sk-1",)) == [
        "srv", "--api-key", "<redacted>", "--hf-token=<redacted>", "HF_TOKEN=<redacted>", "--tokenizer", "tok",
        "--num-speculative-tokens", "4", "--token-delay", "0.1", "--note", "has <redacted> inside"]


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token", "--db-password"])
def test_a_literal_secret_in_the_study_is_refused(flag):
    with pytest.raises(ConfigError, match="api_key_env"):
        templates.check_no_literal_secret("server.command", ["srv", flag, "s3cret"])
    templates.check_no_literal_secret("server.command", ["srv", flag, "{api_key}"])  # the way to do it


@pytest.mark.parametrize("host, refused", [("0.0.0.0", True), ("::", True), ("10.1.2.3", True),
                                           ("gpu-node-7", True), ("127.0.0.1", False), ("127.0.0.9", False),
                                           ("localhost", False), ("::1", False), ("{host}", False)])
def test_binding_beyond_loopback_must_be_meant(host, refused):
    args = ["srv", "--host", host, "--port", "{port}"]
    if refused:
        with pytest.raises(ConfigError, match="allow_remote_bind"):
            templates.check_bind("server.command", args, allowed=False)
        templates.check_bind("server.command", args, allowed=True)
    else:
        templates.check_bind("server.command", args, allowed=False)


def test_missing_api_key_variable_fails_before_any_launch(tmp_path, model, monkeypatch):
    monkeypatch.delenv("SPECSWEEP_TEST_NO_SUCH_KEY", raising=False)
    study = fault_study(model, api_key_env="SPECSWEEP_TEST_NO_SUCH_KEY")
    study["server"]["command"] += ["--api-key", "{api_key}"]
    rc, err = run_cli(tmp_path, study)
    assert rc == 2 and "SPECSWEEP_TEST_NO_SUCH_KEY" in err and "not set" in err
    assert "server pid" not in err


def test_a_failure_record_never_holds_the_key(tmp_path, model, monkeypatch):
    key = "sk-planted-0123456789"
    monkeypatch.setenv("SPECSWEEP_TEST_KEY", key)
    study = fault_study(model, "die-at-request:2", api_key_env="SPECSWEEP_TEST_KEY")
    study["server"]["command"] += ["--api-key", "{api_key}", "--echo-args"]  # the server prints its argv
    rc, err = run_cli(tmp_path, study)
    assert rc == 12, err
    assert "--api-key <redacted>" in err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path


# --- the cause of this attempt only -------------------------------------------------------------

@pytest.mark.parametrize("earlier", ["cuda-crash", "bind-error"])
def test_an_earlier_attempts_log_lines_never_name_this_failure(tmp_path, model, earlier):
    if earlier == "cuda-crash":
        rc, _ = run_cli(tmp_path, fault_study(model, "crash-at-request:2"))
        assert rc == 12
        assert store.latest_failure(tmp_path / "failures", NAME).to_json()["signature"] == "cuda-illegal-instruction"
    else:
        (tmp_path / "server.log").write_text("error: couldn't bind HTTP server socket, hostname: 127.0.0.1\n")
    rc, err = run_cli(tmp_path, fault_study(model, "exit-at-startup"), "--attempt", "2")
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert rc == 10, err
    assert record["class"] == "server-start" and record["transient"] is False
    assert record["signature"] == "bad-arguments"
    assert "illegal instruction" not in record["server_log_tail"] and "couldn't bind" not in record["server_log_tail"]
    assert "the argument has been removed" in record["server_log_tail"]
