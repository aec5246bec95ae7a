"""The quiet-host guard against the real llama-server, through the real workflow: a CPU hog beside
the server fails the section (host-not-quiet), a hog pinned to another core takes nothing from it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import finish, load, result_path, run_workflow, small_study
from specsweep.records import store

pytestmark = pytest.mark.e2e

HOG = "import time\nend = time.time() + 120\nwhile time.time() < end:\n    pass\n"  # bounded: 2 minutes


def quiet_study(retries: int = 0) -> dict:
    # One short section: beside a hog the server runs at a few tok/s, and the guard's verdict needs
    # a section, not a long one.
    study = small_study(grid={"budget": [0], "tp": [1], "context": [64]}, retries=retries)
    study["workload"].update(warmup_output_tokens=2, repeats=1,
                             sections=[{"name": "short", "output_tokens": 8, "requests": 1, "concurrency": 1}])
    return study


def test_a_section_measured_beside_a_cpu_hog_fails_and_the_same_study_alone_passes(embedded, tmp_path):
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        rc, out = finish(run_workflow(tmp_path, quiet_study()), timeout=600)
    finally:
        hog.kill()
        hog.wait()
    assert rc != 0, out
    name = "tp1-b0-ctx64"
    assert not result_path(tmp_path / "results/launches", name).exists()
    record = store.latest_failure(tmp_path / "results/failures", name).to_json()
    assert record["class"] == "host-not-quiet" and record["exit_code"] == 18 and record["transient"] is True
    assert "max_foreign_cores" in record["reason"] and "python" in record["reason"]
    assert "the server waited for a CPU" in record["reason"]  # contention, measured on its own threads

    # The hog is gone: the same study passes, a section the host still disturbed retried as in any study.
    rc, out = finish(run_workflow(tmp_path, quiet_study(retries=1)), timeout=600)
    assert rc == 0, out
    doc = load(result_path(tmp_path / "results/launches", name))
    for section in doc["sections"]:
        assert section["quiet_host"]["contended_cores"] <= doc["quiet_host"]["max_foreign_cores"], \
            section["quiet_host"]


def test_a_cpu_hog_pinned_to_a_core_the_server_does_not_use_takes_nothing_from_it(embedded, tmp_path):
    """The quiet-host guard judges contention, not activity: the hog ran a whole core all along, on the other one."""
    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "needs 2 CPUs: this suite's machines have them (docs/development.md)"
    study = quiet_study(retries=1)  # a section some other process disturbed on its core is retried
    study["server"] = {**study["server"], "threads": 1,
                       "command": ["taskset", "-c", str(cpus[0]), *study["server"]["command"]]}
    hog = subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=lambda: os.sched_setaffinity(0, {cpus[1]}))
    try:
        rc, out = finish(run_workflow(tmp_path, study), timeout=600)
    finally:
        hog.kill()
        hog.wait()
    assert rc == 0, out
    doc = load(tmp_path / "results/launches/tp1-b0-ctx64/launch1.json")
    limit = doc["quiet_host"]["max_foreign_cores"]
    for section in doc["sections"]:
        load_ = section["quiet_host"]
        assert load_["cores"] > 0.5 and any(p["name"].startswith("python") for p in load_["top"]), load_  # the hog
        # The hog's core was counted in all but not where the server runs (whatever else the host ran there).
        assert load_["server_cpus"] == [cpus[0]] and load_["cores"] - load_["cores_on_server_cpus"] > 0.5, load_
        assert load_["method"] == "schedstat" and load_["contended_cores"] <= limit, load_
