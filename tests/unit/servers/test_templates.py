"""Launch templates (servers/templates.py): secrets redacted, a literal secret refused, a bind
beyond loopback refused unless meant."""

from __future__ import annotations

import pytest

from specsweep.errors import ConfigError
from specsweep.servers import templates


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
