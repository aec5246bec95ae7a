"""What the Snakemake report shows besides the figures: the answer (best budget per tp x context
x section, with the runners-up within noise), the failures and exclusions, and one page per
configuration (command, provenance, per-section numbers). Built from valid results only.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from specsweep import axes
from specsweep.analysis.aggregate import OK, not_ok
from specsweep.measure import quiet_host
from specsweep.records import store
from specsweep.records.result import Result
from specsweep.spec import SLO, Objective
from specsweep.study.grid import expand_grid

RESULT_COLUMNS = ["best_budget", "output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup", "speedup_min",
                  "speedup_max", "sustained_rate_rps", "within_noise", "budgets_measured", "budgets_missing"]


def groups_of(frame: pd.DataFrame) -> list[str]:
    """What the best budget is chosen per: every axis but the budget, then the section and load."""
    return [a for a in axes.columns(frame.columns) if a != "budget"] + axes.within(frame.columns)


def keys_of_best(best: pd.DataFrame) -> list[str]:
    """The columns a best table is grouped by: those before best_budget."""
    cols = list(best.columns)
    return cols[:cols.index("best_budget")]


def best_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per value of every other axis and section: the budget with the highest output tok/s, its
    spread, and the budgets whose repeats reach the best one's slowest repeat (within noise of it).

    Budget 0 competes too: when speculation is slower, the answer is 0.
    """
    rows = []
    keys, inside = groups_of(frame), axes.within(frame.columns)
    # The axes in their sort order, sections and loads in the workload's.
    order = {c: {v: i for i, v in enumerate(dict.fromkeys(frame[c]))} for c in inside}
    groups = sorted(frame.groupby(keys, sort=False),
                    key=lambda g: (*(axes.sort_key(v) for v in g[0][:-len(inside)]),
                                   *(order[c][v] for c, v in zip(inside, g[0][-len(inside):]))))
    for key, group in groups:
        where = dict(zip(keys, key))
        measured = group[group["status"] == OK]
        missing = sorted(set(group["budget"]) - set(measured["budget"]))
        valued = measured.dropna(subset=["output_tok_s"])  # a goodput search that met no rate has none
        if valued.empty:
            rows.append({**where, "best_budget": None, "budgets_measured": _budgets(measured["budget"]),
                         "budgets_missing": _budgets(missing)})
            continue
        measured = valued
        best = measured.loc[measured["output_tok_s"].idxmax()]
        close = measured[(measured["budget"] != best["budget"])
                         & (measured["output_tok_s_max"] >= best["output_tok_s_min"])]
        rows.append({
            **where, "best_budget": int(best["budget"]),
            **{c: best[c] for c in ("output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup",
                                    "speedup_min", "speedup_max")},
            "sustained_rate_rps": best.get("sustained_rate_rps"),
            "within_noise": _budgets(close["budget"]), "budgets_measured": _budgets(measured["budget"]),
            "budgets_missing": _budgets(missing),
        })
    return pd.DataFrame(rows, columns=keys + RESULT_COLUMNS)


def _budgets(values) -> str:
    return " ".join(str(int(v)) for v in sorted(values))


def front_page(config: dict, frame: pd.DataFrame, best: pd.DataFrame) -> str:
    """The report's first page (reStructuredText): the answer, then what is missing and why."""
    bad = not_ok(frame)
    title = f"specsweep: {config['study']}"
    keys = keys_of_best(best)
    grid = ", ".join(f"{a} {config['grid'][a]}" for a in axes.names(config["grid"]))
    per = ", ".join(_AXIS_WORDS.get(a, a) for a in keys if a not in axes.within(keys))
    objective = (config["workload"].get("objective") or {})
    lines = [title, "=" * len(title), "",
             f"{config['model']['name']} on {config['backend']}; grid: {grid}. "
             f"{frame['name'].nunique() - len(bad)} of {frame['name'].nunique()} configurations measured.", "",
             "Best draft budget", "-----------------", "",
             f"For each {per}, section and load level: the budget with the highest output "
             "throughput (budget 0 = no speculation, so 0 means speculation did not pay), its tok/s and speedup "
             "over budget 0 with the min-max of the repeats, and the other budgets whose repeats reach the "
             "best one's slowest repeat, i.e. within noise of it. Also in results/best.csv. Load c<n> is a "
             "closed loop with n requests in flight, r<x> an open loop of x requests/s."
             + (_objective_words(objective) if objective else ""), "",
             ".. list-table::", "   :header-rows: 1", ""]
    heads = [*keys, "best budget", "output tok/s (min-max)", "speedup (min-max)", "within noise", "no result"]
    lines += [f"   * - {heads[0]}"] + [f"     - {h}" for h in heads[1:]]
    for row in best.to_dict("records"):
        cells = [row[k] for k in keys] + [
            _none_best(row) if pd.isna(row["best_budget"]) else f"{int(row['best_budget'])}"
            + (f" (sustains {row['sustained_rate_rps']:.3g} req/s)" if row.get(axes.LOAD) == SLO else ""),
            _span(row["output_tok_s"], row["output_tok_s_min"], row["output_tok_s_max"], ".1f"),
            _span(row["speedup"], row["speedup_min"], row["speedup_max"], ".2f"),
            row["within_noise"] or "none", row["budgets_missing"] or "none"]
        lines += [f"   * - {cells[0]}"] + [f"     - {c}" for c in cells[1:]]
    lines += ["", "Without a result", "----------------", ""]
    if bad.empty:
        lines.append("Every configuration has a valid result.")
    for row in bad.itertuples():
        lines.append(f"- ``{row.name}``: **{row.status}**: {_rst_text(row.reason)}")
    lines += ["", "The figures, the tables, the failures and one page per configuration are in the categories "
              "of this report (menu on the left); the study's merged configuration is under Study."]
    return "\n".join(lines) + "\n"


