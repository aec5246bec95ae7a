"""The manifests a job is handed (study/manifests.py): each put where its content says, each
checked for the path it must hold, and the spec resolved from them."""

import json
import platform

import pytest

from specsweep import study
from specsweep.errors import ConfigError
from specsweep.study import manifests


def write(tmp_path, name: str, doc: dict):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_manifests_in_any_order_are_each_put_where_their_content_says(tmp_path):
    server = write(tmp_path, "a.json", {"binary": "/cache/llama-server", "machine": platform.machine()})
    model = write(tmp_path, "b.json", {"model": "/cache/model.gguf"})
    prompts = write(tmp_path, "c.json", {"prompts": "/cache/documents.jsonl", "set": "humaneval"})
    handed = manifests.Handed.sorted_out([prompts, model, server])
    assert handed == manifests.Handed(binary=server, model=model, prompts=prompts)
    spec = study.find_spec(study.validate_study({"grid": {"budget": [0], "tp": [1], "context": [64]},
                                                 "workload": {"prompt_set": "humaneval"}}), "tp1-b0-ctx64")
    resolved, set_manifest = manifests.resolve(spec, handed)
    assert (resolved.binary, resolved.model_path) == ("/cache/llama-server", "/cache/model.gguf")
    assert set_manifest["set"] == "humaneval"
    other = write(tmp_path, "d.json", {"prompts": "/cache/documents.jsonl", "set": "sharegpt"})
    with pytest.raises(ConfigError, match=r"of prompt set 'sharegpt', the study uses 'humaneval'; pass "
                                          r"results/provision/prompts-humaneval.json"):
        manifests.resolve(spec, manifests.Handed(binary=server, model=model, prompts=other))


@pytest.mark.parametrize(("backend", "made_by"), [("llama-server", "llama-server"), ("vllm", "vllm")])
def test_a_missing_manifest_is_refused_with_the_target_its_backend_makes_it_by(backend, made_by):
    spec = study.find_spec(study.validate_study({"backend": backend, "server": {"binary": "embedded"},
                                                 "model": {"path": "embedded"}, "workload": {"prompts_file": None},
                                                 "grid": {"budget": [0], "tp": [1], "context": [64]}}),
                           "tp1-b0-ctx64")
    with pytest.raises(ConfigError, match=rf"pass --binary-manifest \(made by: snakemake --cores 1 "
                                          rf"results/provision/{made_by}.json\)"):
        manifests.resolve(spec, manifests.Handed())


def test_a_hollow_or_broken_manifest_is_refused_with_the_command_that_remakes_it(tmp_path):
    hollow = write(tmp_path, "model.json", {"model": 3})
    with pytest.raises(ConfigError, match=r"must be a JSON object with a 'model' path; remake it with"):
        manifests.holding(hollow, "model", "model")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read manifest"):
        manifests.holding(tmp_path / "broken.json", "model", "model")
