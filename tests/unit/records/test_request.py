"""A request's derived times and rates, from timestamps whose answers are known."""

from __future__ import annotations

import pytest

from specsweep.records.request import RequestRecord


def _record(output_tokens: int, *, send: float = 1.0, first: float = 1.2, end: float = 2.2) -> RequestRecord:
    return RequestRecord(section="s", index=0, prompt_tokens=8, output_tokens=output_tokens, t_scheduled=0.9,
                         t_send=send, t_first_token=first, t_end=end, chunk_t=(first, 1.7, end),
                         chunk_tokens=(1, 3, output_tokens), server_predicted_per_second=None,
                         draft_tokens=0, draft_accepted=0)


def test_decode_rate_counts_the_tokens_after_the_first_over_the_time_after_the_first():
    # 11 tokens: 10 after the first, in the 1.0 s from the first token's arrival to the end; neither
    # the first token (11 / 1.0) nor the time before it (10 / 1.2) belongs to the decode rate.
    rec = _record(11)
    assert rec.decode_tok_s == pytest.approx(10.0)
    assert rec.tpot_s == pytest.approx(0.1)
    assert rec.ttft_s == pytest.approx(0.2) and rec.e2e_s == pytest.approx(1.2)
    assert rec.schedule_lag_s == pytest.approx(0.1)
    assert rec.itl_s == pytest.approx([0.5, 0.5])


def test_one_token_or_no_time_after_it_has_no_decode_rate_rather_than_a_made_up_one():
    assert _record(1).decode_tok_s is None and _record(1).tpot_s is None
    assert _record(5, first=2.2, end=2.2).decode_tok_s is None
