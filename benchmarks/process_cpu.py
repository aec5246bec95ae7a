"""Where a pytest run's CPU goes, per kind of process: every Python process the tests start
(Snakemake, each `specsweep` subcommand, the fault server, pytest's workers) counted by its own
CPU time, so that what the inner loop pays for process starts can be told from what it measures;
then the tests whose processes cost most, with their Snakemake runs.

    python benchmarks/process_cpu.py                      # the inner loop: tests/unit tests/workflow
    python benchmarks/process_cpu.py tests/workflow -k rerun

Each process appends its argv and its CPU at exit (a sitecustomize put first on PYTHONPATH for
the run; Snakemake passes PYTHONPATH on to its jobs). A process killed by a signal it does not
handle (a server stopped with SIGKILL) runs no exit handler and is not counted: the table is a
floor, and its total is set beside the run's own CPU (its children's, from the kernel).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST = "pytest and its workers (the tests' own code)"

SITECUSTOMIZE = """
import atexit, json, os, sys

def _count():
    times = os.times()
    try:
        with open(os.environ["SPECSWEEP_PROCESS_CPU"], "a") as out:
            out.write(json.dumps({"argv": sys.argv[:2], "cpu": times.user + times.system,
                                  "test": os.environ.get("PYTEST_CURRENT_TEST", "")}) + "\\n")
    except OSError:
        pass

if os.environ.get("SPECSWEEP_PROCESS_CPU"):
    atexit.register(_count)
"""


def kind(argv: list[str]) -> str:
    """What a process was, from its argv as Python saw it (`-m x` shows as x's __main__.py)."""
    first = argv[0] if argv else ""
    if first.endswith("specsweep/__main__.py"):
        return f"specsweep {argv[1]}" if len(argv) > 1 else "specsweep"
    if "snakemake" in first:
        return "snakemake"
    if first == "-c" or first.endswith("pytest/__main__.py"):  # "-c": an xdist worker
        return PYTEST
    if first.endswith("__main__.py"):
        return Path(first).parent.name
    return Path(first).name or "python"


def main() -> None:
    tests = sys.argv[1:] or ["tests/unit", "tests/workflow"]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE)
        log = Path(tmp) / "processes.jsonl"
        env = {**os.environ, "SPECSWEEP_PROCESS_CPU": str(log),
               "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=REPO,
                              env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
    counted = sum(row["cpu"] for row in rows)
    print(f"wall {wall:.0f} s; CPU {children.ru_utime + children.ru_stime:.0f} s in all, "
          f"{counted:.0f} s counted in {len(rows)} processes")
    print_kinds(rows, counted)
    print_tests(rows)
    sys.exit(done.returncode)


def print_kinds(rows: list[dict], counted: float) -> None:
    """CPU per kind of process, the costliest first."""
    kinds: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        kinds[kind(row["argv"])].append(row["cpu"])
    print(f"{'CPU-s':>8}{'share':>7}{'processes':>10}{'each':>7}  kind")
    for name, cpus in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
        total = sum(cpus)
        print(f"{total:8.1f}{total / counted:7.0%}{len(cpus):10d}{total / len(cpus):7.2f}  {name}")


def print_tests(rows: list[dict], top: int = 15) -> None:
    """The tests whose processes cost most (pytest sets PYTEST_CURRENT_TEST in each test's
    environment, and every process it starts inherits it), and how many Snakemake runs each made."""
    tests: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if row.get("test") and kind(row["argv"]) != PYTEST:
            tests[row["test"].rsplit(" (", 1)[0]].append(row)
    print(f"\n{'CPU-s':>8}{'snakemake':>10}{'processes':>10}  test (the processes it started)")
    for test, started in sorted(tests.items(), key=lambda kv: -sum(r["cpu"] for r in kv[1]))[:top]:
        runs = sum(kind(r["argv"]) == "snakemake" for r in started)
        print(f"{sum(r['cpu'] for r in started):8.1f}{runs:10d}{len(started):10d}  {test}")


if __name__ == "__main__":
    main()
