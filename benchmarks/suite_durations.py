"""Where the test suite's time goes: each test's seconds (setup, call and teardown, so a fixture's
build is counted in the first test that needs it) from a pytest JUnit XML record, summed by tier
and by what the tests wait on (docs/development.md, One command, two phases).

    pytest --junitxml=suite.xml && python benchmarks/suite_durations.py suite.xml
    python benchmarks/suite_durations.py suite.xml --markdown     # the table docs/development.md shows

Under xdist the shared phase's tests overlap, so their seconds add up to more than its wall time:
the sums say what each group costs the machine, the run's own wall time what it costs the reader.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

# (what the tests wait on, a test id holds all of these); the first match wins. The early tests
# share their builds: whichever asks first builds, the others wait for it, so they are one group.
GROUPS = [
    ("early: llama-server build, vLLM install, GPU carry", ("test_provision_real",)),
    ("early: llama-server build, vLLM install, GPU carry", ("test_the_carry_fits",)),
    ("vLLM start and measure", ("test_vllm_real",)),
    ("GPU rehearsal's offline runs", ("test_gpu_smoke_offline",)),
    ("virtualenv install + README commands", ("test_main_install",)),
    ("SLURM", ("test_slurm",)),
    ("report in Chromium", ("test_the_report_shows",)),
    ("real sweeps (llama-server)", ("tests.e2e.",)),
    ("CLI and Snakemake with the fault server or stand-in", ("tests.workflow.",)),
    ("unit", ("tests.unit.",)),
]


def group(test_id: str) -> str:
    return next((name for name, parts in GROUPS if all(p in test_id for p in parts)), "other")


def main(path: str, *, markdown: bool = False) -> None:
    tiers: dict[str, list[float]] = defaultdict(list)
    groups: dict[str, list[float]] = defaultdict(list)
    failed = 0
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}.{case.get('name')}"
        seconds = float(case.get("time", 0))
        tiers[test_id.split(".")[1]].append(seconds)
        groups[group(test_id)].append(seconds)
        failed += case.find("failure") is not None or case.find("error") is not None
    total = sum(sum(v) for v in tiers.values())
    print(f"{sum(len(v) for v in tiers.values())} tests, {failed} failed, {total:.0f} test-seconds in all")
    rows = [(f"tier {name}", len(seconds), sum(seconds)) for name, seconds in sorted(tiers.items())]
    rows += [(name, len(seconds), sum(seconds)) for name, seconds in sorted(groups.items(), key=lambda kv: -sum(kv[1]))]
    if markdown:
        print("\n| tier, or what the tests wait on | tests | test-seconds |\n|---|---|---|")
        print("\n".join(f"| {name} | {count} | {seconds:.0f} |" for name, count, seconds in rows))
        return
    print(f"{'tier':<12}{'tests':>6}{'seconds':>9}")
    for name, count, seconds in rows[:len(tiers)]:
        print(f"{name[5:]:<12}{count:>6}{seconds:>9.0f}")
    print(f"\n{'waits on':<52}{'tests':>6}{'seconds':>9}")
    for name, count, seconds in rows[len(tiers):]:
        print(f"{name:<52}{count:>6}{seconds:>9.0f}")


if __name__ == "__main__":
    main(sys.argv[1], markdown="--markdown" in sys.argv[2:])
