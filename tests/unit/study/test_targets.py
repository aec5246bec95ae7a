"""Provisioning targets (study/targets.py): found by name in the backends and prompt sets that
own them, each made from its own pins and needs, a wrong request refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsweep import cli, study
from specsweep.errors import ConfigError
from specsweep.servers import backends
from specsweep.servers.backends import Provision
from specsweep.servers.backends.base import Backend
from specsweep.study import targets


def test_each_backend_offers_its_embedded_targets_and_keeps_its_tools_out_of_plans():
    for backend in backends.BACKENDS.values():
        assert set(backend.embedded.values()) <= set(targets.names(in_plan=True))
        assert not set(backend.tools) & set(targets.names(in_plan=True))  # made by hand, never planned
    assert {"prompts-sharegpt", "prompts-humaneval"} <= set(targets.names(in_plan=True))


def test_two_owners_of_one_target_name_are_refused(monkeypatch):
    class Twin(Backend):
        name = "twin"
        embedded = {"model": "model"}  # llama-server's model target

    monkeypatch.setitem(backends.BACKENDS, "twin", Twin())
    targets.all_targets.cache_clear()
    try:
        with pytest.raises(ConfigError, match="provisioning target 'model' of .* is already another's"):
            targets.all_targets()
    finally:
        monkeypatch.delitem(backends.BACKENDS, "twin")
        targets.all_targets.cache_clear()


def test_a_target_is_made_from_its_own_pins_and_a_study_provisions_needs_first():
    config = study.load_study(Path(__file__).resolve().parents[3] / "config" / "vllm-cpu.yaml")
    assert targets.in_order(config) == ["prompts-sharegpt", "vllm", "tiny-model"]
    assert targets.pins(config, "vllm") == {"torch_cpu_version": config["provision"]["torch_cpu_version"],
                                            "vllm_cpu_version": config["provision"]["vllm_cpu_version"]}
    assert targets.pins(config, "tiny-model") == {}  # made from vLLM's manifest, not from a pin
    assert set(targets.pins(config, "prompts-sharegpt")) == {"sharegpt_version", "sharegpt_sha256"}


def test_a_wrong_request_is_refused_before_anything_is_made(tmp_path, capsys):
    request = Provision(pins={}, log_path=tmp_path / "log", options={"cuda_arch": "90-real"})
    with pytest.raises(ConfigError, match=r"provision vllm takes no --cuda-arch"):
        targets.provision("vllm", request)
    with pytest.raises(ConfigError, match=r"tiny-model is made from vllm: pass --needs results/provision/vllm.json"):
        targets.provision("tiny-model", Provision(pins={}, log_path=tmp_path / "log"))
    with pytest.raises(ConfigError, match=r"nothing provisions 'server'; the targets: llama-server, "):
        targets.find("server")
    assert cli.main(["provision", "tiny-model", "--out", str(tmp_path / "m.json")]) == 2
    assert "tiny-model is made from 1 other target(s) (vllm); --needs gave 0" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def test_the_commands_pins_are_checked_as_a_studys_before_anything_is_made(tmp_path, capsys):
    code = cli.main(["provision", "llama-server", "--pins", '{"llama_cpp_python_version": 3}',
                     "--out", str(tmp_path / "m.json")])
    assert code == 2
    assert "provision.llama_cpp_python_version: 3 is not of type 'string'" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()
