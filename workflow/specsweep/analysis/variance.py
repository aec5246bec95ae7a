"""The variance of a cell's paired design at each level, the study-wide noise between launches,
and what more measurement an undecided verdict would need.

The model (docs/verdicts.md), on the log of each request's throughput (its output tokens over its
time from send to last token) for prompt p sent at launch index k to budget b's server:

    y_bkp = mu_b + pi_kp + u_bk + e_bkp

- pi_kp, the prompt: every budget's launch k sends the same prompts, so it cancels in every
  comparison of budgets made at the same launch index (the pairing);
- u_bk, the launch: each configuration's launch is a server of its own, started at another minute,
  so it does not cancel; its variance sigma_u^2 counts in full;
- e_bkp, the budget-by-prompt interaction (how much a draft helps differs from text to text) and
  the request's own noise, variance sigma_e^2.

Within launch index k the budgets x prompts table's two-way residual estimates sigma_e^2 (u_bk is
the row effect there, pi_kp the column effect). Across launch indices the prompt means
m_bk = mean_p y_bkp follow the additive model m_bk = mu_b + beta_k + eps_bk (beta_k: launch k's
prompts), Var(eps) = sigma_u^2 + sigma_e^2 / P, fitted by least squares so that racing's unequal
launch counts are handled as they come. The residual mean square of one cell has few degrees of
freedom ((B - 1)(L - 1): 3 for four budgets and two launches); sigma_u^2 is a property of the
machine and the server, not of one cell, so it is pooled over the study's cells (Kalibera & Jones
2013's variance components, estimated by the method of moments; statistics.md section 2a) and each
cell's variance is sigma_u^2 + its own sigma_e^2 / P, with Satterthwaite's degrees of freedom. A
cell whose own launch-level scatter is far above what the pooled figure predicts (F test at 1%)
keeps its own estimate instead.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

HOMOGENEITY_LEVEL = 0.01  # a cell's launch scatter beyond the pooled figure at this level keeps its own
MOST_PROMPTS = 64  # the most prompts per launch a recommendation names (a prompt set's reach, a launch's length)
MOST_LAUNCHES = 1000  # beyond this a difference is called out of reach rather than priced


@dataclass(frozen=True)
class Observation:
    """One request of a cell: its budget, launch index, prompt identity and throughput (tok/s)."""

    budget: int
    launch: int
    prompt: str
    tok_s: float


@dataclass(frozen=True)
class Design:
    """A cell's paired design after fitting: per budget the estimate of mu_b (log scale, relative
    to launch 1's prompts), the covariance of the estimates per unit of the launch-level variance,
    and the variance each level shows."""

    budgets: tuple[int, ...]
    estimates: dict[int, float]
    unit_cov: np.ndarray  # Cov(mu_hat) / Var(eps_bk), rows and columns in ``budgets`` order
    launches: dict[int, int]  # per budget, its launches
    prompts: float  # prompts per launch a budget's launch mean rests on (mean over launches)
    launch_ms: float  # residual mean square of the additive model (nan without degrees of freedom)
    launch_df: int
    interaction: float  # sigma_e^2 (nan without degrees of freedom)
    interaction_df: int

    def covariance(self, i: int, j: int, k: int) -> float:
        """Cov(mu_hat_j - mu_hat_i, mu_hat_k - mu_hat_i) per unit of the launch-level variance."""
        a, b, c = (self.budgets.index(x) for x in (i, j, k))
        cov = self.unit_cov
        return float(cov[b, c] - cov[b, a] - cov[a, c] + cov[a, a])


def paired(observations: Iterable[Observation]) -> dict[int, dict[int, dict[str, float]]]:
    """Per launch index, per budget, the log throughput of each prompt every budget of that launch
    index was sent: a prompt not sent to all of them is no pair and is left out."""
    table: dict[int, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for o in observations:
        table[o.launch][o.budget][o.prompt] = math.log(o.tok_s)
    out = {}
    for k, by_budget in sorted(table.items()):
        common = set.intersection(*(set(v) for v in by_budget.values()))
        if common:
            out[k] = {b: {p: v[p] for p in sorted(common)} for b, v in sorted(by_budget.items())}
    return out


def fit(observations: Iterable[Observation]) -> Design | None:
    """The cell's design fitted; None when no two budgets share a launch index's prompts."""
    table = paired(observations)
    budgets = tuple(sorted({b for by_budget in table.values() for b in by_budget}))
    if len(budgets) < 2 or not any(len(v) >= 2 for v in table.values()):
        return None
    interaction, interaction_df = _interaction(table)
    cells = [(b, k, float(np.mean(list(v[b].values())))) for k, v in table.items() for b in v]
    launches = sorted(table)
    x = np.zeros((len(cells), len(budgets) + len(launches) - 1))
    for row, (b, k, _) in enumerate(cells):
        x[row, budgets.index(b)] = 1.0
        if launches.index(k) > 0:
            x[row, len(budgets) + launches.index(k) - 1] = 1.0
    y = np.array([m for _, _, m in cells])
    gram = np.linalg.pinv(x.T @ x)
    coef = gram @ x.T @ y
    df = len(cells) - int(np.linalg.matrix_rank(x))
    ms = float(((y - x @ coef) ** 2).sum() / df) if df > 0 else math.nan
    prompts = float(np.mean([len(next(iter(v.values()))) for v in table.values()]))
    counts = {b: sum(b in v for v in table.values()) for b in budgets}
    return Design(budgets, {b: float(coef[i]) for i, b in enumerate(budgets)},
                  gram[:len(budgets), :len(budgets)], counts, prompts, ms, df, interaction, interaction_df)


def _interaction(table: Mapping[int, Mapping[int, Mapping[str, float]]]) -> tuple[float, int]:
    """sigma_e^2 from each launch index's budgets x prompts table: the two-way residual, pooled."""
    squares, df = 0.0, 0
    for by_budget in table.values():
        y = np.array([list(v.values()) for v in by_budget.values()])
        if y.shape[0] < 2 or y.shape[1] < 2:
            continue
        resid = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
        squares += float((resid ** 2).sum())
        df += (y.shape[0] - 1) * (y.shape[1] - 1)
    return (squares / df if df else math.nan), df


