"""A summary's cells (every axis but the budget, one section, one load) and the evidence each is
decided on.

Where every budget's launch k sent the same prompts (the workload's pairing), the evidence is the
paired design of the cell's requests (analysis/variance.py): differences between budgets are
taken prompt by prompt, the variance between launches is pooled over the study and counted in
full, and the budget-by-prompt interaction is averaged over the prompts. Where requests cannot be
paired (the goodput search's row, results without prompt identities), each launch's throughput is
one unit (or, with one launch each, one launch's repeats), as verdict.decide takes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from specsweep import axes
from specsweep.analysis import variance, verdict
from specsweep.records.status import OK


@dataclass(frozen=True)
class Evidence:
    """What one cell is decided on."""

    basis: str  # verdict.PROMPTS, LAUNCHES or REPEATS
    units: int  # the fewest launches (or repeats) any budget of the cell had
    samples: dict[int, list[float]]  # each budget's launch (or repeat) throughputs
    estimates: verdict.Estimates | None = None  # the paired design's, None for the units' one-way
    design: variance.Design | None = None
    variance: variance.CellVariance | None = None


def keys_of(columns) -> list[str]:
    """What a cell is: every axis but the budget, then the section and load."""
    return [a for a in axes.columns(columns) if a != "budget"] + axes.within(columns)


def values_of(cell) -> list[float]:
    """The numbers of a launch_tok_s or repeat_tok_s cell."""
    if isinstance(cell, str):
        return [float(v) for v in cell.split()]
    return [] if cell is None or not axes.is_number(cell) or math.isnan(cell) else [float(cell)]


def cell_units(cell: pd.DataFrame) -> tuple[dict[int, list[float]], str]:
    """The units of one cell's measured rows, by budget: their launches' throughputs, or (one
    launch each) their repeats'."""
    cell = cell.dropna(subset=["output_tok_s"])
    launches = {int(r["budget"]): values_of(r.get("launch_tok_s")) or [float(r["output_tok_s"])]
                for _, r in cell.iterrows()}
    repeats = {int(r["budget"]): values_of(r.get("repeat_tok_s")) for _, r in cell.iterrows()}
    return verdict.units(launches, repeats)


def observations(cell: pd.DataFrame) -> list[variance.Observation]:
    """Every request of a cell's measured rows, from their prompt_tok_s ("launch:prompt:tok/s" each)."""
    out = []
    for _, row in cell.iterrows():
        text = row.get("prompt_tok_s")
        for item in (text.split() if isinstance(text, str) else ()):
            launch, prompt, rate = item.split(":")
            out.append(variance.Observation(int(row["budget"]), int(launch), prompt, float(rate)))
    return out


def evidence(frame: pd.DataFrame) -> dict[tuple, Evidence]:
    """Per cell with a measured figure (keyed by its keys_of values), its evidence: the paired
    design where the cell's requests pair, the study's launch noise pooled over all such cells."""
    keys = keys_of(frame.columns)
    inside = axes.within(frame.columns)
    valued = frame[frame["status"] == OK].dropna(subset=["output_tok_s"])
    designs: dict[tuple, variance.Design] = {}
    units: dict[tuple, tuple[dict[int, list[float]], str]] = {}
    for key, cell in valued.groupby(keys, sort=False):
        units[key] = cell_units(cell)
        design = variance.fit(observations(cell))
        if design is not None and len(design.budgets) == cell["budget"].nunique():
            designs[key] = design
    pooled = variance.pooled_launch_noise([(key[:len(key) - len(inside)], d) for key, d in designs.items()])
    noise, parts = pooled if pooled is not None else (None, {})
    index = {key: i for i, key in enumerate(designs)}
    out = {}
    for key, (samples, basis) in units.items():
        design = designs.get(key)
        spread = None if design is None else variance.cell_variance(design, noise, parts.get(index[key]))
        if design is None or spread is None:
            out[key] = Evidence(basis, min(len(v) for v in samples.values()), samples)
            continue
        est = verdict.Estimates(design.estimates,
                                lambda i, j, k, d=design, v=spread.variance: v * d.covariance(i, j, k), spread.df)
        out[key] = Evidence(verdict.PROMPTS, min(design.launches.values()), samples, est, design, spread)
    return out


def speedup_interval(found: Evidence, budget: int, *, confidence: float) -> tuple[float, float] | None:
    """A budget's speedup over budget 0 with its interval, from the cell's evidence; None for budget
    0 itself (1 by definition), without budget 0, or where the units give no interval (one
    launch's repeats, one unit each)."""
    if budget == 0:
        return None
    if found.estimates is not None:
        if 0 not in found.estimates.means or budget not in found.estimates.means:
            return None
        return verdict.interval(found.estimates, budget, confidence=confidence)
    if found.basis != verdict.LAUNCHES:
        return None  # one launch's repeats would give an interval narrower than the noise: none
    return verdict.speedup_interval(found.samples, budget, confidence=confidence)


def paired_speedup(found: Evidence, budget: int) -> float | None:
    """The geometric mean, over the paired prompts, of a budget's throughput over budget 0's."""
    means = found.estimates.means if found.estimates is not None else {}
    if 0 not in means or budget not in means:
        return None
    return math.exp(means[budget] - means[0])
