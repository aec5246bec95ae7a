"""Planning cost against grid size: `snakemake -n` of the real workflow at 100, 1,000 and 10,000
configurations, and `specsweep grid` for comparison.

    python benchmarks/planning.py [--sizes 100 1000 10000] [--launches 2]

Prints the wall time of each dry run and the ratio to the previous size (near the size ratio,
10, is linear; near its square, 100, quadratic), and Snakemake's own floor: the dry run of a
trivial workflow with as many one-line shell jobs, so that what specsweep adds can be told apart
from what one job per configuration costs in Snakemake itself.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def study(size: int, launches: int) -> dict:
    """A grid of ``size`` configurations: budgets x prompt lengths, as square as it divides, each
    measured on ``launches`` server launches (one job each)."""
    budgets = next(b for b in range(int(math.isqrt(size)), 0, -1) if size % b == 0)
    return {"grid": {"budget": list(range(budgets)), "tp": [1], "context": list(range(64, 64 + size // budgets))},
            "workload": {"launches": launches}}


TRIVIAL = """rule all:
    input: expand("out/{i}.txt", i=range(SIZE))
rule one:
    output: "out/{i}.txt"
    log: "logs/{i}.log"
    shell: "echo {wildcards.i} > {output} 2> {log}"
"""


def timed(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--launches", type=int, default=2, help="server launches per configuration (jobs each)")
    args = parser.parse_args()
    print(f"{args.launches} launch(es) per configuration; the trivial floor has as many jobs")
    print(f"{'configurations':>14}{'snakemake -n':>14}{'ratio':>8}{'specsweep grid':>16}{'trivial floor':>15}")
    previous = None
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "study.yaml").write_text(yaml.safe_dump(study(size, args.launches)))
            dry = timed([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp),
                         "-n", "--cores", "1", "results/summary.png", "--quiet", "all", "--configfile",
                         str(tmp / "study.yaml")], tmp)
            grid = timed([sys.executable, "-m", "specsweep", "grid", "--config", str(tmp / "study.yaml")], tmp)
            (tmp / "Trivial").write_text(TRIVIAL.replace("SIZE", str(size * args.launches)))
            floor = timed([sys.executable, "-m", "snakemake", "-s", str(tmp / "Trivial"), "-n", "--cores", "1",
                           "--quiet", "all"], tmp)
        ratio = f"{dry / previous:.1f}x" if previous else "-"
        print(f"{size:>14,}{dry:>13.1f}s{ratio:>8}{grid:>15.1f}s{floor:>14.1f}s", flush=True)
        previous = dry


if __name__ == "__main__":
    main()
