"""Do verdicts reproduce? K independent runs of a study, and how often they disagree.

    python benchmarks/verdict_agreement.py [--runs 3] [--config config/config.yaml]
        [--set workload.launches=3] [--keep DIR]
    python benchmarks/verdict_agreement.py --analyze DIR/run1 DIR/run2 ...

Each run is the README's main command (`snakemake --cores 1 results/summary.png`) in a fresh
copy of this checkout (the built server, model and prompts come from the shared cache), one after
another, nothing else running. For every pair of runs and every cell (tp, context, section, load)
it counts a disagreement when one run's best budget (the one it names, or the highest where it
is undecided) lies outside the other run's best set. It prints the share of agreeing pairs x
cells (goal: at least 95% at 95% confidence), each run's verdicts, the launches each run spent
(racing spends fewer where cells decide early) and its wall time.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def fresh_copy(dest: Path) -> Path:
    """The checkout's files (tracked and untracked, not ignored), as a fresh clone would have them."""
    from conftest import copy_checkout

    dest.mkdir(parents=True)
    return copy_checkout(dest)


def set_key(doc: dict, assignment: str) -> None:
    """--set a.b=value: the value read as YAML."""
    key, value = assignment.split("=", 1)
    *path, last = key.split(".")
    for part in path:
        doc = doc.setdefault(part, {})
    doc[last] = yaml.safe_load(value)


def run_once(folder: Path, config: Path, changes: list[str]) -> float:
    doc = yaml.safe_load(config.read_text())
    for change in changes:
        set_key(doc, change)
    (folder / "config" / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "results/summary.png"], cwd=folder,
                          capture_output=True, text=True)
    took = time.monotonic() - start
    (folder / "snakemake.out").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{folder}: the main command failed; see {folder / 'snakemake.out'}")
    return took


def best_of(folder: Path) -> pd.DataFrame:
    best = pd.read_csv(folder / "results" / "best.csv", dtype={"best_set": str})
    best["named"] = best["best_budget"].fillna(best["highest_budget"]).astype(int)
    best["members"] = best["best_set"].fillna("").map(lambda s: {int(b) for b in s.split()})
    return best


def cells_of(best: pd.DataFrame) -> list[str]:
    keys = list(best.columns[:list(best.columns).index("best_budget")])
    return [" ".join(str(r[k]) for k in keys) for r in best.to_dict("records")]


def agreement(folders: list[Path]) -> tuple[int, int, list[str]]:
    """(pairs x cells that agree, pairs x cells in all, a line per disagreement)."""
    bests = {f: best_of(f) for f in folders}
    agree, total, lines = 0, 0, []
    for a, b in itertools.combinations(folders, 2):
        for cell, ra, rb in zip(cells_of(bests[a]), bests[a].to_dict("records"), bests[b].to_dict("records")):
            total += 1
            if ra["named"] in rb["members"] and rb["named"] in ra["members"]:
                agree += 1
            else:
                lines.append(f"{a.name} vs {b.name}, {cell}: {ra['named']} {sorted(ra['members'])} against "
                             f"{rb['named']} {sorted(rb['members'])}")
    return agree, total, lines


def launches_of(folder: Path) -> int:
    return len(list((folder / "results" / "runs").glob("*/launch*.json")))


def report(folders: list[Path], took: dict[Path, float]) -> None:
    agree, total, lines = agreement(folders)
    print(f"\nagreement: {agree} of {total} run pairs x cells ({agree / total:.0%}); disagreements:")
    print("\n".join(f"  {line}" for line in lines) or "  none")
    for folder in folders:
        best = best_of(folder)
        states = best["verdict"].value_counts().to_dict()
        shown = "; ".join(f"{c}: {v}" for c, v in zip(cells_of(best), _verdicts(best)))
        print(f"{folder.name}: {launches_of(folder)} launches"
              + (f", {took[folder]:.0f} s" if folder in took else "") + f", {states}\n  {shown}")


def _verdicts(best: pd.DataFrame) -> list[str]:
    out = []
    for r in best.to_dict("records"):
        interval = "" if pd.isna(r.get("speedup_low")) else f" {r['speedup']:.2f}x [{r['speedup_low']:.2f}-" \
                                                             f"{r['speedup_high']:.2f}]"
        out.append(f"{r['verdict']} {r['named']} {{{r['best_set']}}}{interval}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument("--set", action="append", default=[], help="change a study key, e.g. workload.launches=3")
    parser.add_argument("--keep", type=Path, help="folder for the runs (kept); default a new one under /tmp")
    parser.add_argument("--analyze", type=Path, nargs="+", help="result folders of earlier runs: only compare them")
    args = parser.parse_args()
    if args.analyze:
        report(args.analyze, {})
        return
    root = args.keep or Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True).stdout.strip())
    folders, took = [], {}
    for number in range(1, args.runs + 1):
        folder = fresh_copy(root / f"run{number}")
        took[folder] = run_once(folder, args.config, args.set)
        print(f"run {number}: {took[folder]:.0f} s, {launches_of(folder)} launches", flush=True)
        folders.append(folder)
    report(folders, took)


if __name__ == "__main__":
    main()
