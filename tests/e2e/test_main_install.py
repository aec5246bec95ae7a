"""The README's commands, run as written after the README's first line alone (`pip install -e .`,
no test extras): the main command, the report, the archive, compare, the grid listing, one
configuration by hand, and the archive's reproduction elsewhere. A runtime dependency that only
the test extras bring in (pygments for the report, once) fails here.

GPU, SLURM and the CPU vLLM study need what this machine's main install cannot have (GPUs, a
cluster, a 2.5 GB second environment) and are dry-run by tests/test_readme.py instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_checkout, docs_text, small_study

pytestmark = pytest.mark.e2e
README = docs_text()  # the README and docs/


def blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, re.DOTALL)


def block(first: str) -> str:
    return next(b for b in blocks() if b.startswith(first))


def lines(text: str) -> list[str]:
    return [line.split("  #")[0].strip() for line in text.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, embedded) -> Path:
    """A copy of the checkout whose default study is small (same keys, same configuration names)."""
    dest = copy_checkout(tmp_path_factory.mktemp("main-install") / "specsweep")
    doc = small_study()
    doc["grid"] = {"budget": [0, 4], "tp": [1], "context": [128]}  # tp1-b4-ctx128: the hand-run line's name
    # The commands are what this test proves, not the figures: one short section (the hand-run line
    # says what it measured in it), over the 2 + 1 + 6 configurations the README's lines measure.
    doc["workload"]["sections"] = [{"name": "short", "output_tokens": 8, "requests": 1, "concurrency": 1}]
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(doc))
    return dest


def sh(where: Path, command: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """One README line in bash, in the virtualenv the first line made (never the test suite's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(REPO)))
    activate = f". {where / '.venv/bin/activate'} && " if (where / ".venv").exists() else ""
    return subprocess.run(["bash", "-euc", activate + command], cwd=where, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_every_readme_command_works_after_the_main_install_alone(checkout, tmp_path):
    main_line = lines(README.split("```bash\n", 1)[1])[0]
    assert main_line.endswith("pip install -e . && snakemake --cores 1 results/summary.png")
    first = sh(checkout, main_line, timeout=1500)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    installed = sh(checkout, "pip list --format=freeze").stdout.lower()
    assert "pytest" not in installed and "selenium" not in installed and "pygments" in installed
    assert "Report: snakemake --report results/report.html" in first.stderr

    for line in lines(block("snakemake --cores 1 results/summary.png\nsnakemake --report")):
        done = sh(checkout, line)
        assert done.returncode == 0, (line, done.stdout[-3000:] + done.stderr[-3000:])
    assert (checkout / "results/report.html").stat().st_size > 10_000
    assert (checkout / "results/study.tar.gz").is_file()

    shutil.copytree(checkout / "results", checkout / "old/results")  # the compare lines' baseline
    for line in lines(block("python -m specsweep compare")):
        done = sh(checkout, line)
        assert done.returncode == 0, (line, done.stdout[-3000:] + done.stderr[-3000:])
    assert (checkout / "results/compare/summary.csv").is_file()

    (checkout / "my-study.yaml").write_text(next(b for b in re.findall(r"```yaml\n(.*?)```", README, re.DOTALL)
                                                 if b.startswith("# my-study.yaml")))
    grid_line = next(line for line in lines(block("snakemake --cores 1 results/summary.png --configfile my-study"))
                     if "grid" in line)
    listed = sh(checkout, grid_line)
    assert listed.returncode == 0 and listed.stdout.split() == [f"tp1-b{b}-ctx512" for b in (0, 4, 8)], listed
    assert sh(checkout, "specsweep grid --config my-study.yaml").stdout == listed.stdout  # the console script

    for line in lines(block("snakemake --cores 1 results/provision/")):
        done = sh(checkout, line)
        assert done.returncode == 0, (line, done.stdout[-3000:] + done.stderr[-3000:])
    assert "measured: short" in done.stdout

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(checkout / "results/study.tar.gz", elsewhere)
    (elsewhere / ".venv").symlink_to(checkout / ".venv")  # the receiver's own main install
    done = sh(elsewhere, block("tar xzf"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "files match their checksums" in done.stdout

    # The study-axis example, as written (on the checkout's small workload): last, since it writes its
    # own summary over the default study's.
    kv_line, = lines(block("snakemake --cores 1 results/summary.png --configfile config/kv-cache.yaml"))
    done = sh(checkout, kv_line)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Best draft budget per tp, context, kv, section and load" in done.stderr
    kv = (checkout / "results/summary.csv").read_text().splitlines()[0].split(",")
    assert kv[:7] == ["name", "tp", "budget", "context", "kv", "section", "load"]
