"""The backend seam: golden launch commands, SGLang's wire format against its own published schema,
and the real CLI measuring through the SGLang stand-in (tokens, acceptance, faults, GPUs, env)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SGLANG_STANDIN, load
from specsweep import study
from specsweep.analysis import aggregate, ledger, partial_reports
from specsweep.errors import ConfigError, Excluded, InvalidResponse
from specsweep.measure import client, leases, runner
from specsweep.servers import backends, command, probes

STANDIN = SGLANG_STANDIN
SGLANG_WHEEL = "sglang==0.5.23"


def spec_of(doc: dict, name: str) -> study.RunSpec:
    return study.find_spec(study.validate_study(doc), name)


# --- golden launch commands ---------------------------------------------------------------------

def test_golden_argv_of_every_backend_default():
    def argv(backend: str, model: str) -> list[str]:
        doc = {"backend": backend, "model": {"path": model}, "server": {"binary": "PY"},
                 "grid": {"budget": [0, 4], "tp": [1, 2], "context": [128]}}
        if backend == "llama-server":  # its default has no {tp}: one tp only
            doc["grid"]["tp"] = [2]
        return command.server_argv(spec_of(doc, "tp2-b4-ctx128"), 8000, scratch="/s")

    assert argv("llama-server", "/m.gguf") == [
        "PY", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", "8000", "-c", "404", "-np", "1", "-t", "2",
        "--metrics", "--no-webui", "--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8",
        "--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", "4"]
    assert argv("sglang", "Qwen/Qwen3-8B") == [
        "PY", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--tp", "2", "--context-length", "404",
        "--host", "127.0.0.1", "--port", "8000", "--nccl-port", "<side_port>", "--enable-metrics",
        "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"]
    assert argv("vllm", "/models/m") == [
        "PY", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m", "--tensor-parallel-size", "2",
        "--max-model-len", "404", "--host", "127.0.0.1", "--port", "8000", "--disable-uvicorn-access-log",
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}']


def test_golden_argv_and_env_of_the_example_studies():
    ddtree = study.load_study(REPO / "config" / "sglang-ddtree.yaml")
    spec = study.find_spec(ddtree, "tp2-b15-ctx25000-topk8")
    assert command.server_argv(spec, 8000, scratch="/s", side_port=8001) == [
        "/opt/sglang-ddtree/.venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/Qwen3.6-27B",
        "--tp", "2", "--context-length", "27079", "--host", "127.0.0.1", "--port", "8000", "--nccl-port", "8001",
        "--mem-fraction-static", "0.85", "--enable-metrics", "--speculative-algorithm", "DDTREE",
        "--speculative-draft-model-path", "/models/Qwen3.6-27B-DFlash", "--speculative-ddtree-budget", "15"]
    assert command.server_env(spec, 8000) == {"SGLANG_DDTREE_MAX_TOPK": "8"}
    narrow = study.find_spec(ddtree, "tp2-b15-ctx25000-topk4")  # the fourth axis, through server.env
    assert command.server_env(narrow, 8000) == {"SGLANG_DDTREE_MAX_TOPK": "4"}
    assert command.server_argv(narrow, 8000, scratch="/s") == command.server_argv(spec, 8000, scratch="/s")
    assert len(study.expand_grid(ddtree)) == 7 * 2 * 2
    assert spec.gpu and spec.backend == "sglang" and spec.context + 2048 <= spec.context_limit
    assert [s.output_tokens for s in spec.sections] == [256, 1024, 2048]
    assert sorted(ddtree["grid"]["budget"]) == [0, 8, 12, 15, 16, 32, 64] and ddtree["grid"]["tp"] == [1, 2]
    baseline = study.find_spec(ddtree, "tp1-b0-ctx25000-topk4")
    assert "--speculative-algorithm" not in command.server_argv(baseline, 8000)

    eagle = study.find_spec(study.load_study(REPO / "config" / "vllm-gpu.yaml"), "tp2-b4-ctx2048")
    assert command.server_argv(eagle, 8000) == [
        "python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/Qwen3-8B",
        "--tensor-parallel-size", "2", "--max-model-len", "4116", "--host", "127.0.0.1", "--port", "8000",
        "--gpu-memory-utilization", "0.85", "--disable-uvicorn-access-log", "--speculative-config",
        '{"method": "eagle3", "model": "/models/Qwen3-8B-EAGLE3", "num_speculative_tokens": 4}']
    assert json.loads(command.server_argv(eagle, 8000)[-1])["num_speculative_tokens"] == 4

    cpu = study.find_spec(study.load_study(REPO / "config" / "vllm-cpu.yaml"), "tp1-b4-ctx128")
    resolved = cpu.resolved(binary="/venv/bin/python", model_path="/cache/tiny")
    assert command.server_argv(resolved, 8000, scratch="/s")[:4] == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model"]
    assert command.server_env(resolved, 8000, scratch="/s")["VLLM_CACHE_ROOT"] == "/s/cache"


def test_the_plan_shows_the_command_each_job_launches():
    ddtree = study.load_study(REPO / "config" / "sglang-ddtree.yaml")
    shown = study.shown_command(study.find_spec(ddtree, "tp1-b32-ctx25000-topk8"))
    assert shown.startswith("SGLANG_DDTREE_MAX_TOPK=8 /opt/sglang-ddtree/.venv/bin/python -m sglang.launch_server")
    assert "--port '<port>'" in shown and "--speculative-ddtree-budget 32" in shown


def test_embedded_is_provisioned_only_for_what_the_study_leaves_to_the_pipeline():
    sharegpt = {"prompts": "results/provision/prompts-sharegpt.json"}  # the prompt set, unless the doc brings its own
    assert study.provisioned(study.validate_study({})) == {
        "binary": "results/provision/llama-server.json", "model": "results/provision/model.json", **sharegpt}
    assert study.provisioned(study.load_study(REPO / "config" / "vllm-cpu.yaml")) == {
        "binary": "results/provision/vllm.json", "model": "results/provision/tiny-model.json", **sharegpt}
    assert study.provisioned(study.load_study(REPO / "config" / "sglang-ddtree.yaml")) == sharegpt
    own = study.validate_study({"server": {"binary": "/usr/bin/llama-server"}, "model": {"path": "/m.gguf"},
                                 "workload": {"prompt_set": "humaneval"}})
    assert study.provisioned(own) == {"prompts": "results/provision/prompts-humaneval.json"}
    with pytest.raises(ConfigError, match="sglang has no embedded"):
        study.validate_study({"backend": "sglang"})


def test_model_paths_each_backend_accepts(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    vllm = spec_of({"backend": "vllm", "model": {"path": str(folder)}, "server": {"binary": "python3"}},
                   "tp1-b0-ctx128")
    runner.check_model_path(vllm)  # a folder
    runner.check_model_path(study.RunSpec.from_dict({**json.loads(vllm.to_json()), "model_path": "Qwen/Qwen3-8B"}))
    with pytest.raises(ConfigError, match="does not exist"):
        runner.check_model_path(study.RunSpec.from_dict({**json.loads(vllm.to_json()), "model_path": "/no/such"}))
    llama = spec_of({"model": {"path": str(folder)}, "server": {"binary": "x"}}, "tp1-b0-ctx128")
    with pytest.raises(ConfigError, match="serves one GGUF file"):
        runner.check_model_path(llama)
    facts = runner.model_facts(str(folder))
    assert facts["files"] == 1 and facts["bytes"] == 2 and len(facts["sha256"]) == 64
    (folder / "config.json").write_text("{} ")
    assert runner.model_facts(str(folder))["sha256"] != facts["sha256"]  # any byte changes the hash
    assert runner.model_facts("Qwen/Qwen3-8B")["hub_id"] == "Qwen/Qwen3-8B"


# --- exclusions by architecture -----------------------------------------------------------------

def test_exclusions_by_compute_capability_apply_there_and_nowhere_else():
    ddtree = study.load_study(REPO / "config" / "sglang-ddtree.yaml")
    b8, b15 = study.find_spec(ddtree, "tp1-b8-ctx25000-topk4"), study.find_spec(ddtree, "tp1-b15-ctx25000-topk4")
    on = lambda cc: {**ddtree, "hardware": {"compute_capability": cc}}  # noqa: E731
    assert "illegal instruction" in ledger.exclusion_reason(on("12.0"), b8)
    assert ledger.exclusion_reason(on("12.0"), b15) is None
    assert ledger.exclusion_reason(on("9.0"), b8) is None
    assert b8.excluded_on and b8.excluded_on[0][0] == ("12.0",) and b15.excluded_on == ()
    # The job itself refuses such GPUs when the plan was made elsewhere (a login node).
    with pytest.raises(Excluded, match="compute capability 12.0"):
        leases.check_exclusions(b8.excluded_on, {"gpus": [{"index": "0", "compute_capability": "12.0"}]})
    leases.check_exclusions(b8.excluded_on, {"gpus": [{"index": "0", "compute_capability": "9.0"}]})
    assert study.RunSpec.from_dict(json.loads(b8.to_json())) == b8  # survives the trip through params


def test_a_reproducing_failure_prints_a_ready_to_paste_exclusion(tmp_path):
    from specsweep.errors import ServerDied
    from specsweep.records.store import failure_record, write_failure

    doc = study.validate_study({"server": {"binary": "x", "gpu": True}, "model": {"path": "/m"},
                                   "grid": {"budget": [0, 8], "tp": [1], "context": [128]}})
    b8 = study.find_spec(doc, "tp1-b8-ctx128")
    error = ServerDied("server died in section short", signature="cuda-illegal-instruction",
                       evidence=["RuntimeError: CUDA error: an illegal instruction was encountered"])
    record = failure_record(name=b8.name, spec=json.loads(b8.to_json()), error=error, started_at="t",
                            attempt=1, server_log=None, log_tail="", compute_capability="12.0")
    write_failure(tmp_path / "failures", record)
    report = partial_reports.failure_report(aggregate.summarize(doc, tmp_path / "runs", tmp_path / "failures"),
                                      tmp_path / "failures")
    line = report.splitlines()[-1].strip()
    rule = yaml.safe_load(line)[0]
    assert rule == {"tp": 1, "budget": 8, "context": 128, "compute_capability": "12.0",
                    "reason": "cuda-illegal-instruction: RuntimeError: CUDA error: an illegal instruction was "
                              "encountered"}
    pasted = study.validate_study({**doc, "exclude": [rule], "hardware": {"compute_capability": "12.0"}})
    excluded = [s.name for s in study.expand_grid(pasted) if ledger.exclusion_reason(pasted, s)]
    assert excluded == ["tp1-b8-ctx128"]


# --- Prometheus text ------------------------------------------------------------------------------

def test_metrics_add_every_labelled_series_and_drop_created_stamps():
    text = ('# TYPE vllm:spec_decode_num_drafts counter\n'
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 14.0\n'
            'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9\n'
            'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 6.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 2\n')

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        values = client.metrics(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    assert values["vllm:spec_decode_num_drafts_total"] == 20.0  # both engines, not the last one
    assert values["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == 5.0
    assert not any(k.endswith("_created") for k in values)


# --- SGLang's own schema ---------------------------------------------------------------------------

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


# --- the real CLI through the stand-in ---------------------------------------------------------------

def sglang_study(tmp_path: Path, *extra: str, tp=(1, 2), budgets=(0, 4), context: int = 64) -> Path:
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
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 2, "sections": [
            {"name": "short", "output_tokens": 16, "requests": 2},
            {"name": "long", "output_tokens": 48, "requests": 1}]},
        # These tests are about the wire format; the quiet-host guard has tests of its own (test_quiet_host.py).
        "quiet_host": {"max_foreign_cores": 100.0, "max_repeat_spread": 10.0},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_name(tmp_path: Path, doc: Path, name: str, gpus: str = "0,1,2") -> tuple[int, str]:
    env = {**os.environ, "SPECSWEEP_GPUS": gpus}
    out = subprocess.run([sys.executable, "-m", "specsweep", "run", "--config", str(doc), "--name", name,
                          "--out", str(tmp_path / "runs" / f"{name}.json"),
                          "--server-log", str(tmp_path / f"{name}.log"),
                          "--failures-dir", str(tmp_path / "failures")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    return out.returncode, out.stderr


@pytest.mark.parametrize("spelling", ["new", "between", "old"])
def test_the_cli_measures_sglang_tokens_and_acceptance_from_its_own_fields(tmp_path, spelling):
    doc = sglang_study(tmp_path, "--spelling", spelling)
    code, err = run_name(tmp_path, doc, "tp2-b4-ctx64")
    assert code == 0, err
    doc = load(tmp_path / "runs" / "tp2-b4-ctx64.json")
    assert doc["server"]["backend"] == "sglang" and doc["server"]["version"] == "0.5.23"
    assert doc["server"]["reported"]["tp_size"] == 2
    # Budget 4 to --speculative-num-draft-tokens is 3 drafts a step: the root counts (the stand-in
    # proposes verify_ct x 3, as spec_decoding_meta.py does).
    assert doc["server"]["budget"]["flag"] == "--speculative-num-draft-tokens"
    assert doc["server"]["budget"]["drafts_per_step"] == 3
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
    code, err = run_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 0, err
    for section in load(tmp_path / "runs" / "tp1-b0-ctx64.json")["sections"]:
        assert section["acceptance_length"] is None and section["draft_tokens"] == 0


@pytest.mark.parametrize("fault, code, klass, signature", [
    ("die-at-request:3", 12, "server-died", "cuda-illegal-instruction"),
    ("error-at-request:3", 14, "invalid-response", None),
])
def test_sglang_faults_become_classified_failures(tmp_path, fault, code, klass, signature):
    doc = sglang_study(tmp_path, "--fault", fault, tp=(1,), budgets=(4,))
    got, err = run_name(tmp_path, doc, "tp1-b4-ctx64")
    assert got == code, err
    record = load(next((tmp_path / "failures" / "tp1-b4-ctx64").glob("*.json")))
    assert record["class"] == klass and record["signature"] == signature
    assert not (tmp_path / "runs" / "tp1-b4-ctx64.json").exists()


def test_a_server_context_smaller_than_the_grid_is_refused_before_measuring(tmp_path):
    doc = sglang_study(tmp_path, "--context-length", "40", tp=(1,), budgets=(0,))
    code, err = run_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 2 and "reports a context of 40 tokens" in err


def test_a_kv_pool_too_small_for_prompt_and_output_is_refused_before_it_clips_the_output(tmp_path):
    """SGLang's scheduler clips max_new_tokens to the pool without an error (init_req_max_new_tokens):
    the preflight names the pool instead of a later token shortfall."""
    doc = sglang_study(tmp_path, "--max-total-tokens", "100", tp=(1,), budgets=(0,))
    code, err = run_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 2 and "KV cache holds 100 tokens (max_total_num_tokens), one request needs 112" in err, err
    assert "mem-fraction-static" in err and not (tmp_path / "runs" / "tp1-b0-ctx64.json").exists()
    # The longest input the scheduler takes, where it is below the grid's prompt length.
    doc = sglang_study(tmp_path, "--max-total-tokens", "60", tp=(1,), budgets=(0,))
    code, err = run_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 2 and "inputs of at most 54 tokens (max_req_input_len), grid.context is 64" in err, err


@pytest.mark.parametrize("strict", [False, True])
def test_a_server_that_does_not_say_its_limits_is_recorded_unchecked_or_refused(tmp_path, strict):
    """Both info routes 404: the checks read nothing, so they must say so (or refuse), never pass."""
    doc = sglang_study(tmp_path, "--server-info", "missing", tp=(1,), budgets=(0,))
    if strict:
        config = yaml.safe_load(doc.read_text())
        config["server"]["preflight"] = "strict"
        doc.write_text(yaml.safe_dump(config))
    code, err = run_name(tmp_path, doc, "tp1-b0-ctx64")
    why = "context not checked: /server_info answered 404, /get_server_info answered 404"
    assert why in err, err
    result = tmp_path / "runs" / "tp1-b0-ctx64.json"
    if strict:
        assert code == 2 and "refused by server.preflight: strict" in err and not result.exists()
        return
    assert code == 0, err
    preflight = load(result)["server"]["preflight"]
    assert preflight["checked"] == [] and why in preflight["unchecked"]
    assert any(line.startswith("KV pool not checked: /server_info answered 404") for line in preflight["unchecked"])


def test_newer_sglang_is_checked_on_the_limits_it_resolved_not_the_length_it_echoes(tmp_path):
    doc = sglang_study(tmp_path, "--server-info", "newer", tp=(1,), budgets=(0,))
    code, err = run_name(tmp_path, doc, "tp1-b0-ctx64")
    assert code == 0, err
    preflight = load(tmp_path / "runs" / "tp1-b0-ctx64.json")["server"]["preflight"]
    assert preflight["unchecked"] == [], preflight
    assert [c.split(":")[0] for c in preflight["checked"]] == ["input length", "KV pool"]
    # The echoed context_length alone is no check: without the resolved limits it is said unchecked.
    facts = backends.Facts(detail={"context_length": 4096})
    spec = spec_of(yaml.safe_load(doc.read_text()), "tp1-b0-ctx64")
    unchecked = backends.get("sglang").check_context(spec, facts).unchecked
    assert unchecked[0] == ("context not checked: /server_info gives no max_context_length (its context_length "
                            "only echoes --context-length)"), unchecked


@pytest.mark.parametrize("backend", ["llama-server", "vllm"])
def test_every_backend_says_its_context_unchecked_when_its_route_did_not_answer(backend, tmp_path):
    spec = spec_of({"backend": backend, "grid": {"budget": [0], "tp": [1], "context": [64]}}, "tp1-b0-ctx64")
    route = {"llama-server": "/props", "vllm": "/v1/models"}[backend]
    preflight = backends.get(backend).check_context(spec, backends.Facts(unread=f"{route} answered 404"))
    assert preflight == backends.Preflight(unchecked=(f"context not checked: {route} answered 404",))
    assert backends.get(backend).check_context(spec, backends.Facts(max_context=4096)).checked


# --- the plan --------------------------------------------------------------------------------------

def _dry_run(tmp_path: Path, *extra: str) -> str:
    out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
                          str(tmp_path), "-n", "-p", "--cores", "8", "results/summary.png", "--resources", "gpu=8",
                          "--configfile", str(REPO / "config" / "sglang-ddtree.yaml"), *extra],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout + out.stderr


def test_the_seed_study_plans_its_commands_gpus_and_exclusions_without_provisioning(tmp_path):
    plain = _dry_run(tmp_path)
    assert re.search(r"run_configuration\s+28\b", plain)
    assert "--manifests results/provision/prompts-sharegpt.json --out" in plain
    assert re.findall(r"rule (provision\w+)", plain) == ["provision_prompts"]  # no server or model to provision
    assert ("# server: SGLANG_DDTREE_MAX_TOPK=8 /opt/sglang-ddtree/.venv/bin/python -m sglang.launch_server "
            "--model-path /models/Qwen3.6-27B --tp 2") in plain
    assert re.search(r"resources: .*gpu=2", plain)
    on_sm120 = _dry_run(tmp_path, "--config", "hardware={'compute_capability': '12.0'}")
    assert re.search(r"run_configuration\s+20\b", on_sm120)  # budgets 8 and 12 at tp 1 and 2, each topk, left out
    assert "tp1-b8-ctx25000" not in on_sm120 and "tp1-b15-ctx25000-topk4" in on_sm120


@pytest.mark.parametrize("backend, args, budget, flag, drafts", [
    ("llama-server", backends.get("llama-server").speculative_args, 8, "--spec-ngram-mod-n-max", 8),
    ("vllm", backends.get("vllm").speculative_args, 4, "num_speculative_tokens", 4),
    ("sglang", ("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "{budget}"), 4,
     "--speculative-num-draft-tokens", 3),
    ("sglang", ("--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "{budget}"), 16,
     "--speculative-ddtree-budget", 16),
    ("sglang", ("--speculative-algorithm", "DFLASH", "--speculative-dflash-block={budget}"), 8,
     "--speculative-dflash-block", None),
    ("llama-server", backends.get("llama-server").speculative_args, 0, None, 0),
])
def test_each_result_says_what_its_budget_meant_on_that_server(backend, args, budget, flag, drafts):
    from dataclasses import replace

    spec = replace(study.expand_grid(study.validate_study({"backend": backend, "model": {"path": "/m"},
                                                             "server": {"binary": "x"}}))[0],
                   budget=budget, speculative_args=tuple(args) if budget else ())
    meaning = backends.get(backend).budget_meaning(spec)
    assert (meaning["flag"], meaning["drafts_per_step"]) == (flag, drafts)
    assert ("not known to specsweep" in meaning["means"]) == (drafts is None)


def test_sglang_with_dp_attention_opens_ports_derived_from_its_own():
    """PortArgs.init_new (sglang srt/server_args.py): port + 233, then port_base = that + 1 .. + 5."""
    sglang = backends.get("sglang")
    assert sglang.derived_ports(["--port", "30000"], 30000) == ()  # ipc:// files without DP attention
    assert sglang.derived_ports(["--enable-dp-attention"], 30000) == (30233, *range(30234, 30240))
    assert sglang.derived_ports(["--enable-dp-attention"], 65400) == (65167, *range(65168, 65174))  # past 65535
    assert sglang.derived_ports(["--enable-dp-attention", "--dist-init-addr=10.0.0.1:5000"], 30000) == \
        (5000, *range(5001, 5007))
    assert sglang.derived_ports(["--enable-dp-attention", "--dist-init-addr", "[::1]:5100"], 1) == \
        (5100, *range(5101, 5107))  # an IPv6 host: the port is after the last colon
    assert sglang.derived_ports(["--enable-dp-attention", "--dist-init-addr", "127.0.0.1:65532"], 1) == \
        (65532, *range(65525, 65531))  # dist_init_port - 7 onwards when + 6 would pass 65535
    # The edges: port + 233 = 65535 stays; dist_init_port + 6 = 65535 keeps port_base above it.
    assert sglang.derived_ports(["--enable-dp-attention"], 65302) == (65535, *range(65528, 65534))
    assert sglang.derived_ports(["--enable-dp-attention"], 65303) == (65070, *range(65071, 65077))
    assert sglang.derived_ports(["--enable-dp-attention", "--dist-init-addr", "h:65529"], 1) == \
        (65529, *range(65530, 65536))
    assert sglang.derived_ports(["--enable-dp-attention", "--dist-init-addr", "h:65530"], 1) == \
        (65530, *range(65523, 65529))
    assert backends.get("llama-server").derived_ports(["--enable-dp-attention"], 30000) == ()


def test_sglang_on_several_nodes_is_refused_before_any_launch():
    from specsweep.study.loading import check_study

    doc = study.validate_study({"backend": "sglang", "model": {"path": "Qwen/Qwen3-8B"},
                                   "server": {"gpu": True, "binary": "python3"}})
    doc["server"]["command"] = [*doc["server"]["command"], "--nnodes", "2"]
    with pytest.raises(ConfigError, match=r"--nnodes 2: a specsweep job leases the GPUs, ports and quiet host of "
                                          r"one machine"):
        check_study(doc)
    backends.get("sglang").check_launch(["--nnodes", "1"])  # one node: fine
