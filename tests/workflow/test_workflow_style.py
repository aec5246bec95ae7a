"""The workflow stays snakefmt-clean, and every snakemake --lint finding is one answered in
workflow/rules/common.smk (a new finding fails this test until it is fixed or answered)."""

import re
import subprocess
import sys

from conftest import REPO

ANSWERED = {
    "Specify a conda environment or container for each rule.:",
    "Shell command directly uses variable PYTHON from outside of the rule:",
    "Shell command directly uses variable QUIET_HOST from outside of the rule:",
}


def test_snakefmt_clean():
    files = [str(REPO / "Snakefile"), *map(str, sorted((REPO / "workflow/rules").glob("*.smk")))]
    proc = subprocess.run([sys.executable, "-m", "snakefmt", "--check", *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_lint_is_answered():
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True)
    findings = set(re.findall(r"^    \* (.+)$", proc.stdout + proc.stderr, re.MULTILINE))
    assert findings, "expected the two answered lints; did --lint change its output?"
    assert findings <= ANSWERED, findings - ANSWERED


def test_ruff_clean():
    """The package, tests and benchmarks keep the linter's rules (pyproject.toml [tool.ruff])."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]


def test_imports_point_one_way():
    """Each layer imports only the layers below it (docs/development.md, Layout): no import circle can form."""
    import ast

    order = ["errors", "axes", "spec", "records", "servers", "study", "measure", "analysis", "cli", "__main__"]
    package = REPO / "workflow" / "specsweep"
    wrong = []
    for path in package.rglob("*.py"):
        layer = path.relative_to(package).parts[0].removesuffix(".py")
        if layer not in order:
            continue  # __init__.py of the package, data/
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specsweep."):
                target = node.module.split(".")[1]
                if target in order and order.index(target) > order.index(layer):
                    wrong.append(f"{path.relative_to(package)} imports {node.module}")
    assert not wrong, wrong
