"""Streaming HTTP client for llama-server's native /completion route.

Token counts come from the server's own counters (``tokens_predicted``, ``timings``), never from
counting stream chunks: under speculative decoding one chunk can carry several tokens.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import requests

from .errors import InvalidResponse, ServerHung

CONNECT_TIMEOUT_S = 5.0


class ConnectionLost(Exception):
    """The connection broke mid-request; the caller decides whether the server died."""


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it; times are seconds since the section started."""

    section: str
    index: int
    prompt_tokens: int
    output_tokens: int
    t_send: float
    t_first_token: float
    t_end: float
    chunks: int
    server_predicted_per_second: float | None
    draft_tokens: int
    draft_accepted: int

    @property
    def ttft_s(self) -> float:
        return self.t_first_token - self.t_send

    @property
    def e2e_s(self) -> float:
        return self.t_end - self.t_send

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first over the time after the first token; None for 1 token."""
        span = self.t_end - self.t_first_token
        if self.output_tokens < 2 or span <= 0:
            return None
        return (self.output_tokens - 1) / span


def stream_completion(
    base_url: str,
    *,
    prompt: list[int],
    n_predict: int,
    stall_timeout_s: float,
    section: str,
    index: int,
    t0: float,
) -> RequestRecord:
    """Send one greedy, ignore_eos streaming request and validate every event of the answer."""
    body = {
        "prompt": prompt,
        "n_predict": n_predict,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "cache_prompt": False,  # every request pays its own prefill, as a fresh prompt would
    }
    t_send = time.monotonic() - t0
    try:
        # The read timeout bounds the gap between two bytes: a stalled server trips it.
        with requests.post(
            f"{base_url}/completion", json=body, stream=True, timeout=(CONNECT_TIMEOUT_S, stall_timeout_s)
        ) as resp:
            if resp.status_code != 200:
                raise InvalidResponse(f"HTTP {resp.status_code} from /completion: {resp.text[:300]}")
            return _read_stream(resp, section=section, index=index, n_predict=n_predict,
                                prompt_len=len(prompt), t0=t0, t_send=t_send)
    except requests.exceptions.ConnectionError as exc:
        # requests reports a read timeout inside a stream as a ConnectionError subclass.
        if _is_read_timeout(exc):
            raise ServerHung(f"no bytes from the server for {stall_timeout_s:g} s (stall timeout)") from exc
        raise ConnectionLost(str(exc)) from exc
    except requests.exceptions.Timeout as exc:
        raise ServerHung(f"no bytes from the server for {stall_timeout_s:g} s (stall timeout)") from exc
    except requests.exceptions.ChunkedEncodingError as exc:
        raise ConnectionLost(str(exc)) from exc


def _is_read_timeout(exc: Exception) -> bool:
    text = repr(exc)
    return "Read timed out" in text or "ReadTimeout" in text


def _read_stream(resp, *, section, index, n_predict, prompt_len, t0, t_send) -> RequestRecord:
    t_first = None
    chunks = 0
    final = None
    for raw in resp.iter_lines():
        if not raw:
            continue
        event = _parse_event(raw)
        if event is None:
            continue
        chunks += 1
        if t_first is None and event.get("tokens_predicted", 0) >= 1:
            t_first = time.monotonic() - t0
        if event.get("stop"):
            final = event
            break
    t_end = time.monotonic() - t0
    if final is None:
        raise ConnectionLost("stream ended without a final event")
    return _record(final, section=section, index=index, n_predict=n_predict, prompt_len=prompt_len,
                   t_send=t_send, t_first=t_first if t_first is not None else t_end, t_end=t_end,
                   chunks=chunks)


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


def _record(final: dict, *, section, index, n_predict, prompt_len, t_send, t_first, t_end, chunks) -> RequestRecord:
    timings = final.get("timings") or {}
    produced = final.get("tokens_predicted")
    if not isinstance(produced, int):
        raise InvalidResponse("final event has no integer tokens_predicted")
    if produced != n_predict:
        raise InvalidResponse(
            f"server generated {produced} tokens, {n_predict} were requested with ignore_eos "
            f"(stop_type={final.get('stop_type')!r}"
            + (", truncated: the slot's context is full)" if final.get("truncated") else ")")
        )
    if timings.get("predicted_n", produced) != produced:
        raise InvalidResponse(f"timings.predicted_n {timings.get('predicted_n')} != tokens_predicted {produced}")
    evaluated = final.get("tokens_evaluated", prompt_len)
    if evaluated != prompt_len:
        raise InvalidResponse(f"server evaluated {evaluated} prompt tokens, {prompt_len} were sent")
    return RequestRecord(
        section=section, index=index, prompt_tokens=prompt_len, output_tokens=produced,
        t_send=t_send, t_first_token=t_first, t_end=t_end, chunks=chunks,
        server_predicted_per_second=timings.get("predicted_per_second"),
        draft_tokens=int(timings.get("draft_n", 0)),
        draft_accepted=int(timings.get("draft_n_accepted", 0)),
    )


def tokenize(base_url: str, text: str, timeout: float = 30.0) -> list[int]:
    """Token ids of a text, as the server counts them."""
    resp = requests.post(f"{base_url}/tokenize", json={"content": text, "add_special": False}, timeout=timeout)
    if resp.status_code != 200:
        raise InvalidResponse(f"HTTP {resp.status_code} from /tokenize: {resp.text[:200]}")
    tokens = resp.json().get("tokens")
    if not isinstance(tokens, list) or not tokens:
        raise InvalidResponse("/tokenize returned no tokens")
    return tokens


def server_info(base_url: str, timeout: float = 5.0) -> dict:
    """What the running server says about itself (build, slot context); empty if unknown."""
    try:
        resp = requests.get(f"{base_url}/props", timeout=timeout)
        return resp.json() if resp.status_code == 200 else {}
    except (requests.RequestException, ValueError):
        return {}


def metrics(base_url: str, timeout: float = 5.0) -> dict[str, float]:
    """Prometheus counters from /metrics as {name: value}; empty if the route is off."""
    try:
        resp = requests.get(f"{base_url}/metrics", timeout=timeout)
    except requests.RequestException:
        return {}
    if resp.status_code != 200:
        return {}
    values = {}
    for line in resp.text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name.split("{")[0]] = float(value)
        except ValueError:
            continue
    return values
