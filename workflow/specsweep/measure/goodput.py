"""The bounded search for the highest request rate a configuration sustains within its objective.

Bracket, then bisect, each step one fresh open-loop run at one rate:

- bracket: start at ``start_rate``; while the objective is met, double the rate, while it is not,
  halve it, until one rate met it and another did not;
- bisect at the geometric midpoint (the search is in ratios: a rate is as far from twice itself
  at 1 req/s as at 100) until the failing rate is at most ``precision`` above the meeting one.

So with latencies that grow with load, the found rate is at most a fraction ``precision`` below
the true one and never above it. Every step counts against ``max_steps``, the bracket included:
a search that runs out is recorded as not converged, its rate a lower bound (or, when no step met
the objective, no rate at all: the lowest rate tried is then an upper bound). The steps needed
from a start within a factor 2**k of the true rate: k + 1 to bracket, then
ceil(log2(log(2) / log(1 + precision))) to bisect (3 at the default 0.1), 5 in all for k = 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from specsweep.spec import Objective


@dataclass
class Search:
    """The steps taken and what they found; ``measure`` answers whether a rate met the objective."""

    objective: Objective
    steps: list[dict] = field(default_factory=list)
    met: float | None = None  # the highest rate that met the objective
    missed: float | None = None  # the lowest rate that did not

    def converged(self) -> bool:
        """Whether the lowest missed rate is within the precision above the highest met one."""
        return self.met is not None and self.missed is not None and self.missed <= self.met * (
            1 + self.objective.precision)

    def next_rate(self) -> float | None:
        """The rate of the next step, or None when the search is done."""
        if len(self.steps) >= self.objective.max_steps or self.converged():
            return None
        if self.met is None and self.missed is None:
            return self.objective.start_rate
        if self.missed is None:
            return self.met * 2
        if self.met is None:
            return self.missed / 2
        return math.sqrt(self.met * self.missed)

    def record(self, rate: float, step: dict) -> None:
        """One step's outcome: ``step`` carries its measured figures and ``meets``."""
        self.steps.append({"step": len(self.steps) + 1, "rate": rate, **step})
        if step["meets"]:
            self.met = rate if self.met is None else max(self.met, rate)
        else:
            self.missed = rate if self.missed is None else min(self.missed, rate)

    def run(self, measure: Callable[[int, float], dict]) -> Search:
        """Take steps until done; ``measure(step_number, rate)`` returns the step's figures."""
        while (rate := self.next_rate()) is not None:
            self.record(rate, measure(len(self.steps) + 1, rate))
        return self

    def to_json(self, best_step: dict | None) -> dict:
        """The result's ``search``: the objective, every step, and the sustained rate and goodput."""
        return {
            "objective": vars(self.objective).copy(),
            "steps": self.steps,
            "sustained_rate_rps": self.met,
            "lowest_missed_rps": self.missed,
            "converged": self.converged(),
            "goodput_tok_s": best_step["output_tok_s"] if best_step else None,
        }


def step_figures(objective: Objective, stats: dict) -> dict:
    """What one step records of its section statistics, and whether it met the objective."""
    ttft, tpot = stats["ttft_s"]["p99"], stats["tpot_s"]["p99"]
    return {"ttft_p99_s": ttft, "tpot_p99_s": tpot, "output_tok_s": stats["output_tok_s"],
            "schedule_lag_p99_s": stats["schedule_lag_s"]["p99"], "meets": objective.met_by(ttft, tpot)}
