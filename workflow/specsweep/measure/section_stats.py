"""Statistics of one section, computed from the per-request records and counter deltas."""

from __future__ import annotations

import math
from collections.abc import Sequence

from specsweep.records.request import RequestRecord
from specsweep.servers.backends import Backend

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default method); None for no values."""
    data = sorted(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """mean, min, max and the standard percentiles of a list of numbers."""
    out: dict[str, float | None] = {
        "mean": sum(values) / len(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(values, q)
    return out


def section_metrics(by_repeat: list[tuple[list[RequestRecord], float]], counters: dict[str, float],
                    backend: Backend) -> dict:
    """Section statistics over its repeats: ``by_repeat`` holds (records, wall time) per repeat.

    Throughput is total tokens over total wall time, with every repeat's own figure kept for
    the spread; latency distributions pool the requests of all repeats.
    """
    records = [r for recs, _ in by_repeat for r in recs]
    wall_s = sum(wall for _, wall in by_repeat)
    per_repeat = [sum(r.output_tokens for r in recs) / wall for recs, wall in by_repeat if wall > 0]
    return {
        **_pooled(records, wall_s, counters, backend),
        "repeats": len(by_repeat),
        "output_tok_s_repeats": per_repeat,
        "output_tok_s_min": min(per_repeat) if per_repeat else None,
        "output_tok_s_max": max(per_repeat) if per_repeat else None,
    }


def _pooled(records: list[RequestRecord], wall_s: float, counters: dict[str, float], backend: Backend) -> dict:
    tokens = sum(r.output_tokens for r in records)
    decode = [r.decode_tok_s for r in records if r.decode_tok_s is not None]
    drafted, accepted = backend.drafts(records, counters)
    return {
        "requests": len(records),
        "output_tokens": tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "wall_s": wall_s,
        "output_tok_s": tokens / wall_s if wall_s > 0 else None,
        "request_s": len(records) / wall_s if wall_s > 0 else None,
        "ttft_s": distribution([r.ttft_s for r in records]),
        "tpot_s": distribution([r.tpot_s for r in records if r.tpot_s is not None]),
        "itl_s": distribution([gap for r in records for gap in r.itl_s]),
        "e2e_s": distribution([r.e2e_s for r in records]),
        "decode_tok_s": distribution(decode),
        "schedule_lag_s": distribution([r.schedule_lag_s for r in records]),
        "draft_tokens": drafted,
        "draft_accepted": accepted,
        "draft_acceptance_rate": accepted / drafted if drafted else None,
        "acceptance_length": backend.acceptance_length(records, counters),
        "counters": counters,
    }


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for every counter (``*_total``) present in both."""
    return {k: after[k] - before[k] for k in after if k.endswith("_total") and k in before}


def add_deltas(total: dict[str, float], delta: dict[str, float]) -> dict[str, float]:
    """Sum of counter deltas over several windows (a section's repeats)."""
    return {k: total.get(k, 0.0) + delta.get(k, 0.0) for k in {*total, *delta}}
