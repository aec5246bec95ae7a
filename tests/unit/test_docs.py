"""Docs that cannot drift from the code: the failure-class table is the one errors.py makes, the
layout names every module of the package and nothing else, and the README stays short and leads
to every page of docs/."""

from __future__ import annotations

import ast
import re

import pytest
import yaml

from conftest import REPO
from specsweep import errors
from specsweep.study import loading

DOCS = REPO / "docs"
PACKAGE = REPO / "workflow" / "specsweep"


def test_the_failure_table_is_the_one_errors_py_makes():
    page = (DOCS / "failures.md").read_text()
    assert errors.failure_table() in page, "paste the output of python -m specsweep failure-classes into the page"
    assert len(errors.classes()) == len({c.exit_code for c in errors.classes()}) == 26  # one code each


@pytest.mark.parametrize("package", ["analysis", "records", "measure", "servers", "study"])
def test_each_package_docstring_names_every_module_it_holds_and_no_other(package):
    folder = REPO / "workflow" / "specsweep" / package
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    summary = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())).split("\n\n")[0]
    named = {n for group in re.findall(r"\(([a-z_,\s]+)\)", summary) for n in re.split(r",\s*", group.strip())}
    assert named == modules, f"{package}/__init__.py: named {sorted(named)}, holds {sorted(modules)}"


# A measured figure in prose: a time, a share, a ratio, a size or a count of things measured.
FIGURE = re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)*(?:\s?(?:to|-)\s?\d+(?:\.\d+)?)?\s?(?:min(?:utes)?|s|ms|%|x|GiB|MiB|MB"
                    r"|GB|tok/s|steps|tests|launches|mutants)|\d+ of \d+)(?!\w)")
# Settings and design values, not measurements: the same default may be named wherever it matters.
SETTINGS = {"1%", "5%", "10%", "95%", "30 s", "1800 s", "2 launches", "16 launches"}


def test_each_measured_figure_is_stated_in_one_page_and_pointed_to_from_the_others():
    """Code blocks (a terminal's output, a command) are shown, not stated, and are left out."""
    where: dict[str, set[str]] = {}
    for page in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        prose = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for figure in FIGURE.findall(prose):
            where.setdefault(figure, set()).add(page.name)
    twice = {f: sorted(pages) for f, pages in where.items() if len(pages) > 1 and f not in SETTINGS}
    assert not twice, f"state each figure in the page that owns it and point there from the others: {twice}"


def layout() -> str:
    return (DOCS / "layout.md").read_text()


def test_the_layout_names_every_module_of_each_package_and_no_other():
    text = layout()
    bullets = {m[0]: m[1] for m in re.findall(r"^  - `(\w+/)`: (.*?)(?=^  - |^- )", text, re.M | re.S)}
    backends = {p.stem for p in (PACKAGE / "servers" / "backends").rglob("*.py") if p.stem != "__init__"}
    for folder in ("records", "servers", "host", "study", "measure", "analysis", "cli", "data"):
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


def test_the_key_table_of_config_readme_is_the_one_the_schema_makes():
    chosen = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    page = (REPO / "config" / "README.md").read_text()
    assert loading.key_table(chosen) in page, "paste the output of python -m specsweep config-keys into the page"
