"""The mutation harness's own map (tests/mutation/run.py): every function that refuses a
measurement is found, and the checks it mutates are known to it as such."""

from __future__ import annotations

import importlib.util
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "mutation" / "run.py"


def _harness():
    spec = importlib.util.spec_from_file_location("mutation_run", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_trust_checks_are_found_and_the_targeted_ones_are_not_reported():
    run = _harness()
    found = run.trust_checks()
    # Refusals raised in a function, a method and a private helper, by mutmut's names.
    assert {"specsweep.servers.backends.llama_server.xǁLlamaServerǁfinal",
            "specsweep.measure.section_checks.x_check_counters",
            "specsweep.records.result.xǁResultǁ_validate_distinct_prompts"} <= set(found)
    assert not any(".x_words" in name for name in found)  # a function raising nothing is none
    targets = run.read_list("targets.txt")
    left = run.untargeted(targets)
    assert set(left) < set(found)
    # The check of llama-server's timings.predicted_n against the stream is a target (issue 56):
    # take it out and the harness says so.
    assert "specsweep.servers.backends.llama_server.xǁLlamaServerǁfinal" not in left
    assert "specsweep.servers.backends.llama_server.xǁLlamaServerǁfinal" in run.untargeted(
        [t for t in targets if "llama_server" not in t])
