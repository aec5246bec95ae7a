"""Loaded by every Python that tests start while mutmut collects its statistics (run.py puts this
folder on PYTHONPATH): which mutated functions ran in a subprocess (the CLI, Snakemake's jobs).

mutmut records a function's callers in its own process only, so without this the checks that
the tests reach through ``python -m specsweep`` would count as untested. The names are written
at exit to $SPECSWEEP_MUTATION_HITS/<pid>.json, and tests/mutation/hits.py adds them to the test
that started the subprocess.
"""

import os

if os.environ.get("MUTANT_UNDER_TEST") == "stats" and os.environ.get("SPECSWEEP_MUTATION_HITS"):
    import atexit
    import json

    from mutmut.mutation import trampoline

    _hits: set[str] = set()

    def _record(name: str, caller: str | None = None) -> None:
        _hits.add(name)

    def _dump() -> None:
        if _hits:
            path = os.path.join(os.environ["SPECSWEEP_MUTATION_HITS"], f"{os.getpid()}.json")
            with open(path, "w") as fh:
                json.dump(sorted(_hits), fh)

    trampoline.record_trampoline_hit = _record
    atexit.register(_dump)
