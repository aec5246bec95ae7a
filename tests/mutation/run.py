"""Mutation testing of the trust checks: does the suite fail when one of them is broken?

    python tests/mutation/run.py                          # every target in targets.txt
    python tests/mutation/run.py 'specsweep.measure.client.*'     # a subset, by mutmut name glob
    python tests/mutation/run.py --again                  # in the kept copy, only the mutants not
                                                          # killed yet (less those judged equivalent),
                                                          # with the tests as they are now
    python tests/mutation/run.py --report                 # the kept copy's score and survivors
    python tests/mutation/run.py --untargeted             # the trust checks no target mutates
    SPECSWEEP_MUTATION_TESTS=tests/unit/analysis/test_verdict.py python tests/mutation/run.py \
        'specsweep.analysis.verdict.*'                    # one package against its own tests

mutmut (3.x) mutates a copy of the package, one small change at a time (a condition inverted, a
branch removed, a constant or a raised class changed), and runs the tests that reach the mutated
function; a mutant the tests do not fail on survived. The copy lives in build/mutation/ with the
src/ layout mutmut names modules by. The tests reach most checks through subprocesses (the CLI,
Snakemake's jobs, the servers), which import the mutated copy and report what they ran (see
hits.py and sitecustomize.py here).

One mutant at a time (--max-children 1): the tests measure with the quiet-host guard on, and a
second mutant's tests on the other core would fail them for noise, not for the mutant. Tests that
killed earlier mutants, those aimed at the function (aimed.txt) and the quick ones (under a second)
run first; a mutant meets every quick test that reaches it and at most
$SPECSWEEP_MUTATION_MAX_TESTS (15) others (tests/mutation/hits.py): a mutant only a later test
would kill counts as surviving, so the score errs low. Set it to 0 to try every test.

Prints and writes build/mutation/report.txt: the score (killed over all tried, less the mutants
judged equivalent in equivalent.txt), and the diff of every other survivor.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORK = REPO / "build" / "mutation"
MUTATED = [  # files holding the targets; the rest of the package runs unmutated
    "measure/client.py", "servers/process.py", "servers/probes.py", "measure/workload.py", "measure/runner.py",
    "cli/__init__.py", "records/result.py", "analysis/aggregate.py", "analysis/ledger.py", "analysis/plot.py",
    "study/prompts.py",
    "servers/backends/base.py", "servers/backends/llama_server.py", "study/loading.py", "study/grid.py",
    "host/quiet_host.py", "host/leases.py", "host/gpu_pool.py", "host/locks.py",
    "servers/backends/sglang.py", "servers/backends/vllm.py", "measure/goodput.py", "spec.py",
    "host/host_facts.py", "host/gpu_memory.py", "host/gpu_watch.py", "measure/section_checks.py",
    "measure/interrupts.py",
    "analysis/verdict.py", "analysis/race.py", "measure/attempts.py", "records/paths.py", "records/store.py",
    "cache.py", "study/offline.py", "analysis/variance.py", "analysis/cells.py", "analysis/answer.py",
    "records/inferred.py", "measure/before_start.py", "measure/energy.py", "measure/in_flight.py",
    "analysis/schedule.py", "records/migrations.py",
]
TESTS = [  # what mutants are tried against: the tests that take seconds, the fault server's above all
    "tests/unit/measure/test_client.py", "tests/workflow/test_faults.py", "tests/unit/measure/test_workload.py",
    "tests/unit/analysis/test_aggregate.py", "tests/unit/records/test_store.py", "tests/unit/records/test_result.py",
    "tests/unit/measure/test_section_stats_and_signatures.py", "tests/unit/study/test_prompts.py",
    "tests/workflow/test_rerun.py", "tests/unit/study/test_grid_axes.py", "tests/unit/host/test_quiet_host.py",
    "tests/unit/host/test_leases.py", "tests/unit/host/test_gpu_memory.py",
    "tests/workflow/test_secrets.py", "tests/unit/analysis/test_verdict.py",
    "tests/unit/analysis/test_race.py", "tests/unit/analysis/test_paired_verdict.py",
    "tests/workflow/test_launches.py",
    "tests/unit/servers/test_backends.py", "tests/workflow/test_sglang_standin.py",
    "tests/unit/measure/test_goodput.py",
    "tests/unit/analysis/test_load_levels.py", "tests/unit/measure/test_gpu_topology_and_clocks.py",
    "tests/unit/study/test_loading.py",
    # The same checks' tests that start the CLI and the fault server (moved out of tests/unit).
    "tests/workflow/test_workload_cli.py", "tests/workflow/test_prompts_cli.py",
    "tests/workflow/test_quiet_host_cli.py", "tests/workflow/test_leases_cli.py",
    "tests/workflow/test_goodput_cli.py", "tests/workflow/test_gpu_telemetry_cli.py",
    "tests/unit/measure/test_energy.py", "tests/unit/records/test_inferred.py", "tests/unit/measure/test_in_flight.py",
    "tests/unit/analysis/test_schedule.py", "tests/unit/servers/test_vllm_applied.py",
    "tests/workflow/test_inferred_failures.py",
]
MUTMUT = str(Path(sys.executable).with_name("mutmut"))  # not `python -m mutmut`: that loads its main module twice
KILLED = {"killed", "timeout", "segfault", "caught by type check"}


def read_list(name: str) -> list[str]:
    """Non-empty lines of a file here, without comments."""
    lines = (line.split("#", 1)[0].strip() for line in (HERE / name).read_text().splitlines())
    return [line for line in lines if line]


def equivalents() -> dict[str, str]:
    """mutant name -> why it cannot change behaviour (equivalent.txt: name, two spaces, reason)."""
    found = {}
    for line in (HERE / "equivalent.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition("  ")
            found[name.strip()] = why.strip()
    return found


def unmutated(globs: list[str]) -> list[str]:
    """The targets whose file MUTATED leaves out: mutmut would make no mutant of them and the
    score would pass them over in silence (as it did cache.py's and offline.py's until 2026-12-05)."""
    files = {"specsweep." + f.removesuffix(".py").replace("/", ".") for f in MUTATED}
    return [g for g in globs if not any(g.startswith(module + ".") for module in files)]


# What refuses a measurement: a function that raises one of these is a trust check.
REFUSALS = {"InvalidResponse", "PromptReused", "ClientOverload", "ServerDied", "ServerHung", "HostNotQuiet",
            "GpuThrottled", "ResultRefused", "InvalidResult", "IncomparableResults", "InconsistentStudy",
            "SettingNotApplied", "InferredToFail"}


def trust_checks(package: Path = REPO / "workflow" / "specsweep") -> list[str]:
    """Every function of the package that raises a refusal (REFUSALS), by its mutmut name."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = "specsweep." + ".".join(path.relative_to(package).with_suffix("").parts)
        tree = ast.parse(path.read_text())
        for owner, node in _functions(tree):
            if any(isinstance(n, ast.Raise) and _raised(n) in REFUSALS for n in ast.walk(node)):
                bar = "\u01c1"  # mutmut's separator of class and method
                found.append(f"{module}.x_{node.name}" if owner is None else f"{module}.x{bar}{owner}{bar}{node.name}")
    return found


