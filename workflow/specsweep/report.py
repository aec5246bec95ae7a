"""What the Snakemake report shows besides the figures: the answer (best budget per tp x context
x section, with the runners-up within noise), the failures and exclusions, and one page per
configuration (command, provenance, per-section numbers). Built from valid results only.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from . import results
from .aggregate import OK, not_ok
from .config import expand_grid

BEST_COLUMNS = ["tp", "context", "section", "best_budget", "output_tok_s", "output_tok_s_min", "output_tok_s_max",
                "speedup", "speedup_min", "speedup_max", "within_noise", "budgets_measured", "budgets_missing"]


def best_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (tp, context, section): the budget with the highest output tok/s, its spread, and the
    budgets whose repeats reach the best one's slowest repeat (within noise of it).

    Budget 0 competes too: when speculation is slower, the answer is 0.
    """
    rows = []
    ok = frame[frame["status"] == OK]
    order = {name: i for i, name in enumerate(dict.fromkeys(frame["section"]))}  # the workload's order
    groups = sorted(frame.groupby(["tp", "context", "section"]), key=lambda g: (g[0][0], g[0][1], order[g[0][2]]))
    for (tp, context, section), group in groups:
        measured = ok[(ok["tp"] == tp) & (ok["context"] == context) & (ok["section"] == section)]
        missing = sorted(set(group["budget"]) - set(measured["budget"]))
        if measured.empty:
            rows.append({"tp": tp, "context": context, "section": section, "best_budget": None,
                         "budgets_measured": "", "budgets_missing": _budgets(missing)})
            continue
        best = measured.loc[measured["output_tok_s"].idxmax()]
        close = measured[(measured["budget"] != best["budget"])
                         & (measured["output_tok_s_max"] >= best["output_tok_s_min"])]
        rows.append({
            "tp": tp, "context": context, "section": section, "best_budget": int(best["budget"]),
            **{c: best[c] for c in ("output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup",
                                    "speedup_min", "speedup_max")},
            "within_noise": _budgets(close["budget"]), "budgets_measured": _budgets(measured["budget"]),
            "budgets_missing": _budgets(missing),
        })
    return pd.DataFrame(rows, columns=BEST_COLUMNS)


def _budgets(values) -> str:
    return " ".join(str(int(v)) for v in sorted(values))


def front_page(config: dict, frame: pd.DataFrame, best: pd.DataFrame) -> str:
    """The report's first page (reStructuredText): the answer, then what is missing and why."""
    bad = not_ok(frame)
    title = f"specsweep: {config['study']}"
    lines = [title, "=" * len(title), "",
             f"{config['model']['name']} on {config['backend']}; grid: budget {config['grid']['budget']}, tp "
             f"{config['grid']['tp']}, context {config['grid']['context']}. "
             f"{frame['name'].nunique() - len(bad)} of {frame['name'].nunique()} configurations measured.", "",
             "Best draft budget", "-----------------", "",
             "For each tensor-parallel size, prompt length and section: the budget with the highest output "
             "throughput (budget 0 = no speculation, so 0 means speculation did not pay), its tok/s and speedup "
             "over budget 0 with the min-max of the repeats, and the other budgets whose repeats reach the "
             "best one's slowest repeat, i.e. within noise of it. Also in results/best.csv.", "",
             ".. list-table::", "   :header-rows: 1", "",
             "   * - tp", "     - context", "     - section", "     - best budget", "     - output tok/s (min-max)",
             "     - speedup (min-max)", "     - within noise", "     - no result"]
    for row in best.itertuples():
        lines += [f"   * - {row.tp}", f"     - {row.context}", f"     - {row.section}",
                  f"     - {'none measured' if pd.isna(row.best_budget) else int(row.best_budget)}",
                  f"     - {_span(row.output_tok_s, row.output_tok_s_min, row.output_tok_s_max, '.1f')}",
                  f"     - {_span(row.speedup, row.speedup_min, row.speedup_max, '.2f')}",
                  f"     - {row.within_noise or 'none'}", f"     - {row.budgets_missing or 'none'}"]
    lines += ["", "Without a result", "----------------", ""]
    if bad.empty:
        lines.append("Every configuration has a valid result.")
    for row in bad.itertuples():
        lines.append(f"- ``{row.name}``: **{row.status}**: {_rst_text(row.reason)}")
    lines += ["", "The figures, the tables, the failures and one page per configuration are in the categories "
              "of this report (menu on the left); the study's merged configuration is under Study."]
    return "\n".join(lines) + "\n"


def _span(value, low, high, fmt: str) -> str:
    if value is None or pd.isna(value):
        return "no result"
    spread = "" if pd.isna(low) or pd.isna(high) else f" ({low:{fmt}}-{high:{fmt}})"
    return f"{value:{fmt}}{spread}"


