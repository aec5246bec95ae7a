"""Axes as data: a study's own grid axis reaches the server through its placeholder, and names,
exclusions, the summary, the best table, the figure and compare all follow it; three-axis studies
keep their names and params, and a results folder written before axes were data reads as it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import DATA
from factories import result_doc
from specsweep import axes, cli, study
from specsweep.analysis import aggregate, answer, compare, ledger, partial_reports, plot, report
from specsweep.errors import ConfigError
from specsweep.records import migrations
from specsweep.records.failure import Failure
from specsweep.records.store import write_json_atomic
from specsweep.servers import command
from specsweep.study.loading import defaults

LEGACY = DATA / "results-3546885"  # written by main at 3546885 (three axes)


def kv_study(**extra) -> dict:
    cfg = {"grid": {"budget": [0, 4], "tp": [1], "context": [64], "kv": ["f16", "q8_0"]},
           "server": {"env": {"LLAMA_ARG_CACHE_TYPE_K": "{kv}"}}}
    for key, value in extra.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    return study.validate_study(cfg)


def test_a_study_axis_names_configurations_and_reaches_the_server_through_its_placeholder():
    specs = study.expand_grid(kv_study())
    assert [s.name for s in specs] == ["tp1-b0-ctx64-kvf16", "tp1-b0-ctx64-kvq8_0", "tp1-b4-ctx64-kvf16",
                                       "tp1-b4-ctx64-kvq8_0"]
    spec = specs[3]
    assert spec.values == {"tp": 1, "budget": 4, "context": 64, "kv": "q8_0"}
    assert command.server_env(spec, 8080) == {"LLAMA_ARG_CACHE_TYPE_K": "q8_0"}
    # A flag's value works the same way, and the spec's params carry the axis (a changed value reruns).
    template = ["{binary}", "-m", "{model}", "--port", "{port}", "-ub", "{ub}"]
    cfg = study.validate_study({"grid": {"budget": [0, 4], "ub": [64, 512]}, "server": {"command": template}})
    spec = study.find_spec(cfg, "tp1-b4-ctx128-ub512")
    argv = command.server_argv(spec, 1)
    assert argv[argv.index("-ub") + 1] == "512" and json.loads(spec.to_json())["axes"] == {"ub": 512}
    assert study.LaunchSpec.from_dict(json.loads(spec.to_json())) == spec


def test_three_axis_studies_keep_their_names_and_params(default_config):
    """Upgrading must not rerun a finished configuration: the same names, the same params."""
    names = [s.name for s in study.expand_grid(default_config)]
    assert names[:3] == ["tp1-b0-ctx128", "tp1-b0-ctx512", "tp1-b2-ctx128"] and len(names) == 8
    legacy = yaml.safe_load((LEGACY / "study.yaml").read_text())
    cfg = study.validate_study(legacy)
    for path in sorted((LEGACY / "results" / "runs").glob("*.json")):
        stored = json.loads(path.read_text())["spec"]
        spec = study.find_spec(cfg, path.stem)
        assert "axes" not in json.loads(spec.to_json())
        resolved = spec.resolved(binary=stored["binary"], model_path=stored["model_path"])
        assert study.LaunchSpec.from_dict(stored) == resolved


@pytest.mark.parametrize("change, words", [
    ({"server": {"env": {}}}, ["grid.kv reaches no server", "{kv}"]),
    ({"server": {"env": {"LLAMA_ARG_CACHE_TYPE_K": "{kvv}"}}}, ["unknown placeholder {kvv}", "{kv}",
                                                                 "add it to the grid"]),
    ({"exclude": [{"kvv": "f16", "reason": "typo"}]}, ["exclude[0]: kvv is not an axis", "tp, budget, context, kv"]),
    ({"plot": {"column": "kvv"}}, ["plot.column: kvv is not an axis"]),
    ({"plot": {"line": "kv", "column": "kv"}}, ["plot: x, line and column must be different axes"]),
    ({"grid": {"port": [1, 2]}, "server": {"env": {"K": "{kv}", "X": "{port}"}}},
     ["grid.port", "placeholder specsweep fills itself"]),
    ({"grid": {"kv": ["1", 1]}}, ["share the name tp1-b0-ctx64-kv1"]),
])
def test_axis_mistakes_are_refused_before_anything_runs(change, words):
    with pytest.raises(ConfigError) as err:
        kv_study(**change)
    assert all(w in err.value.reason for w in words), err.value.reason


def test_exclusions_match_a_study_axis_and_the_offered_entry_names_every_axis(tmp_path):
    cfg = kv_study(exclude=[{"kv": "q8_0", "budget": 4, "reason": "not wanted"}])
    excluded = [s.name for s in study.expand_grid(cfg) if ledger.exclusion_reason(cfg, s)]
    assert excluded == ["tp1-b4-ctx64-kvq8_0"]
    row = {"name": "tp1-b4-ctx64-kvf16", "tp": 1, "budget": 4, "context": 64, "kv": "f16"}
    entry = partial_reports.exclude_entry(row, ["tp", "budget", "context", "kv"],
                                    Failure.from_json({"class": "server-died", "signature": "gpu-oom",
                                                       "evidence": ["CUDA out of memory"]}))
    assert json.loads(entry[2:]) == {"tp": 1, "budget": 4, "context": 64, "kv": "f16",
                                     "reason": "gpu-oom: CUDA out of memory"}
    # Pasted back, it is a valid rule that leaves exactly that configuration out.
    again = kv_study(exclude=[json.loads(entry[2:])])
    assert [s.name for s in study.expand_grid(again) if ledger.exclusion_reason(again, s)] == [row["name"]]


def kv_results(folder: Path, rates: dict[str, float]) -> tuple[dict, pd.DataFrame]:
    cfg = kv_study()
    for spec in study.expand_grid(cfg):
        if spec.name in rates:
            doc = result_doc(spec, tok_s=rates[spec.name])
            write_json_atomic(folder / "launches" / spec.name / "launch1.json", doc)
    frame = aggregate.summarize(cfg, folder / "launches", folder / "failures")
    aggregate.write_summary(frame, folder / "summary.csv")
    return cfg, frame


RATES = {"tp1-b0-ctx64-kvf16": 100.0, "tp1-b4-ctx64-kvf16": 150.0, "tp1-b0-ctx64-kvq8_0": 80.0,
         "tp1-b4-ctx64-kvq8_0": 60.0}


def test_summary_speedup_and_best_budget_are_per_value_of_the_study_axis(tmp_path):
    _, frame = kv_results(tmp_path, RATES)
    assert list(frame.columns[:9]) == ["name", "tp", "budget", "context", "kv", "section", "load", "status",
                                       "reason"]
    assert axes.columns(frame.columns) == ["tp", "budget", "context", "kv"]
    short = frame[frame["section"] == "short"].set_index("name")
    # Each budget against budget 0 at its own kv, never the other's baseline.
    rate = short["output_tok_s"]
    assert short.loc["tp1-b4-ctx64-kvf16", "speedup"] == pytest.approx(rate["tp1-b4-ctx64-kvf16"]
                                                                       / rate["tp1-b0-ctx64-kvf16"])
    assert short.loc["tp1-b4-ctx64-kvq8_0", "speedup"] == pytest.approx(rate["tp1-b4-ctx64-kvq8_0"]
                                                                        / rate["tp1-b0-ctx64-kvq8_0"])
    assert short.loc["tp1-b4-ctx64-kvf16", "speedup"] > 1 > short.loc["tp1-b4-ctx64-kvq8_0", "speedup"]
    best = answer.best_table(frame, defaults("verdict"))
    assert list(best.columns[:4]) == ["tp", "context", "kv", "section"]
    named = best[best["section"] == "short"].set_index("kv")["best_budget"]
    assert named.to_dict() == {"f16": 4, "q8_0": 0}


def test_front_page_and_terminal_answer_show_the_axis(tmp_path):
    cfg, frame = kv_results(tmp_path, RATES)
    best = answer.write_best(frame, cfg, tmp_path / "best.csv")
    page = report.front_page(cfg, frame, best)
    assert "kv ['f16', 'q8_0']" in page and "     - kv" in page
    assert "For each tensor-parallel size, prompt length, kv" in page
    text = report.terminal_answer(frame, best, summary_csv=tmp_path / "summary.csv", best_csv=tmp_path / "best.csv")
    assert "per tp, context, kv, section and load" in text
    lines = [line.split() for line in text.splitlines() if line.startswith("   ") and "short" in line]
    assert [(row[2], row[3], row[4], row[5]) for row in lines] == [("f16", "short", "c1", "4"),
                                                                     ("q8_0", "short", "c1", "0")]


def test_the_figure_gives_the_column_axis_panels_and_never_joins_its_values(tmp_path):
    _, frame = kv_results(tmp_path, RATES)
    fig = plot.plot_summary(frame, tmp_path / "a.png", title="t",
                            facets=plot.Facets.of(frame, **{**defaults("plot"), "column": "kv"}))
    titles = [ax.get_title() for ax in fig.axes[:6]]
    assert titles == [f"{s}, kv {v}: output tok/s" for v in ("f16", "q8_0") for s in ("short", "medium", "long")]
    # Without a column axis the kv values are lines of their own, told apart by style and named in the legend.
    fig = plot.plot_summary(frame, tmp_path / "b.png", title="t", facets=plot.Facets.of(frame, **defaults("plot")))
    lines = {c.get_label(): c.lines[0] for c in fig.axes[0].containers}
    assert set(lines) == {"tp 1, kv f16, ctx 64", "tp 1, kv q8_0, ctx 64"}
    assert lines["tp 1, kv f16, ctx 64"].get_linestyle() != lines["tp 1, kv q8_0, ctx 64"].get_linestyle()
    short = frame[(frame["section"] == "short") & (frame["kv"] == "q8_0")].sort_values("budget")
    assert list(lines["tp 1, kv q8_0, ctx 64"].get_ydata()) == list(short["output_tok_s"])
    legend = {h.get_label() for h in fig.legends[0].legend_handles}
    assert {"tp 1, kv f16", "tp 1, kv q8_0", "context 64"} <= legend


def test_a_named_axis_on_the_x_axis_is_placed_in_order(tmp_path):
    _, frame = kv_results(tmp_path, RATES)
    facets = plot.Facets.of(frame, x="kv", line="budget", column=None)
    fig = plot.plot_summary(frame, tmp_path / "x.png", title="t", facets=facets)
    ax, bottom = fig.axes[0], fig.axes[6]  # the x axis is shared: the bottom row names it
    assert [t.get_text() for t in bottom.get_xticklabels()] == ["f16", "q8_0"] and bottom.get_xlabel() == "kv"
    lines = {c.get_label(): list(c.lines[0].get_ydata()) for c in ax.containers}
    short = frame[(frame["section"] == "short") & (frame["budget"] == 4)].sort_values("kv")
    assert lines["tp 1, ctx 64, budget 4"] == list(short["output_tok_s"])


def test_compare_pairs_configurations_by_every_axis(tmp_path):
    kv_results(tmp_path / "a", RATES)
    kv_results(tmp_path / "b", {**RATES, "tp1-b4-ctx64-kvq8_0": 120.0})
    out = tmp_path / "compare.csv"
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--csv", str(out),
                     "--plot", str(tmp_path / "c.png")]) == 0
    frame = pd.read_csv(out)
    assert list(frame.columns[:6]) == ["name", "tp", "budget", "context", "kv", "section"]
    ratio = frame[frame["section"] == "short"].set_index(["budget", "kv"])["ratio"]
    assert ratio[(4, "q8_0")] > 1.8 and ratio[(4, "f16")] == pytest.approx(1.0)
    assert ratio[(0, "q8_0")] == pytest.approx(1.0)


def test_a_three_axis_study_against_a_four_axis_one_pairs_nothing_it_should_not(tmp_path):
    kv_results(tmp_path / "b", RATES)
    a = compare.open_study(LEGACY / "results", tmp_path / "ta")
    b = compare.open_study(tmp_path / "b", tmp_path / "tb")
    for launches in b.launches.values():  # the same model on both sides, so that the pairing is what is tested
        for result in launches:
            result.model = a.launches["tp1-b0-ctx64"][0].model
    frame = compare.compare(a, b, alpha=defaults("compare")["alpha"])
    assert set(frame.loc[frame["kv"].isna(), "verdict"]) == {"only in A"}
    assert set(frame.loc[frame["kv"].notna(), "verdict"]) == {"only in B"}


def test_a_results_folder_written_before_axes_were_data_aggregates_reports_and_compares(tmp_path):
    """Results of main at 3546885 (tp1-b0-ctx64, tp1-b4-ctx64), in the older runs/ layout: carried
    over by `specsweep migrate` (nothing measured), then read as they are, the same numbers."""
    folder = shutil.copytree(LEGACY, tmp_path / "old")
    assert len(migrations.migrate(folder)) == 2 and not (folder / "results/runs").exists()
    cfg = study.validate_study(yaml.safe_load((folder / "study.yaml").read_text()))
    old = pd.read_csv(folder / "results" / "summary.csv")
    frame = aggregate.summarize(cfg, folder / "results" / "launches", folder / "results" / "failures")
    # Read as they are, with what came later: the load each section ran at (closed loop, one in
    # flight: c1) and the goodput search's columns, empty (that study declared no objective).
    # Launches came later still: one each (the result file of a configuration reads as its launch 1),
    # with the interval of the speedup empty (one launch, no noise between launches to size it).
    # Requests by prompt came with the paired verdict: read from the records' prompt identities; with
    # one launch each there is no launch noise to size, so no paired speedup either. Energy came
    # later: empty, as on any host without a GPU's energy (never 0); the requests in flight later
    # still: empty, as a section that counted none.
    added = ["load", *aggregate.ENERGY_COLUMNS, "energy_source", *aggregate.IN_FLIGHT_COLUMNS,
             *aggregate.SEARCH_COLUMNS,
             "launches", "launch_tok_s", "repeat_tok_s", "prompt_tok_s",
             "launch_overhead_s", "speedup_low", "speedup_high", "speedup_paired"]
    assert set(frame["status"]) == {"ok"} and [c for c in frame.columns if c not in added] == list(old.columns)
    assert set(frame["load"]) == {"c1"} and frame[list(aggregate.SEARCH_COLUMNS)].isna().all().all()
    assert frame[list(aggregate.IN_FLIGHT_COLUMNS)].isna().all().all()
    assert frame[[*aggregate.ENERGY_COLUMNS, "energy_source"]].isna().all().all()
    pd.testing.assert_frame_equal(frame.drop(columns=["reason", *added]), old.drop(columns="reason"),
                                  check_dtype=False)
    assert set(frame["launches"]) == {1} and frame["speedup_low"].isna().all()
    assert frame["prompt_tok_s"].str.startswith("1:").all() and frame["speedup_paired"].isna().all()
    # The verdict of one launch rests on its repeats, and says so; its figures are those the old
    # best table showed for the budget it names.
    best = answer.best_table(frame, defaults("verdict"))
    before = pd.read_csv(folder / "results" / "best.csv")
    assert set(best["basis"]) == {"repeats"} and set(best["launches"]) == {2}
    for row in best.to_dict("records"):
        was = before[before["section"] == row["section"]].iloc[0]
        shown = row["best_budget"] if row["verdict"] != "undecided" else row["highest_budget"]
        assert shown == was["best_budget"] and row["output_tok_s"] == pytest.approx(was["output_tok_s"])
    written = answer.write_best(frame, cfg, folder / "results" / "best.csv")
    report.write_all(cfg, frame, written, launches_dir=folder / "results" / "launches",
                     failures_dir=folder / "results" / "failures", front=tmp_path / "front.rst",
                     failures_html=tmp_path / "f.html", pages_dir=tmp_path / "pages",
                     tables_html=(tmp_path / "s.html", tmp_path / "b.html"), study_yaml="",
                     study_html=tmp_path / "y.html")
    assert "miss the noise between launches" in (tmp_path / "front.rst").read_text()
    printed = report.terminal_answer(frame, written, summary_csv=folder / "results" / "summary.csv",
                                     best_csv=folder / "results" / "best.csv")
    # The answer returned is the answer written: what the terminal says from it is what the file says.
    read_back = pd.read_csv(folder / "results" / "best.csv", dtype={c: "string" for c in answer.TEXT_COLUMNS})
    assert printed == report.terminal_answer(frame, read_back.fillna({c: "" for c in answer.TEXT_COLUMNS}),
                                             summary_csv=folder / "results" / "summary.csv",
                                             best_csv=folder / "results" / "best.csv")
    assert any(line.split()[:4] == ["1", "64", "short", "c1"] for line in printed.splitlines()), printed
    assert "misses the noise between launches" in printed
    out = tmp_path / "c.csv"
    assert cli.main(["compare", str(folder / "results"), str(folder / "results"), "--csv", str(out)]) == 0
    assert set(pd.read_csv(out)["verdict"]) == {"~"}


def test_a_launch_index_runs_each_cells_budgets_side_by_side_and_reverses_at_even_launches():
    """Grid order is budget-major (b0 at every context, then b2, ...); a launch index runs a cell's
    budgets one after another instead, every axis but the budget held, and the next launch index
    runs them all in reverse, so that a machine drifting between minutes moves budgets of one cell
    as little and as evenly as it can."""
    from specsweep.study import grid

    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128, 512, 1024]}})
    specs = study.expand_grid(cfg)
    order = study.cell_major(specs)
    assert sorted(order) == sorted(s.name for s in specs) and order != [s.name for s in specs]
    pairs = [order[i:i + 2] for i in range(0, len(order), 2)]
    assert all({n.split("-")[1] for n in pair} == {"b0", "b4"} and len({n.replace("b4", "b0") for n in pair}) == 1
               for pair in pairs), order
    assert grid.launch_order(order, 2) == list(reversed(order)) and grid.launch_order(order, 3) == order
    # Every job of launch 1 above every job of launch 2; within one, the cell-major order.
    ranks = {(n, k): grid.launch_priority(order, n, k, 2) for n in order for k in (1, 2)}
    assert min(ranks[n, 1] for n in order) > max(ranks[n, 2] for n in order)
    assert sorted(order, key=lambda n: -ranks[n, 1]) == order
