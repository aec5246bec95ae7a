"""Do verdicts reproduce? K independent runs of a study, and how often they disagree.

    python benchmarks/verdict_agreement.py [--runs 3] [--config config/config.yaml]
        [--set workload.launches=3] [--keep DIR]
    python benchmarks/verdict_agreement.py --analyze DIR/run1 DIR/run2 ...

Each run is the README's main command (`snakemake --cores 1 results/summary.png`) in a fresh
clone of this checkout's HEAD (commit what you want measured; the built server, model and
prompts come from the shared cache), one after another, nothing else running. For every pair
of runs and every cell (tp, context, section, load) it counts a contradiction when a budget one
run names best (decided or tied; an undecided cell names none) lies outside the other run's best
set, or when the two sets share no budget; the stricter count that also takes an undecided
run's highest budget as its pick is printed beside.
It prints the share of agreeing pairs x cells (goal: at least 95% at 95% confidence), each
run's verdicts, the launches each run spent (racing spends fewer where cells decide early), its
wall time, and the noise between launches with the launches it implies for a 10% difference.
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


def fresh_clone(dest: Path) -> Path:
    """A fresh clone of the checkout's HEAD, as the issue's runs were."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(dest)], check=True)
    return dest


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
    best["named"] = best["best_budget"].map(lambda b: None if pd.isna(b) else int(b))  # none when undecided
    best["highest"] = best["highest_budget"].astype(int)
    best["members"] = best["best_set"].fillna("").map(lambda s: {int(b) for b in s.split()})
    return best


def cells_of(best: pd.DataFrame) -> list[str]:
    keys = list(best.columns[:list(best.columns).index("best_budget")])
    return [" ".join(str(r[k]) for k in keys) for r in best.to_dict("records")]


def contradict(a: dict, b: dict, *, strict: bool) -> bool:
    """Whether two runs' verdicts on one cell contradict each other: a budget one run names lies
    outside the other's best set, or the two sets share no budget. ``strict``: an undecided run's
    highest budget counts as named too (a verdict never claims it; shown for comparison)."""
    picks = [(a["highest"] if strict else a["named"], b), (b["highest"] if strict else b["named"], a)]
    return any(p is not None and p not in other["members"] for p, other in picks) or not a["members"] & b["members"]


def agreement(folders: list[Path], *, strict: bool = False) -> tuple[int, int, list[str]]:
    """(pairs x cells that agree, pairs x cells in all, a line per disagreement)."""
    bests = {f: best_of(f) for f in folders}
    agree, total, lines = 0, 0, []
    for a, b in itertools.combinations(folders, 2):
        for cell, ra, rb in zip(cells_of(bests[a]), bests[a].to_dict("records"), bests[b].to_dict("records")):
            total += 1
            if not contradict(ra, rb, strict=strict):
                agree += 1
            else:
                lines.append(f"{a.name} vs {b.name}, {cell}: {ra['verdict']} {ra['named']} {sorted(ra['members'])} "
                             f"against {rb['verdict']} {rb['named']} {sorted(rb['members'])}")
    return agree, total, lines


def launches_of(folder: Path) -> int:
    return len(list((folder / "results" / "launches").glob("*/launch*.json")))


def noise(folders: list[Path]) -> str:
    """The noise each run's verdicts measured, from best.csv: the study's launch SD (log scale) and
    each cell's budget-by-prompt interaction SD."""
    lines = []
    for folder in folders:
        best = best_of(folder)
        if "launch_sd" not in best or best["launch_sd"].dropna().empty:
            continue
        inter = best["interaction_sd"].dropna()
        lines.append(f"  {folder.name}: launch SD {best['launch_sd'].median():.3f} (median over cells), "
                     f"interaction SD {inter.median():.3f} ({inter.min():.3f}-{inter.max():.3f})")
    return "\n".join(lines)


def named(best: pd.DataFrame) -> int:
    """Cells whose verdict names a budget: decided, or tied (the smallest of the tie)."""
    return int(best["named"].notna().sum())


def report(folders: list[Path], took: dict[Path, float]) -> None:
    print("noise measured:\n" + (noise(folders) or "  (no paired verdicts)"))
    agree, total, lines = agreement(folders)
    pairs = len(lines)
    print(f"\nagreement: {agree} of {total} run pairs x cells ({agree / max(total, 1):.0%}) have no named best "
          f"outside the other run's best set and no disjoint sets; {pairs} contradict:")
    print("\n".join(f"  {line}" for line in lines) or "  none")
    agree, total, lines = agreement(folders, strict=True)
    print(f"counting an undecided run's highest budget as named too: {agree} of {total} ({agree / max(total, 1):.0%})")
    print("\n".join(f"  {line}" for line in lines) or "  none")
    bests = [best_of(folder) for folder in folders]
    cells = sum(len(best) for best in bests)
    print(f"\nnamed: {sum(named(best) for best in bests)} of {cells} run x cell verdicts; mean best-set size "
          f"{sum(best['members'].map(len).sum() for best in bests) / max(cells, 1):.2f}")
    for folder, best in zip(folders, bests):
        states = best["verdict"].value_counts().to_dict()
        shown = "\n  ".join(f"{c}: {v}" for c, v in zip(cells_of(best), _verdicts(best)))
        print(f"{folder.parent.name}/{folder.name}: {launches_of(folder)} launches"
              + (f", {took[folder]:.0f} s" if folder in took else "") + f", sweep {sweep_s(folder):.0f} s, "
              f"{named(best)} of {len(best)} named, {states}\n  {shown}")


def sweep_s(folder: Path) -> float:
    """Seconds from the first launch's start to the summary's end, from Snakemake's log (the build
    and provisioning apart)."""
    import datetime
    import re

    logs = sorted((folder / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        return float("nan")
    text = logs[-1].read_text()
    stamps = [(m.start(), datetime.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"))
              for m in re.finditer(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]", text, re.M)]
    first = text.find("rule launch_configuration")
    start = max((t for pos, t in stamps if pos < first), default=stamps[0][1]) if first >= 0 else stamps[0][1]
    return (stamps[-1][1] - start).total_seconds()


def _verdicts(best: pd.DataFrame) -> list[str]:
    out = []
    for r in best.to_dict("records"):
        interval = "" if pd.isna(r.get("speedup_low")) else f" {r['speedup']:.2f}x [{r['speedup_low']:.2f}-" \
                                                             f"{r['speedup_high']:.2f}]"
        needs = f"; needs {r['needs']}" if isinstance(r.get("needs"), str) else ""
        out.append(f"{r['verdict']} {r['named'] if r['named'] is not None else '-'} (highest {r['highest']}) "
                   f"{{{r['best_set']}}}{interval}{needs}")
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
        folder = fresh_clone(root / f"run{number}")
        took[folder] = run_once(folder, args.config, args.set)
        print(f"run {number}: {took[folder]:.0f} s, {launches_of(folder)} launches", flush=True)
        folders.append(folder)
    report(folders, took)


if __name__ == "__main__":
    main()