@dataclass(frozen=True)
class LaunchNoise:
    """The study-wide variance between launches (log scale) by the method of moments: the sums it
    is made of, so that one cell can be judged against the others without it."""

    excess: float  # sum over cells of df x (launch-level mean square - sigma_e^2 / P)
    weight: float  # sum over cells of df
    terms: float  # sum over cells of the squared pieces of the estimate's variance (times weight^2)

    @property
    def variance(self) -> float:
        return max(0.0, self.excess / self.weight) if self.weight > 0 else 0.0

    @property
    def spread(self) -> float:
        """The estimate's own variance (Satterthwaite: 2 x sum of (coefficient x mean square)^2 / df)."""
        return 2 * self.terms / self.weight ** 2 if self.weight > 0 else math.inf

    @property
    def df(self) -> float:
        return 2 * self.variance ** 2 / self.spread if self.spread > 0 else math.inf

    def without(self, other: LaunchNoise) -> LaunchNoise:
        return LaunchNoise(self.excess - other.excess, self.weight - other.weight, self.terms - other.terms)


def _share(design: Design, cells_in_group: int) -> LaunchNoise:
    """One cell's part of the pooled figure. Cells of one launch group share their servers, so
    together they count the degrees of freedom of one: each counts 1/cells_in_group of its own."""
    own = design.interaction / design.prompts
    df = design.launch_df / cells_in_group
    terms = (design.launch_df * design.launch_ms) ** 2 / df + (design.launch_df * own) ** 2 / design.interaction_df
    return LaunchNoise(design.launch_df * (design.launch_ms - own), design.launch_df, terms)


