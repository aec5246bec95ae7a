"""The answer: per cell (every axis but the budget, one section, one load), the verdict on the
budgets measured there (analysis/verdict.py), the figures of the budget it names and the budgets
without a result: computed and written as results/best.csv here, and nowhere else (write_best).
analysis/report.py presents the table it returns; racing (analysis/race.py) reads it for who is
still in some cell's best set.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from scipy import stats

from specsweep import axes
from specsweep.analysis import cells, ledger, variance, verdict
from specsweep.records import store
from specsweep.records.result import ENERGY_COLUMNS
from specsweep.records.status import OK

RESULT_COLUMNS = ["best_budget", "verdict", "best_set", "within_noise", "highest_budget", "output_tok_s",
                  "output_tok_s_min", "output_tok_s_max", "speedup", "speedup_low", "speedup_high", "speedup_min",
                  "speedup_max", *ENERGY_COLUMNS, "energy_source", "sustained_rate_rps", "confidence", "basis",
                  "launches", "prompts",
                  "launch_sd", "interaction_sd", "needs_launches", "needs_prompts", "needs",
                  "budgets_measured", "budgets_missing"]
FIGURES = ("output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup", "speedup_low", "speedup_high",
           "speedup_min", "speedup_max", *ENERGY_COLUMNS, "energy_source")


# The best table's text columns: "" where a cell has none, in the table returned and in the file alike.
TEXT_COLUMNS = ("within_noise", "budgets_measured", "best_set", "verdict", "basis", "needs")


def of_study(frame: pd.DataFrame, config: dict) -> pd.DataFrame:
    """The study's answer: the best table of the summary ``frame`` under the study's verdict:
    settings, looked at as often as racing may look (racing asks it after each round)."""
    best = best_table(frame, config["verdict"], looks=ledger.looks(config))
    best[list(TEXT_COLUMNS)] = best[list(TEXT_COLUMNS)].astype("string").fillna("")
    return best


def write_best(frame: pd.DataFrame, config: dict, path: Path) -> pd.DataFrame:
    """The study's answer (of_study) written to ``path`` (results/best.csv), and returned as
    written, for the report, the deploy files and the terminal."""
    best = of_study(frame, config)
    store.write_text_atomic(path, best.to_csv(index=False))
    return best


def keys_of_best(best: pd.DataFrame) -> list[str]:
    """The columns a best table is grouped by: those before best_budget."""
    cols = list(best.columns)
    return cols[:cols.index("best_budget")]


def look_confidence(settings: dict, looks: int = 1) -> float:
    """The confidence each look at the data is held to, so that the study keeps its stated one:
    racing looks once after every round and may stop a configuration at any of them, so the
    stated error is split evenly over the looks it may take (Bonferroni's inequality: the chance
    that the true best is ever left out is at most the sum over the looks)."""
    return 1 - (1 - settings["confidence"]) / max(1, looks)


def best_table(frame: pd.DataFrame, settings: dict, *, looks: int = 1) -> pd.DataFrame:
    """Per value of every other axis, section and load (a cell): the verdict (analysis/verdict.py,
    at the confidence and tie of ``settings``, the study's verdict:, each of ``looks`` looks at
    look_confidence) on the budgets measured there, from the cell's evidence (analysis/cells.py),
    with the figures of the budget it names (or, undecided, of the highest) as the summary row
    has them, what the verdict rests on and, undecided, what it would need, and the budgets
    without a result.

    Budget 0 competes too: when speculation is slower, the answer is 0. A budget without a
    result is never a candidate: it is listed as missing, never counted as zero.
    """
    rows = []
    keys, inside = cells.keys_of(frame.columns), axes.within(frame.columns)
    confidence = look_confidence(settings, looks)
    evidence = cells.evidence(frame)
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
        found = evidence[key]
        decided = _decide(found, confidence, settings["tie"])
        head = decided.highest if decided.named is None else decided.named
        shown = valued[valued["budget"] == head].iloc[0]
        rows.append({
            **where, "best_budget": decided.named, "verdict": decided.state, "best_set": _budgets(decided.members),
            "within_noise": _budgets(decided.others), "highest_budget": decided.highest,
            **_figures(shown),
            "sustained_rate_rps": shown.get("sustained_rate_rps"), "confidence": settings["confidence"],
            "basis": decided.basis, "launches": decided.units, **_rests_on(found),
            **_needs(found, decided, valued, settings["tie"], confidence),
            "budgets_measured": _budgets(valued["budget"]), "budgets_missing": _budgets(missing),
        })
    return pd.DataFrame(rows, columns=keys + RESULT_COLUMNS)


def _decide(found: cells.Evidence, confidence: float, tie: float) -> verdict.Verdict:
    if found.estimates is None:
        return verdict.decide(found.samples, confidence=confidence, tie=tie, basis=found.basis)
    return verdict.best_set(found.estimates, confidence=confidence, tie=tie, basis=found.basis, units=found.units)


def _figures(shown: pd.Series) -> dict:
    """The named (or highest) budget's figures from its summary row (aggregate.add_speedup). Where
    the requests pair, its speedup is the paired one, the figure its interval is about (else the
    ratio of mean throughputs)."""
    figures = {c: shown.get(c) for c in FIGURES}
    if not pd.isna(shown.get("speedup_paired", math.nan)):
        figures["speedup"] = shown["speedup_paired"]
    return figures


def _rests_on(found: cells.Evidence) -> dict:
    """The paired design's size and the noise at each level it measured (log scale, ~ relative)."""
    if found.design is None:
        return {}
    return {"prompts": round(found.design.prompts, 2), "launch_sd": math.sqrt(found.variance.launch),
            "interaction_sd": math.sqrt(found.variance.interaction)}  # nan with one prompt a launch


