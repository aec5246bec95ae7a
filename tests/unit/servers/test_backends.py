"""The backend seam (servers/backends/): golden launch commands, embedded provisioning, model paths,
exclusions by architecture, Prometheus text, what a budget means on each server, the ports SGLang
derives, the context checks; SGLang through the real CLI is tests/workflow/test_sglang_standin.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from conftest import REPO, SGLANG_STANDIN
from specsweep import study
from specsweep.analysis import aggregate, ledger, partial_reports
from specsweep.errors import ConfigError, Excluded
from specsweep.measure import before_start, client, result_doc
from specsweep.measure.before_start import check_model_path
from specsweep.servers import backends, command

STANDIN = SGLANG_STANDIN
SGLANG_WHEEL = "sglang==0.5.23"


def spec_of(doc: dict, name: str) -> study.LaunchSpec:
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
    check_model_path(vllm)  # a folder
    check_model_path(study.LaunchSpec.from_dict({**json.loads(vllm.to_json()), "model_path": "Qwen/Qwen3-8B"}))
    with pytest.raises(ConfigError, match="does not exist"):
        check_model_path(study.LaunchSpec.from_dict({**json.loads(vllm.to_json()), "model_path": "/no/such"}))
    llama = spec_of({"model": {"path": str(folder)}, "server": {"binary": "x"}}, "tp1-b0-ctx128")
    with pytest.raises(ConfigError, match="serves one GGUF file"):
        check_model_path(llama)
    facts = result_doc.model_facts(str(folder))
    assert facts["files"] == 1 and facts["bytes"] == 2 and len(facts["sha256"]) == 64
    (folder / "config.json").write_text("{} ")
    assert result_doc.model_facts(str(folder))["sha256"] != facts["sha256"]  # any byte changes the hash
    assert result_doc.model_facts("Qwen/Qwen3-8B")["hub_id"] == "Qwen/Qwen3-8B"


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
        before_start.check_exclusions(b8.excluded_on, {"gpus": [{"index": "0", "compute_capability": "12.0"}]})
    before_start.check_exclusions(b8.excluded_on, {"gpus": [{"index": "0", "compute_capability": "9.0"}]})
    assert study.LaunchSpec.from_dict(json.loads(b8.to_json())) == b8  # survives the trip through params


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
    report = partial_reports.failure_report(aggregate.summarize(doc, tmp_path / "launches", tmp_path / "failures"),
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


# --- the real CLI through the stand-in ---------------------------------------------------------------


@pytest.mark.parametrize("backend", ["llama-server", "vllm"])
def test_every_backend_says_its_context_unchecked_when_its_route_did_not_answer(backend, tmp_path):
    spec = spec_of({"backend": backend, "grid": {"budget": [0], "tp": [1], "context": [64]}}, "tp1-b0-ctx64")
    route = {"llama-server": "/props", "vllm": "/v1/models"}[backend]
    preflight = backends.get(backend).check_context(spec, backends.Facts(unread=f"{route} answered 404"))
    assert preflight == backends.Preflight(unchecked=(f"context not checked: {route} answered 404",))
    assert backends.get(backend).check_context(spec, backends.Facts(max_context=4096)).checked


# --- the plan --------------------------------------------------------------------------------------


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


# llama-server's final event as tools/server/server.cpp sends it: the counts, stop_type and
# truncated, and timings with draft_n / draft_n_accepted only where speculation is on.
FINAL = {"stop": True, "tokens_predicted": 8, "tokens_evaluated": 16, "stop_type": "limit", "truncated": False,
         "timings": {"predicted_n": 8, "predicted_ms": 100.0, "predicted_per_second": 80.0,
                     "draft_n": 12, "draft_n_accepted": 5}}


def test_llama_servers_final_event_is_read_field_by_field():
    server = backends.get("llama-server")
    final = server.final(FINAL, n_predict=8, prompt_len=16)
    assert (final.output_tokens, final.prompt_tokens, final.server_tok_s) == (8, 16, 80.0)
    assert (final.draft_tokens, final.draft_accepted) == (12, 5)
    timings = {k: v for k, v in FINAL["timings"].items() if not k.startswith("draft")}
    plain = server.final({**FINAL, "timings": timings}, n_predict=8, prompt_len=16)  # budget 0: no draft fields
    assert (plain.draft_tokens, plain.draft_accepted) == (0, 0)
    # A server that says neither its prompt count nor predicted_n is held to what it streamed.
    bare = {k: v for k, v in FINAL.items() if k not in ("tokens_evaluated", "timings")}
    assert server.final(bare, n_predict=8, prompt_len=16).output_tokens == 8


@pytest.mark.parametrize("change, words", [
    ({"tokens_predicted": 7}, "server generated 7 tokens, 8 were requested with ignore_eos (stop_type='limit')"),
    ({"tokens_predicted": 7, "stop_type": "word", "truncated": True},
     "server generated 7 tokens, 8 were requested with ignore_eos (stop_type='word', truncated: the slot's context "
     "is full)"),
    ({"tokens_evaluated": 15}, "server evaluated 15 prompt tokens, 16 were sent"),
    ({"tokens_predicted": None}, "llama-server: final event has no integer count of generated tokens"),
    ({"timings": {**FINAL["timings"], "predicted_n": 9}}, "timings.predicted_n 9 != tokens_predicted 8"),
])
def test_llama_servers_final_event_that_disagrees_with_the_request_is_refused_saying_why(change, words):
    from specsweep.errors import InvalidResponse

    with pytest.raises(InvalidResponse) as caught:
        backends.get("llama-server").final({**FINAL, **change}, n_predict=8, prompt_len=16)
    assert str(caught.value) == words


# SGLang's final event as srt/managers/tokenizer_manager.py sends it: meta_info with the counts, the
# finish_reason ({"type": "length", "length": N}, or "abort" with a message), and the speculative
# counters under whichever names the version uses (sglang.DRAFT_FIELDS, the first pair it has).
SG_META = {"prompt_tokens": 16, "completion_tokens": 8, "finish_reason": {"type": "length", "length": 8},
           "spec_verify_ct": 3, "spec_accept_token_num": 5, "spec_draft_token_num": 12}


def test_sglangs_final_event_is_read_field_by_field():
    server = backends.get("sglang")
    final = server.final({"meta_info": SG_META}, n_predict=8, prompt_len=16)
    assert (final.output_tokens, final.prompt_tokens, final.server_tok_s) == (8, 16, None)  # no decode rate
    assert (final.draft_tokens, final.draft_accepted, final.verify_steps) == (12, 5, 3)
    newer = {**SG_META, "spec_num_correct_drafts": 4, "spec_num_proposed_drafts": 10}  # the first pair wins
    assert server.final({"meta_info": newer}, n_predict=8, prompt_len=16).draft_tokens == 10
    plain = {k: v for k, v in SG_META.items() if not k.startswith("spec_")}  # budget 0: no draft fields
    final = server.final({"meta_info": plain}, n_predict=8, prompt_len=16)
    assert (final.draft_tokens, final.draft_accepted, final.verify_steps) == (0, 0, None)
    half = {**plain, "spec_accept_token_num": 5}  # a pair half there is no pair: nothing drafted is claimed
    assert server.final({"meta_info": half}, n_predict=8, prompt_len=16).draft_accepted == 0
    unsaid = {k: v for k, v in plain.items() if k != "finish_reason"}  # no reason given: the counts decide
    assert server.final({"meta_info": {**unsaid, "finish_reason": None}}, n_predict=8, prompt_len=16).output_tokens == 8


@pytest.mark.parametrize("change, words", [
    ({"finish_reason": {"type": "abort", "message": "out of memory"}}, "sglang aborted the request: out of memory"),
    ({"finish_reason": {"type": "abort"}}, "sglang aborted the request: {'type': 'abort'}"),
    ({"completion_tokens": 7}, "server generated 7 tokens, 8 were requested with ignore_eos (finish_reason="
                               "{'type': 'length', 'length': 8})"),
    ({"prompt_tokens": 15}, "server evaluated 15 prompt tokens, 16 were sent"),
    ({"completion_tokens": None}, "sglang: final event has no integer count of generated tokens"),
])
def test_sglangs_final_event_that_aborted_or_disagrees_is_refused_saying_why(change, words):
    from specsweep.errors import InvalidResponse

    with pytest.raises(InvalidResponse) as caught:
        backends.get("sglang").final({"meta_info": {**SG_META, **change}}, n_predict=8, prompt_len=16)
    assert str(caught.value) == words


def test_a_setting_is_checked_against_what_the_server_reports_flag_by_flag():
    """Backend.check_applied with SGLang's applied_fields: the value asked for against the one
    /server_info reports; a flag the server does not report is unchecked, said, not assumed."""
    from specsweep.errors import SettingNotApplied
    from specsweep.servers.backends import Facts

    server = backends.get("sglang")
    argv = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4", "--port", "1"]
    told = Facts(version="0.5.23", max_context=None, detail={"speculative_algorithm": "NGRAM",
                                                             "speculative_num_draft_tokens": 4})
    done = server.check_applied(argv, told)
    assert done.checked == ("speculative_algorithm: NGRAM, as --speculative-algorithm asked",
                            "speculative_num_draft_tokens: 4, as --speculative-num-draft-tokens asked")
    assert done.unchecked == ()
    quiet = server.check_applied(argv, Facts(version="x", max_context=None, detail={"speculative_algorithm": "NGRAM"}))
    assert quiet.unchecked == ("speculative_num_draft_tokens: not reported, so --speculative-num-draft-tokens 4 is "
                               "not known to have taken effect",)
    with pytest.raises(SettingNotApplied) as caught:
        server.check_applied(argv, Facts(version="x", max_context=None,
                                         detail={"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 2}))
    assert str(caught.value) == ("--speculative-num-draft-tokens 4 was asked for, the server reports "
                                 "speculative_num_draft_tokens = 2")
    # A flag not given, or given last with no value, asks nothing; one given last with its value
    # is checked, whichever of the fields it is.
    assert server.check_applied(["--port", "1", "--speculative-ddtree-budget"], told).checked == ()
    last = server.check_applied(["--port", "1", "--speculative-num-draft-tokens", "4"], told)
    assert last.checked == ("speculative_num_draft_tokens: 4, as --speculative-num-draft-tokens asked",)
