"""A fourth axis (a server environment variable) through the main command on the real llama-server:
it reaches the server, and the summary, figure, report and compare all carry it."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from conftest import finish, measured, run_workflow, small_study
from specsweep.records import paths

pytestmark = pytest.mark.e2e


def test_an_environment_variable_axis_runs_end_to_end(embedded, tmp_path):
    study = small_study()
    # The axis reaching the server and every table is what this test proves: two short sections, once.
    study["workload"].update(repeats=1, sections=[{"name": "short", "output_tokens": 8, "requests": 1},
                                                  {"name": "medium", "output_tokens": 8, "requests": 1}])
    study["grid"]["kv"] = ["f16", "q8_0"]
    # llama-server reads its flags from LLAMA_ARG_* too (common/arg.cpp: LLAMA_ARG_CACHE_TYPE_K for
    # --cache-type-k); -lv 4 makes it log the KV cache's types, so the test can see the value arrive.
    study["server"]["env"] = {"LLAMA_ARG_CACHE_TYPE_K": "{kv}"}
    study["server"]["command"] = study["server"]["command"] + ["-lv", "4"]
    study["plot"] = {"column": "kv"}
    rc, out = finish(run_workflow(tmp_path, study))
    assert rc == 0, out
    names = ["tp1-b0-ctx64-kvf16", "tp1-b0-ctx64-kvq8_0", "tp1-b4-ctx64-kvf16", "tp1-b4-ctx64-kvq8_0"]
    assert measured(tmp_path / "results/launches") == names
    for name in names:
        log = (tmp_path / "logs/server" / name / "launch1.log").read_text()
        kv = name.rsplit("-kv", 1)[1]
        assert f"K ({kv})" in log and f"K ({'f16' if kv == 'q8_0' else 'q8_0'})" not in log, name
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert list(summary.columns[:7]) == ["name", "tp", "budget", "context", "kv", "section", "load"]
    # Two 8-token sections may give ngram-mod nothing to draft: such a budget is listed as
    # "speculation did not engage", never given a speedup; every other row is measured.
    measured_rows = summary[summary["status"] == "ok"]
    assert set(summary["status"]) <= {"ok", "speculation did not engage"} and measured_rows["speedup"].notna().all()
    assert set(summary.loc[summary["budget"] == 0, "status"]) == {"ok"}
    best = pd.read_csv(tmp_path / "results/best.csv")
    assert sorted(set(best["kv"])) == ["f16", "q8_0"] and len(best) == 2 * 2
    assert "Best draft budget per tp, context, kv, section and load" in out
    front = (tmp_path / "results/report/front.rst").read_text()
    assert "kv ['f16', 'q8_0']" in front and "     - kv" in front
    assert (tmp_path / "results/summary.png").read_bytes()[:4] == b"\x89PNG"
    assert "Traceback" not in (tmp_path / paths.SUMMARY_LOG).read_text()  # the summary job draws the figure
    # The figure's column axis came from the study (plot.column: kv): a column of panels per kv value and
    # section, 4.6 inches each at 110 dpi (plot.plot_summary), where one per section would be half as wide.
    width = int.from_bytes((tmp_path / "results/summary.png").read_bytes()[16:20], "big")
    assert width == round(4.6 * 2 * 2 * 110), width
    # compare pairs configurations by every axis: the study against itself, row for row.
    import subprocess
    csv = tmp_path / "compare.csv"
    done = subprocess.run([sys.executable, "-m", "specsweep", "compare", "results", "results", "--csv", str(csv)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pairs = pd.read_csv(csv)
    # A configuration whose speculation did not engage has no figure on either side to compare.
    shown = pairs[pairs["verdict"] != "no result in either"]
    assert len(pairs) == len(summary) and set(shown["verdict"]) == {"~"} and (shown["ratio"] == 1.0).all()
    assert len(shown) == (summary["status"] == "ok").sum()
    assert sorted(set(zip(pairs["budget"], pairs["kv"]))) == [(0, "f16"), (0, "q8_0"), (4, "f16"), (4, "q8_0")]
