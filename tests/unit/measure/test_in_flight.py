"""Requests in flight counted twice (measure/in_flight.py): the client's Little's-law count against
the batch the server says it ran, each backend's way of saying it, and when the two are judged."""

from __future__ import annotations

import pytest

from specsweep.errors import LoadNotHeld
from specsweep.measure import in_flight
from specsweep.servers.backends import llama_server, sglang, vllm

LLAMA, SGLANG, VLLM = llama_server.LlamaServer(), sglang.SGLang(), vllm.VLLM()


def test_the_clients_count_is_throughput_times_mean_latency():
    # 8 requests of 2 s over 4 s: 2 requests/s x 2 s = 4 in flight (the sum of latencies over the window).
    doc = in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, [4.0] * 6, closed_loop=True)
    assert doc["client"] == 4.0 and doc["server"] == 4.0 and doc["judged"] and doc["samples"] == 6
    assert doc["tolerance"] == in_flight.TOLERANCE and doc["not_judged"] is None


def test_llama_server_gives_its_batch_from_counters_read_around_the_section():
    # tools/server/server-context.cpp: n_busy_slots_per_decode = n_busy_slots_total / n_decode_total.
    before = {"llamacpp:n_busy_slots_per_decode": 1.5, "llamacpp:n_decode_total": 100.0}
    after = {"llamacpp:n_busy_slots_per_decode": 2.5, "llamacpp:n_decode_total": 300.0}
    totals = [LLAMA.batch_totals(r)["llamacpp:n_busy_slots_total"] for r in (before, after)]
    assert totals == [150.0, 750.0]
    delta = {"llamacpp:n_busy_slots_total": totals[1] - totals[0], "llamacpp:n_decode_total": 200.0}
    assert LLAMA.batch(delta, []) == 3.0  # 600 busy slots over 200 decodes in the window
    assert LLAMA.batch({"llamacpp:n_decode_total": 0.0, "llamacpp:n_busy_slots_total": 0.0}, []) is None
    assert LLAMA.batch({"llamacpp:n_busy_slots_total": 2.0}, []) is None  # no decode count: no batch
    assert LLAMA.batch({"llamacpp:n_decode_total": 1.0, "llamacpp:n_busy_slots_total": 2.0}, []) == 2.0
    assert LLAMA.batch_totals({"llamacpp:n_decode_total": 5.0}) == {}  # a server without the gauge
    assert LLAMA.batch_gauge is None
    assert in_flight.count(LLAMA, [1.0], 1.0, delta, [], closed_loop=True)["samples"] is None


def test_vllm_and_sglang_give_theirs_by_their_running_gauge_sampled():
    assert VLLM.batch_gauge == "vllm:num_requests_running" and SGLANG.batch_gauge == "sglang:num_running_reqs"
    assert VLLM.batch({}, [1.0, 2.0, 3.0, 2.0]) == 2.0 and VLLM.batch({}, []) is None
    assert VLLM.batch_totals({"vllm:num_requests_running": 3.0}) == {}


@pytest.mark.parametrize("server, judged", [(3.41, True), (4.59, True), (3.39, False), (4.61, False)])
def test_a_closed_loop_level_is_refused_past_the_tolerance_either_way(server, judged):
    doc = in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, [server] * 5, closed_loop=True)
    if judged:
        in_flight.check("section chat at c4", doc)
        return
    with pytest.raises(LoadNotHeld) as caught:
        in_flight.check("section chat at c4", doc)
    words = str(caught.value)
    assert words.startswith(f"section chat at c4: the client kept 4.00 requests in flight (throughput x mean "
                            f"latency) but the server ran {server:.2f} at once")
    assert ("it queued the rest" in words) == (server < 4) and ("did not send" in words) == (server > 4)
    assert "sglang:num_running_reqs" in words and caught.value.exit_code == 31
    assert words.endswith("more than 15% apart: it queued the rest, so this level measured a smaller batch than it "
                          "names" if server < 4 else "more than 15% apart: it ran requests this client did not send")


def test_exactly_the_tolerance_apart_is_held(monkeypatch):
    monkeypatch.setattr(in_flight, "TOLERANCE", 0.25)
    for server in (3.0, 5.0):  # 4 in flight by the client, 1.0 = 0.25 x 4 either way
        in_flight.check("x", in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, [server] * 5, closed_loop=True))
    with pytest.raises(LoadNotHeld):
        in_flight.check("x", in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, [5.0625] * 5, closed_loop=True))


def test_the_counts_are_kept_to_four_decimals():
    doc = in_flight.count(SGLANG, [1.0], 3.0, {}, [2 / 3] * 5, closed_loop=True)
    assert doc["client"] == 0.3333 and doc["server"] == 0.6667


@pytest.mark.parametrize("closed, samples, why", [
    (False, [1.0] * 9, "an open-loop section"),
    (True, [1.0] * 4, "4 sample(s) of the server's gauge, fewer than 5"),
    (True, [], "the server reports no running-request count"),
])
def test_what_is_not_judged_says_why_and_passes(closed, samples, why):
    doc = in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, samples, closed_loop=closed)
    assert not doc["judged"] and doc["not_judged"].startswith(why)
    in_flight.check("x", doc)  # far apart, but not judged


def test_five_samples_are_enough_and_no_time_is_not_judged():
    assert in_flight.count(SGLANG, [1.0], 1.0, {}, [1.0] * 5, closed_loop=True)["judged"]
    doc = in_flight.count(SGLANG, [], 0.0, {}, [1.0] * 5, closed_loop=True)
    assert doc["client"] is None and not doc["judged"] and doc["not_judged"] == "no time passed"
