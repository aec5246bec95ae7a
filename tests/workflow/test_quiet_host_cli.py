"""The quiet-host guard through real processes and the real CLI: specsweep's own Snakemake and queued
jobs are never foreign, a retry after host-not-quiet waits before it launches, and every result
keeps its figures. The guard's arithmetic: tests/unit/host/test_quiet_host.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import NAME, SHARED_GUARD, fault_study, launch_cli
from specsweep.host import quiet_host
from specsweep.records import store


def test_specsweeps_own_snakemake_and_queued_jobs_are_not_foreign():
    # A job queued for devices is `python -m specsweep launch ...`; this one only looks like one.
    queued = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "-m", "specsweep", "launch"])
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "specsweep"])
    try:
        time.sleep(0.3)
        found = quiet_host.ours(os.getpid())
        assert os.getppid() in found  # what started this process (Snakemake, for a job)
        assert queued.pid in found and stranger.pid not in found
    finally:
        for proc in (queued, stranger):
            proc.kill()
            proc.wait()


def test_a_retry_after_a_host_not_quiet_failure_waits_before_it_launches(tmp_path, model):
    folder = tmp_path / "failures" / NAME
    folder.mkdir(parents=True)
    # A record written before the class was renamed (failure schema 1): read as host-not-quiet.
    old = {"class": "noisy-host", "transient": True}
    (folder / "2026-01-01T000000.000Z-attempt1.json").write_text(json.dumps(old))
    t0 = time.monotonic()
    pause = json.dumps({**SHARED_GUARD, "retry_pause_s": 1.5})
    rc, err = launch_cli(tmp_path, fault_study(model), "--attempt", "2", "--quiet-host", pause)
    assert rc == 0, err
    assert "found the host busy: waiting 1.5 s" in err and time.monotonic() - t0 >= 1.5


@pytest.mark.alone  # the schema's guard, judging this host: nothing of the suite may run beside it
def test_result_records_the_quiet_host_figures(tmp_path, model):
    rc, err = launch_cli(tmp_path, fault_study(model, token_delay=0.01, guard={}))
    assert rc == 0, err
    doc = store.read_result(tmp_path / "launches" / f"{NAME}.json").to_json()
    assert doc["lease"]["devices"] == ["host"] and doc["quiet_host"]["max_foreign_cores"] == 0.25
    for section in doc["sections"]:
        load = section["quiet_host"]
        # What a result guarantees, not that the host was quiet: what others took stayed within the limit.
        assert load["cores"] is not None and load["method"] == "schedstat"
        assert load["max_cores"] == 0.25, load
        assert load["contended_cores"] <= 0.25 or load["cpu_s"] <= quiet_host.FLOOR_CPU_S, load
        assert section["started_at"] < section["finished_at"]

