"""SGLang through the real CLI against the SGLang stand-in (tests/doubles/sglang_standin.py), which
answers as SGLang's own source says: its request schema, its stream, tokens, acceptance, faults,
GPUs and environment, the checks before the first section, and the plan of the seed's study."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SGLANG_STANDIN, SHARED_GUARD, load
from specsweep import study
from specsweep.errors import InvalidResponse
from specsweep.measure import client
from specsweep.servers import backends, probes

STANDIN = SGLANG_STANDIN
SGLANG_WHEEL = "sglang==0.5.23"


def spec_of(doc: dict, name: str) -> study.LaunchSpec:
    return study.find_spec(study.validate_study(doc), name)


@pytest.fixture(scope="session")
def sglang_api_types(tmp_path_factory) -> Path:
    """SGLang's published request/response schema, from its wheel (downloaded, never committed)."""
    folder = tmp_path_factory.mktemp("sglang-wheel")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", SGLANG_WHEEL, "-d", str(folder)],
                   check=True, capture_output=True, timeout=600)
    wheel = next(folder.glob("sglang-*.whl"))
    target = folder / "api_types.py"
    with zipfile.ZipFile(wheel) as zf:
        target.write_bytes(zf.read("sglang/api/v1/api_types.py"))
    return target


@pytest.fixture(scope="session")
def api(sglang_api_types):
    import importlib.util

    spec = importlib.util.spec_from_file_location("sglang_api_types", sglang_api_types)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sglang_adapter_sends_what_sglangs_schema_accepts(api):
    body = backends.get("sglang").request_body([1, 2, 3], 8)
    request = api.GenerateRequest.from_json_value(body)
    assert request.input_ids == [1, 2, 3] and request.stream is True
    params = api.SamplingParams.from_json_value(body["sampling_params"])
    assert (params.max_new_tokens, params.temperature, params.ignore_eos) == (8, 0.0, True)
    with pytest.raises(api.JsonContractError):  # the schema is strict: a misspelt key is refused
        api.SamplingParams.from_json_value({"max_new_token": 8})


