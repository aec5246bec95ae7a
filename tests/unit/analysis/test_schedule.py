"""The draft schedule per load (analysis/schedule.py): levels placed at the batch the server ran,
only where a budget is named, the rest listed with why, and nothing past the largest batch."""

from __future__ import annotations

import pandas as pd

from specsweep.analysis import schedule


def frame_and_best(levels: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``levels``: (context, load, verdict, best budget or None, {budget: server batch})."""
    rows, best = [], []
    for context, load, said, named, batches in levels:
        for budget, batch in batches.items():
            rows.append({"name": f"tp1-b{budget}-ctx{context}", "tp": 1, "budget": budget, "context": context,
                         "section": "chat", "load": load, "status": "ok", "server_batch": batch})
        best.append({"tp": 1, "context": context, "section": "chat", "load": load, "best_budget": named,
                     "verdict": said, "best_set": " ".join(map(str, batches))})
    return pd.DataFrame(rows), pd.DataFrame(best)


def build(levels, per_step=None):
    frame, best = frame_and_best(levels)
    per_step = per_step or {name: int(name.split("-b")[1].split("-")[0]) for name in frame["name"]}

    def name_of(where, budget):
        rows = frame[(frame["budget"] == budget) & (frame["context"] == where["context"])]
        return str(rows["name"].iloc[0])
    return schedule.build("s", frame, best, per_step, name_of)


def test_each_named_level_sits_at_the_batch_the_server_ran_not_the_clients_concurrency():
    doc = build([(128, "c1", "decided", 8, {0: 1.0, 8: 1.0}),
                 (128, "c4", "tied", 4, {0: 2.1, 4: 1.97, 8: 2.0}),    # 4 in flight, the server ran about 2
                 (128, "c8", "undecided", None, {0: 7.9, 8: 7.8})])
    assert doc["schema"] == "specsweep.schedule" and doc["schema_version"] == 1 and doc["study"] == "s"
    assert set(doc["formats"]) == {"vllm_per_batch_size", "vllm_rows", "sglang_steps"}
    (one,) = doc["schedules"]
    assert one["levels"] == [
        {"context": 128, "load": "c1", "verdict": "decided", "budget": 8, "configuration": "tp1-b8-ctx128",
         "batch": 1.0, "k": 8},
        {"context": 128, "load": "c4", "verdict": "tied", "budget": 4, "configuration": "tp1-b4-ctx128",
         "batch": 1.97, "k": 4},
        {"context": 128, "load": "c8", "verdict": "undecided", "why": "undecided: best set 0 8"}]
    assert one["where"] == {"tp": 1, "section": "chat"}
    (ctx,) = one["by_context"]
    # c4 is placed at 1.97, the batch the server said it ran at budget 4: batch size 2 gets its K;
    # nothing past it (c8 is undecided, so the largest placed batch is 1.97).
    assert ctx["vllm_per_batch_size"] == {"1": 8, "2": 4} == ctx["sglang_steps"]
    assert one["largest_batch"] == 1.97
    assert one["vllm_rows"] == [[1, 1, 1, 128, 8], [2, 2, 1, 128, 4]]
    assert one["unfilled"] == [{"context": 128, "load": "c8", "why": "undecided: best set 0 8"}]


def test_contexts_share_the_rows_and_no_row_reaches_past_the_largest_measured():
    doc = build([(128, "c1", "decided", 4, {0: 1.0, 4: 1.0}), (128, "c2", "decided", 4, {0: 2.0, 4: 2.0}),
                 (512, "c1", "decided", 0, {0: 1.0, 4: 1.0}), (512, "c2", "decided", 4, {0: 2.0, 4: 1.9})])
    (one,) = doc["schedules"]
    assert one["vllm_rows"] == [[1, 2, 1, 128, 4], [1, 1, 129, 512, 0], [2, 2, 129, 512, 4]]
    assert one["largest_context"] == 512 and one["largest_batch"] == 2.0 and one["unfilled"] == []


def test_a_level_without_the_servers_batch_cannot_be_placed_and_says_so():
    doc = build([(128, "c1", "decided", 4, {0: 1.0, 4: None}), (128, "c2", "decided", 4, {0: 2.0, 4: 2.0})])
    (one,) = doc["schedules"]
    assert one["unfilled"] == [{"context": 128, "load": "c1", "why": "the server reported no batch for this level"}]
    assert one["levels"][0] == {"context": 128, "load": "c1", "verdict": "decided", "budget": 4,
                                "why": "the server reported no batch for this level"}
    # Batch size 1 takes the nearest measured level's K (2.0's): only up to the largest measured.
    assert one["by_context"][0]["vllm_per_batch_size"] == {"1": 4, "2": 4}


def test_a_study_without_two_closed_loop_levels_has_no_schedule():
    assert build([(128, "c1", "decided", 4, {0: 1.0, 4: 1.0})]) is None
    frame, best = frame_and_best([(128, "c1", "decided", 4, {0: 1.0, 4: 1.0})])
    best = pd.concat([best, best.assign(load="slo")])  # the goodput search's row is no closed-loop level
    assert schedule.build("s", frame, best, {}, lambda w, b: "tp1-b4-ctx128") is None


def test_budget_zero_schedules_no_drafts_whatever_its_configuration_says():
    doc = build([(128, "c1", "decided", 0, {0: 1.0, 4: 1.0}), (128, "c2", "decided", 4, {0: 2.0, 4: 2.0})],
                per_step={"tp1-b0-ctx128": None, "tp1-b4-ctx128": 3})
    assert doc["schedules"][0]["by_context"][0]["vllm_per_batch_size"] == {"1": 0, "2": 3}


def test_only_closed_loop_levels_count_and_one_k_over_several_sizes_is_one_row():
    assert [schedule.closed_loop(x) for x in ("c2", "c16", "r2", "slo", "c")] == [2, 16, None, None, None]
    doc = build([(128, "c1", "decided", 4, {0: 1.0, 4: 1.0}), (128, "c3", "decided", 4, {0: 3.0, 4: 3.04})])
    (one,) = doc["schedules"]
    assert one["vllm_rows"] == [[1, 3, 1, 128, 4]] and one["largest_batch"] == 3.04


def test_a_tied_level_without_a_named_budget_and_a_level_without_a_verdict_are_unfilled():
    doc = build([(128, "c1", "tied", None, {0: 1.0, 4: 1.0}), (128, "c2", None, None, {0: 2.0, 4: 2.0}),
                 (512, "c1", "decided", 4, {0: 1.0, 4: 1.0}), (512, "c2", "decided", 4, {0: 2.0, 4: 2.0}),
                 (1024, "c1", "decided", 4, {0: 1.0, 4: 1.0})])
    (one,) = doc["schedules"]
    assert [e["why"] for e in one["unfilled"]] == ["tied: best set 0 4", "no verdict: best set 0 4"]
    frame, best = frame_and_best([(128, "c1", None, None, {0: 1.0}), (128, "c2", None, None, {0: 2.0})])
    nothing = schedule.build("s", frame, best.assign(best_set=None), {}, lambda w, b: None)
    assert [e["why"] for e in nothing["schedules"][0]["unfilled"]] == ["no verdict: best set none"] * 2
    # Contexts 512 and 1024 measured: rows for 1..512 and 513..1024, none past 1024.
    assert one["vllm_rows"] == [[1, 2, 1, 512, 4], [1, 1, 513, 1024, 4]] and one["largest_context"] == 1024


def test_nothing_named_anywhere_gives_empty_forms_not_a_failure():
    doc = build([(128, "c1", "undecided", None, {0: 1.0, 4: 1.0}), (128, "c2", "undecided", None, {0: 2.0, 4: 2.0})])
    (one,) = doc["schedules"]
    assert one["by_context"] == [] and one["vllm_rows"] == [] and len(one["unfilled"]) == 2
    assert one["largest_batch"] is None and one["largest_context"] is None
