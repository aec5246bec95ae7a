"""Load as a dimension in aggregation: one row per section and level, speedup and the best budget
per level, the trade-off figure's curves and frontier, and the goodput row that met nothing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO
from factories import result_doc
from specsweep.analysis import aggregate, answer, plot, report
from specsweep.errors import ServerDied
from specsweep.records.store import failure_record, write_failure, write_json_atomic
from specsweep.study import validate_study
from specsweep.study.grid import expand_grid
from specsweep.study.loading import defaults

RATES = {"tp1-b0-ctx128": 100.0, "tp1-b4-ctx128": 130.0}


def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def load_study() -> dict:
    cfg = default_config()
    cfg["grid"] = {"budget": [0, 4, 8], "tp": [1], "context": [128]}
    cfg["workload"]["sections"] = [{"name": "chat", "output_tokens": 8, "requests": 2}]
    cfg["workload"]["load_levels"] = {"concurrency": [1, 2, 4]}
    cfg["workload"].update(launches=1, repeats=2)  # one result file each below, decided on its repeats
    return validate_study(cfg)


def summary(tmp_path, cfg) -> pd.DataFrame:
    runs, failures = tmp_path / "launches", tmp_path / "failures"
    for spec in expand_grid(cfg):
        if spec.name in RATES:
            write_json_atomic(runs / spec.name / "launch1.json", result_doc(spec, tok_s=RATES[spec.name]))
        else:
            error = ServerDied("server died in section chat: killed by SIGKILL", section="chat")
            write_failure(failures, failure_record(name=spec.name, spec=json.loads(spec.to_json()), error=error,
                                                   started_at="t", attempt=1, server_log=None, log_tail=""))
    return aggregate.summarize(cfg, runs, failures)


def test_each_section_runs_once_per_level_in_order_with_its_own_prompts():
    spec = expand_grid(load_study())[1]
    assert [(s.name, s.concurrency, s.load) for s in spec.sections] == [("chat", 1, "c1"), ("chat", 2, "c2"),
                                                                         ("chat", 4, "c4")]
    assert spec.prompts_needed == spec.warmup_requests + spec.repeats * 3 * 2
    assert spec.slots == 4  # the server is started for the highest level


def test_rates_as_levels_keep_the_sections_concurrency():
    cfg = default_config()
    cfg["workload"]["sections"] = [{"name": "chat", "output_tokens": 8, "requests": 2, "concurrency": 3}]
    cfg["workload"]["load_levels"] = {"request_rate": [0.5, 2]}
    spec = expand_grid(validate_study(cfg))[0]
    assert [(s.request_rate, s.concurrency, s.load) for s in spec.sections] == [(0.5, 3, "r0.5"), (2, 3, "r2")]


def test_summary_speedup_and_best_budget_are_per_load_level(tmp_path):
    frame = summary(tmp_path, load_study())
    assert list(frame.columns[:7]) == ["name", "tp", "budget", "context", "section", "load", "status"]
    assert list(frame["load"]) == ["c1", "c2", "c4"] * 3
    ok = frame[frame["status"] == "ok"].set_index(["name", "load"])
    for level in ("c1", "c2", "c4"):  # against budget 0 at the same level, never another's
        assert ok.loc[("tp1-b4-ctx128", level), "speedup"] == pytest.approx(
            ok.loc[("tp1-b4-ctx128", level), "output_tok_s"] / ok.loc[("tp1-b0-ctx128", level), "output_tok_s"])
    failed = frame[frame["name"] == "tp1-b8-ctx128"]
    assert list(failed["load"]) == ["c1", "c2", "c4"] and set(failed["status"]) == {"failed"}
    best = answer.best_table(frame, defaults("verdict"))
    assert list(zip(best["load"], best["best_budget"])) == [("c1", 4), ("c2", 4), ("c4", 4)]
    assert set(best["budgets_missing"]) == {"8"}


def test_the_tradeoff_figure_draws_a_curve_per_configuration_and_names_the_missing(tmp_path):
    frame = summary(tmp_path, load_study())
    out = tmp_path / "tradeoff.png"
    fig = plot.plot_tradeoff(frame, out, title="t")
    assert out.read_bytes()[:4] == b"\x89PNG"
    ax = fig.axes[0]
    curves = [line for line in ax.lines if line.get_linestyle() != "--"]
    ok = frame[frame["status"] == "ok"]
    # One curve per measured configuration across its three levels, at tok/s per GPU and per user.
    assert len(curves) == 2 and all(len(c.get_xdata()) == 3 for c in curves)
    drawn = sorted(x for c in curves for x in c.get_xdata())
    assert drawn == pytest.approx(sorted(ok["output_tok_s"] / ok["tp"]))
    assert sorted(y for c in curves for y in c.get_ydata()) == pytest.approx(sorted(ok["decode_tok_s_mean"]))
    assert len([line for line in ax.lines if line.get_linestyle() == "--"]) == 1  # the frontier
    assert any("no result: tp1-b8-ctx128" in t.get_text() for t in ax.texts)
    assert not any(y == 0 for c in curves for y in c.get_ydata())


def test_frontier_keeps_the_points_no_other_beats_on_both():
    points = [[10, 5], [20, 4], [15, 6], [30, 1], [12, 5.5], [30, 0.5]]
    assert plot.frontier(points) == [(15, 6), (20, 4), (30, 1)]
    assert plot.frontier([]) == []


def test_a_goodput_row_that_met_nothing_is_no_best_budget_not_zero():
    frame = pd.DataFrame({
        "name": ["tp1-b0-ctx128", "tp1-b4-ctx128"], "tp": [1, 1], "budget": [0, 4], "context": [128, 128],
        "section": ["chat", "chat"], "load": ["slo", "slo"], "status": ["ok", "ok"], "reason": ["", ""],
        **{c: [np.nan, np.nan] for c in aggregate.METRIC_COLUMNS}})
    best = answer.best_table(aggregate.add_speedup(frame, defaults("verdict")), defaults("verdict"))
    assert len(best) == 1 and pd.isna(best["best_budget"].iloc[0]) and best["budgets_measured"].iloc[0] == "0 4"
    page = report.front_page(load_study(), aggregate.add_speedup(frame, defaults("verdict")), best)
    assert "none within the objective" in page
