"""The answer: per cell (every axis but the budget, one section, one load), the verdict on the
budgets measured there (analysis/verdict.py), the figures of the budget it names and the budgets
without a result, as results/best.csv holds it. analysis/report.py presents it; racing
(analysis/race.py) reads it for who is still in some cell's best set.
"""

from __future__ import annotations

import pandas as pd

from specsweep import axes
from specsweep.analysis import aggregate, verdict
from specsweep.records.status import OK

RESULT_COLUMNS = ["best_budget", "verdict", "best_set", "within_noise", "highest_budget", "output_tok_s",
                  "output_tok_s_min", "output_tok_s_max", "speedup", "speedup_low", "speedup_high", "speedup_min",
                  "speedup_max", "sustained_rate_rps", "confidence", "basis", "launches", "budgets_measured",
                  "budgets_missing"]
FIGURES = ("output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup", "speedup_low", "speedup_high",
           "speedup_min", "speedup_max")


def groups_of(frame: pd.DataFrame) -> list[str]:
    """What the best budget is chosen per: every axis but the budget, then the section and load."""
    return [a for a in axes.columns(frame.columns) if a != "budget"] + axes.within(frame.columns)


def keys_of_best(best: pd.DataFrame) -> list[str]:
    """The columns a best table is grouped by: those before best_budget."""
    cols = list(best.columns)
    return cols[:cols.index("best_budget")]


def best_table(frame: pd.DataFrame, settings: dict) -> pd.DataFrame:
    """Per value of every other axis, section and load (a cell): the verdict (analysis/verdict.py,
    at the confidence and tie of ``settings``, the study's verdict:) on the budgets measured
    there, with the figures of the budget it names (or, undecided, of the highest), the speedup's
    interval, and the budgets without a result.

    Budget 0 competes too: when speculation is slower, the answer is 0. A budget without a
    result is never a candidate: it is listed as missing, never counted as zero.
    """
    rows = []
    keys, inside = groups_of(frame), axes.within(frame.columns)
    # The axes in their sort order, sections and loads in the workload's.
    order = {c: {v: i for i, v in enumerate(dict.fromkeys(frame[c]))} for c in inside}
    groups = sorted(frame.groupby(keys, sort=False),
                    key=lambda g: (*(axes.sort_key(v) for v in g[0][:-len(inside)]),
                                   *(order[c][v] for c, v in zip(inside, g[0][-len(inside):]))))
    for key, group in groups:
        where = dict(zip(keys, key))
        measured = group[group["status"] == OK]
        missing = sorted(set(group["budget"]) - set(measured["budget"]))
        valued = measured.dropna(subset=["output_tok_s"])  # a goodput search that met no rate has none
        if valued.empty:
            rows.append({**where, "best_budget": None, "budgets_measured": _budgets(measured["budget"]),
                         "budgets_missing": _budgets(missing)})
            continue
        samples, basis = aggregate.cell_units(valued)
        confidence = settings["confidence"]
        found = verdict.decide(samples, confidence=confidence, tie=settings["tie"], basis=basis)
        shown = valued[valued["budget"] == (found.highest if found.named is None else found.named)].iloc[0]
        rows.append({
            **where, "best_budget": found.named, "verdict": found.state, "best_set": _budgets(found.members),
            "within_noise": _budgets(found.others), "highest_budget": found.highest,
            **{c: shown.get(c) for c in FIGURES}, "sustained_rate_rps": shown.get("sustained_rate_rps"),
            "confidence": confidence, "basis": found.basis, "launches": found.units,
            "budgets_measured": _budgets(valued["budget"]), "budgets_missing": _budgets(missing),
        })
    return pd.DataFrame(rows, columns=keys + RESULT_COLUMNS)


def _budgets(values) -> str:
    return " ".join(str(int(v)) for v in sorted(values))
