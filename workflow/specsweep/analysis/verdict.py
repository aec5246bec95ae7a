"""The verdict of one cell: the best draft budget, the budgets that cannot be told from it, and
each budget's speedup with an interval.

A cell is one value of every axis but the budget, one section and one load level. Its unit of
replication is the launch: each launch of a configuration is a server of its own, started at
another minute on a machine in another state, and its section throughput (tokens over wall
time) is one number. Repeats on one launch share that server and that minute, so they miss the
noise between launches (three runs of the default study once named three different "decisive"
best budgets from them). Only where every budget of a cell has a single launch are the repeats
used instead, and the verdict says so (``basis``).

The procedure is multiple comparisons with the best (MCB; J. C. Hsu, Multiple Comparisons:
Theory and Methods, Chapman & Hall 1996, ch. 4; for equal sizes it is Gupta's subset selection,
Gupta 1965) on the logarithm of throughput, so that differences are ratios. The variance is
pooled over the cell's budgets (a one-way model: every budget's launches scatter alike), with
sum(n_i - 1) degrees of freedom. Budget i stays in the best set unless some budget j beats it by
more than the tie margin plus the MCB allowance:

    mean_j - mean_i > ln(1 + tie) + d_i * s * sqrt(1/n_i + 1/n_j)

where d_i is the one-sided Dunnett critical value for i against the k - 1 others (the
multivariate t of the k - 1 differences, from SciPy). The set then holds the truly best budget
with probability at least ``confidence``. The speedup interval of a budget is the two-sided
t interval of its log throughput against budget 0's, with the same pooled variance (a per-budget
interval, not a simultaneous one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

DECIDED, TIED, UNDECIDED = "decided", "tied", "undecided"
LAUNCHES, REPEATS = "launches", "repeats"
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


@lru_cache(maxsize=4096)
def dunnett_one_sided(n_control: int, n_others: tuple[int, ...], df: int, confidence: float) -> float:
    """The d with P(all k - 1 differences from the control, in units of their standard errors,
    are at most d) = confidence, for a multivariate t with ``df`` degrees of freedom."""
    if len(n_others) == 1:
        return float(stats.t.ppf(confidence, df))
    inv = [1 / n_control + 1 / n for n in n_others]
    corr = np.array([[1.0 if a == b else (1 / n_control) / math.sqrt(inv[a] * inv[b])
                      for b in range(len(n_others))] for a in range(len(n_others))])
    dist = stats.multivariate_t(loc=np.zeros(len(n_others)), shape=corr, df=df)

    def short(d: float) -> float:
        return float(dist.cdf(np.full(len(n_others), d), random_state=QMC_SEED)) - confidence

    return float(optimize.brentq(short, 0.0, 1000.0, xtol=1e-4))


def decide(samples: Mapping[int, Sequence[float]], *, confidence: float, tie: float,
           basis: str = LAUNCHES) -> Verdict:
    """The verdict of a cell from each budget's units (positive throughputs)."""
    budgets = sorted(samples)
    pooled = pool(samples)
    highest = max(budgets, key=lambda b: (pooled.means[b], -b))
    units = min(pooled.sizes.values())
    if len(budgets) == 1:
        return Verdict(DECIDED, highest, highest, (highest,), basis, units)
    if pooled.df == 0:  # one unit each: no noise estimate, nothing can be separated
        return Verdict(UNDECIDED, None, highest, tuple(budgets), basis, units)
    margin = math.log1p(tie)
    members, halves = [], {}
    for i in budgets:
        others = [j for j in budgets if j != i]
        d = dunnett_one_sided(pooled.sizes[i], tuple(pooled.sizes[j] for j in others), pooled.df, confidence)
        allowance = {j: d * pooled.s * math.sqrt(1 / pooled.sizes[i] + 1 / pooled.sizes[j]) for j in others}
        if all(pooled.means[j] - pooled.means[i] <= margin + allowance[j] for j in others):
            members.append(i)
        if i != highest:
            halves[i] = allowance[highest]
    if members == [highest]:
        return Verdict(DECIDED, highest, highest, (highest,), basis, units)
    if margin > 0 and all(halves[i] <= margin for i in members if i != highest):
        return Verdict(TIED, min(members), highest, tuple(members), basis, units)
    return Verdict(UNDECIDED, None, highest, tuple(members), basis, units)


def speedup_interval(samples: Mapping[int, Sequence[float]], budget: int, *,
                     confidence: float) -> tuple[float, float] | None:
    """The two-sided interval of a budget's throughput over budget 0's, from the pooled variance
    of its cell; None without budget 0, or without degrees of freedom."""
    if 0 not in samples or budget not in samples:
        return None
    pooled = pool(samples)
    if pooled.df == 0:
        return None
    diff = pooled.means[budget] - pooled.means[0]
    half = float(stats.t.ppf((1 + confidence) / 2, pooled.df)) * pooled.s * math.sqrt(
        1 / pooled.sizes[budget] + 1 / pooled.sizes[0])
    return math.exp(diff - half), math.exp(diff + half)


def units(launch_values: Mapping[int, Sequence[float]],
          repeat_values: Mapping[int, Sequence[float]]) -> tuple[dict[int, list[float]], str]:
    """The units a cell is decided on: the launches, unless no budget has two (then the repeats)."""
    one_launch_each = all(len(v) <= 1 for v in launch_values.values())
    if one_launch_each and all(repeat_values.get(b) for b in launch_values):
        return {b: list(repeat_values[b]) for b in launch_values}, REPEATS
    return {b: list(v) for b, v in launch_values.items()}, LAUNCHES