def _functions(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            yield from ((node.name, n) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _raised(node: ast.Raise) -> str | None:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else exc.attr if isinstance(exc, ast.Attribute) else None


def untargeted(globs: list[str]) -> list[str]:
    """The trust checks that no target glob names: nobody has seen their mutants fail a test."""
    return [name for name in trust_checks() if not any(fnmatch.fnmatchcase(name, g) for g in globs)]


def prepare() -> None:
    """A fresh copy of the project in the src/ layout, configured for mutmut and pytest."""
    shutil.rmtree(WORK, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "workflow" / "specsweep", WORK / "src" / "specsweep", ignore=skip)
    shutil.copytree(REPO / "workflow", WORK / "workflow", ignore=shutil.ignore_patterns("specsweep", "__pycache__"))
    for name in ("tests", "config", "profiles"):
        shutil.copytree(REPO / name, WORK / name, ignore=skip)
    shutil.copy2(REPO / "Snakefile", WORK / "Snakefile")
    listing = lambda items: "[" + ", ".join(json.dumps(i) for i in items) + "]"  # noqa: E731 (TOML arrays)
    (WORK / "pyproject.toml").write_text(f"""\
[tool.mutmut]
source_paths = ["src/specsweep"]
only_mutate = {listing("src/specsweep/" + f for f in MUTATED)}
also_copy = ["config", "workflow", "profiles", "Snakefile"]
pytest_add_cli_args_test_selection = {listing(tests())}
pytest_add_cli_args = ["-p", "no:cacheprovider", "-o", "addopts="]
# A mutant that makes a test wait (a probe that never succeeds) times out: that counts as killed.
timeout_multiplier = 4.0
timeout_constant = 30.0

[tool.pytest.ini_options]
markers = ["e2e: runs the real workflow against the real llama-server (minutes)"]
timeout = 300
""")


def tests() -> list[str]:
    """The test files mutants are tried against: TESTS, or $SPECSWEEP_MUTATION_TESTS (comma-separated
    paths) for a run aimed at one package, whose stats pass need not run every other test first."""
    given = os.environ.get("SPECSWEEP_MUTATION_TESTS")
    return [t.strip() for t in given.split(",") if t.strip()] if given else TESTS


def refresh_tests() -> None:
    """The tests as they are now, into the kept copy (mutmut copies them on into mutants/)."""
    shutil.rmtree(WORK / "tests")
    shutil.copytree(REPO / "tests", WORK / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def run_mutmut(globs: list[str]) -> int:
    names = [g if "__mutmut_" in g else f"{g}__mutmut_*" for g in globs]
    env = {**os.environ, "SPECSWEEP_MUTATION_MAX_TESTS": os.environ.get("SPECSWEEP_MUTATION_MAX_TESTS", "15")}
    return subprocess.run([MUTMUT, "run", "--max-children", "1", *names], cwd=WORK, env=env).returncode


def outcomes(globs: list[str]) -> dict[str, str]:
    """mutant name -> mutmut's status, for the mutants the globs select."""
    from mutmut.stats import status_by_exit_code

    found = {}
    for meta in (WORK / "mutants").rglob("*.meta"):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatchcase(name, g if "__mutmut_" in g else f"{g}__mutmut_*") for g in globs):
                found[name] = status_by_exit_code[code]
    return found


def diff(name: str) -> str:
    shown = subprocess.run([MUTMUT, "show", name], cwd=WORK, capture_output=True, text=True)
    return shown.stdout.strip()


def report(results: dict[str, str], minutes: float) -> tuple[str, float]:
    untried = sorted(n for n, s in results.items() if s == "not checked")  # a run stopped early
    results = {n: s for n, s in results.items() if s != "not checked"}
    equal = equivalents()
    survivors = sorted(n for n, s in results.items() if s not in KILLED and n not in equal)
    judged = sorted(n for n, s in results.items() if s not in KILLED and n in equal)
    stale = sorted(n for n in equal if results.get(n) in KILLED)
    killed = sum(s in KILLED for s in results.values())
    counted = len(results) - len(judged)
    score = killed / counted if counted else 0.0
    lines = [f"mutation score: {killed} of {counted} non-equivalent mutants killed = {score:.1%} "
             f"({len(results)} tried, {len(judged)} judged equivalent, {len(survivors)} surviving; "
             f"{minutes:.0f} min)"]
    by_status: dict[str, int] = {}
    for status in results.values():
        by_status[status] = by_status.get(status, 0) + 1
    lines.append("by status: " + ", ".join(f"{k} {v}" for k, v in sorted(by_status.items())))
    if untried:
        lines.append(f"not tried yet (the run was stopped): {len(untried)}; python tests/mutation/run.py --again")
    if stale:
        lines.append("listed as equivalent but killed (remove from equivalent.txt): " + ", ".join(stale))
    for name in survivors:
        lines += ["", f"SURVIVED ({results[name]}): {name}", diff(name)]
    for name in judged:
        lines += ["", f"equivalent: {name}: {equal[name]}"]
    return "\n".join(lines), score


def main(argv: list[str]) -> int:
    t0 = time.monotonic()
    if argv == ["--untargeted"]:
        left = untargeted(read_list("targets.txt"))
        print("\n".join(left) or "every trust check is a target")
        print(f"{len(left)} of {len(trust_checks())} trust checks (functions raising {', '.join(sorted(REFUSALS))}) "
              f"have no target in targets.txt", file=sys.stderr)
        return 0
    if argv == ["--report"]:
        globs, code = read_list("targets.txt"), 0
    elif argv == ["--again"]:
        globs = read_list("targets.txt")
        # Survivors judged equivalent are not retried (each costs every test that reaches it);
        # a fresh run tries them again and flags any that a test now kills.
        last = [n for n, s in outcomes(globs).items() if s not in KILLED and n not in equivalents()]
        refresh_tests()
        code = run_mutmut(last) if last else 0
    else:
        globs = argv or read_list("targets.txt")
        if missing := unmutated(globs):
            print(f"not in MUTATED, so never mutated: {', '.join(missing)}; add their files", file=sys.stderr)
            return 2
        prepare()
        code = run_mutmut(globs)
    if code != 0:
        print(f"mutmut exited {code}; see its output above", file=sys.stderr)
        return code
    text, score = report(outcomes(globs), (time.monotonic() - t0) / 60)
    (WORK / "report.txt").write_text(text + "\n")
    print(text)
    print(f"\nreport: {WORK / 'report.txt'}")
    return 0 if score >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
