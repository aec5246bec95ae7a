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
    doc = in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, [4.0] * 10, closed_loop=True)
    assert doc["client"] == 4.0 and doc["server"] == 4.0 and doc["judged"] and doc["samples"] == 10
    assert doc["tolerance"] == in_flight.TOLERANCE_SAMPLED == 0.5 and doc["not_judged"] is None


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


def counted(busy_per_decode: float) -> dict:
    """The deltas of llama-server's counters over a window of 100 decodes at that many slots busy."""
    return {"llamacpp:n_busy_slots_total": 100 * busy_per_decode, "llamacpp:n_decode_total": 100.0}


@pytest.mark.parametrize("server, held", [(3.41, True), (3.39, False), (9.0, True)])
def test_a_closed_loop_level_the_server_ran_short_of_is_refused(server, held):
    """Fewer than the client kept in flight: the rest queued. More is recorded, not refused:
    llama-server's count is per decode, blind to the time it idled between the client's requests."""
    doc = in_flight.count(LLAMA, [2.0] * 8, 4.0, counted(server), [], closed_loop=True)
    assert doc["tolerance"] == in_flight.TOLERANCE == 0.15 and doc["judged"]
    if held:
        in_flight.check("section chat at c4", doc)
        return
    with pytest.raises(LoadNotHeld) as caught:
        in_flight.check("section chat at c4", doc)
    assert str(caught.value) == (
        f"section chat at c4: the client kept 4.00 requests in flight (throughput x mean latency) but the server "
        f"ran 3.39 at once ({LLAMA.batch_from}), more than 15% fewer: it queued the rest, so this level measured "
        f"a smaller batch than it names")
    assert caught.value.exit_code == 31


def test_exactly_the_tolerance_short_is_held_and_a_sampled_gauge_gets_the_wider_one():
    in_flight.check("x", in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, [2.0] * 10, closed_loop=True))  # 2.0 = 0.5 x 4
    with pytest.raises(LoadNotHeld, match="more than 50% fewer"):
        in_flight.check("x", in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, [1.9375] * 10, closed_loop=True))
    with pytest.raises(LoadNotHeld, match="more than 15% fewer"):
        in_flight.check("x", in_flight.count(LLAMA, [2.0] * 8, 4.0, counted(3.0), [], closed_loop=True))


def test_a_gauge_is_read_from_where_it_moved_and_one_that_never_moved_judges_nothing():
    # The value before the section (1, left by a warmup) is not this section's: from its first move on.
    assert in_flight.fresh([1.0, 1.0, 4.0, 4.0, 3.0], 1.0) == [4.0, 4.0, 3.0]
    assert in_flight.fresh([4.0, 4.0], 1.0) == [4.0, 4.0] and in_flight.fresh([2.0, 2.0], None) == [2.0, 2.0]
    assert in_flight.fresh([0.0] * 12, 0.0) == []
    doc = in_flight.count(SGLANG, [1.0] * 4, 4.0, {}, in_flight.fresh([0.0] * 12, 0.0), closed_loop=True)
    assert not doc["judged"] and doc["server"] is None


def test_the_counts_are_kept_to_four_decimals():
    doc = in_flight.count(SGLANG, [1.0], 3.0, {}, [2 / 3] * 10, closed_loop=True)
    assert doc["client"] == 0.3333 and doc["server"] == 0.6667


@pytest.mark.parametrize("closed, samples, why", [
    (False, [1.0] * 9, "an open-loop section"),
    (True, [1.0] * 9, "9 fresh sample(s) of the server's gauge (read after it moved from its value before the "
                      "section), fewer than 10"),
    (True, [], "the server reports no running-request count"),
])
def test_what_is_not_judged_says_why_and_passes(closed, samples, why):
    doc = in_flight.count(SGLANG, [2.0] * 8, 4.0, {}, samples, closed_loop=closed)
    assert not doc["judged"] and doc["not_judged"].startswith(why)
    in_flight.check("x", doc)  # far apart, but not judged


def test_ten_samples_are_enough_and_no_time_is_not_judged():
    assert in_flight.count(SGLANG, [1.0], 1.0, {}, [1.0] * 10, closed_loop=True)["judged"]
    doc = in_flight.count(SGLANG, [], 0.0, {}, [1.0] * 10, closed_loop=True)
    assert doc["client"] is None and not doc["judged"] and doc["not_judged"] == "no time passed"