def _standin(port: int, *extra: str, api_types: Path | None = None) -> subprocess.Popen:
    cmd = [sys.executable, STANDIN, "--port", str(port), *extra]
    if api_types:
        cmd += ["--api-types", str(api_types)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not probes.port_answers(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def _raw_stream(url: str, body: dict) -> list[dict]:
    import requests

    with requests.post(url, json=body, stream=True, timeout=20) as resp:
        assert resp.status_code == 200
        lines = [ln.decode() for ln in resp.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(ln[len("data: "):]) for ln in lines[:-1]]


def test_the_sglang_standin_answers_as_sglangs_schema_says(api, sglang_api_types):
    port = probes.free_port()
    proc = _standin(port, "--speculative-num-draft-tokens", "4", "--context-length", "64",
                    api_types=sglang_api_types)
    base = f"http://127.0.0.1:{port}"
    try:
        time.sleep(0.6)  # past its "starting" window
        chunks = _raw_stream(f"{base}/generate", backends.get("sglang").request_body(list(range(10)), 12))
        decoded = [api.GenerateResponse.from_json_value(c) for c in chunks]
        assert [d.meta_info.completion_tokens for d in decoded][-1] == 12
        assert all(d.meta_info.finish_reason is None for d in decoded[:-1])
        assert "spec_verify_ct" in chunks[-1]["meta_info"] and "spec_verify_ct" not in chunks[0]["meta_info"]
        overflow = _raw_stream(f"{base}/generate", backends.get("sglang").request_body(list(range(60)), 12))
        error = api.GenerateStreamError.from_json_value(overflow[0])
        assert "exceeds the model's maximum context length" in error.error.message
        import requests

        bad = requests.post(f"{base}/generate", json={"input_ids": [1], "sampling_params": {"max_new_token": 1}})
        assert bad.status_code == 400  # the contract check, as api_contract.generate_contract_error
        info = api.GetServerInfoResponse.from_json_value(requests.get(f"{base}/server_info").json())
        assert info.version == "0.5.23" and info.max_context_length == 64
    finally:
        proc.kill()
        proc.wait()


def test_an_overflow_inside_sglangs_200_stream_is_an_invalid_response():
    port = probes.free_port()
    proc = _standin(port, "--context-length", "32")
    try:
        time.sleep(0.6)
        with pytest.raises(InvalidResponse, match="longer than the model's context length"):
            client.stream_completion(backends.get("sglang"), f"http://127.0.0.1:{port}", prompt=list(range(40)),
                                     n_predict=4, stall_timeout_s=5, section="s", index=0, t0=time.monotonic())
    finally:
        proc.kill()
        proc.wait()


SECTIONS = [{"name": "short", "output_tokens": 16, "requests": 2}, {"name": "long", "output_tokens": 48, "requests": 1}]


def sglang_study(tmp_path: Path, *extra: str, tp=(1, 2), budgets=(0, 4), context: int = 64,
                 sections=SECTIONS) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"stand-in": true}')
    doc = {
        "backend": "sglang",
        "model": {"name": "stand-in", "path": str(model), "context_limit": 4096},
        "server": {"binary": sys.executable,
                   "command": ["{binary}", STANDIN, "--model-path", "{model}", "--tp", "{tp}", "--context-length",
                               "{ctx_size}", "--host", "{host}", "--port", "{port}", *extra],
                   "speculative_args": ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens",
                                        "{budget}"],
                   "env": {"SGLANG_DDTREE_MAX_TOPK": "8"}, "gpu": True,
                   "startup_timeout_s": 30, "stall_timeout_s": 5},
        "grid": {"budget": list(budgets), "tp": list(tp), "context": [context]},
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 2, "sections": list(sections)},
        # These tests are about the wire format; the quiet-host guard has tests of its own (test_quiet_host.py).
        "quiet_host": SHARED_GUARD,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def config_name(tmp_path: Path, doc: Path, name: str, gpus: str = "0,1,2") -> tuple[int, str]:
    env = {**os.environ, "SPECSWEEP_GPUS": gpus}
    out = subprocess.run([sys.executable, "-m", "specsweep", "launch", "--config", str(doc), "--name", name,
                          "--out", str(tmp_path / "launches" / f"{name}.json"),
                          "--server-log", str(tmp_path / f"{name}.log"),
                          "--failures-dir", str(tmp_path / "failures")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    return out.returncode, out.stderr


@pytest.mark.parametrize("spelling", ["new", "between", "old"])
def test_the_cli_measures_sglang_tokens_and_acceptance_from_its_own_fields(tmp_path, spelling):
    doc = sglang_study(tmp_path, "--spelling", spelling)
    code, err = config_name(tmp_path, doc, "tp2-b4-ctx64")
    assert code == 0, err
    doc = load(tmp_path / "launches" / "tp2-b4-ctx64.json")
    assert doc["server"]["backend"] == "sglang" and doc["server"]["version"] == "0.5.23"
    assert doc["server"]["reported"]["tp_size"] == 2
    # Budget 4 to --speculative-num-draft-tokens is 3 drafts a step: the root counts (the stand-in
    # proposes verify_ct x 3, as spec_decoding_meta.py does).
    assert doc["server"]["budget"]["flag"] == "--speculative-num-draft-tokens"
    assert doc["server"]["budget"]["drafts_per_step"] == 3
    # The settings the server says it runs, each the one its command asked for.
    assert {"speculative_algorithm: NGRAM, as --speculative-algorithm asked",
            "speculative_num_draft_tokens: 4, as --speculative-num-draft-tokens asked"} <= set(
        doc["server"]["preflight"]["checked"])
    assert len(doc["lease"]["devices"]) == 2 and doc["hardware"]["gpu_count"] == 2
    log = (tmp_path / "tp2-b4-ctx64.log").read_text()
    assert f"CUDA_VISIBLE_DEVICES={','.join(doc['lease']['devices'])}" in log
    assert "SGLANG_DDTREE_MAX_TOPK=8" in log and doc["server"]["env"]["SGLANG_DDTREE_MAX_TOPK"] == "8"
    for section, asked in zip(doc["sections"], doc["spec"]["sections"]):
        records = section["records"]
        tokens = sum(r["output_tokens"] for r in records)
        steps = sum(r["verify_steps"] for r in records)
        assert tokens == section["output_tokens"] == asked["requests"] * doc["spec"]["repeats"] * asked["output_tokens"]
        # The server's counters agree with its per-request fields, and acceptance comes from the latter.
        assert section["counters"]["sglang:generation_tokens_total"] == tokens
        assert section["counters"]["sglang:spec_verify_calls_total"] == steps
        # Tokens per verification step, the token each request's prefill made left out (as vLLM's
        # 1 + accepted / drafts and llama-server's count them): not completion_tokens / verify_ct.
        assert 1.0 < section["acceptance_length"] == pytest.approx((tokens - len(records)) / steps)
        # ... which is 1 + accepted / steps, as llama-server's and vLLM's counters give it: the
        # stand-in's prefill token is in no verify step, as in SGLang's own workers.
        assert section["acceptance_length"] == pytest.approx(1 + section["draft_accepted"] / steps)
        assert section["acceptance_length"] != pytest.approx(9.99)  # never the lifetime figures
        assert 0 < section["draft_accepted"] < section["draft_tokens"] == steps * 3


def test_sglang_without_speculation_reports_no_acceptance(tmp_path):
    doc = sglang_study(tmp_path, tp=(1,), budgets=(0,))
    code, err = config_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 0, err
    for section in load(tmp_path / "launches" / "tp1-b0-ctx64.json")["sections"]:
        assert section["acceptance_length"] is None and section["draft_tokens"] == 0


@pytest.mark.parametrize("fault, code, klass, signature", [
    ("die-at-request:3", 12, "server-died", "cuda-illegal-instruction"),
    ("error-at-request:3", 14, "invalid-response", None),
])
def test_sglang_faults_become_classified_failures(tmp_path, fault, code, klass, signature):
    doc = sglang_study(tmp_path, "--fault", fault, tp=(1,), budgets=(4,))
    got, err = config_name(tmp_path, doc, "tp1-b4-ctx64")
    assert got == code, err
    record = load(next((tmp_path / "failures" / "tp1-b4-ctx64").glob("*.json")))
    assert record["class"] == klass and record["signature"] == signature
    assert not (tmp_path / "launches" / "tp1-b4-ctx64.json").exists()


def test_a_server_context_smaller_than_the_grid_is_refused_before_measuring(tmp_path):
    doc = sglang_study(tmp_path, "--context-length", "40", tp=(1,), budgets=(0,))
    code, err = config_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 2 and "reports a context of 40 tokens" in err


def test_a_kv_pool_too_small_for_prompt_and_output_is_refused_before_it_clips_the_output(tmp_path):
    """SGLang's scheduler clips max_new_tokens to the pool without an error (init_req_max_new_tokens):
    the preflight names the pool instead of a later token shortfall."""
    doc = sglang_study(tmp_path, "--max-total-tokens", "100", tp=(1,), budgets=(0,))
    code, err = config_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 2 and "KV cache holds 100 tokens (max_total_num_tokens), one request needs 112" in err, err
    assert "mem-fraction-static" in err and not (tmp_path / "launches" / "tp1-b0-ctx64.json").exists()
    # The longest input the scheduler takes, where it is below the grid's prompt length.
    doc = sglang_study(tmp_path, "--max-total-tokens", "60", tp=(1,), budgets=(0,))
    code, err = config_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 2 and "inputs of at most 54 tokens (max_req_input_len), grid.context is 64" in err, err


@pytest.mark.parametrize("strict", [False, True])
def test_a_server_that_does_not_say_its_limits_is_recorded_unchecked_or_refused(tmp_path, strict):
    """Both info routes 404: the checks read nothing, so they must say so (or refuse), never pass."""
    doc = sglang_study(tmp_path, "--server-info", "missing", tp=(1,), budgets=(0,))
    if strict:
        config = yaml.safe_load(doc.read_text())
        config["server"]["preflight"] = "strict"
        doc.write_text(yaml.safe_dump(config))
    code, err = config_name(tmp_path, doc, "tp1-b0-ctx64")
    why = "context not checked: /server_info answered 404, /get_server_info answered 404"
    assert why in err, err
    result = tmp_path / "launches" / "tp1-b0-ctx64.json"
    if strict:
        assert code == 2 and "refused by server.preflight: strict" in err and not result.exists()
        return
    assert code == 0, err
    preflight = load(result)["server"]["preflight"]
    assert preflight["checked"] == [] and why in preflight["unchecked"]
    assert any(line.startswith("KV pool not checked: /server_info answered 404") for line in preflight["unchecked"])


def test_newer_sglang_is_checked_on_the_limits_it_resolved_not_the_length_it_echoes(tmp_path):
    doc = sglang_study(tmp_path, "--server-info", "newer", tp=(1,), budgets=(0,))
    code, err = config_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 0, err
    preflight = load(tmp_path / "launches" / "tp1-b0-ctx64.json")["server"]["preflight"]
    assert preflight["unchecked"] == [], preflight
    assert [c.split(":")[0] for c in preflight["checked"]] == ["input length", "KV pool"]
    # The echoed context_length alone is no check: without the resolved limits it is said unchecked.
    facts = backends.Facts(detail={"context_length": 4096})
    spec = spec_of(yaml.safe_load(doc.read_text()), "tp1-b0-ctx64")
    unchecked = backends.get("sglang").check_context(spec, facts).unchecked
    assert unchecked[0] == ("context not checked: /server_info gives no max_context_length (its context_length "
                            "only echoes --context-length)"), unchecked


def _dry_run(tmp_path: Path, *extra: str) -> str:
    out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
                          str(tmp_path), "-n", "-p", "--cores", "8", "results/summary.png", "--resources", "gpu=8",
                          "--configfile", str(REPO / "config" / "sglang-ddtree.yaml"), *extra],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout + out.stderr


def test_the_seed_study_plans_its_commands_gpus_and_exclusions_without_provisioning(tmp_path):
    plain = _dry_run(tmp_path)
    assert re.search(r"launch_configuration\s+28\b", plain)
    assert "--manifests results/provision/prompts-sharegpt.json --out" in plain
    assert re.findall(r"wildcards: target=(\S+)", plain) == ["prompts-sharegpt"]  # no server or model to provision
    assert ("# server: SGLANG_DDTREE_MAX_TOPK=8 /opt/sglang-ddtree/.venv/bin/python -m sglang.launch_server "
            "--model-path /models/Qwen3.6-27B --tp 2") in plain
    assert re.search(r"resources: .*gpu=2", plain)
    on_sm120 = _dry_run(tmp_path, "--config", "hardware={'compute_capability': '12.0'}")
    assert re.search(r"launch_configuration\s+20\b", on_sm120)  # budgets 8 and 12 at tp 1 and 2, each topk, left out
    assert "tp1-b8-ctx25000" not in on_sm120 and "tp1-b15-ctx25000-topk4" in on_sm120


def test_a_server_that_runs_another_draft_length_than_asked_is_refused(tmp_path):
    # As SGLang's adaptive mode once fell back to static steps in silence (sgl-project/sglang #23289):
    # the server says it runs 2 draft tokens where its command asked for 4.
    doc = sglang_study(tmp_path, "--report-draft-tokens", "2", tp=(1,), budgets=(4,))
    code, err = config_name(tmp_path, doc, "tp1-b4-ctx64")
    assert code == 30, err
    record = load(next((tmp_path / "failures" / "tp1-b4-ctx64").glob("*.json")))
    assert record["class"] == "setting-not-applied" and not record["transient"]
    assert record["reason"] == ("--speculative-num-draft-tokens 4 was asked for, the server reports "
                                "speculative_num_draft_tokens = 2")
    assert not (tmp_path / "launches" / "tp1-b4-ctx64.json").exists()


# Four in flight for about 2.4 s a repeat (8 requests of 120 tokens at 10 ms a token): the server's
# gauge is sampled a dozen times a repeat.
FOUR_IN_FLIGHT = [{"name": "busy", "output_tokens": 120, "requests": 8, "concurrency": 4}]


@pytest.mark.parametrize("running, code", [(1024, 0), (1, 31)])
def test_a_level_the_server_queued_is_refused_by_littles_law(tmp_path, running, code):
    """The client keeps four requests in flight; a server that runs one at a time queues the others,
    so the level measured a batch of one, not four: refused (load-not-held), nothing written."""
    doc = sglang_study(tmp_path, "--token-delay", "0.01", "--max-running-requests", str(running), tp=(1,),
                       budgets=(0,), sections=FOUR_IN_FLIGHT)
    # A queued request gets no byte until a place frees (three requests ahead of it, 3.6 s here, longer
    # beside the shared tier): a stall timeout above that, so that the level, not a hang, is judged.
    study_doc = yaml.safe_load(doc.read_text())
    study_doc["server"]["stall_timeout_s"] = 60
    doc.write_text(yaml.safe_dump(study_doc))
    got, err = config_name(tmp_path, doc, "tp1-b0-ctx64")
    assert got == code, err
    if code:
        record = load(next((tmp_path / "failures" / "tp1-b0-ctx64").glob("*.json")))
        assert record["class"] == "load-not-held" and not record["transient"]
        assert "it queued the rest" in record["reason"] and "sglang:num_running_reqs" in record["reason"]
        assert not (tmp_path / "launches" / "tp1-b0-ctx64.json").exists()
        return
    held = load(tmp_path / "launches" / "tp1-b0-ctx64.json")["sections"][0]["in_flight"]
    assert held["judged"] and held["samples"] >= 10 and "sglang:num_running_reqs" in held["server_from"]
    assert held["client"] == pytest.approx(4, rel=0.1) and held["server"] == pytest.approx(4, rel=0.5)