def _needs(found: cells.Evidence, decided: verdict.Verdict, valued: pd.DataFrame, tie: float,
           confidence: float) -> dict:
    """What an undecided cell would need, for the differences it measured: launches per budget at
    the prompts per launch that cost least (Kalibera & Jones), from the variance at each level."""
    if decided.state != verdict.UNDECIDED or found.design is None:
        return {}
    spread, design = found.variance, found.design
    means = design.estimates
    # One prompt a launch measures no interaction apart: the launch-level figure already holds it.
    interaction = 0.0 if math.isnan(spread.interaction) else spread.interaction
    gaps = [means[decided.highest] - means[b] for b in decided.others]
    per_prompt = (valued["wall_s"] / valued["requests"]).mean() if "wall_s" in valued else math.nan
    overhead = valued["launch_overhead_s"].mean() if "launch_overhead_s" in valued else math.nan
    ratio = overhead / per_prompt if per_prompt > 0 and not math.isnan(overhead) else 1.0
    prompts = variance.optimal_prompts(spread.launch, interaction, ratio, least=design.prompts)
    # Bonferroni's t at today's degrees of freedom: above Dunnett's d, and more data only lowers it.
    critical = float(stats.t.ppf(1 - (1 - confidence) / max(1, len(decided.members) - 1), verdict.degrees(spread.df)))
    launches = variance.launches_needed(gaps, launch=spread.launch, interaction=interaction,
                                        prompts=prompts, critical=critical, margin=math.log1p(tie))
    if launches is None:
        return {"needs": "out of reach: the budgets measured within the tie margin or beyond "
                         f"{variance.MOST_LAUNCHES} launches"}
    launches = max(launches, decided.units + 1)  # what it has did not decide: at least one more
    return {"needs_launches": launches, "needs_prompts": prompts,
            "needs": f"about {launches} launches of {prompts} prompt{'' if prompts == 1 else 's'} per section"}


def _budgets(values) -> str:
    return " ".join(str(int(v)) for v in sorted(values))
