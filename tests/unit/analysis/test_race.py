"""Racing (analysis/race.py): who gets another launch, on summary rows as aggregation makes them."""

from __future__ import annotations

import math
import random

import pandas as pd

from factories import BUDGETS, launches, paired_study
from specsweep.analysis import aggregate, answer, ledger, race
from specsweep.records import status
from specsweep.study.loading import defaults


def frame_of(draws: dict[tuple[int, int], list[float]], taken: dict[tuple[int, int], int]) -> pd.DataFrame:
    """Summary rows of a two-context grid (one section), each configuration with its first
    ``taken`` launches of ``draws``."""
    rows = []
    for (context, budget), values in draws.items():
        used = values[:taken[context, budget]]
        rows.append({"name": f"tp1-b{budget}-ctx{context}", "tp": 1, "budget": budget, "context": context,
                     "section": "short", "load": "c1", "status": status.OK, "reason": "",
                     "output_tok_s": sum(used) / len(used), "output_tok_s_min": min(used),
                     "output_tok_s_max": max(used), "launches": len(used),
                     "launch_tok_s": " ".join(f"{v:.6g}" for v in used), "repeat_tok_s": ""})
    return aggregate.add_speedup(pd.DataFrame(rows), defaults("verdict"))


def race_on(draws: dict, most: int) -> dict:
    """Launches each configuration gets when rounds race from 2 launches up to ``most``."""
    config = {"workload": {"launches": 2},
              "verdict": {"confidence": 0.95, "tie": 0.01, "until_decided": {"max_launches": most}}}
    taken = dict.fromkeys(draws, 2)
    for round_ in range(2, most):
        names, _ = race.contenders(config, frame_of(draws, taken), round_)
        if not names:
            break
        for key in taken:
            if f"tp1-b{key[1]}-ctx{key[0]}" in names:
                taken[key] += 1
    return taken


def test_racing_reaches_the_fixed_designs_verdict_with_fewer_launches():
    # ctx 128: budget 8 far ahead (decided at once); ctx 1024: 4 ahead of 8 by 10%, under 5% noise.
    truth = {128: {0: 100.0, 4: 120.0, 8: 260.0}, 1024: {0: 100.0, 4: 115.0, 8: 104.0}}
    most, spent, raced_on = 8, [], 0
    for seed in range(6, 15):
        rng = random.Random(seed)
        draws = {(c, b): launches(rng, {b: rate}, n=most, between=0.05)[b] for c, row in truth.items()
                 for b, rate in row.items()}
        taken = race_on(draws, most)
        raced = answer.best_table(frame_of(draws, taken), defaults("verdict"))
        fixed = answer.best_table(frame_of(draws, dict.fromkeys(draws, most)), defaults("verdict"))
        assert list(raced["best_budget"]) == list(fixed["best_budget"]) == [8, 4], seed
        assert taken[128, 8] == taken[128, 0] == 2  # the decided cell got nothing past the first round
        spent.append(sum(taken.values()))
        raced_on += taken[1024, 4] > 2
    assert max(spent) < most * 6 and raced_on >= 5, spent  # fewer than the fixed design's 48, every time


def test_racing_stops_at_its_most_launches_and_never_resumes_a_stopped_configuration():
    # One true rate, launches 10% apart: nothing can be separated.
    draws = {(128, 0): [100.0, 110.0, 95.0, 104.0], (128, 4): [108.0, 97.0, 103.0, 96.0]}
    config = {"workload": {"launches": 2},
              "verdict": {"confidence": 0.95, "tie": 0.01, "until_decided": {"max_launches": 3}}}
    names, cells = race.contenders(config, frame_of(draws, dict.fromkeys(draws, 2)), 2)
    assert names == ["tp1-b0-ctx128", "tp1-b4-ctx128"]
    assert cells == ["tp 1 context 128 section short load c1: undecided 0 4"]
    assert race.contenders(config, frame_of(draws, dict.fromkeys(draws, 3)), 3) == ([], [])
    # A configuration with fewer launches than the round (it stopped earlier) is not raced again.
    taken = {(128, 0): 2, (128, 4): 3}
    assert race.contenders({**config, "verdict": {**config["verdict"], "until_decided": {"max_launches": 5}}},
                           frame_of(draws, taken), 3)[0] == ["tp1-b4-ctx128"]


