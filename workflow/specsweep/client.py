"""Streaming HTTP client: one greedy request, every event validated, in any backend's dialect.

Token counts come from the server's own counters (the backend says where each server keeps its
running count), never from counting stream chunks: under speculative decoding one chunk can
carry several tokens.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import requests

from prometheus_client.parser import text_string_to_metric_families
from urllib3.exceptions import ReadTimeoutError

from .backends import Backend
from .errors import InvalidResponse, ServerHung

CONNECT_TIMEOUT_S = 5.0


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The bearer token every server's --api-key expects; no header without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class ConnectionLost(Exception):
    """The connection broke mid-request; the caller decides whether the server died."""


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it; times are seconds since the section started.

    ``chunk_t``/``chunk_tokens``: arrival time of every stream event that carried tokens and how
    many tokens it carried, by the server's own running count (several under speculation).
    """

    section: str
    index: int
    prompt_tokens: int
    output_tokens: int
    t_scheduled: float
    t_send: float
    t_first_token: float
    t_end: float
    chunk_t: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    server_predicted_per_second: float | None
    draft_tokens: int
    draft_accepted: int
    repeat: int = 0
    verify_steps: int | None = None  # verification forward passes, where the server reports them
    prompt_sha256: str | None = None  # identity of the prompt sent (prompts.prompt_id of its token ids)

    @property
    def schedule_lag_s(self) -> float:
        """How late the client sent the request against its schedule (client-side queueing)."""
        return self.t_send - self.t_scheduled

    @property
    def ttft_s(self) -> float:
        return self.t_first_token - self.t_send

    @property
    def e2e_s(self) -> float:
        return self.t_end - self.t_send

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if self.output_tokens < 2:
            return None
        return (self.t_end - self.t_first_token) / (self.output_tokens - 1)

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first over the time after the first token; None for 1 token."""
        span = self.t_end - self.t_first_token
        if self.output_tokens < 2 or span <= 0:
            return None
        return (self.output_tokens - 1) / span

    @property
    def itl_s(self) -> list[float]:
        """Gaps between consecutive token-carrying events: what a reader of the stream waits."""
        return [b - a for a, b in zip(self.chunk_t, self.chunk_t[1:])]


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
