"""The workflow stays snakefmt-clean, and every snakemake --lint finding is one answered in
workflow/rules/common.smk (a new finding fails this test until it is fixed or answered)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO

ANSWERED = {
    "Specify a conda environment or container for each rule.:",
    "Shell command directly uses variable PYTHON from outside of the rule:",
    "Shell command directly uses variable QUIET_HOST from outside of the rule:",
    "Environment variable PYTHONPATH used but not asserted with envvars directive:",
    "Param results is a prefix of input or output file but hardcoded:",
}


def test_snakefmt_clean():
    files = [str(REPO / "Snakefile"), *map(str, sorted((REPO / "workflow/rules").glob("*.smk")))]
    proc = subprocess.run([sys.executable, "-m", "snakefmt", "--check", *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_lint_is_answered():
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True)
    findings = {re.sub(r" in line \d+\.:$", ":", f)  # where it stands is no part of the answer
                for f in re.findall(r"^    \* (.+)$", proc.stdout + proc.stderr, re.MULTILINE)}
    assert findings, "expected the two answered lints; did --lint change its output?"
    assert findings <= ANSWERED, findings - ANSWERED


def test_ruff_clean():
    """The package, tests and benchmarks keep the linter's rules (pyproject.toml [tool.ruff])."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]


PACKAGE = REPO / "workflow" / "specsweep"
LAYERS = ["errors", "axes", "spec", "records", "cache", "servers", "host", "study", "measure", "analysis", "cli",
          "__main__"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every specsweep module a file imports, in any form (import a.b, from a import b, from a.b
    import c; at the top, in a function or for annotations alike)."""
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("specsweep")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specsweep"):
            for alias in node.names:  # a name that is a module is that module; else the module it is taken from
                found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module)
    return found & modules


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imported_modules(p) - {module_name(p)} for p in PACKAGE.rglob("*.py")}


def test_imports_point_one_way():
    """Each layer imports only the layers below it (docs/layout.md), whatever the
    import's form."""
    wrong = []
    for module, targets in import_graph().items():
        layer = module.split(".")[1] if "." in module else None
        for target in targets:
            below = target.split(".")[1] if "." in target else None
            if layer in LAYERS and below in LAYERS and LAYERS.index(below) > LAYERS.index(layer):
                wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def test_no_module_imports_itself_through_others():
    """No import circle anywhere, inside one layer too (a package's own __init__, which Python runs
    before any of its modules, is not counted as imported by them)."""
    from graphlib import CycleError, TopologicalSorter

    graph = {m: {t for t in targets if not m.startswith(f"{t}.")} for m, targets in import_graph().items()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import circle: {' -> '.join(exc.args[1])}") from None


def test_the_layer_test_sees_every_import_form(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import specsweep.analysis.race\nfrom specsweep import cli\nfrom specsweep.records import paths\n"
                      "def f():\n    from specsweep.analysis.aggregate import OK\n")
    assert imported_modules(sample) == {"specsweep.analysis.race", "specsweep.cli", "specsweep.records.paths",
                                        "specsweep.analysis.aggregate"}
