"""A stand-in for SGLang's HTTP server (sglang 0.5.23), for contract tests on a machine without CUDA.

It answers as SGLang's own source says, file by file (all in the sglang 0.5.23 wheel):

- ``sglang/srt/entrypoints/http_server.py``: ``/health`` and ``/health_generate`` share one
  handler: 503 while starting, else a one-token generation that answers 200 after at least one
  second (``await asyncio.sleep(1)``) and is kept out of the metrics (``log_metrics=False``).
  ``/generate`` checks the body against the contract (``api_contract.generate_contract_error``:
  HTTP 400 ``{"error": "<message>"}``), then streams ``data: {json}\\n\\n`` chunks and
  ``data: [DONE]\\n\\n``; a ``ValueError`` inside the stream (context overflow) becomes one
  ``data: {"error": {"message", "type": "invalid_request_error", "code": 400, "retryable"}}``
  chunk inside the HTTP 200 answer. ``/server_info`` (and the deprecated ``/get_server_info``)
  return the resolved server args (``context_length`` as passed), ``max_context_length`` and
  ``max_total_num_tokens`` (the KV pool, ``--max-total-tokens`` here) as 0.5.23's
  ``GetServerInfoResponse`` declares them, ``max_req_input_len`` (min(context, pool) - 1 - 5) as
  newer servers add it (shared/reference/servers.md, December), and ``version``;
  ``/tokenize`` is the OpenAI-style route. ``--server-info newer`` answers as newer servers do
  (``asdict(server_args)``: ``context_length`` as passed, no ``max_context_length``, beside the
  scheduler's ``max_total_num_tokens`` and ``max_req_input_len``); ``missing`` answers 404 on both
  routes, as a fork that renamed them would.
- ``sglang/srt/managers/scheduler.py``: a pool smaller than input + output clips the request's
  ``max_new_tokens`` to what fits, without an error (``init_req_max_new_tokens``).
- ``sglang/srt/managers/tokenizer_manager.py``: ``meta_info`` has ``id``, ``prompt_tokens``,
  ``completion_tokens`` (running), ``finish_reason`` (null until the last chunk, then
  ``{"type": "length", "length": n}``), ``cached_tokens``; the speculation fields come on the
  final chunk only (``_calculate_spec_decoding_metrics``): ``spec_accept_rate``,
  ``spec_accept_length`` = completion_tokens / spec_verify_ct, ``spec_num_correct_drafts``,
  ``spec_num_proposed_drafts`` = spec_verify_ct x (draft tokens - 1), ``spec_verify_ct``.
  The first token comes from the prefill; ``spec_verify_ct`` counts the decode passes after it,
  each of which appends its accepted drafts plus one bonus token, and ``spec_num_correct_drafts``
  sums the accepted drafts (``req.spec_verify_ct += 1``, ``req.spec_accepted_tokens += accept_len``
  with accept_len = tokens appended - 1: the speculative workers' verify, e.g.
  ``srt/speculative/ngram_info.py`` and ``eagle_info.py``).
  ``--spelling`` gives the two older names of the draft fields. Input over the context length:
  "The input (N tokens) is longer than the model's context length (C tokens)."
- ``sglang/srt/entrypoints/openai/serving_tokenize.py``: ``{"tokens", "count", "max_model_len"}``.
- ``sglang/srt/observability/metrics_collector.py``: labelled counters
  ``sglang:generation_tokens_total`` and ``sglang:spec_verify_calls_total``; the gauge
  ``sglang:spec_accept_length`` holds only the last logging window; the gauge
  ``sglang:num_running_reqs`` ("The number of running requests.", mostrecent) is set when the
  scheduler logs its decode stats, every ``--decode-log-interval`` (40) decode steps
  (``scheduler_output_processor_mixin.py``: ``forward_ct_decode % decode_log_interval == 0``); here
  a step of any request counts as one. ``--max-running-requests N`` runs at most N requests at once,
  the rest wait in the queue (``schedule_policy.py``), as the real flag does.

With ``--api-types FILE`` (SGLang's own ``api_types.py``) every ``/generate`` body is decoded by
its ``GenerateRequest``, exactly as the real server's contract check does.

    python tests/doubles/sglang_standin.py --port {port} --context-length {ctx_size}
        [--speculative-num-draft-tokens {budget}] [--report-draft-tokens N] [--spelling new|between|old]
        [--server-info newer|missing]
        [--fault die-at-request:N|error-at-request:N] [--api-types FILE] [--max-running-requests N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import zlib
from http.server import ThreadingHTTPServer

from standin_http import StandinHandler  # beside this file: on the path when it runs as a script

VERSION = "0.5.23"
SPELLINGS = {
    "new": ("spec_num_correct_drafts", "spec_num_proposed_drafts"),
    "between": ("spec_accepted_drafts", "spec_proposed_drafts"),
    "old": ("spec_accept_token_num", "spec_draft_token_num"),
}


class State:
    def __init__(self, args):
        self.args = args
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.requests = 0
        self.generated = 0  # sglang:generation_tokens_total
        self.verify_calls = 0  # sglang:spec_verify_calls_total
        self.running, self.running_logged, self.decode_steps = 0, 0, 0  # sglang:num_running_reqs
        self.slots = threading.BoundedSemaphore(args.max_running_requests)
        self.contract = _load_contract(args.api_types) if args.api_types else None
        name, _, n = args.fault.partition(":")
        self.fault, self.fault_at = name, int(n or 0)

    @property
    def draft_tokens(self) -> int:
        return self.args.speculative_num_draft_tokens

    @property
    def reported_draft_tokens(self) -> int | None:
        """What /server_info says it runs: the flag's value (None without speculation), or what
        --report-draft-tokens makes it say, as a server whose adaptive mode fell back would."""
        return self.args.report_draft_tokens or self.draft_tokens or None

    def steps(self, n: int, index: int) -> list[int]:
        """Tokens each forward pass makes: the prefill's one, then per verify step 1 + the drafts it
        accepted, a seeded pattern of 1..draft tokens (1 a step without speculation)."""
        if self.draft_tokens <= 1:
            return [1] * n
        out, i = [1], 0
        while sum(out) < n:
            out.append(min(1 + (index + i) % self.draft_tokens, n - sum(out)))
            i += 1
        return out

    def step(self, joined: int) -> None:
        """A request joined (+1) or left (-1) the running batch, or made a decode step (0); the
        gauge takes the running count every decode_log_interval steps, as the scheduler logs it."""
        with self.lock:
            self.running += joined
            if joined == 0:
                self.decode_steps += 1
                if self.decode_steps % self.args.decode_log_interval == 0:
                    self.running_logged = self.running


def _load_contract(path: str):
    spec = importlib.util.spec_from_file_location("sglang_api_types", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_handler(state: State):
    class Handler(StandinHandler):

        def _empty(self, code: int) -> None:
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _authorized(self) -> bool:
            if state.args.api_key and self.headers.get("Authorization") != f"Bearer {state.args.api_key}":
                self._json(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self):
            if not self._authorized():
                return
            if self.path in ("/health", "/health_generate"):
                if time.monotonic() - state.started < state.args.startup_s:
                    return self._empty(503)  # ServerStatus.Starting
                time.sleep(1.0)  # the handler polls once a second for the generated token
                return self._empty(200)
            if self.path in ("/server_info", "/get_server_info"):
                if state.args.server_info == "missing":
                    return self._json(404, {"detail": "Not Found"})
                if state.args.server_info == "newer":  # asdict(server_args) + the scheduler's limits
                    return self._json(200, {
                        "model_path": state.args.model_path, "context_length": state.args.context_length,
                        "tp_size": state.args.tp, "max_total_num_tokens": state.args.max_total_tokens,
                        "max_req_input_len": min(state.args.context_length, state.args.max_total_tokens) - 1 - 5,
                        "speculative_algorithm": state.args.speculative_algorithm,
                        "speculative_num_draft_tokens": state.reported_draft_tokens,
                        "version": VERSION})
                return self._json(200, {
                    "model_path": state.args.model_path, "served_model_name": state.args.model_path,
                    "tokenizer_path": state.args.model_path, "context_length": state.args.context_length,
                    "max_context_length": state.args.context_length,
                    "max_total_num_tokens": state.args.max_total_tokens,
                    "max_req_input_len": min(state.args.context_length, state.args.max_total_tokens) - 1 - 5,
                    "tp_size": state.args.tp, "speculative_algorithm": state.args.speculative_algorithm,
                    "speculative_num_draft_tokens": state.reported_draft_tokens,
                    "version": VERSION, "internal_states": [{"avg_spec_accept_length": 9.99}],
                    "host": state.args.host, "port": state.args.port,
                })
            if self.path == "/metrics":
                labels = f'model_name="{state.args.model_path}",tp_rank="0"'
                text = (
                    "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
                    "# TYPE sglang:generation_tokens_total counter\n"
                    f"sglang:generation_tokens_total{{{labels}}} {float(state.generated)}\n"
                    "# HELP sglang:spec_verify_calls_total Number of speculative verify calls.\n"
                    "# TYPE sglang:spec_verify_calls_total counter\n"
                    f"sglang:spec_verify_calls_total{{{labels}}} {float(state.verify_calls)}\n"
                    "# HELP sglang:num_running_reqs The number of running requests.\n"
                    "# TYPE sglang:num_running_reqs gauge\n"
                    f"sglang:num_running_reqs{{{labels}}} {float(state.running_logged)}\n"
                    "# HELP sglang:spec_accept_length The average acceptance length (last window).\n"
                    "# TYPE sglang:spec_accept_length gauge\n"
                    f"sglang:spec_accept_length{{{labels}}} 9.99\n"
                )
                return self._metrics(text)
            return self._json(404, {"detail": "Not Found"})

        def do_POST(self):
            if not self._authorized():
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path in ("/tokenize", "/v1/tokenize"):
                words = str(body.get("prompt", "")).split()
                ids = [zlib.crc32(w.encode()) % 1900 + 100 for w in words]  # the same ids every launch
                return self._json(200, {"tokens": ids, "count": len(ids), "max_model_len": state.args.context_length})
            if self.path == "/generate":
                if state.contract is not None:
                    try:
                        state.contract.GenerateRequest.from_json_value(body)
                    except state.contract.JsonContractError as exc:
                        return self._json(400, {"error": str(exc)})
                with state.lock:
                    state.requests += 1
                    number = state.requests
                with state.slots:  # beyond --max-running-requests a request waits in the queue
                    state.step(+1)
                    try:
                        return self._generate(body, number)
                    finally:
                        state.step(-1)
            return self._json(404, {"detail": "Not Found"})

        def _generate(self, body: dict, number: int) -> None:
            params = body.get("sampling_params") or {}
            n, ids = int(params.get("max_new_tokens", 128)), body.get("input_ids") or []
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            context = state.args.context_length
            if len(ids) >= context:
                return self._error(f"The input ({len(ids)} tokens) is longer than the model's context length "
                                   f"({context} tokens).")
            if len(ids) + n > context:
                return self._error(f"Requested token count exceeds the model's maximum context length of {context} "
                                   f"tokens. You requested a total of {len(ids) + n} tokens: {len(ids)} tokens from "
                                   f"the input messages and {n} tokens for the completion.")
            # A pool too small for input + output: the scheduler clips max_new_tokens to what fits
            # (srt/managers/scheduler.py, init_req_max_new_tokens), silently.
            n = min(n, state.args.max_total_tokens - 1 - len(ids))
            steps = state.steps(n, number)
            meta = {"id": f"req-{number}", "prompt_tokens": len(ids), "completion_tokens": 0, "finish_reason": None,
                    "cached_tokens": 0}
            out_ids: list[int] = []
            for step, k in enumerate(steps, 1):
                if number == state.fault_at and step == 2:
                    self._fault()
                out_ids += [7] * k
                meta = {**meta, "completion_tokens": len(out_ids)}
                if step == len(steps):  # every pass after the prefill verified drafts (spec_verify_ct)
                    meta = {**meta, "finish_reason": {"type": "length", "length": n}, "e2e_latency": 0.01 * n,
                            **self._spec_fields(len(steps) - 1, len(out_ids))}
                self._chunk({"text": " w" * len(out_ids), "output_ids": list(out_ids), "meta_info": meta})
                state.step(0)
                time.sleep(state.args.token_delay * k)
            with state.lock:
                state.generated += len(out_ids)
                state.verify_calls += len(steps) - 1 if state.draft_tokens > 1 else 0
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _spec_fields(self, verify_ct: int, completion: int) -> dict:
            if state.draft_tokens <= 1 or verify_ct == 0:
                return {}
            proposed = verify_ct * (state.draft_tokens - 1)
            # The prefill made one token; each verify step its accepted drafts and one bonus token
            # (spec_accepted_tokens += accept_len, accept_len = tokens the step appended - 1).
            correct = completion - 1 - verify_ct
            accepted_name, proposed_name = SPELLINGS[state.args.spelling]
            return {"spec_accept_rate": correct / proposed, "spec_accept_length": completion / verify_ct,
                    accepted_name: correct, proposed_name: proposed, "spec_verify_ct": verify_ct}

        def _fault(self) -> None:
            if state.fault == "die-at-request":
                print("[2026-11-29 10:00:00 TP0] Scheduler hit an exception: RuntimeError: CUDA error: an illegal "
                      "instruction was encountered", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if state.fault == "error-at-request":
                self._error("injected: detokenizer failed", code=500)

        def _error(self, message: str, code: int = 400) -> None:
            self._chunk({"error": {"message": message, "type": "invalid_request_error", "code": code,
                                   "retryable": False}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True


    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-path", default="stand-in/model")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--context-length", type=int, default=32768)
    # The KV pool in tokens (--max-total-tokens; the real server sizes it from GPU memory).
    parser.add_argument("--max-total-tokens", type=int, default=100_000)
    parser.add_argument("--speculative-algorithm", default=None)
    parser.add_argument("--speculative-num-draft-tokens", type=int, default=0)
    parser.add_argument("--report-draft-tokens", type=int, default=0,
                        help="report this speculative_num_draft_tokens in /server_info instead of the flag's")
    parser.add_argument("--spelling", choices=sorted(SPELLINGS), default="new")
    parser.add_argument("--server-info", choices=["0.5.23", "newer", "missing"], default="0.5.23")
    parser.add_argument("--api-key")
    parser.add_argument("--api-types", help="SGLang's own sglang/api/v1/api_types.py: validate every request")
    parser.add_argument("--fault", default="none")
    parser.add_argument("--max-running-requests", type=int, default=1024)
    parser.add_argument("--decode-log-interval", type=int, default=40)
    parser.add_argument("--startup-s", type=float, default=0.5)
    parser.add_argument("--token-delay", type=float, default=0.002)
    args, _unknown = parser.parse_known_args()  # the rest of SGLang's flags: accepted, ignored
    state = State(args)
    ThreadingHTTPServer.request_queue_size = 512
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    print(f"sglang stand-in {VERSION} on {args.host}:{args.port} CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')} env SGLANG_DDTREE_MAX_TOPK="
          f"{os.environ.get('SGLANG_DDTREE_MAX_TOPK', '')}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
