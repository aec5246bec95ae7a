"""The verdict of one cell: the best draft budget, the budgets that cannot be told from it, and
each budget's speedup with an interval.

A cell is one value of every axis but the budget, one section and one load level. What it is
decided on is analysis/cells.py's: where every budget's launch k sent the same prompts, the
paired design of its requests (analysis/variance.py: an estimate per budget, their covariance,
the launch noise counted in full); else each launch's section throughput as one unit (one-way,
the variance pooled over the cell's budgets), or, where every budget has a single launch, that
launch's repeats, which miss the noise between launches (three runs of the default study once
named three different "decisive" best budgets from them; the verdict says so, ``basis``).

The procedure is multiple comparisons with the best (MCB; J. C. Hsu, Multiple Comparisons:
Theory and Methods, Chapman & Hall 1996, ch. 4; for independent units of equal sizes it is
Gupta's subset selection, Gupta 1965) on the logarithm of throughput, so that differences are
ratios (``best_set`` on any ``Estimates``). Budget i stays in the best set unless some budget j
beats it by more than the tie margin plus the MCB allowance:

    m_j - m_i > ln(1 + tie) + d_i * SE(m_j - m_i)

where d_i is the one-sided critical value of the multivariate t of the k - 1 differences with
their own correlations (Dunnett's for independent units, from SciPy). The set then holds the
truly best budget with probability at least ``confidence``. The speedup interval of a budget is
the two-sided t interval of m_b - m_0 (a per-budget interval, not a simultaneous one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

DECIDED, TIED, UNDECIDED = "decided", "tied", "undecided"
LAUNCHES, REPEATS, PROMPTS = "launches", "repeats", "prompts"
QMC_SEED = 0  # the multivariate t's integration is quasi-random: seeded, the same data give the same verdict


@dataclass(frozen=True)
class Verdict:
    state: str  # DECIDED (one budget left), TIED (several, within the tie), UNDECIDED
    named: int | None  # the budget named best: the one left, or the smallest of a tie; None when undecided
    highest: int  # the budget with the highest mean throughput
    members: tuple[int, ...]  # the best set: every budget not separably worse than another, in order
    basis: str  # LAUNCHES or REPEATS: what the units were
    units: int  # the fewest units any budget of the cell had

    @property
    def others(self) -> tuple[int, ...]:
        """The best set without the named (or, undecided, the highest) budget: "within noise"."""
        head = self.highest if self.named is None else self.named
        return tuple(b for b in self.members if b != head)

    def text(self) -> str:
        """What a person reads: "8", "0 (tied: 0 2)", "undecided: 4 8"."""
        return words(self.state, self.named, " ".join(map(str, self.members)))


def words(state: str, named: int | None, members: str) -> str:
    """A verdict as a person reads it, from its state, named budget and best set ("4 8"): "8",
    "0 (tied: 0 2)", "undecided: 4 8". The report and best.csv's readers say it this way."""
    if state == DECIDED:
        return str(named)
    return f"{named} (tied: {members})" if state == TIED else f"undecided: {members}"


def state_words(state: str, members: str) -> str:
    """The verdict column of the terminal's answer, beside the named budget: "decided",
    "tied: 0 2", "undecided: 4 8"."""
    return "decided" if state == DECIDED else f"{'tied' if state == TIED else 'undecided'}: {members}"


@dataclass(frozen=True)
class Pooled:
    """A cell's units on the log scale: each budget's mean and count, the pooled standard
    deviation and its degrees of freedom."""

    means: dict[int, float]  # per budget, of log throughput
    sizes: dict[int, int]
    s: float  # pooled standard deviation of log throughput (nan without degrees of freedom)
    df: int


def pool(samples: Mapping[int, Sequence[float]]) -> Pooled:
    logs = {b: np.log(np.asarray(v, dtype=float)) for b, v in samples.items()}
    df = sum(len(v) - 1 for v in logs.values())
    squares = sum(float(((v - v.mean()) ** 2).sum()) for v in logs.values())
    s = math.sqrt(squares / df) if df > 0 else math.nan
    return Pooled({b: float(v.mean()) for b, v in logs.items()}, {b: len(v) for b, v in logs.items()}, s, df)


@dataclass(frozen=True)
class Estimates:
    """What MCB decides on: per budget an estimate of its mean log throughput, the covariance of
    any two differences, and the degrees of freedom of the variance behind them."""

    means: dict[int, float]
    covariance: Callable[[int, int, int], float]  # Cov(m_j - m_i, m_k - m_i)
    df: float

    def variance(self, i: int, j: int) -> float:
        return self.covariance(i, j, j)


def one_way(pooled: Pooled) -> Estimates:
    """Independent units per budget (launches, or one launch's repeats) with a pooled variance."""
    s2, n = pooled.s ** 2, pooled.sizes
    return Estimates(pooled.means, lambda i, j, k: s2 * (1 / n[i] + (1 / n[j] if j == k else 0.0)), pooled.df)


