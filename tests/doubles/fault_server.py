"""A fault-injection stand-in for llama-server: the same HTTP API, misbehaving on demand.

Only for faults a real server will not produce when asked (a crash between two sections, an
error event inside a 200 stream, a child that escapes the process group). It is launched by
specsweep exactly like a real server, through the study's command template:

    python tests/doubles/fault_server.py --port {port} --fault die-at-request:3 [--fault-log FILE]

Faults (``N`` counts /completion requests from 1; the warmup is request 1):
  none                   behave
  exit-at-startup        print a removed-argument error and exit 1 before listening
  signature-at-startup   print a CUDA illegal-instruction traceback and exit 1
  oom-at-startup         run out of host memory while loading: std::bad_alloc, then abort (SIGABRT);
                         with --oom-above-ctx N, only where -c (llama-server's context size) is above N
  never-ready            /health answers 503 "Loading model" forever
  die-at-request:N       SIGKILL itself after a few tokens of request N
  die-after-request:N    SIGKILL itself right after request N completed
  crash-at-request:N     print a CUDA illegal-instruction error mid-stream of request N, exit 1
  hang-at-request:N      stop sending bytes after a few tokens of request N (socket open)
  short-at-request:N     end request N one token short
  error-at-request:N     send an error event inside the 200 stream of request N
  http500-at-request:N   answer request N with HTTP 500
  badjson-at-request:N   send a malformed JSON event in request N
  small-context          report a slot context of 8 tokens
  escaping-child         start a child in its own session that would outlive the server
  miscount-at-request:N  count one token more in /metrics than request N streamed
  unhealthy-after-request:N  /health answers 503 once request N completed (the process runs on)
  stop-after-request:N   SIGSTOP itself on the first HTTP request after request N completed
  drop-at-request:N      close the connection after a few tokens of request N and serve on
  no-listen              run without ever listening (a stranger may take the port)
  stop-at-startup        SIGSTOP itself once listening: connections are accepted, never answered
  port-in-use-at-startup print llama-server's bind failure and exit 1
  uncounted-at-request:N final event of request N without its count of generated tokens
  misevaluated-at-request:N  final event of request N counts one prompt token fewer than sent
  mispredicted-at-request:N  final event of request N has a timings.predicted_n one above the tokens
                         it streamed and counted (llama-server fills both from the slot's count of
                         decoded tokens; the check is servers/backends/llama_server.py final)
  dying-health-after-request:N  once request N completed, /health answers 503 and the process exits
  no-metrics             /metrics answers 501, as llama-server started without --metrics
  metrics-gone-after-request:N  /metrics answers HTTP 500 once request N completed
  leave-shm              leave a file in /dev/shm, as a killed vLLM leaves its segments
``--api-key KEY`` answers every route but the public ones with 401 unless the request carries
``Authorization: Bearer KEY``, as llama-server does (tools/server/server.cpp,
middleware_validate_api_key; public: /health, /v1/health, /models, /v1/models, /api/tags).
``--ignore-sigterm`` makes the server (and an escaping child) ignore SIGTERM, as a server stuck in
a GPU call does: only SIGKILL stops it.
On SIGTERM the server writes "fault-server: SIGTERM, shutting down" and exits 0 (llama-server, too,
stops gracefully on SIGTERM): the log then shows whether a stop was graceful or a SIGKILL.
``--echo-args`` prints the whole argv at startup (secrets included), as vLLM logs its arguments.
``--fault-log FILE`` gets one line "<fault> <time.time()>" the moment a fault fires.
``--budget N`` (N > 0) drafts as llama-server's speculation does, reporting ``timings.draft_n`` and
``draft_n_accepted`` in the final event and the ``llamacpp:spec_decode_num_drafts_total`` /
``..._accepted_tokens_total`` counters (tools/server/server.cpp): one draft step per four tokens,
one token accepted a step. With ``--remember`` it is a server whose caches learn the answers, as
ngram-mod's pool and SGLang's NGRAM cache do across requests: a prompt it has answered before gets
every drafted token accepted (three a step), so a re-sent prompt shows as higher acceptance.
``--busy-above K --slow-ttft S`` is a server whose latency grows with load in a known way: a
request that arrives while K others are in flight waits S seconds before its first token (a full
batch, the queue's wait). With evenly spaced arrivals at rate r and requests of duration D, the
requests in flight at an arrival are ceil(r * D) - 1, so the highest rate whose every TTFT stays
below S is exactly K / D: what the goodput search must find.
``--speed-by-budget 0:1,4:2 --launch-noise SIGMA --starts FILE`` is a server whose throughput is
a known function of the budget plus noise of known size, for the verdict's tests: tokens come
``speed`` times faster than ``--token-delay`` at its budget, times a factor exp(N(0, SIGMA)) drawn
once per launch (the noise between launches), seeded by this start's number in FILE (a counter
of starts) so that a test knows every launch's factor. ``--fault-on-start K`` keeps ``--fault``
for the K-th start alone (other starts behave): one launch of a sweep dies, its siblings do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_DELAY_S = 0.002
PUBLIC_ROUTES = {"/health", "/v1/health", "/models", "/v1/models", "/api/tags"}


class State:
    def __init__(self, fault: str, fault_log: str | None, delay: float, api_key: str | None = None):
        name, _, n = fault.partition(":")
        self.fault, self.at = name, int(n or 0)
        self.fault_log = fault_log
        self.delay = delay
        self.requests = 0
        self.tokens_total = 0
        self.unhealthy = False
        self.api_key = api_key
        self.stop_armed = False
        self.metrics_gone = False
        self.lock = threading.Lock()
        self.budget = 0
        self.remember = False
        self.answered: set[str] = set()  # prompts seen (with --remember)
        self.drafts_total = 0
        self.accepted_total = 0
        self.inflight = 0  # /completion requests being answered
        self.busy_above = 0  # --busy-above: from this many in flight, a request waits slow_ttft
        self.slow_ttft = 0.0

    def pace(self, t0: float, i: int) -> None:
        """Sleep until the i-th token is due: a deadline per token, not a sleep per token, so that
        the rate is ``1 / delay`` however long writing an event took on a busy host (a sleep per
        token adds every write's cost and every late wake-up to the pace: under parallel tests a
        four-times-faster budget once measured about two times)."""
        due = t0 + i * self.delay - time.monotonic()
        if due > 0:
            time.sleep(due)

    def fire(self, what: str) -> None:
        if self.fault_log:
            with open(self.fault_log, "a") as fh:
                fh.write(f"{what} {time.time():.6f}\n")
        print(f"fault-server: fault {what} fires", file=sys.stderr, flush=True)


def make_handler(state: State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        chunked = False  # set per request once a streamed answer's headers are out

        def log_message(self, *args):  # keep the server log for faults
            pass

        def _json(self, code: int, doc: dict | str) -> None:
            body = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _refused(self) -> bool:
            """401 for a protected route without the key (and True), as llama-server's middleware."""
            if not state.api_key or self.path in PUBLIC_ROUTES:
                return False
            if self.headers.get("Authorization") == f"Bearer {state.api_key}":
                return False
            self._json(401, {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
            return True

        def _maybe_stop(self) -> None:
            if state.stop_armed:
                state.fire(state.fault)
                os.kill(os.getpid(), signal.SIGSTOP)

        def do_GET(self):
            self._maybe_stop()
            if self._refused():
                return
            if self.path == "/health":
                if state.fault == "never-ready" or state.unhealthy:
                    if state.fault == "dying-health-after-request":
                        threading.Timer(0.05, os._exit, args=(3,)).start()  # dies while being probed
                    return self._json(503, {"error": {"code": 503, "message": "Loading model"}})
                return self._json(200, {"status": "ok"})
            if self.path == "/props":
                n_ctx = 8 if state.fault == "small-context" else 100_000
                return self._json(200, {"build_info": "fault-server", "total_slots": 1,
                                        "default_generation_settings": {"n_ctx": n_ctx}})
            if self.path == "/v1/models":
                return self._json(200, {"object": "list", "data": [{"id": "fault-server", "object": "model"}]})
            if self.path == "/metrics":
                if state.metrics_gone:
                    return self._json(500, {"error": {"code": 500, "message": "injected"}})
                if state.fault == "no-metrics":  # tools/server/server.cpp, handle_metrics
                    message = "This server does not support metrics endpoint. Start it with `--metrics`"
                    return self._json(501, {"error": {"code": 501, "type": "not_supported_error", "message": message}})
                text = f"llamacpp:tokens_predicted_total {state.tokens_total}\n"
                if state.budget > 0:
                    text += (f"llamacpp:spec_decode_num_drafts_total {state.drafts_total}\n"
                             f"llamacpp:spec_decode_num_accepted_tokens_total {state.accepted_total}\n")
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return self.wfile.write(body)
            return self._json(404, {"error": "not found"})

        def do_POST(self):
            self._maybe_stop()
            if self._refused():
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/tokenize":
                words = body.get("content", "").split()
                # crc32, not hash(): the same text must get the same ids in every launch (PYTHONHASHSEED).
                return self._json(200, {"tokens": [zlib.crc32(w.encode()) % 49000 + 100 for w in words]})
            if self.path == "/completion":
                with state.lock:
                    state.requests += 1
                    number, busy = state.requests, state.inflight
                    state.inflight += 1
                try:
                    return self._complete(body, number, busy=busy)
                finally:
                    with state.lock:
                        state.inflight -= 1
            if self.path == "/v1/completions":  # OpenAI style, for peer clients in benchmarks/
                return self._openai_complete(body)
            return self._json(404, {"error": "not found"})

        def _complete(self, body: dict, number: int, *, busy: int = 0) -> None:
            here = number == state.at
            if here and state.fault == "http500-at-request":
                state.fire(state.fault)
                return self._json(500, {"error": {"code": 500, "message": "injected"}})
            n_predict, n_prompt = body["n_predict"], len(body["prompt"])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            # Chunked, as llama-server streams (cpp-httplib's set_chunked_content_provider in
            # tools/server/server.cpp): each event reaches the client when it is sent.
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.chunked = True
            if state.busy_above and busy >= state.busy_above:
                time.sleep(state.slow_ttft)
            produced = n_predict - 1 if here and state.fault == "short-at-request" else n_predict
            t0 = time.monotonic()
            for i in range(1, produced + 1):
                if here and i == 3:
                    self._mid_stream_fault()
                    if state.fault == "drop-at-request":
                        return  # Connection: close: the stream just ends, without its final event or last chunk
                self._event({"content": " w", "tokens": [7], "stop": False, "tokens_predicted": i,
                             "tokens_evaluated": n_prompt})
                state.pace(t0, i)
            ms = (time.monotonic() - t0) * 1000
            state.tokens_total += produced + (1 if here and state.fault == "miscount-at-request" else 0)
            if here and state.fault in ("unhealthy-after-request", "dying-health-after-request"):
                state.fire(state.fault)
                state.unhealthy = True  # before the final event: no probe can come in between
            if here and state.fault == "metrics-gone-after-request":
                state.fire(state.fault)
                state.metrics_gone = True
            if here and state.fault == "stop-after-request":
                state.stop_armed = True  # stops on the next request, when this response is complete
            drafts, accepted = self._speculate(body["prompt"], produced)
            counted = None if here and state.fault == "uncounted-at-request" else produced
            evaluated = n_prompt - 1 if here and state.fault == "misevaluated-at-request" else n_prompt
            self._event({"content": "", "stop": True, "tokens_predicted": counted, "tokens_evaluated": evaluated,
                         "stop_type": "limit", "truncated": False,
                         "timings": {"predicted_n": produced + (here and state.fault == "mispredicted-at-request"),
                                     "predicted_ms": ms,
                                     "predicted_per_second": produced / (ms / 1000) if ms else 0,
                                     **({"draft_n": drafts * state.budget, "draft_n_accepted": accepted}
                                        if state.budget > 0 else {})}})
            self.wfile.write(b"0\r\n\r\n")  # the chunked body's end
            self.wfile.flush()
            if here and state.fault == "die-after-request":
                state.fire(state.fault)
                os.kill(os.getpid(), signal.SIGKILL)

        def _speculate(self, prompt, produced: int) -> tuple[int, int]:
            """(draft steps, accepted tokens) of one request; a remembered prompt gets all accepted."""
            if state.budget <= 0:
                return 0, 0
            key = json.dumps(prompt)
            with state.lock:
                known = state.remember and key in state.answered
                state.answered.add(key)
                steps = max(1, produced // 4)
                accepted = steps * (min(3, state.budget) if known else 1)
                state.drafts_total += steps
                state.accepted_total += accepted
            return steps, accepted

        def _openai_complete(self, body: dict) -> None:
            n_predict = int(body.get("max_tokens") or 16)
            n_prompt = len(str(body.get("prompt", "")).split())
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            t0 = time.monotonic()
            for i in range(1, n_predict + 1):
                self._event({"id": "x", "object": "text_completion", "model": "fault-server",
                             "choices": [{"index": 0, "text": " w", "finish_reason": None}]})
                state.pace(t0, i)
            state.tokens_total += n_predict
            self._event({"id": "x", "object": "text_completion", "model": "fault-server",
                         "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                         "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_predict,
                                   "total_tokens": n_prompt + n_predict}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _mid_stream_fault(self) -> None:
            if state.fault == "die-at-request":
                state.fire(state.fault)
                os.kill(os.getpid(), signal.SIGKILL)
            elif state.fault == "crash-at-request":
                state.fire(state.fault)
                print("RuntimeError: CUDA error: an illegal instruction was encountered", file=sys.stderr, flush=True)
                os._exit(1)
            elif state.fault == "hang-at-request":
                state.fire(state.fault)
                time.sleep(3600)
            elif state.fault == "error-at-request":
                state.fire(state.fault)
                self._raw(b'data: {"error": {"code": 500, "message": "injected failure"}}\n\n')
            elif state.fault == "badjson-at-request":
                state.fire(state.fault)
                self._raw(b"data: {not json\n\n")
            elif state.fault == "drop-at-request":
                state.fire(state.fault)
                self.close_connection = True

        def _event(self, doc: dict) -> None:
            self._raw(f"data: {json.dumps(doc)}\n\n".encode())

        def _raw(self, data: bytes) -> None:
            if self.chunked:
                data = f"{len(data):X}\r\n".encode() + data + b"\r\n"
            self.wfile.write(data)
            self.wfile.flush()

    return Handler


def _graceful_exit(_signum, _frame) -> None:
    print("fault-server: SIGTERM, shutting down", file=sys.stderr, flush=True)
    os._exit(0)


def _count_start(path: str) -> int:
    """This start's number (1, 2, ...) in a counter file shared by every launch of a test."""
    import fcntl

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        number = int(fh.read().strip() or 0) + 1
        fh.seek(0)
        fh.truncate()
        fh.write(str(number))
    return number


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fault", default="none")
    parser.add_argument("--budget", type=int, default=0)
    parser.add_argument("--remember", action="store_true")
    parser.add_argument("--fault-log")
    parser.add_argument("--token-delay", type=float, default=TOKEN_DELAY_S)
    parser.add_argument("--echo-args", action="store_true", help="print the argv, as vLLM prints its args")
    parser.add_argument("--api-key", help="require this bearer token on every route but the public ones")
    parser.add_argument("--ignore-sigterm", action="store_true", help="only SIGKILL stops it (and its child)")
    parser.add_argument("--busy-above", type=int, default=0, help="from this many requests in flight, a new one waits")
    parser.add_argument("--slow-ttft", type=float, default=0.0, help="how long such a request waits (s)")
    parser.add_argument("--speed-by-budget", default="", help="budget:factor,...: how much faster tokens come")
    parser.add_argument("--launch-noise", type=float, default=0.0, help="sigma of log of a per-launch pace factor")
    parser.add_argument("--starts", help="a file counting starts: seeds the launch noise, numbers --fault-on-start")
    parser.add_argument("--fault-on-start", type=int, default=0, help="--fault on this start alone (1 = the first)")
    parser.add_argument("-c", "--ctx-size", type=int, default=0, help="llama-server's context size (-c)")
    parser.add_argument("--oom-above-ctx", type=int, default=0,
                        help="run out of memory at startup (oom-at-startup) where -c is above this, as a context "
                             "too large for the machine does")
    args, _unknown = parser.parse_known_args()  # accept llama-server flags and ignore them
    start = _count_start(args.starts) if args.starts else 0
    if args.fault_on_start and start != args.fault_on_start:
        args.fault = "none"
    if args.oom_above_ctx:
        args.fault = "oom-at-startup" if args.ctx_size > args.oom_above_ctx else "none"
    speeds = {int(b): float(f) for b, f in (pair.split(":") for pair in args.speed_by_budget.split(",") if pair)}
    factor = math.exp(random.Random(f"launch:{start}").gauss(0.0, args.launch_noise)) if args.launch_noise else 1.0
    args.token_delay = args.token_delay / speeds.get(args.budget, 1.0) / factor
    if args.echo_args:
        print(f"fault-server: args: {sys.argv[1:]}", file=sys.stderr, flush=True)
    state = State(args.fault, args.fault_log, args.token_delay, args.api_key)
    state.budget, state.remember = args.budget, args.remember
    state.busy_above, state.slow_ttft = args.busy_above, args.slow_ttft
    if state.fault == "exit-at-startup":
        print("error: the argument has been removed: --draft-max", file=sys.stderr, flush=True)
        sys.exit(1)
    if state.fault == "signature-at-startup":
        print("Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal instruction was "
              "encountered\nCUDA kernel errors might be asynchronously reported", file=sys.stderr, flush=True)
        sys.exit(1)
    if state.fault == "oom-at-startup":
        # llama.cpp sizes its buffers from -c at load (src/llama-context.cpp); an allocation the host
        # cannot satisfy throws std::bad_alloc, uncaught, so libstdc++'s verbose terminate handler
        # (libsupc++/vterminate.cc) prints these two lines and calls abort().
        print("llama_context: n_ctx = 2000000000\nterminate called after throwing an instance of "
              "'std::bad_alloc'\n  what():  std::bad_alloc", file=sys.stderr, flush=True)
        os.abort()
    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_sigterm else _graceful_exit)
    if state.fault == "port-in-use-at-startup":  # llama.cpp tools/server: LOG_ERR when the bind fails
        print("main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080", file=sys.stderr, flush=True)
        sys.exit(1)
    if state.fault == "leave-shm":
        shm = f"/dev/shm/specsweep-fault-{os.getpid()}"
        with open(shm, "wb") as fh:
            fh.write(b"\0" * 4096)
        print(f"fault-server: left {shm}", file=sys.stderr, flush=True)
    if state.fault == "no-listen":
        print("fault-server: running without listening", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    if state.fault == "escaping-child":
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)" \
            if args.ignore_sigterm else "import time; time.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        print(f"fault-server: escaping child pid {child.pid}", file=sys.stderr, flush=True)
    ThreadingHTTPServer.request_queue_size = 512  # the default backlog of 5 resets concurrent connects
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    if state.fault == "stop-at-startup":  # the kernel still accepts on the bound socket
        print("fault-server: stopping itself while listening", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    print(f"fault-server: listening on {args.host}:{args.port} ({args.fault}) "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