_AXIS_WORDS = {"tp": "tensor-parallel size", "context": "prompt length"}


def _objective_words(objective: dict) -> str:
    bound = Objective(**objective)
    return (f" Load slo is the goodput search: the highest request rate (open loop) whose {bound.text()}, found "
            f"by bracketing from {bound.start_rate:g} req/s and bisecting to within {bound.precision:.0%} in at most "
            f"{bound.max_steps} steps; its tok/s is the goodput at that rate, its speedup the goodput over "
            f"budget 0's.")


def _none_best(row: dict) -> str:
    """A group without a best budget: nothing measured, or (the goodput search) no rate within the objective."""
    return "none within the objective" if row.get("budgets_measured") else "none measured"


def _span(value, low, high, fmt: str) -> str:
    if value is None or pd.isna(value):
        return "no result"
    spread = "" if pd.isna(low) or pd.isna(high) else f" ({low:{fmt}}-{high:{fmt}})"
    return f"{value:{fmt}}{spread}"


def _rst_text(text: str) -> str:
    return str(text).replace("*", "\\*").replace("`", "'").replace("|", "\\|").replace("_", "\\_")


SUMMARY_SHOWN = ["status", "output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup", "ttft_p50_s",
                 "tpot_p50_s", "acceptance_length", "reason"]  # after the name, the axes and the section


def table_page(title: str, frame: pd.DataFrame, note: str) -> str:
    """A CSV as a page a browser shows (the report shows HTML, not CSV); the CSV has every column."""
    return _html(title, f"<p>{html.escape(note)}</p>"
                        + frame.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}"))


def study_page(config_yaml: str) -> str:
    return _html("Merged study configuration", f"<pre>{html.escape(config_yaml)}</pre>")


def failures_page(frame: pd.DataFrame) -> str:
    """An HTML table of every configuration without a valid result and why."""
    bad = not_ok(frame)
    rows = "".join(f"<tr><td>{html.escape(r.name)}</td><td>{html.escape(r.status)}</td>"
                   f"<td>{html.escape(str(r.reason))}</td></tr>" for r in bad.itertuples())
    body = (f"<table><tr><th>configuration</th><th>status</th><th>reason</th></tr>{rows}</table>"
            if rows else "<p>Every configuration has a valid result.</p>")
    return _html("Failed, excluded and missing configurations", body)


def configuration_pages(config: dict, frame: pd.DataFrame, runs_dir: Path, failures_dir: Path) -> dict[str, str]:
    """{configuration name: HTML page}: its command, provenance and per-section numbers, or why
    it has none."""
    pages = {}
    for spec in expand_grid(config):
        rows = frame[frame["name"] == spec.name]
        status, reason = rows["status"].iloc[0], rows["reason"].iloc[0]
        if status == OK:
            result = store.read_result(Path(runs_dir) / f"{spec.name}.json")
            pages[spec.name] = _html(f"{spec.name}: measured", _measured(result, rows))
        else:
            record = store.latest_failure(Path(failures_dir), spec.name)
            body = (f"<p><b>{html.escape(status)}</b>: {html.escape(str(reason))}</p>"
                    + (f"<h2>Server log, last lines</h2><pre>{html.escape(record.server_log_tail)}</pre>"
                       if record else ""))
            pages[spec.name] = _html(f"{spec.name}: {status}", body)
    return pages


def _measured(result: Result, rows: pd.DataFrame) -> str:
    table = rows[[*axes.within(rows.columns), "output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup",
                  "ttft_p50_s", "tpot_p50_s", "acceptance_length", "draft_acceptance_rate", "sustained_rate_rps"]]
    facts = {"server command": " ".join(result.server["command"]), "server version": result.server["version"],
             "model": json.dumps(result.model), "hardware": json.dumps(result.hardware),
             "started / finished": f"{result.started_at} / {result.finished_at}"}
    items = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts.items())
    return (f"<h2>Per section</h2>{table.to_html(index=False, float_format=lambda v: f'{v:.4g}', na_rep='-')}"
            + _gpu_readings(result) +
            f"<h2>What was measured, where</h2><table>{items}</table>"
            f"<h2>Provenance</h2><pre>{html.escape(json.dumps(result.provenance, indent=1))}</pre>")


