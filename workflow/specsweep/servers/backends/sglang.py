"""SGLang (and its DDTree forks): ``python -m sglang.launch_server``.

Checked against the sglang 0.5.23 wheel: ``sglang/api/v1/api_types.py`` (GenerateRequest,
SamplingParams, GenerateResponse, GenerateMetaInfo, GetServerInfoResponse: the schema the server
validates against), ``sglang/srt/entrypoints/http_server.py`` (routes), and
``sglang/srt/managers/tokenizer_manager.py`` (``_calculate_spec_decoding_metrics``). The traps:

- ``/health`` runs a one-token generation (``log_metrics=False``: not in the counters) and answers
  only after at least one second, so its probe needs a long timeout.
- ``meta_info`` carries a running ``completion_tokens``; the speculation fields come on the final
  chunk only and were renamed twice: ``spec_num_correct_drafts``/``spec_num_proposed_drafts``
  (0.5.x), ``spec_accepted_drafts``/``spec_proposed_drafts``, ``spec_accept_token_num``/
  ``spec_draft_token_num`` (older). All spellings are read.
- Acceptance length of a section is tokens per verification step with the prefill token
  excluded, as for every backend: sum(completion_tokens - 1) / sum(spec_verify_ct) over its own
  requests (``completion_tokens / spec_verify_ct``, what ``spec_accept_length`` says, counts the
  token the prefill made, so it reads higher than vLLM's 1 + accepted / drafts for the same
  steps). ``avg_spec_accept_length`` in ``/server_info`` and the ``sglang:spec_accept_length``
  gauge are lifetime or last-window values, useless per section. ``spec_accept_rate`` is wrong
  for tree methods (proposed = verify_ct x (draft tokens - 1)).
- Errors can arrive inside an HTTP 200 stream as ``data: {"error": {...}}``.
"""

from __future__ import annotations

from specsweep.errors import ConfigError, InvalidResponse
from specsweep.servers.backends.base import (
    Backend,
    Facts,
    Final,
    Preflight,
    check_counts,
    context_check,
    flag_value,
    read_json,
)

# (accepted, proposed) draft-token fields of meta_info, newest spelling first.
DRAFT_FIELDS = (
    ("spec_num_correct_drafts", "spec_num_proposed_drafts"),
    ("spec_accepted_drafts", "spec_proposed_drafts"),
    ("spec_accept_token_num", "spec_draft_token_num"),
)