def _rst_text(text: str) -> str:
    return str(text).replace("*", "\\*").replace("`", "'").replace("|", "\\|").replace("_", "\\_")


SUMMARY_SHOWN = ["name", "tp", "budget", "context", "section", "status", "output_tok_s", "output_tok_s_min",
                 "output_tok_s_max", "speedup", "ttft_p50_s", "tpot_p50_s", "acceptance_length", "reason"]


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
            doc = results.load_result(Path(runs_dir) / f"{spec.name}.json")
            pages[spec.name] = _html(f"{spec.name}: measured", _measured(doc, rows))
        else:
            record = results.latest_failure(Path(failures_dir), spec.name) or {}
            body = (f"<p><b>{html.escape(status)}</b>: {html.escape(str(reason))}</p>"
                    + (f"<h2>Server log, last lines</h2><pre>{html.escape(record.get('server_log_tail', ''))}</pre>"
                       if record else ""))
            pages[spec.name] = _html(f"{spec.name}: {status}", body)
    return pages


def _measured(doc: dict, rows: pd.DataFrame) -> str:
    table = rows[["section", "output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup", "ttft_p50_s",
                  "tpot_p50_s", "acceptance_length", "draft_acceptance_rate"]]
    facts = {"server command": " ".join(doc["server"]["command"]), "server version": doc["server"]["version"],
             "model": json.dumps(doc["model"]), "hardware": json.dumps(doc.get("hardware")),
             "started / finished": f"{doc['started_at']} / {doc['finished_at']}"}
    items = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts.items())
    return (f"<h2>Per section</h2>{table.to_html(index=False, float_format=lambda v: f'{v:.4g}', na_rep='-')}"
            f"<h2>What was measured, where</h2><table>{items}</table>"
            f"<h2>Provenance</h2><pre>{html.escape(json.dumps(doc.get('provenance'), indent=1))}</pre>")


def _html(title: str, body: str) -> str:
    style = ("body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n")


def write_all(config: dict, frame: pd.DataFrame, *, runs_dir: Path, failures_dir: Path, best_csv: Path,
              front: Path, failures_html: Path, pages_dir: Path, tables_html: tuple[Path, Path],
              study_yaml: str, study_html: Path) -> None:
    best = best_table(frame)
    results.write_text_atomic(best_csv, best.to_csv(index=False))
    results.write_text_atomic(front, front_page(config, frame, best))
    summary_html, best_html = tables_html
    shown = frame[[c for c in SUMMARY_SHOWN if c in frame.columns]]
    results.write_text_atomic(summary_html, table_page("Summary table", shown, "Every column is in results/summary.csv."))
    results.write_text_atomic(best_html, table_page("Best draft budget", best, "Also in results/best.csv."))
    results.write_text_atomic(study_html, study_page(study_yaml))
    results.write_text_atomic(failures_html, failures_page(frame))
    for name, page in configuration_pages(config, frame, runs_dir, failures_dir).items():
        results.write_text_atomic(Path(pages_dir) / f"{name}.html", page)


def terminal_answer(summary_csv: Path, best_csv: Path, *, limit: int = 12) -> str:
    """What the terminal shows when the main command succeeds: the best budgets (a few lines of
    results/best.csv), what has no result and why, and where to look next."""
    best = pd.read_csv(best_csv)
    frame = pd.read_csv(summary_csv, keep_default_na=True).fillna({"reason": ""})
    lines = ["", f"Best draft budget per tp, context and section ({best_csv}; 0 = speculation did not pay):",
             f"  {'tp':>3} {'context':>8}  {'section':<12} {'best':>5} {'tok/s':>8} {'speedup':>8}  within noise"]
    for row in best.head(limit).itertuples():
        if pd.isna(row.best_budget):
            lines.append(f"  {row.tp:>3} {row.context:>8}  {row.section:<12} {'-':>5}  no budget measured")
            continue
        lines.append(f"  {row.tp:>3} {row.context:>8}  {row.section:<12} {int(row.best_budget):>5} "
                     f"{row.output_tok_s:>8.1f} {_times(row.speedup):>8}  "
                     f"{row.within_noise if isinstance(row.within_noise, str) and row.within_noise else 'none'}")
    if len(best) > limit:
        lines.append(f"  ... {len(best) - limit} more rows in {best_csv}")
    bad = not_ok(frame)
    lines.append("Without a result: " + ("none." if bad.empty else ", ".join(
        f"{r.name} ({r.status}: {r.reason})" for r in bad.itertuples())))
    lines += [f"Figure: results/summary.png; table: {summary_csv}.",
              "Report: snakemake --report results/report.html   (one file, opened in any browser)"]
    return "\n".join(lines)


def _times(value) -> str:
    return "-" if pd.isna(value) else f"{value:.2f}x"
