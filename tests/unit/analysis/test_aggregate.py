"""Aggregation from valid results only: failures, exclusions and gaps stay what they are."""

import json
import math
from dataclasses import replace

import pandas as pd
import pytest

from factories import result_doc
from specsweep import study
from specsweep.analysis import aggregate, cells, ledger, partial_reports
from specsweep.analysis.plot import Facets, plot_summary
from specsweep.errors import ServerDied
from specsweep.records import store
from specsweep.study.loading import defaults


@pytest.fixture
def sweep(tmp_path):
    """A 2x2 grid: one ok baseline, one ok speculative, one failed, one excluded; one invalid."""
    cfg = study.validate_study({
        "grid": {"budget": [0, 4, 8], "tp": [1], "context": [128, 1024]},
        "exclude": [{"budget": 8, "context": 1024, "reason": "known crash"}],
    })
    runs, failures = tmp_path / "launches", tmp_path / "failures"
    specs = {s.name: s for s in study.expand_grid(cfg)}
    store.write_json_atomic(runs / "tp1-b0-ctx128" / "launch1.json", result_doc(specs["tp1-b0-ctx128"], tok_s=100))
    store.write_json_atomic(runs / "tp1-b4-ctx128" / "launch1.json", result_doc(specs["tp1-b4-ctx128"], tok_s=50))
    store.write_json_atomic(runs / "tp1-b4-ctx1024" / "launch1.json", result_doc(specs["tp1-b4-ctx1024"], tok_s=80))
    bad = result_doc(specs["tp1-b8-ctx128"])
    bad["sections"][0]["output_tok_s"] = 0
    store.write_json_atomic(runs / "tp1-b8-ctx128" / "launch1.json", bad)
    err = ServerDied("server died in section medium: killed by SIGKILL", section="medium")
    rec = store.failure_record(name="tp1-b0-ctx1024", spec={}, error=err, started_at="t", attempt=1,
                                 server_log=None, log_tail="")
    store.write_failure(failures, rec)
    return cfg, aggregate.summarize(cfg, runs, failures)


def _status(frame, name):
    return set(frame[frame["name"] == name]["status"])


def test_every_configuration_has_rows_with_its_status(sweep):
    cfg, frame = sweep
    assert len(frame) == 6 * 3  # configurations x sections
    assert _status(frame, "tp1-b0-ctx128") == {"ok"}
    assert _status(frame, "tp1-b0-ctx1024") == {"failed"}
    assert _status(frame, "tp1-b8-ctx1024") == {"excluded"}
    assert _status(frame, "tp1-b8-ctx128") == {"invalid result"}
    failed = frame[frame["name"] == "tp1-b0-ctx1024"].iloc[0]
    assert "server-died" in failed["reason"] and "medium" in failed["reason"]


def test_each_status_carries_its_reason_and_ok_rows_none(sweep, tmp_path):
    cfg, frame = sweep
    ok = frame[frame["status"] == "ok"]
    assert len(ok) == 3 * 3 and set(ok["reason"]) == {""}
    invalid = frame[frame["name"] == "tp1-b8-ctx128"].iloc[0]["reason"]
    assert "section short: throughput 0 is not a positive number" in invalid, invalid  # what validation said
    # A configuration with neither a result nor a failure record is "not run", never a number.
    bare = aggregate.summarize(cfg, tmp_path / "nothing", tmp_path / "nothing")
    not_run = bare[bare["name"] != "tp1-b8-ctx1024"]
    assert set(not_run["status"]) == {"not run"} and set(not_run["reason"]) == {"no result and no failure record"}
    assert set(bare[bare["name"] == "tp1-b8-ctx1024"]["status"]) == {"excluded"}  # the rule, not "not run"


def test_non_ok_rows_carry_no_numbers(sweep):
    _, frame = sweep
    bad = frame[frame["status"] != "ok"]
    assert bad["output_tok_s"].isna().all() and bad["speedup"].isna().all()


def test_speedup_is_relative_to_budget_zero_and_missing_without_baseline(sweep):
    _, frame = sweep
    row = frame[(frame["name"] == "tp1-b4-ctx128") & (frame["section"] == "long")].iloc[0]
    assert row["speedup"] == pytest.approx(row["output_tok_s"] / row["baseline_tok_s"])
    assert 0.4 < row["speedup"] < 0.6  # 50 vs 100 tok/s: slower, and the table says so
    no_base = frame[frame["name"] == "tp1-b4-ctx1024"].iloc[0]
    assert no_base["status"] == "ok" and math.isnan(no_base["speedup"])


