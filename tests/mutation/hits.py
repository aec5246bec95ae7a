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


def killers_first(items: list) -> None:
    """Tests that failed for an earlier mutant run first: with -x, a mutant of a check is then
    usually dead after one test instead of after half the list (mutmut passes its set unordered)."""
    path = os.environ.get(KILLERS)
    if not path or not os.path.exists(path):
        return
    rank: dict[str, int] = {}
    for name in reversed(Path(path).read_text().split()):  # the most recent failure first
        rank.setdefault(name, len(rank))
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))


def remember_killer(report) -> None:
    """Note a failing test (most recent last) for the next mutants' order."""
    path = os.environ.get(KILLERS)
    if path and report.failed and os.environ.get("MUTANT_UNDER_TEST", "") not in ("", "stats", "fail"):
        with open(path, "a") as fh:
            fh.write(report.nodeid + "\n")