def pooled_launch_noise(designs: Sequence[tuple[str, Design]]) -> tuple[LaunchNoise, dict[int, LaunchNoise]] | None:
    """sigma_u^2 over every cell (``(launch group, design)``): the launch-level mean squares less
    each cell's sigma_e^2 / P, weighted by degrees of freedom, never below zero; with each cell's
    own part (by its index in ``designs``), for judging it against the rest."""
    usable = [(i, g, d) for i, (g, d) in enumerate(designs) if d.launch_df > 0 and d.interaction_df > 0]
    if not usable:
        return None
    per_group: dict[str, int] = defaultdict(int)
    for _, g, _ in usable:
        per_group[g] += 1
    parts = {i: _share(d, per_group[g]) for i, g, d in usable}
    total = LaunchNoise(sum(p.excess for p in parts.values()), sum(p.weight for p in parts.values()),
                        sum(p.terms for p in parts.values()))
    return total, parts


@dataclass(frozen=True)
class CellVariance:
    """Var(eps_bk) of one cell, its degrees of freedom, and where it came from."""

    variance: float
    df: float
    launch: float  # the sigma_u^2 it uses
    interaction: float  # the cell's sigma_e^2
    pooled: bool  # sigma_u^2 from the study (True) or the cell's own launch-level scatter (False)


def cell_variance(design: Design, noise: LaunchNoise | None, own_part: LaunchNoise | None = None
                  ) -> CellVariance | None:
    """sigma_u^2 (pooled) + sigma_e^2 / P with Satterthwaite's degrees of freedom, or the cell's own
    launch-level mean square where there is no pooled figure, or where the cell's scatter exceeds
    what the other cells' figure predicts (F test at HOMOGENEITY_LEVEL)."""
    own = CellVariance(design.launch_ms, design.launch_df, max(0.0, design.launch_ms - _within(design)),
                       design.interaction, False)
    if design.interaction_df == 0 or noise is None:
        return own if design.launch_df > 0 else None
    within = _within(design)
    if own_part is not None and design.launch_df > 0:
        others = noise.without(own_part)
        if others.weight > 0:
            expected = others.variance + within
            df = expected ** 2 / (others.spread / 2 + within ** 2 / design.interaction_df)
            if design.launch_ms / expected > stats.f.ppf(1 - HOMOGENEITY_LEVEL, design.launch_df, min(df, 1e6)):
                return own
    variance = noise.variance + within
    df = variance ** 2 / (noise.spread / 2 + within ** 2 / design.interaction_df)
    return CellVariance(variance, df, noise.variance, design.interaction, True)


def _within(design: Design) -> float:
    return design.interaction / design.prompts if design.interaction_df else 0.0


def optimal_prompts(launch: float, interaction: float, cost_ratio: float, *, least: float) -> int:
    """Kalibera & Jones's cost-optimal repetitions at the lower level: prompts per launch
    P* = ceil(sqrt((c_launch / c_prompt) * sigma_e^2 / sigma_u^2)), between ``least`` and
    MOST_PROMPTS (no launch noise measured: the most)."""
    if launch <= 0:
        return MOST_PROMPTS
    best = math.ceil(math.sqrt(max(cost_ratio, 0.0) * interaction / launch))
    return int(min(MOST_PROMPTS, max(math.ceil(least), best)))


def launches_needed(gaps: Sequence[float], *, launch: float, interaction: float, prompts: float, critical: float,
                    margin: float) -> int | None:
    """Launches per budget at ``prompts`` prompts each for the best set to shrink to one budget (or
    to a tie): each measured gap to the highest, less the tie margin, must exceed the critical
    value times the standard error 2 (sigma_u^2 + sigma_e^2 / P) / L. None when a gap within the
    margin could only be tied and there is no margin, or more than MOST_LAUNCHES would be needed."""
    unit = 2 * (launch + interaction / prompts)
    most = 0
    for gap in gaps:
        room = gap - margin if gap > margin else margin
        if room <= 0:
            return None
        most = max(most, math.ceil(unit / (room / critical) ** 2))
    return most if most <= MOST_LAUNCHES else None
