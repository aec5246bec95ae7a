"""Every Snakemake and `specsweep grid` command the README shows works as written (dry-run), in a
copy of the checkout with the README's own example study file."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

README = (REPO / "README.md").read_text()


def code_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.DOTALL)


def commands() -> list[str]:
    """Each shell command of the README's bash blocks, continuation lines joined, `&&` split."""
    found = []
    for block in code_blocks("bash"):
        if block.startswith("tar xzf"):  # runs in an unpacked archive: tests/test_study_archive.py runs it there
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("snakemake ") or part.startswith("python -m specsweep grid"):
                    found.append(part)
    return found


def test_the_readme_shows_the_main_command_and_an_example_study():
    assert "snakemake --cores 1 results/summary.png" in commands()
    assert any(b.startswith("# my-study.yaml") for b in code_blocks("yaml"))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout's files (no results, no logs), plus the README's example study."""
    dest = tmp_path_factory.mktemp("readme") / "specsweep"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    for block in code_blocks("yaml"):
        name = block.splitlines()[0].split()[1].rstrip(":")  # "# my-study.yaml: what it is"
        if name.endswith(".yaml"):
            (dest / name).write_text(block)
    return dest


@pytest.mark.parametrize("line", commands())
def test_readme_command_works_as_written(checkout, line):
    argv = shlex.split(line)
    if argv[0] == "snakemake":
        argv = [sys.executable, "-m", "snakemake", *argv[1:], "--dry-run"]
    else:
        argv = [sys.executable, *argv[1:]]
    proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
