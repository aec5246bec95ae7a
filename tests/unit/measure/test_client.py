"""The client's own validation, event by event: what a stream may carry and what it may not."""

from __future__ import annotations

import json
import time

import pytest
import requests
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from specsweep.errors import InvalidResponse
from specsweep.measure import client
from specsweep.servers import backends
from specsweep.servers.backends.base import check_counts


@pytest.mark.parametrize("raw, event", [
    (b'data: {"tokens_predicted": 3}', {"tokens_predicted": 3}),
    (b'data:{"tokens_predicted": 3}', {"tokens_predicted": 3}),  # SSE allows no space after the colon
    (b"data: [DONE]", None),  # the OpenAI-style end marker carries nothing
    (b": keep-alive", None),  # an SSE comment
    (b"event: ping", None),
])
def test_events_that_carry_data_are_read_and_the_rest_skipped(raw, event):
    assert client._parse_event(raw) == event


@pytest.mark.parametrize("raw, words", [
    (b"data: {not json", "malformed JSON in stream: '{not json'"),
    (b"data: [1, 2]", "stream event is not a JSON object: '[1, 2]'"),
    (b'data: {"error": {"code": 400, "message": "context"}}',
     'error event inside the stream: {"code": 400, "message": "context"}'),
])
def test_events_that_are_not_an_answer_are_refused(raw, words):
    with pytest.raises(InvalidResponse) as caught:
        client._parse_event(raw)
    assert caught.value.reason == words


def test_bytes_that_are_not_utf8_do_not_break_the_reader():
    # The text is never what is counted (the server's token counts are): a stray byte in it is
    # read as U+FFFD, not a crash of the client that would pass for a failed configuration.
    assert client._parse_event(b'data: {"content": "caf\xe9", "tokens_predicted": 3}') == {
        "content": "caf\ufffd", "tokens_predicted": 3}


def test_a_refused_event_is_quoted_but_never_at_length():
    # A server that streams garbage must not flood the failure record: 200 characters of the
    # payload, 300 of an error object, are enough to recognise it.
    garbage, listing, message = "x" * 500, "[" + "1, " * 200 + "1]", "m" * 400
    cases = [
        (f"data: {{{garbage}", f"malformed JSON in stream: {('{' + garbage)[:200]!r}"),
        (f"data: {listing}", f"stream event is not a JSON object: {listing[:200]!r}"),
        (f'data: {{"error": "{message}"}}', f"error event inside the stream: {json.dumps(message)[:300]}"),
    ]
    for raw, words in cases:
        with pytest.raises(InvalidResponse) as caught:
            client._parse_event(raw.encode())
        assert caught.value.reason == words


def test_only_a_read_timeout_inside_the_stream_counts_as_a_stall():
    timeout = requests.exceptions.ConnectionError(ReadTimeoutError(None, "/completion", "Read timed out."))
    broken = requests.exceptions.ConnectionError(ProtocolError("Connection broken: IncompleteRead"))
    assert client._is_read_timeout(timeout)
    assert not client._is_read_timeout(broken)
    assert not client._is_read_timeout(requests.exceptions.ConnectionError())


def test_counts_must_match_exactly_what_was_asked_and_sent():
    check_counts("srv", produced=8, n_predict=8, evaluated=16, prompt_len=16)
    check_counts("srv", produced=8, n_predict=8, evaluated=None, prompt_len=16)  # a server that does not say
    cases = [
        (dict(produced=None, evaluated=16), "srv: final event has no integer count of generated tokens"),
        (dict(produced=7, evaluated=16), "server generated 7 tokens, 8 were requested with ignore_eos"),
        (dict(produced=7, evaluated=16, why="stopped at EOS"),
         "server generated 7 tokens, 8 were requested with ignore_eos (stopped at EOS)"),
        (dict(produced=9, evaluated=16), "server generated 9 tokens, 8 were requested with ignore_eos"),
        (dict(produced=8, evaluated=15), "server evaluated 15 prompt tokens, 16 were sent"),
    ]
    for kwargs, words in cases:
        with pytest.raises(InvalidResponse) as caught:
            check_counts("srv", n_predict=8, prompt_len=16, **kwargs)
        assert caught.value.reason == words


class Lines:
    """The one part of a streamed requests.Response that _read_stream uses: its lines."""

    def __init__(self, lines: list[bytes]):
        self.lines = lines

    def iter_lines(self, chunk_size: int):
        return iter(self.lines)


def test_a_stream_is_read_past_blank_lines_and_comments_to_its_final_event():
    backend = backends.get("llama-server")
    timeline = client._Timeline(time.monotonic())
    final = client._read_stream(backend, Lines([
        b'data: {"tokens_predicted": 1, "stop": false}', b"", b": keep-alive",
        b'data: {"tokens_predicted": 3, "stop": false}', b'data: {"tokens_predicted": 3, "stop": true}',
        b'data: {"tokens_predicted": 99, "stop": false}',  # after the final event: never read
    ]), timeline)
    assert final == {"tokens_predicted": 3, "stop": True}
    assert timeline.tokens == [1, 2] and timeline.counted == 3  # one event carried two tokens


def test_a_stream_that_ends_without_its_final_event_is_a_lost_connection():
    backend = backends.get("llama-server")
    with pytest.raises(client.ConnectionLost) as caught:
        client._read_stream(backend, Lines([b'data: {"tokens_predicted": 1, "stop": false}']),
                            client._Timeline(time.monotonic()))
    assert str(caught.value) == "stream ended without a final event"