def _gpu_readings(result: Result) -> str:
    """Each held GPU's clocks, heat and power per section (host_load.gpu_telemetry), where NVML read them."""
    rows = [{"section": s["name"], "load": s["load"], "gpu": g["gpu"], "readings": g["samples"],
             "SM MHz min": g["sm_clock_mhz"]["min"], "SM MHz mean": g["sm_clock_mhz"]["mean"],
             "max C": g["temperature_c_max"], "W mean": g["power_w"]["mean"], "W max": g["power_w"]["max"],
             "slowed": f"{g['slowed_share']:.0%}", "power-capped": f"{g['power_capped_share']:.0%}",
             "reasons": ", ".join(g["reasons"]) or "-"}
            for s in result.sections for g in (s.get("host_load") or {}).get("gpu_telemetry") or []]
    if not rows:
        return ""
    return (f"<h2>GPUs per section (NVML, every {quiet_host.SAMPLE_EVERY_S:g} s)</h2>"
            f"{pd.DataFrame(rows).to_html(index=False, float_format=lambda v: f'{v:.4g}')}")


def _html(title: str, body: str) -> str:
    style = ("body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n")


def write_all(config: dict, frame: pd.DataFrame, *, runs_dir: Path, failures_dir: Path, best_csv: Path,
              front: Path, failures_html: Path, pages_dir: Path, tables_html: tuple[Path, Path],
              study_yaml: str, study_html: Path) -> None:
    best = best_table(frame)
    store.write_text_atomic(best_csv, best.to_csv(index=False))
    store.write_text_atomic(front, front_page(config, frame, best))
    summary_html, best_html = tables_html
    keys = ["name", *axes.columns(frame.columns), *axes.within(frame.columns)]
    shown = frame[keys + [c for c in SUMMARY_SHOWN if c in frame.columns]]
    store.write_text_atomic(summary_html, table_page("Summary table", shown, "Every column is in results/summary.csv."))
    store.write_text_atomic(best_html, table_page("Best draft budget", best, "Also in results/best.csv."))
    store.write_text_atomic(study_html, study_page(study_yaml))
    store.write_text_atomic(failures_html, failures_page(frame))
    for name, page in configuration_pages(config, frame, runs_dir, failures_dir).items():
        store.write_text_atomic(Path(pages_dir) / f"{name}.html", page)


def terminal_answer(summary_csv: Path, best_csv: Path, *, limit: int = 12) -> str:
    """What the terminal shows when the main command succeeds: the best budgets (a few lines of
    results/best.csv), what has no result and why, and where to look next."""
    best = pd.read_csv(best_csv, dtype={"within_noise": "string", "budgets_measured": "string"}).fillna(
        {"within_noise": "", "budgets_measured": ""})
    frame = pd.read_csv(summary_csv, dtype={"reason": "string"}).fillna({"reason": ""})
    keys = keys_of_best(best)
    inside = axes.within(keys)
    axes_shown, widths = keys[:-len(inside)], {k: max(len(k), _MIN_WIDTH.get(k, 0), *(len(str(v)) for v in best[k]))
                                               for k in keys}

    def where(row) -> str:
        return (" ".join(f"{row[k]!s:>{widths[k]}}" for k in axes_shown)
                + "".join(f"  {row[k]!s:<{widths[k]}}" for k in inside))

    per = f"{', '.join(keys[:-1])} and {keys[-1]}"
    lines = ["", f"Best draft budget per {per} ({best_csv}; 0 = speculation did not pay):",
             f"  {where({k: k for k in keys})} {'best':>5} {'tok/s':>8} {'speedup':>8}  within noise"]
    for row in best.head(limit).to_dict("records"):
        if pd.isna(row["best_budget"]):
            lines.append(f"  {where(row)} {'-':>5}  "
                         + ("no budget within the objective" if row.get("budgets_measured") else "no budget measured"))
            continue
        sustained = (f"  (sustains {row['sustained_rate_rps']:.3g} req/s)"
                     if row.get(axes.LOAD) == SLO and not pd.isna(row.get("sustained_rate_rps")) else "")
        lines.append(f"  {where(row)} {int(row['best_budget']):>5} {row['output_tok_s']:>8.1f} "
                     f"{_times(row['speedup']):>8}  {row['within_noise'] or 'none'}{sustained}")
    if len(best) > limit:
        lines.append(f"  ... {len(best) - limit} more rows in {best_csv}")
    bad = not_ok(frame)
    lines.append("Without a result: " + ("none." if bad.empty else ", ".join(
        f"{r.name} ({r.status}: {r.reason})" for r in bad.itertuples())))
    lines += [f"Figures: results/summary.png, results/tradeoff.png (per user against per GPU); table: {summary_csv}.",
              "Report: snakemake --report results/report.html   (one file, opened in any browser)"]
    return "\n".join(lines)


# The terminal's columns as they were before axes were data (and load a column).
_MIN_WIDTH = {"tp": 3, "context": 8, axes.SECTION: 12, axes.LOAD: 4}


def _times(value) -> str:
    return "-" if pd.isna(value) else f"{value:.2f}x"