class SGLang(Backend):
    name = "sglang"
    no_embedded = "SGLang needs CUDA: there is nothing to provision on a CPU machine"
    source = ("sglang 0.5.23: sglang/api/v1/api_types.py, srt/entrypoints/http_server.py, "
              "srt/managers/tokenizer_manager.py")
    binary = "python3"
    version_argv = ("-c", "import sglang; print(sglang.__version__)")  # the Python that has it
    # --nccl-port: torch.distributed's rendezvous port; unset, PortArgs.init_new takes a free one
    # (get_free_port, srt/server_args.py) that a concurrent job's server may take first.
    command = ("{binary}", "-m", "sglang.launch_server", "--model-path", "{model}", "--tp", "{tp}",
               "--context-length", "{ctx_size}", "--host", "{host}", "--port", "{port}", "--nccl-port", "{side_port}",
               "--enable-metrics")
    # Upstream's n-gram speculation; a DDTree fork's flags go in the study (config/sglang-ddtree.yaml).
    speculative_args = ("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "{budget}")
    # NGRAM/EAGLE count the root token in --speculative-num-draft-tokens (speculative/
    # spec_decoding_meta.py uses N - 1); DDTree's budget counts non-root tree nodes, verified
    # B + 1 wide (sgl-project/sglang#29907): a tree of B drafts, not a chain.
    # srt/server_args.py: the fields /server_info returns (asdict(server_args), 0.5.23's contract too).
    applied_fields = (("--speculative-algorithm", "speculative_algorithm"),
                      ("--speculative-num-draft-tokens", "speculative_num_draft_tokens"),
                      ("--speculative-ddtree-budget", "speculative_ddtree_budget"))
    budget_flags = (("--speculative-num-draft-tokens", -1, "B - 1 drafted tokens a step (the root counts in B)"),
                    ("--speculative-ddtree-budget", 0, "a tree of B drafted nodes a step, verified B + 1 wide"))
    preflight_reads = ("the context (max_context_length, or max_req_input_len on newer servers) and the KV pool "
                       "(max_total_num_tokens) in /server_info")
    acceptance_from = ("sum(completion_tokens - 1) / sum(spec_verify_ct) over the section's own requests "
                       "(meta_info; every decode pass verifies, spec_verify_ct += 1, and appends its accepted "
                       "drafts + 1; the first token is the prefill's), equal to 1 + spec_num_correct_drafts / "
                       "spec_verify_ct")
    health_timeout_s = 30.0  # SGLANG_HEALTH_CHECK_TIMEOUT is 20 s; the answer takes at least 1 s
    generate_route = "/generate"
    token_counter = "sglang:generation_tokens_total"
    batch_gauge = "sglang:num_running_reqs"
    batch_from = ("the mean of sglang:num_running_reqs sampled through the section (sglang/srt/observability/"
                  "metrics_collector.py: \"The number of running requests.\", set every decode_log_interval steps)")
    signatures = (("scheduler-died", r"Scheduler hit an exception|Rank \d+ scheduler is dead|subprocess.*is dead"),)

    def check_launch(self, argv: list[str]) -> None:
        nodes = flag_value(argv, "--nnodes")
        if nodes not in (None, "1"):
            raise ConfigError(f"server.command runs SGLang on --nnodes {nodes}: a specsweep job leases the GPUs, "
                              f"ports and quiet host of one machine, and cannot see another's; measure on one node")

    # With --enable-dp-attention, PortArgs.init_new (srt/server_args.py) talks TCP on fixed ports
    # instead of ipc:// files: dist_init_port (--dist-init-addr's, else port + ZMQ_TCP_PORT_DELTA
    # = 233, port - 233 past 65535) and port_base = dist_init_port + 1 to port_base + 5 (tokenizer,
    # detokenizer, rpc, metrics, scheduler input, load collector; dist_init_port - 7 onwards when
    # they would pass 65535). The data-parallel ranks' worker ports are taken free at run time.
    TCP_PORT_DELTA, DERIVED = 233, 6

    def derived_ports(self, argv: list[str], port: int) -> tuple[int, ...]:
        if "--enable-dp-attention" not in argv:
            return ()
        addr = flag_value(argv, "--dist-init-addr")
        if addr is not None:
            dist = int(addr.rsplit(":", 1)[1])
        else:
            dist = port + self.TCP_PORT_DELTA if port + self.TCP_PORT_DELTA <= 65535 else port - self.TCP_PORT_DELTA
        base = dist + 1 if dist + self.DERIVED <= 65535 else dist - self.DERIVED - 1
        return (dist, *range(base, base + self.DERIVED))

    def request_body(self, prompt: list[int], n_predict: int) -> dict:
        return {"input_ids": prompt, "stream": True,
                "sampling_params": {"max_new_tokens": n_predict, "temperature": 0.0, "ignore_eos": True}}

    def tokens_so_far(self, event: dict) -> int | None:
        done = (event.get("meta_info") or {}).get("completion_tokens")
        return done if isinstance(done, int) else None

    def is_final(self, event: dict) -> bool:
        return (event.get("meta_info") or {}).get("finish_reason") is not None

    def final(self, event: dict, *, n_predict: int, prompt_len: int) -> Final:
        meta = event.get("meta_info") or {}
        reason = meta.get("finish_reason") or {}
        if reason.get("type") == "abort":
            raise InvalidResponse(f"sglang aborted the request: {reason.get('message') or reason}")
        check_counts(self.name, produced=meta.get("completion_tokens"), n_predict=n_predict,
                     evaluated=meta.get("prompt_tokens"), prompt_len=prompt_len, why=f"finish_reason={reason}")
        accepted, proposed = next(((meta[a], meta[p]) for a, p in DRAFT_FIELDS if a in meta and p in meta), (0, 0))
        verify = meta.get("spec_verify_ct")
        # No server-side decode rate: e2e_latency includes the prefill, so it is not one.
        return Final(output_tokens=meta["completion_tokens"], prompt_tokens=prompt_len, draft_tokens=int(proposed),
                     draft_accepted=int(accepted), verify_steps=int(verify) if isinstance(verify, int) else None)

    def facts(self, base_url: str, spec, *, headers=None) -> Facts:
        # 0.5.23's contract (api/v1/api_types.py, GetServerInfoResponse) has max_context_length and
        # max_total_num_tokens; newer servers return asdict(server_args), whose context_length is
        # only the --context-length we passed (so never read as a check), plus the scheduler's
        # max_total_num_tokens (the KV pool) and max_req_input_len (the longest input it resolved)
        # (srt/entrypoints/http_server.py::get_server_info; shared/reference/servers.md, December).
        info, unread = read_json(f"{base_url}/server_info", headers=headers)
        if not info:  # before the rename
            info, older = read_json(f"{base_url}/get_server_info", headers=headers)
            unread = f"{unread}, {older}" if older else ""
        context = info.get("max_context_length")
        keep = ("tp_size", "context_length", "speculative_algorithm", "speculative_num_draft_tokens",
                "speculative_draft_model_path", "speculative_ddtree_budget", "max_total_num_tokens",
                "max_req_input_len", "mem_fraction_static", "cuda_graph_max_bs")
        return Facts(version=str(info.get("version") or "unknown"),
                     max_context=context if isinstance(context, int) else None,
                     detail={k: info[k] for k in keep if k in info}, unread=unread)

    def check_context(self, spec, facts: Facts) -> Preflight:
        """The context, the longest input SGLang takes, and the KV pool, each as the server resolved it.

        A pool smaller than prompt + output does not fail a request: the scheduler clips
        max_new_tokens to what fits (srt/managers/scheduler.py, init_req_max_new_tokens), and the
        run would fail later as a token shortfall. Refused here, before the first section.
        """
        echoed = "" if facts.unread else ("/server_info gives no max_context_length (its context_length only echoes "
                                          "--context-length)")
        need = spec.context + spec.max_output_tokens
        context = context_check(facts.max_context, need, facts.unread or echoed, self.CONTEXT_REFUSAL)
        longest = context_check(facts.detail.get("max_req_input_len"), spec.context, facts.unread,
                                self.INPUT_REFUSAL, what="input length", field="max_req_input_len")
        pool = context_check(facts.detail.get("max_total_num_tokens"), need, facts.unread,
                             self.POOL_REFUSAL.replace("{context}", str(spec.context)).replace(
                                 "{output}", str(spec.max_output_tokens)),
                             what="KV pool", field="max_total_num_tokens")
        if context.unchecked and longest.checked:  # newer servers: the resolved input limit stands for it
            context = Preflight()
        return context + longest + pool

    CONTEXT_REFUSAL = ("sglang reports a context of {limit} tokens per request (max_context_length), the longest "
                       "request needs {need}; raise --context-length ({{ctx_size}}) or lower grid.context")
    INPUT_REFUSAL = ("sglang takes inputs of at most {limit} tokens (max_req_input_len), grid.context is {need}; "
                     "lower grid.context, or raise --context-length and the KV pool")
    POOL_REFUSAL = ("sglang's KV cache holds {limit} tokens (max_total_num_tokens), one request needs {need} "
                    "(context {context} + output {output}), and sglang would cut its output short; raise "
                    "--mem-fraction-static, use more GPUs (grid.tp), or lower grid.context or the sections' "
                    "output_tokens")

    def acceptance_length(self, records, delta) -> float | None:
        steps = [r for r in records if r.verify_steps]
        if not steps:
            return None
        return sum(r.output_tokens - 1 for r in steps) / sum(r.verify_steps for r in steps)


BACKEND = SGLang()
