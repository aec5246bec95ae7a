"""The tests' side of mutation testing (tests/mutation/run.py); inert unless mutmut runs them.

Under mutmut the tests run in ``mutants/``: subprocesses must import the mutated copy there
(``src/``) and report, while statistics are collected, which functions they ran
(sitecustomize.py in this folder).
"""

from __future__ import annotations

import fnmatch
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


def _trying_a_mutant() -> str:
    """The mutant under test, or "" while mutmut lists tests or collects statistics (then
    MUTANT_UNDER_TEST is "list_all_tests", "stats", "fail"...: every test must be seen)."""
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    return mutant if "__mutmut_" in mutant else ""


def killers_first(items: list, config) -> None:
    """The tests most likely to kill the mutant first (mutmut passes its set unordered), so
    that with -x a mutant is usually dead after one test: those that killed a mutant of the same
    function (the most recent first), then those aimed at it (aimed.txt), then the quick ones
    (under a second at the statistics run), then those that killed other functions' mutants,
    then the rest, quickest first. The quick ones all run, and at most $SPECSWEEP_MUTATION_MAX_TESTS
    others: a mutant that only a later test would kill counts as surviving, so the score errs
    low, never high."""
    mutant = _trying_a_mutant()
    path = os.environ.get(KILLERS)
    if not mutant or not path:
        return
    lines = [line.split(" ", 1) for line in Path(path).read_text().splitlines()] if os.path.exists(path) else []
    same = _first_seen(nodeid for function, nodeid in reversed(lines) if function == _function(mutant))
    other = _first_seen(nodeid for function, nodeid in reversed(lines) if function != _function(mutant))
    seconds = _durations()
    aimed = [part for pattern, part in _aimed() if fnmatch.fnmatchcase(_function(mutant), pattern)]

    def rank(item) -> tuple:
        took = seconds.get(item.nodeid, float("inf"))
        if item.nodeid in same:
            return (0, same[item.nodeid])
        if any(part in item.nodeid for part in aimed):
            return (1, took)
        if took < 1.0:
            return (2, took)
        return (3, other[item.nodeid]) if item.nodeid in other else (4, took)

    items.sort(key=rank)
    most = int(os.environ.get(MAX_TESTS, "0") or 0)
    slow = [item for item in items if seconds.get(item.nodeid, float("inf")) >= 1.0]
    if most and len(slow) > most:
        dropped = {id(item) for item in slow[most:]}
        config.hook.pytest_deselected(items=[item for item in items if id(item) in dropped])
        items[:] = [item for item in items if id(item) not in dropped]


def _first_seen(nodeids) -> dict[str, int]:
    order: dict[str, int] = {}
    for nodeid in nodeids:
        order.setdefault(nodeid, len(order))
    return order


def _aimed() -> list[tuple[str, str]]:
    """(function glob, test id part) from aimed.txt: the tests written for each check."""
    lines = (line.split("#", 1)[0].split() for line in (HERE / "aimed.txt").read_text().splitlines())
    return [(words[0], words[1]) for words in lines if len(words) == 2]


def _durations() -> dict[str, float]:
    """Each test's duration at mutmut's statistics run (mutmut-stats.json beside killers.txt)."""
    stats = Path(os.environ[KILLERS]).with_name("mutmut-stats.json")
    return json.loads(stats.read_text()).get("duration_by_test", {}) if stats.exists() else {}


def remember_killer(report) -> None:
    """Note a test that failed under a mutant (most recent last) for the next mutants' order."""
    path = os.environ.get(KILLERS)
    mutant = _trying_a_mutant()
    if path and report.failed and mutant:
        with open(path, "a") as fh:
            fh.write(f"{_function(mutant)} {report.nodeid}\n")