def test_racing_takes_every_undecided_cell_in_grid_order_at_the_studys_own_confidence_and_tie():
    # Two cells, both undecided at 95%; the grid lists context 1024 first, so its names come first.
    draws = {(1024, 0): [100.0, 110.0], (1024, 4): [104.0, 99.0], (128, 0): [100.0, 96.0], (128, 4): [103.0, 98.0]}
    config = {"workload": {"launches": 2},
              "verdict": {"confidence": 0.95, "tie": 0.01, "until_decided": {"max_launches": 4}}}
    names, cells = race.contenders(config, frame_of(draws, dict.fromkeys(draws, 2)), 2)
    assert names == ["tp1-b0-ctx1024", "tp1-b4-ctx1024", "tp1-b0-ctx128", "tp1-b4-ctx128"] and len(cells) == 2
    # The study's own tie decides, not the default: with a 50% tie both cells are settled.
    study = {**config, "verdict": {**config["verdict"], "tie": 0.5}}
    assert race.contenders(study, frame_of(draws, dict.fromkeys(draws, 2)), 2) == ([], [])


def test_each_round_looks_at_the_stated_error_split_over_the_looks_racing_may_take():
    """The stopping rule: racing from 2 launches to 4 looks 3 times (after rounds 2 and 3, and the
    answer), so each look is held to 1 - 0.05 / 3; a cell whose best set at 95% is one budget but
    at 98.3% two is still raced."""
    assert answer.look_confidence({"confidence": 0.95}, 3) == 1 - 0.05 / 3
    assert answer.look_confidence({"confidence": 0.9}, 1) == answer.look_confidence({"confidence": 0.9}) == 0.9
    assert ledger.looks({"workload": {"launches": 2}, "verdict": {"until_decided": {"max_launches": 4}}}) == 3
    assert ledger.looks({"workload": {"launches": 3}, "verdict": {"until_decided": None}}) == 1
    draws = {(128, 0): [100.0, 103.0], (128, 4): [108.0, 111.5]}
    frame = frame_of(draws, dict.fromkeys(draws, 2))
    once = answer.best_table(frame, {"confidence": 0.95, "tie": 0.01}).iloc[0]
    thrice = answer.best_table(frame, {"confidence": 0.95, "tie": 0.01}, looks=3).iloc[0]
    assert (once["best_set"], thrice["best_set"]) == ("4", "0 4") and thrice["confidence"] == 0.95
    config = {"workload": {"launches": 2}, "verdict": {"confidence": 0.95, "tie": 0.01,
                                                       "until_decided": {"max_launches": 4}}}
    assert race.contenders(config, frame, 2)[0] == ["tp1-b0-ctx128", "tp1-b4-ctx128"]


def test_racing_keeps_the_stated_confidence_over_all_its_looks():
    """The stopping rule, simulated: all four budgets equal (every look at its edge), launch noise
    dominating, racing from 2 launches to 4 on the paired design. The answer's best set still holds
    a designated best (budget 8) in at least 95% of 240 cell verdicts (three binomial standard
    errors below it would be a failure); held to 95% at every look instead, it would not be bound."""
    config = {"workload": {"launches": 2},
              "verdict": {"confidence": 0.95, "tie": 0.0, "until_decided": {"max_launches": 4}}}
    rng = random.Random(54)
    held = total = raced = 0
    for _ in range(40):
        drawn = paired_study(rng, dict.fromkeys(BUDGETS, 0.0), launch=0.08, prompt=0.1, interaction=0.05,
                             launches=4)
        taken = {(c, b): 2 for c in drawn.contexts for b in BUDGETS}
        for round_ in (2, 3):
            names, _ = race.contenders(config, drawn.frame(taken), round_)
            for key in taken:
                if f"tp1-b{key[1]}-ctx{key[0]}" in names:
                    taken[key] += 1
                    raced += 1
        final = answer.best_table(drawn.frame(taken), config["verdict"], looks=ledger.looks(config))
        held += sum("8" in members.split() for members in final["best_set"])
        total += len(final)
    print(f"\nracing under the null: the designated best kept in {held} of {total} ({held / total:.3f}); "
          f"{raced} raced launches")
    assert held / total >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / total) and raced > 0
