"""Every Snakemake and `specsweep grid` command the README shows works as written (dry-run), in a
copy of the checkout with the README's own example study file."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_checkout, docs_text

README = docs_text()  # the README and docs/


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
    dest = copy_checkout(tmp_path_factory.mktemp("readme") / "specsweep")
    for block in code_blocks("yaml"):
        name = block.splitlines()[0].split()[1].rstrip(":")  # "# my-study.yaml: what it is"
        if name.endswith(".yaml"):
            (dest / name).write_text(block)
    (dest / "old" / "results").mkdir(parents=True)  # the compare line's baseline: an earlier study's folder
    return dest


# Studies for a GPU box: their model folders and server Pythons are not on this machine; they plan
# here (a sweep is planned before it is run) and the plan names what is missing.
GPU_STUDIES = ("config/sglang-ddtree.yaml", "config/vllm-gpu.yaml")


@pytest.mark.parametrize("line", commands())
def test_readme_command_works_as_written(checkout, line, request):
    argv = shlex.split(line)
    if argv[0] == "snakemake":
        # The SLURM profile's command runs after docs/slurm.md's install of the slurm extra.
        python = request.getfixturevalue("slurm_python") if "profiles/slurm" in line else sys.executable
        argv = [str(python), "-m", "snakemake", *argv[1:], "--dry-run"]
    else:
        argv = [sys.executable, *argv[1:]]
    proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if any(gpu in line for gpu in GPU_STUDIES):  # planned, saying what a real run here would refuse
        assert re.search(r"warning: (model\.path|server\.binary)\b.* does not exist", proc.stderr), proc.stderr
