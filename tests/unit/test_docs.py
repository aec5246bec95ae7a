"""Docs that cannot drift from the code: the failure-class table is the one errors.py makes, the
layout names every module of the package and nothing else, and the README stays short and leads
to every page of docs/."""

from __future__ import annotations

import ast
import re

import pytest

from conftest import REPO
from specsweep import errors

DOCS = REPO / "docs"
PACKAGE = REPO / "workflow" / "specsweep"


def test_the_failure_table_is_the_one_errors_py_makes():
    page = (DOCS / "failures.md").read_text()
    assert errors.failure_table() in page, "paste the output of python -m specsweep failure-classes into the page"
    assert len(errors.classes()) == len({c.exit_code for c in errors.classes()}) == 23  # one code each


@pytest.mark.parametrize("package", ["analysis", "records", "measure", "servers", "study"])
def test_each_package_docstring_names_every_module_it_holds_and_no_other(package):
    folder = REPO / "workflow" / "specsweep" / package
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    summary = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())).split("\n\n")[0]
    named = {n for group in re.findall(r"\(([a-z_,\s]+)\)", summary) for n in re.split(r",\s*", group.strip())}
    assert named == modules, f"{package}/__init__.py: named {sorted(named)}, holds {sorted(modules)}"


def layout() -> str:
    page = (DOCS / "development.md").read_text()
    return page[page.index("## Layout"):]


def test_the_layout_names_every_module_of_each_package_and_no_other():
    text = layout()
    bullets = {m[0]: m[1] for m in re.findall(r"^  - `(\w+/)`: (.*?)(?=^  - |^- )", text, re.M | re.S)}
    backends = {p.stem for p in (PACKAGE / "servers" / "backends").glob("*.py") if p.stem != "__init__"}
    for folder in ("records", "servers", "study", "measure", "analysis", "data"):
        modules = {p.stem for p in (PACKAGE / folder).glob("*.py") if p.stem != "__init__"}
        if folder == "servers":
            modules |= backends
        named = set(re.findall(r"`([a-z_]+)`", bullets[f"{folder}/"]))
        assert named == modules, (folder, "missing:", modules - named, "no such module:", named - modules)
    top = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert all(f"`{name}`" in text for name in top), top


def test_the_readme_is_short_and_leads_to_every_page():
    readme = (REPO / "README.md").read_text()
    words = len(re.sub(r"```.*?```", "", readme, flags=re.S).split())
    assert words <= 1300, words
    for page in DOCS.glob("*.md"):
        assert f"docs/{page.name}" in readme, page.name
    assert "tests/mutation/README.md" in (DOCS / "development.md").read_text()
