"""Load shape: seeded schedules and schedule lag. Through the real CLI (the open-loop schedule, the
user's own prompt file, deaths between requests): tests/workflow/test_workload_cli.py."""

from __future__ import annotations

import statistics

import pytest

from conftest import fault_study
from specsweep.measure import workload
from specsweep.spec import Section


def test_schedule_is_seeded_and_has_the_asked_rate():
    section = Section(name="s", output_tokens=1, requests=2000, request_rate=50.0)
    times = workload.schedule(section, seed=3)
    assert times == workload.schedule(section, seed=3) and times != workload.schedule(section, seed=4)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] == 0 and statistics.mean(gaps) == pytest.approx(1 / 50, rel=0.1)
    assert workload.schedule(Section(name="s", output_tokens=1, requests=3), seed=3) is None


def test_the_schedule_check_refuses_only_a_lag_above_the_limit(model):
    from specsweep.errors import ClientOverload
    from specsweep.measure import section_checks
    from specsweep.study.grid import expand_grid

    spec = expand_grid(fault_study(model))[0]
    limit = spec.max_schedule_lag_s
    section_checks.check_schedule(spec, "section short", {"schedule_lag_s": {"p99": limit}})  # at the limit: kept
    section_checks.check_schedule(spec, "section short", {"schedule_lag_s": {"p99": None}})  # closed loop: no schedule
    with pytest.raises(ClientOverload) as caught:
        section_checks.check_schedule(spec, "section short", {"schedule_lag_s": {"p99": 0.2}})
    assert caught.value.reason.startswith(
        f"section short: requests left the client 200.0 ms late (p99) against their schedule, above "
        f"workload.max_schedule_lag_s = {limit * 1000:.1f} ms")