def test_written_tables_and_failure_report(sweep, tmp_path):
    _, frame = sweep
    aggregate.write_summary(frame, tmp_path / "summary.csv", tmp_path / "failed.csv")
    again = pd.read_csv(tmp_path / "summary.csv")
    assert list(again["status"]) == list(frame["status"])
    failed = pd.read_csv(tmp_path / "failed.csv")
    assert set(failed["name"]) == {"tp1-b0-ctx1024", "tp1-b8-ctx1024", "tp1-b8-ctx128"}
    report = partial_reports.failure_report(frame)
    assert report.startswith("3 of 6 configurations") and "known crash" in report


def test_plot_is_written_with_failures_marked(sweep, tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_rgba
    from matplotlib.markers import MarkerStyle

    _, frame = sweep
    out = tmp_path / "summary.png"
    fig = plot_summary(frame, out, title="test", facets=Facets.of(frame, **defaults("plot")))
    assert out.stat().st_size > 20_000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Each configuration without a result is a mark above its budget at the top edge of every
    # section's throughput panel (never a point on the axes), grey if excluded, crimson otherwise.
    expected = sorted((b, "grey" if s == "excluded" else "crimson") for b, s in [(0, "failed"), (8, "excluded"),
                                                                                (8, "invalid result")])
    top_row = fig.axes[:3]
    legend = {h.get_label(): h for h in fig.legends[0].legend_handles}
    for ax in top_row:
        dots = [c for c in ax.collections if isinstance(c, PathCollection)]
        marks = [(x, y, tuple(c.get_facecolor()[0])) for c in dots for x, y in c.get_offsets()]
        assert sorted((x, color) for x, _, color in marks) == sorted((b, to_rgba(c)) for b, c in expected)
        for dot in dots:  # drawn above the panel's top edge, whatever the data's scale, and not clipped away
            (x, y), = dot.get_offsets()
            assert ax.transAxes.inverted().transform(dot.get_offset_transform().transform((x, y)))[1] > 1
            assert dot.get_clip_on() is False
        # Just above the panel (below its title), bigger than a data point, in its legend entry's shape.
        for dot in dots:
            (x, y), = dot.get_offsets()
            assert 1 < ax.transAxes.inverted().transform(dot.get_offset_transform().transform((x, y)))[1] < 1.1
            assert dot.get_sizes()[0] > plt.rcParams["lines.markersize"] ** 2
            label = "excluded" if tuple(dot.get_facecolor()[0]) == to_rgba("grey") else "failed / no result"
            style = MarkerStyle(legend[label].get_marker())
            assert (dot.get_paths()[0].vertices == style.get_path().transformed(style.get_transform()).vertices).all()
        # The mark's edge has the colour of its context's line.
        lines = {c.get_label(): c.lines[0].get_color() for c in ax.containers}
        edges = {(x, tuple(c.get_edgecolor()[0])) for c in dots for x, _ in c.get_offsets()}
        assert edges == {(0, to_rgba(lines["tp 1, ctx 1024"])), (8, to_rgba(lines["tp 1, ctx 1024"])),
                         (8, to_rgba(lines["tp 1, ctx 128"]))}
    footer = fig.texts[-1].get_text()
    for name, words in [("tp1-b0-ctx1024", "server-died"), ("tp1-b8-ctx1024", "known crash"),
                        ("tp1-b8-ctx128", "invalid result")]:
        assert any(name in line and words in line for line in footer.splitlines()), footer
    assert "3 configurations measured, 3 without result" in fig._suptitle.get_text()


def test_the_plot_draws_one_line_per_tp_and_never_joins_two_tp_values():
    import matplotlib.pyplot as plt

    from specsweep.analysis import plot

    rows = [{"tp": tp, "context": 64, "budget": b, "section": "short", "status": "ok",
             "output_tok_s": 100.0 * tp + b, "output_tok_s_min": 99.0 * tp + b, "output_tok_s_max": 101.0 * tp + b}
            for tp in (1, 2) for b in (0, 2, 4)]
    frame = pd.DataFrame(rows)
    fig, ax = plt.subplots()
    facets = plot.Facets.of(frame.assign(name="x")[["name", "tp", "budget", "context", "section", "status",
                                                      "output_tok_s", "output_tok_s_min", "output_tok_s_max"]],
                            **defaults("plot"))
    assert facets == plot.Facets(x="budget", line="context", column=None, styled=("tp",))
    plot._panel(ax, frame, "output_tok_s", "short", plot.Drawing(facets, {64: "blue"}, plot.tp_style([(1,), (2,)]),
                                                                 [0, 2, 4]))
    lines = {c.get_label(): c for c in ax.containers}
    assert set(lines) == {"tp 1, ctx 64", "tp 2, ctx 64"}
    for tp in (1, 2):
        x, y = lines[f"tp {tp}, ctx 64"].lines[0].get_data()
        assert list(x) == [0, 2, 4] and list(y) == [100.0 * tp + b for b in (0, 2, 4)]
    styles = {label: c.lines[0].get_linestyle() for label, c in lines.items()}
    assert styles["tp 1, ctx 64"] != styles["tp 2, ctx 64"]
    plt.close(fig)


def test_advice_fits_the_failure_and_exclusions_are_offered_only_for_the_servers_reproducing_ones(tmp_path):
    """A missing model, a full disk or Ctrl-C gets what to do about it, never an exclude: entry;
    a CUDA illegal instruction gets one; the lines name the class and its configurations."""
    from specsweep.errors import ConfigError, Interrupted, ResultWriteError, ServerDied, ServerStartError
    from specsweep.records.store import failure_record, write_failure

    cfg = study.validate_study({"grid": {"budget": [0, 2, 4, 8, 16], "tp": [1], "context": [128]}})
    specs = {s.budget: s for s in study.expand_grid(cfg)}
    errors = {
        0: ConfigError("model file /m.gguf does not exist (llama-server serves one GGUF file)"),
        2: ResultWriteError("cannot write results/launches/x.json: No space left on device"),
        4: Interrupted(2),
        8: ServerDied("server died in section short: RuntimeError: CUDA error: an illegal instruction was "
                      "encountered", signature="cuda-illegal-instruction",
                      evidence=["RuntimeError: CUDA error: an illegal instruction was encountered"]),
        16: ServerStartError("server exited during startup: error loading model", signature="model-load",
                             evidence=["error loading model"]),
    }
    for budget, error in errors.items():
        write_failure(tmp_path, failure_record(name=specs[budget].name, spec=json.loads(specs[budget].to_json()),
                                               error=error, started_at="t", attempt=1, server_log=None, log_tail=""))
    report = partial_reports.failure_report(aggregate.summarize(cfg, tmp_path / "launches", tmp_path), tmp_path)
    pasted = [line for line in report.splitlines() if line.startswith("  - {")]
    assert len(pasted) == 1 and '"budget": 8' in pasted[0], report
    assert "Next, for config (tp1-b0-ctx128): fix the study file" in report
    assert "Next, for result-write (tp1-b2-ctx128): free disk space" in report
    assert "Next, for interrupted (tp1-b4-ctx128): run the same command again to finish the study" in report
    assert "Next, for server-start (tp1-b16-ctx128): read the cause in the server log" in report


def test_a_result_of_another_study_or_configuration_is_named_as_such():
    """Real results store the provisioned paths where the study says 'embedded': those match."""
    cfg = study.validate_study({"grid": {"budget": [0], "tp": [1], "context": [128]}})
    spec = study.expand_grid(cfg)[0]
    measured = spec.resolved(binary="/cache/llama-server", model_path="/cache/m.gguf")
    doc = result_doc(measured)
    result = store.Result.from_json(doc)
    assert ledger.measured_otherwise(result, spec) is None
    reseeded = study.expand_grid(study.validate_study({**cfg, "workload": {"seed": 7, "repeats": 3}}))[0]
    assert ledger.measured_otherwise(result, reseeded) == \
        "measured with another configuration than the study's (repeats, seed differ)"
    other = study.expand_grid(study.validate_study({**cfg, "study": "other"}))[0]
    assert ledger.measured_otherwise(result, other) == "measured for study 'default', not this study 'other'"
    broken = store.Result.from_json({**doc, "spec": {**doc["spec"], "no_such_field": 1}})
    assert ledger.measured_otherwise(broken, spec) == "its spec cannot be read as a configuration of this specsweep"


def test_a_configurations_launches_merge_into_one_row_per_section_with_every_launchs_figures(tmp_path):
    """Two launches at about 100 and 50 tok/s (two repeats each): the row says both, sums the work,
    keeps the extremes of all four repeats, and means the rest."""
    cfg = study.validate_study({"grid": {"budget": [0], "tp": [1], "context": [128]}, "workload": {"launches": 2}})
    spec = study.expand_grid(cfg)[0]
    runs = tmp_path / "launches"
    docs = [result_doc(spec, tok_s=100.0), result_doc(replace(spec, launch=2), tok_s=50.0)]
    for k, doc in enumerate(docs, 1):
        store.write_json_atomic(runs / spec.name / f"launch{k}.json", doc)
    frame = aggregate.summarize(cfg, runs, tmp_path / "failures")
    for section, row in zip(docs[0]["sections"], frame.to_dict("records")):
        pair = [d["sections"][docs[0]["sections"].index(section)] for d in docs]
        assert row["launches"] == 2 and row["status"] == "ok"
        assert cells.values_of(row["launch_tok_s"]) == pytest.approx([s["output_tok_s"] for s in pair], rel=1e-5)
        repeats = [r for s in pair for r in s["output_tok_s_repeats"]]
        assert cells.values_of(row["repeat_tok_s"]) == pytest.approx(repeats, rel=1e-5) and len(repeats) == 4
        assert row["output_tok_s_min"] == min(s["output_tok_s_min"] for s in pair)
        assert row["output_tok_s_max"] == max(s["output_tok_s_max"] for s in pair)
        for key in ("requests", "output_tokens", "wall_s"):
            assert row[key] == pytest.approx(sum(s[key] for s in pair)), key
        assert row["output_tok_s"] == pytest.approx(sum(s["output_tok_s"] for s in pair) / 2)


def test_each_launch_is_judged_on_its_own_and_named_when_it_is_the_one_missing_or_refused(tmp_path):
    cfg = study.validate_study({"grid": {"budget": [0, 2, 4, 8], "tp": [1], "context": [128]},
                                "workload": {"launches": 2}})
    b0, b2, b4, b8 = study.expand_grid(cfg)
    runs = tmp_path / "launches"
    for spec in (b0, b2, b4):
        store.write_json_atomic(runs / spec.name / "launch1.json", result_doc(spec))
    # b0: its second launch measured for another study; b2: no second launch; b4: a damaged first.
    store.write_json_atomic(runs / b0.name / "launch2.json", result_doc(replace(b0, study="other", launch=2)))
    (runs / b4.name / "launch1.json").write_text("{")
    store.write_json_atomic(runs / b4.name / "launch2.json", result_doc(replace(b4, launch=2)))
    store.write_json_atomic(runs / b8.name / "launch2.json", result_doc(replace(b8, launch=2)))  # b8: the second alone
    frame = aggregate.summarize(cfg, runs, tmp_path / "failures")
    rows = {row["name"]: row for row in frame.drop_duplicates("name").to_dict("records")}
    assert rows[b0.name]["status"] == "invalid result"
    assert rows[b0.name]["reason"] == "launch 2: measured for study 'other', not this study 'default'"
    assert rows[b2.name]["status"] == "not run"
    assert rows[b2.name]["reason"] == "launch 2 of 2 not run, and no failure record"
    assert rows[b8.name]["reason"] == "launch 1 of 2 not run, and no failure record"
    three = study.validate_study({**cfg, "workload": {**cfg["workload"], "launches": 3}})
    assert aggregate.summarize(three, runs, tmp_path / "failures").query("name == @b2.name")["reason"].iloc[0] == \
        "launch 2 3 of 3 not run, and no failure record"
    assert rows[b4.name]["status"] == "invalid result" and rows[b4.name]["reason"].startswith(f"{runs}/{b4.name}")
    assert set(frame[frame["name"] == b0.name]["section"]) == {"short", "medium", "long"}  # every section's row
    # Read up to launch 1 only (a racing round's view), b2 is whole.
    assert set(aggregate.summarize(cfg, runs, tmp_path / "failures", upto=1).query("name == @b2.name")["status"]) \
        == {"ok"}


def test_speedups_their_spread_and_interval_are_against_budget_0_of_the_same_cell(tmp_path):
    from specsweep.analysis import verdict

    cfg = study.validate_study({"grid": {"budget": [0, 4], "tp": [1], "context": [128, 1024]},
                                "workload": {"launches": 2}})
    runs = tmp_path / "launches"
    rates = {0: (100.0, 90.0), 4: (150.0, 140.0)}
    for spec in study.expand_grid(cfg):
        for k, rate in enumerate(rates[spec.budget], 1):
            doc = result_doc(replace(spec, launch=k), tok_s=rate)
            store.write_json_atomic(runs / spec.name / f"launch{k}.json", doc)
    (runs / "tp1-b0-ctx1024" / "launch2.json").unlink()  # its cell has no whole baseline: no speedup there
    frame = aggregate.summarize(cfg, runs, tmp_path / "failures")
    ok = frame[frame["context"] == 128].set_index(["budget", "section"])
    for section in ("short", "medium", "long"):
        base, fast = ok.loc[(0, section)], ok.loc[(4, section)]
        assert fast["speedup"] == pytest.approx(fast["output_tok_s"] / base["output_tok_s"])
        assert fast["speedup_min"] == pytest.approx(fast["output_tok_s_min"] / base["output_tok_s"])
        assert fast["speedup_max"] == pytest.approx(fast["output_tok_s_max"] / base["output_tok_s"])
        # The interval is the paired design's (every budget's launch k sent the same prompts),
        # about the geometric mean of the per-prompt speedups, which lies inside it.
        found = cells.evidence(frame)[(1, 128, section, "c1")]
        assert found.basis == verdict.PROMPTS and found.units == 2
        assert (fast["speedup_low"], fast["speedup_high"]) == pytest.approx(
            verdict.interval(found.estimates, 4, confidence=0.95))
        assert fast["speedup_low"] < fast["speedup_paired"] < fast["speedup_high"]
        assert base["speedup_paired"] == 1.0 and 1.4 < fast["speedup_paired"] < 1.6
        assert math.isnan(base["speedup_low"]) and math.isnan(base["speedup_high"])  # 0 against itself: none
    # add_speedup's own default is the 95% the study's schema defaults to.
    again = aggregate.add_speedup(frame.drop(columns=["speedup_low", "speedup_high"]), defaults("verdict"))
    assert list(again["speedup_low"].dropna()) == pytest.approx(list(frame["speedup_low"].dropna()))
    rest = frame[(frame["context"] == 1024) & (frame["budget"] == 4)]
    assert rest["speedup"].isna().all() and rest["speedup_low"].isna().all()
    # One launch each: repeats are no replicates of a launch, so no interval (the point stays).
    one = study.validate_study({**cfg, "workload": {**cfg["workload"], "launches": 1}})
    single = aggregate.summarize(one, runs, tmp_path / "failures", upto=1)
    short = single[(single["context"] == 128) & (single["budget"] == 4) & (single["section"] == "short")].iloc[0]
    assert short["speedup"] > 1 and math.isnan(short["speedup_low"]) and math.isnan(short["speedup_high"])


class _Launch:
    """One launch's result as merged_rows reads it (Result.summary_rows, repeat_rates, prompt_rates
    and timing)."""

    def __init__(self, rows: list[dict], repeats: dict):
        self.rows, self.repeats = rows, repeats
        self.timing = {"job_s": 10.0, "sections_s": 6.0}

    def prompt_rates(self) -> dict:
        return {key: [(f"p{i}", v) for i, v in enumerate(values)] for key, values in self.repeats.items()}

    def summary_rows(self) -> list[dict]:
        return self.rows

    def repeat_rates(self) -> dict:
        return self.repeats


def test_a_goodput_row_merges_its_launches_searches_steps_and_convergence():
    """The search's row (load slo) has no repeats and no min/max: its steps add up, it converged
    only if every launch's search did, and nothing is invented for what it lacks."""
    def launch(tok_s, steps, converged):
        chat = {"section": "chat", "load": "c1", "output_tok_s": tok_s, "output_tok_s_min": tok_s - 1,
                "output_tok_s_max": tok_s + 1, "requests": 4, "output_tokens": 64, "wall_s": 2.0}
        slo = {"section": "chat", "load": "slo", "output_tok_s": tok_s / 2, "output_tok_s_min": None,
               "output_tok_s_max": None, "requests": 8, "output_tokens": 128, "wall_s": 4.0,
               "search_steps": steps, "search_converged": converged}
        return _Launch([chat, slo], {("chat", "c1"): [tok_s - 1, tok_s + 1]})

    chat, slo = aggregate.merged_rows([(1, launch(10.0, 5, True)), (2, launch(20.0, 7, False))])
    assert (slo["search_steps"], slo["search_converged"]) == (12, False)
    assert slo["output_tok_s_min"] is None and slo["output_tok_s_max"] is None and slo["repeat_tok_s"] == ""
    assert (slo["requests"], slo["output_tokens"], slo["wall_s"]) == (16, 256, 8.0)
    assert slo["launch_tok_s"] == "5 10" and slo["output_tok_s"] == 7.5 and slo["launches"] == 2
    assert chat["repeat_tok_s"] == "9 11 19 21" and "search_steps" not in chat and "search_converged" not in chat
    # Each request by launch and prompt (the paired verdict's units); the search's row has none.
    assert chat["prompt_tok_s"] == "1:p0:9 1:p1:11 2:p0:19 2:p1:21" and slo["prompt_tok_s"] == ""
    assert chat["launch_overhead_s"] == slo["launch_overhead_s"] == 4.0
    both = aggregate.merged_rows([(1, launch(10.0, 5, True)), (2, launch(20.0, 7, True))])[1]
    assert both["search_converged"] is True


def test_a_budget_whose_server_drafted_nothing_is_not_a_measurement_of_that_budget(tmp_path):
    """Budget 4 drafted no token in any section of either launch (a server that ignored the draft
    setting): its rows say so, carry no figures, are no candidate in the verdict, and the failure
    table says what to check instead of asking for another run. One drafted token anywhere (or a
    section that does not say) keeps it a measurement."""
    from specsweep.analysis import answer
    from specsweep.records import status

    cfg = study.validate_study({"grid": {"budget": [0, 2, 4], "tp": [1], "context": [128]},
                                "workload": {"launches": 2}})
    runs = tmp_path / "launches"
    for spec in study.expand_grid(cfg):
        for k in (1, 2):
            doc = result_doc(replace(spec, launch=k), tok_s=100.0 + spec.budget, drafts=0 if spec.budget == 4 else None)
            store.write_json_atomic(runs / spec.name / f"launch{k}.json", doc)
    frame = aggregate.summarize(cfg, runs, tmp_path / "failures")
    idle = frame[frame["budget"] == 4]
    assert set(idle["status"]) == {status.NOT_ENGAGED} and idle["output_tok_s"].isna().all()
    assert set(idle["reason"]) == {"budget 4: the server drafted no token in any section of 2 launch(es), so this "
                                   "is not a measurement of the budget"}
    assert set(frame.loc[frame["budget"] != 4, "status"]) == {status.OK}
    best = answer.best_table(frame, defaults("verdict"))
    assert set(best["budgets_measured"]) == {"0 2"} and set(best["budgets_missing"]) == {"4"}
    report = partial_reports.failure_report(frame, tmp_path / "failures")
    assert "tp1-b4-ctx128" in report and "speculation did not engage" in report
    assert "the launches stand, measuring them again would change nothing" in report
    # Settled: nothing more to run, so a clean run drops the partial reports.
    assert frame["status"].isin(status.SETTLED).all()
    # One section of one launch that drafted is enough; a section that does not say is no zero.
    results = [store.read_result(runs / "tp1-b4-ctx128" / f"launch{k}.json") for k in (1, 2)]
    assert not aggregate.drafted(results)
    results[1].sections[-1]["draft_tokens"] = 1
    assert aggregate.drafted(results)
    results[1].sections[-1]["draft_tokens"] = None
    assert aggregate.drafted(results)


def test_the_figure_gets_an_energy_row_only_where_energy_was_read(sweep, tmp_path):
    _, frame = sweep
    fig = plot_summary(frame, tmp_path / "cpu.png", title="t", facets=Facets.of(frame, **defaults("plot")))
    assert len(fig.axes) == 3 * 3  # three sections, three rows: no empty energy panels on a CPU study
    measured = frame.copy()
    measured.loc[measured["status"] == "ok", "j_per_output_token"] = 0.5
    fig = plot_summary(measured, tmp_path / "gpu.png", title="t", facets=Facets.of(frame, **defaults("plot")))
    assert len(fig.axes) == 4 * 3
    energy_row = fig.axes[9:]
    assert all(ax.get_title().endswith("J per output token") for ax in energy_row)
    assert any(line.get_ydata().size and set(line.get_ydata()) == {0.5} for ax in energy_row for line in ax.lines)
