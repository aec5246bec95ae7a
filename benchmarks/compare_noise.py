"""How noisy are a section's repeats on this machine, and how many does a 5% change need?

    python benchmarks/compare_noise.py [--repeats 6]

Measures one configuration of the default study (prompt 128, budgets 0 and 4) twice with the real
llama-server, through the real CLI, then compares the second run with the first (a rerun of
itself: every row should say "~") and prints each section's coefficient of variation of the
repeats' tok/s and the repeats a side `specsweep compare` needs to detect a 5% change.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from specsweep.study.loading import defaults

REPO = Path(__file__).resolve().parents[1]


def measure(doc: dict, folder: Path) -> Path:
    from specsweep import study
    from specsweep.analysis import aggregate

    cfg = study.validate_study(doc)
    for spec in study.expand_grid(cfg):
        proc = subprocess.run([sys.executable, "-m", "specsweep", "launch", "--spec", spec.to_json(),
                               "--out", str(folder / "launches" / f"{spec.name}.json"),
                               "--server-log", str(folder / f"{spec.name}.log"),
                               "--failures-dir", str(folder / "failures")], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
    aggregate.write_summary(aggregate.summarize(cfg, folder / "launches", folder / "failures"), folder / "summary.csv")
    return folder


def main() -> None:
    from specsweep import study
    from specsweep.analysis import compare
    from specsweep.study.targets import provision_embedded

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    doc = study.load_study(REPO / "config/config.yaml")
    embedded = provision_embedded(doc, Path(tempfile.gettempdir()) / "build.log")
    doc["server"]["binary"], doc["model"]["path"] = embedded["binary"], embedded["model"]
    doc["grid"] = {"budget": [0, 4], "tp": [1], "context": [128]}
    doc["workload"]["repeats"] = args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        a, b = measure(doc, Path(tmp) / "a"), measure(doc, Path(tmp) / "b")
        studies = [compare.open_study(p, Path(tmp) / "x") for p in (a, b)]
        frame = compare.compare(*studies, alpha=defaults("compare")["alpha"])
    print(compare.table(frame))
    print(f"\n{'configuration':<16}{'section':<9}{'CV':>7}  repeats a side for a 5% change")
    for r in frame.itertuples():
        print(f"{r.name:<16}{r.section:<9}{r.cv:>7.1%}  {r.repeats_for_5pct:.0f}")
    print(f"rerun of itself: {int((frame['verdict'] != '~').sum())} of {len(frame)} rows significant; "
          f"median CV {frame['cv'].median():.1%}, repeats for 5%: median {frame['repeats_for_5pct'].median():.0f}, "
          f"max {frame['repeats_for_5pct'].max():.0f}")
    print(json.dumps({"cv": frame["cv"].round(4).tolist()}))


if __name__ == "__main__":
    main()
