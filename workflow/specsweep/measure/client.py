"""Streaming HTTP client: one greedy request, every event validated, in any backend's dialect.

Token counts come from the server's own counters (the backend says where each server keeps its
running count), never from counting stream chunks: under speculative decoding one chunk can
carry several tokens.
"""

from __future__ import annotations

import json
import time

import requests
from prometheus_client.parser import text_string_to_metric_families
from urllib3.exceptions import ReadTimeoutError

from specsweep.errors import InvalidResponse, ServerHung
from specsweep.records.request import RequestRecord
from specsweep.servers.backends import Backend

CONNECT_TIMEOUT_S = 5.0


class ConnectionLost(Exception):
    """The connection broke mid-request; the caller decides whether the server died."""


class _Timeline:
    """Arrival times and server-counted token increments of one stream."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.counted = 0

    def event(self, predicted: int) -> None:
        now = time.monotonic() - self.t0
        if predicted > self.counted:
            self.times.append(now)
            self.tokens.append(predicted - self.counted)
            self.counted = predicted


def stream_completion(
    backend: Backend,
    base_url: str,
    *,
    prompt: list[int],
    n_predict: int,
    stall_timeout_s: float,
    section: str,
    index: int,
    t0: float,
    t_scheduled: float | None = None,
    headers: dict[str, str] | None = None,
) -> RequestRecord:
    """Send one greedy, ignore_eos streaming request and validate every event of the answer."""
    t_send = time.monotonic() - t0
    timeline = _Timeline(t0)
    try:
        # The read timeout bounds the gap between two bytes: a stalled server trips it.
        with requests.post(
            f"{base_url}{backend.generate_route}", json=backend.request_body(prompt, n_predict), stream=True,
            timeout=(CONNECT_TIMEOUT_S, stall_timeout_s), headers=headers,
        ) as resp:
            if resp.status_code != 200:
                raise InvalidResponse(f"HTTP {resp.status_code} from {backend.generate_route}: {resp.text[:300]}")
            final = _read_stream(backend, resp, timeline)
    except requests.exceptions.ConnectionError as exc:
        # requests reports a read timeout inside a stream as a ConnectionError subclass.
        if _is_read_timeout(exc):
            raise ServerHung(f"no bytes from the server for {stall_timeout_s:g} s (stall timeout)") from exc
        raise ConnectionLost(str(exc)) from exc
    except requests.exceptions.Timeout as exc:
        raise ServerHung(f"no bytes from the server for {stall_timeout_s:g} s (stall timeout)") from exc
    except requests.exceptions.ChunkedEncodingError as exc:
        raise ConnectionLost(str(exc)) from exc
    t_end = time.monotonic() - t0
    done = backend.final(final, n_predict=n_predict, prompt_len=len(prompt))
    return RequestRecord(
        section=section, index=index, prompt_tokens=done.prompt_tokens, output_tokens=done.output_tokens,
        t_scheduled=t_send if t_scheduled is None else t_scheduled, t_send=t_send,
        t_first_token=timeline.times[0] if timeline.times else t_end, t_end=t_end,
        chunk_t=tuple(timeline.times), chunk_tokens=tuple(timeline.tokens),
        server_predicted_per_second=done.server_tok_s, draft_tokens=done.draft_tokens,
        draft_accepted=done.draft_accepted, verify_steps=done.verify_steps,
    )


def _is_read_timeout(exc: requests.exceptions.ConnectionError) -> bool:
    """requests re-raises urllib3's ReadTimeoutError inside a stream as ConnectionError(that error)."""
    return bool(exc.args) and isinstance(exc.args[0], ReadTimeoutError)


def _read_stream(backend: Backend, resp, timeline: _Timeline) -> dict:
    """Consume the stream up to its final event; record when each token arrived."""
    # A large chunk size: a small read buffer throttles long streams (a peer's known defect).
    for raw in resp.iter_lines(chunk_size=65536):
        if not raw:
            continue
        event = _parse_event(raw)
        if event is None:
            continue
        predicted = backend.tokens_so_far(event)
        if predicted is not None:
            timeline.event(predicted)
        if backend.is_final(event):
            return event
    raise ConnectionLost("stream ended without a final event")


def _parse_event(raw: bytes) -> dict | None:
    line = raw.decode("utf-8", errors="replace")
    if not line.startswith("data:"):
        return None  # SSE comments and other fields carry no data
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    try:
        event = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise InvalidResponse(f"malformed JSON in stream: {payload[:200]!r}") from exc
    if not isinstance(event, dict):
        raise InvalidResponse(f"stream event is not a JSON object: {payload[:200]!r}")
    if "error" in event:
        raise InvalidResponse(f"error event inside the stream: {json.dumps(event['error'])[:300]}")
    return event


def metrics(base_url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> dict[str, float]:
    """Prometheus samples from /metrics as {sample name: value summed over its labelled series}.

    vLLM and SGLang label their counters (engine, model, position): each series is added, not
    the last one kept. ``*_created`` timestamps are left out. Empty if the route is off.
    """
    try:
        resp = requests.get(f"{base_url}/metrics", timeout=timeout, headers=headers)
    except requests.RequestException:
        return {}
    if resp.status_code != 200:
        return {}
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(resp.text):
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    values[sample.name] = values.get(sample.name, 0.0) + sample.value
    except ValueError as exc:
        raise InvalidResponse(f"/metrics is not Prometheus text: {exc}") from exc
    return values