@lru_cache(maxsize=4096)
def critical_value(corr: tuple[tuple[float, ...], ...], df: float, confidence: float) -> float:
    """The d with P(every one of the differences, in units of its standard error, is at most d) =
    confidence, for a multivariate t with ``df`` degrees of freedom and correlations ``corr``
    (one-sided Dunnett where they are those of comparisons with a control)."""
    if len(corr) == 1:
        return float(stats.t.ppf(confidence, df))
    dist = stats.multivariate_t(loc=np.zeros(len(corr)), shape=np.array(corr), df=df)

    def short(d: float) -> float:
        return float(dist.cdf(np.full(len(corr), d), random_state=QMC_SEED)) - confidence

    return float(optimize.brentq(short, 0.0, 1000.0, xtol=1e-4))


def dunnett_one_sided(n_control: int, n_others: tuple[int, ...], df: int, confidence: float) -> float:
    """One-sided Dunnett for a control of ``n_control`` units against others of ``n_others``."""
    inv = [1 / n_control + 1 / n for n in n_others]
    corr = tuple(tuple(1.0 if a == b else round((1 / n_control) / math.sqrt(inv[a] * inv[b]), 4)
                       for b in range(len(n_others))) for a in range(len(n_others)))
    return critical_value(corr, df, confidence)


def degrees(df: float) -> float:
    """Degrees of freedom as the critical values take them: rounded down (a larger critical value,
    never a smaller one) to a whole number, or a tenth below one, and at most 1000 (where t is the
    normal's to three digits), so that a study's cells share a handful of cached values."""
    if df >= 1:
        return float(min(1000, math.floor(df)))
    return max(0.1, math.floor(df * 10) / 10)


def allowances(est: Estimates, i: int, others: Sequence[int], confidence: float) -> dict[int, float]:
    """MCB's allowance for budget i against each other: d_i times the standard error of m_j - m_i,
    d_i the multivariate t quantile of the k - 1 differences' correlations (Hsu 1996, ch. 4)."""
    se = {j: math.sqrt(est.variance(i, j)) for j in others}
    corr = tuple(tuple(1.0 if j == k else round(est.covariance(i, j, k) / (se[j] * se[k]), 4) for k in others)
                 for j in others)
    d = critical_value(corr, degrees(est.df), confidence)
    return {j: d * se[j] for j in others}


def decide(samples: Mapping[int, Sequence[float]], *, confidence: float, tie: float,
           basis: str = LAUNCHES) -> Verdict:
    """The verdict of a cell from each budget's independent units (positive throughputs)."""
    pooled = pool(samples)
    units = min(pooled.sizes.values())
    if pooled.df == 0 and len(samples) > 1:  # one unit each: no noise estimate, nothing can be separated
        highest = max(sorted(samples), key=lambda b: (pooled.means[b], -b))
        return Verdict(UNDECIDED, None, highest, tuple(sorted(samples)), basis, units)
    return best_set(one_way(pooled), confidence=confidence, tie=tie, basis=basis, units=units)


def best_set(est: Estimates, *, confidence: float, tie: float, basis: str, units: int) -> Verdict:
    """MCB: budget i stays in the best set unless some j beats it by more than the tie margin plus
    its allowance; one left is decided, several all within the margin of the highest tied."""
    budgets = sorted(est.means)
    highest = max(budgets, key=lambda b: (est.means[b], -b))
    if len(budgets) == 1:
        return Verdict(DECIDED, highest, highest, (highest,), basis, units)
    margin = math.log1p(tie)
    members, halves = [], {}
    for i in budgets:
        others = [j for j in budgets if j != i]
        allowance = allowances(est, i, others, confidence)
        if all(est.means[j] - est.means[i] <= margin + allowance[j] for j in others):
            members.append(i)
        if i != highest:
            halves[i] = allowance[highest]
    if members == [highest]:
        return Verdict(DECIDED, highest, highest, (highest,), basis, units)
    if margin > 0 and all(halves[i] <= margin for i in members if i != highest):
        return Verdict(TIED, min(members), highest, tuple(members), basis, units)
    return Verdict(UNDECIDED, None, highest, tuple(members), basis, units)


def interval(est: Estimates, budget: int, *, confidence: float) -> tuple[float, float]:
    """The two-sided interval of exp(m_budget - m_0), a speedup over budget 0."""
    diff = est.means[budget] - est.means[0]
    half = float(stats.t.ppf((1 + confidence) / 2, degrees(est.df))) * math.sqrt(est.variance(0, budget))
    return math.exp(diff - half), math.exp(diff + half)


def speedup_interval(samples: Mapping[int, Sequence[float]], budget: int, *,
                     confidence: float) -> tuple[float, float] | None:
    """The two-sided interval of a budget's throughput over budget 0's, from the pooled variance
    of its cell; None without budget 0, or without degrees of freedom."""
    if 0 not in samples or budget not in samples:
        return None
    pooled = pool(samples)
    if pooled.df == 0:
        return None
    return interval(one_way(pooled), budget, confidence=confidence)


def units(launch_values: Mapping[int, Sequence[float]],
          repeat_values: Mapping[int, Sequence[float]]) -> tuple[dict[int, list[float]], str]:
    """The units a cell is decided on: the launches, unless no budget has two (then the repeats)."""
    one_launch_each = all(len(v) <= 1 for v in launch_values.values())
    if one_launch_each and all(repeat_values.get(b) for b in launch_values):
        return {b: list(repeat_values[b]) for b in launch_values}, REPEATS
    return {b: list(v) for b, v in launch_values.items()}, LAUNCHES
