"""benchmarks/process_cpu.py: each Python process a run starts is counted once, under its kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import benchmark_module

process_cpu = benchmark_module("process_cpu")


def test_each_process_is_named_by_what_it_ran():
    assert process_cpu.kind(["/x/workflow/specsweep/__main__.py", "launch", "--spec"]) == "specsweep launch"
    assert process_cpu.kind(["/v/site-packages/snakemake/__main__.py", "-s"]) == "snakemake"
    assert process_cpu.kind(["/v/bin/snakemake", "--cores"]) == "snakemake"
    assert process_cpu.kind(["-c"]) == process_cpu.kind(["/v/site-packages/pytest/__main__.py", "-q"])
    assert process_cpu.kind(["/v/site-packages/pip/__main__.py", "install"]) == "pip"
    assert process_cpu.kind(["/repo/tests/doubles/fault_server.py", "--port"]) == "fault_server.py"


def test_a_process_and_its_child_each_write_their_own_cpu_at_exit(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(process_cpu.SITECUSTOMIZE)
    log = tmp_path / "processes.jsonl"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SPECSWEEP_PROCESS_CPU": str(log)}
    burn = "import subprocess, sys; sum(range(3_000_000)); subprocess.run([sys.executable, '-c', 'pass'])"
    subprocess.run([sys.executable, "-c", burn], env=env, check=True, timeout=60)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [row["argv"] for row in rows] == [["-c"], ["-c"]]  # the child exits first
    assert rows[1]["cpu"] > rows[0]["cpu"] >= 0  # the parent's own loop, not the child's start
    # Both inherit the test that started them (pytest's PYTEST_CURRENT_TEST), so a test's cost adds up.
    assert all("test_a_process_and_its_child" in row["test"] for row in rows)
