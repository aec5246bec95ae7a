"""Harness overhead of each configuration of a finished study: the job's wall time as
Snakemake recorded it (.snakemake/metadata), minus server startup, minus the measured sections.
What is left is interpreter start, the version probe, prompt tokenization, warmup, counter
reads, teardown and writing the result.

Usage (in the study's working directory, after `snakemake --cores 1 results/summary.png`):
    python benchmarks/overhead.py [--dir .]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
from pathlib import Path


def job_wall(workdir: Path, output: str) -> float | None:
    meta = workdir / ".snakemake" / "metadata" / base64.b64encode(output.encode()).decode()
    try:
        record = json.loads(meta.read_text())
        return record["endtime"] - record["starttime"]
    except (OSError, KeyError, ValueError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("."))
    args = parser.parse_args()
    rows = []
    for path in sorted((args.dir / "results" / "launches").glob("*.json")):
        doc = json.loads(path.read_text())
        wall = job_wall(args.dir, str(path.relative_to(args.dir)))
        if wall is None:
            continue
        t = doc["timing"]
        overhead = wall - t["startup_s"] - t["sections_s"]
        rows.append(overhead)
        print(f"{doc['name']:<16} job {wall:6.1f} s = startup {t['startup_s']:4.1f} + sections "
              f"{t['sections_s']:5.1f} + overhead {overhead:4.1f} s ({overhead / wall * 100:4.1f}%; "
              f"warmup {doc['warmup']['wall_s']:.1f} s of it)")
    if rows:
        print(f"median overhead {statistics.median(rows):.2f} s per configuration, "
              f"total {sum(rows):.1f} s over {len(rows)} configurations")


if __name__ == "__main__":
    main()
