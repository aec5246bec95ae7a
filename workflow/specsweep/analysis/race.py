"""Racing (verdict.until_decided): measure again only where the answer is undecided.

After round r (every racing configuration has r launches), a configuration gets launch r + 1
when it is in the best set of some cell whose verdict is still undecided; every other one has
had its last launch (it is decided, tied, or separably worse than the best wherever it could
still win). A configuration that once stops never resumes, so every contender at round r has
exactly r launches. The decision reads finished results alone, up to launch r, so the same
results always give the same next round; a Snakemake checkpoint (rules/launch.smk) holds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from specsweep.analysis import aggregate, answer, verdict
from specsweep.records import status
from specsweep.records.store import write_text_atomic


def contenders(config: dict, frame: pd.DataFrame, round_: int) -> tuple[list[str], list[str]]:
    """(configurations that get launch round + 1, the undecided cells as words), in grid order."""
    if round_ >= config["verdict"]["until_decided"]["max_launches"]:
        return [], []
    best = answer.of_study(frame, config)
    keys = answer.keys_of_best(best)
    racing = frame[(frame["status"] == status.OK) & (frame["launches"] == round_)]
    chosen, cells = set(), []
    for row in best[best["verdict"] == verdict.UNDECIDED].to_dict("records"):
        members = {int(b) for b in str(row["best_set"]).split()}
        here = racing[(racing[keys] == pd.Series({k: row[k] for k in keys})).all(axis=1)]
        names = set(here.loc[here["budget"].astype(int).isin(members), "name"])
        if names:
            chosen |= names
            cells.append(" ".join(f"{k} {row[k]}" for k in keys) + f": undecided {row['best_set']}")
    order = list(dict.fromkeys(frame["name"]))
    return sorted(chosen, key=order.index), cells


def write_round(config: dict, round_: int, launches: Path, failures: Path, out: Path) -> list[str]:
    """Decide round ``round_`` from the launches up to it; write the decision; return the contenders."""
    frame = aggregate.summarize(config, launches, failures, upto=round_)
    names, cells = contenders(config, frame, round_)
    write_text_atomic(Path(out), json.dumps({"round": round_, "contenders": names, "undecided": cells},
                                            indent=1) + "\n")
    return names
