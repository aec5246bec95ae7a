"""The tests' side of mutation testing (tests/mutation/run.py); inert unless mutmut runs them.

Under mutmut the tests run in ``mutants/``: subprocesses must import the mutated copy there
(``src/``) and report, while statistics are collected, which functions they ran
(sitecustomize.py in this folder).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def active() -> bool:
    return "MUTANT_UNDER_TEST" in os.environ


def install(root: Path) -> None:
    """Point subprocesses at the mutated package and at the hit recorder."""
    paths = [str(root / "src"), str(HERE), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ.setdefault("SPECSWEEP_MUTATION_HITS", tempfile.mkdtemp(prefix="specsweep-mutation-hits-"))
    os.environ.setdefault(KILLERS, str(root / "killers.txt"))


def merge() -> None:
    """Add the functions subprocesses ran to mutmut's record of the current test."""
    if os.environ.get("MUTANT_UNDER_TEST") != "stats":
        return
    from mutmut.state import state

    for path in Path(os.environ["SPECSWEEP_MUTATION_HITS"]).glob("*.json"):
        state()._stats.update(json.loads(path.read_text()))
        path.unlink()


KILLERS = "SPECSWEEP_MUTATION_KILLERS"
MAX_TESTS = "SPECSWEEP_MUTATION_MAX_TESTS"


def _function(mutant: str) -> str:
    return mutant.partition("__mutmut_")[0]


def killers_first(items: list, config) -> None:
    """Tests that killed earlier mutants run first, those of the same function before the rest:
    with -x a mutant is then usually dead after one test instead of after half the list (mutmut
    passes its set unordered). At most $SPECSWEEP_MUTATION_MAX_TESTS run: a mutant that only a
    later test would kill counts as surviving, so the score errs low, never high."""
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    path = os.environ.get(KILLERS)
    if mutant in ("", "stats", "fail") or not path:
        return
    lines = [line.split(" ", 1) for line in Path(path).read_text().splitlines()] if os.path.exists(path) else []
    rank: dict[str, int] = {}
    for same in (True, False):
        for function, nodeid in reversed(lines):  # the most recent first
            if (function == _function(mutant)) == same:
                rank.setdefault(nodeid, len(rank))
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))
    most = int(os.environ.get(MAX_TESTS, "0") or 0)
    if most and len(items) > most:
        config.hook.pytest_deselected(items=items[most:])
        del items[most:]


def remember_killer(report) -> None:
    """Note a test that failed under a mutant (most recent last) for the next mutants' order."""
    path = os.environ.get(KILLERS)
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if path and report.failed and mutant not in ("", "stats", "fail"):
        with open(path, "a") as fh:
            fh.write(f"{_function(mutant)} {report.nodeid}\n")
