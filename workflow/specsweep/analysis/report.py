"""What the Snakemake report shows besides the figures: the answer (the best table, computed in
analysis/answer.py) in words, the failures and exclusions, one page per configuration (command,
provenance, per-section numbers), and the terminal's answer. Built from valid results only.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from specsweep import axes
from specsweep.analysis import verdict
from specsweep.analysis.aggregate import not_ok
from specsweep.analysis.answer import keys_of_best
from specsweep.host import gpu_watch
from specsweep.records import paths, store
from specsweep.records.result import Result
from specsweep.records.status import OK
from specsweep.spec import SLO, Objective
from specsweep.study.grid import expand_grid


def front_page(config: dict, frame: pd.DataFrame, best: pd.DataFrame, unchecked: dict[str, list[str]] | None = None,
               *, deploy_dir: Path = paths.DEPLOY) -> str:
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
             f"For each {per}, section and load level: the verdict on the draft budgets (budget 0 = no "
             "speculation, so 0 means speculation did not pay). The best set holds every budget that the "
             f"measurements cannot separate from the best at {_confidence(best)} confidence (multiple comparisons "
             "with the best, prompt by prompt, the noise between launches counted in full: docs/verdicts.md); "
             "one budget left is decided, several within the tie margin are tied (the smallest named), "
             "anything else is undecided and named as such. Figures are the named budget's (undecided: the "
             "highest's): tok/s with the min-max of its repeats, speedup over budget 0 with its interval. Also "
             f"in results/best.csv; each named configuration's server command is a script in {deploy_dir}/, every "
             f"cell in {Path(deploy_dir) / 'deploy.json'}. Load c<n> is a closed loop with n requests in flight, "
             "r<x> an open loop of x requests/s." + (_objective_words(objective) if objective else "")
             + _basis_words(best), "",
             ".. list-table::", "   :header-rows: 1", ""]
    energy = "j_per_output_token" in best and best["j_per_output_token"].notna().any()
    heads = [*keys, "best budget", "output tok/s (min-max)", f"speedup [{_confidence(best)} interval]", "best set",
             "no result"] + (["J per output token (above idle; source)"] if energy else [])
    lines += [f"   * - {heads[0]}"] + [f"     - {h}" for h in heads[1:]]
    for row in best.to_dict("records"):
        cells = [row[k] for k in keys] + _answer_cells(row) + ([_energy_words(row)] if energy else [])
        lines += [f"   * - {cells[0]}"] + [f"     - {c}" for c in cells[1:]]
    lines += ["", "Without a result", "----------------", ""]
    if bad.empty:
        lines.append("Every configuration has a valid result.")
    for row in bad.itertuples():
        lines.append(f"- ``{row.name}``: **{row.status}**: {_rst_text(row.reason)}")
    if unchecked:
        lines += ["", "Measured with a check unread", "----------------------------", "",
                  "The server did not say what these checks before the first section needed; the figures stand, "
                  "the limits were not tested (server.preflight: strict refuses such a launch).", ""]
        lines += [f"- ``{name}``: {_rst_text('; '.join(why))}" for name, why in unchecked.items()]
    lines += ["", "The figures, the tables, the failures and one page per configuration are in the categories "
              "of this report (menu on the left); the study's merged configuration is under Study."]
    return "\n".join(lines) + "\n"


_AXIS_WORDS = {"tp": "tensor-parallel size", "context": "prompt length"}


def _answer_cells(row: dict) -> list[str]:
    """A best-table row's cells on the front page: the verdict (and the rate it sustains), the
    figures, the interval, the best set and the budgets without a result."""
    said = _none_best(row) if pd.isna(row["highest_budget"]) else verdict.words(
        row["verdict"], None if pd.isna(row["best_budget"]) else int(row["best_budget"]), row["best_set"])
    said += f" (sustains {row['sustained_rate_rps']:.3g} req/s)" if row.get(axes.LOAD) == SLO else ""
    return [said, _span(row["output_tok_s"], row["output_tok_s_min"], row["output_tok_s_max"], ".1f"),
            _interval(row), _set_words(row), row["budgets_missing"] or "none"]


def _energy_words(row: dict) -> str:
    """"0.412 (0.198; counter)"; "absent" where no GPU's energy was read (never 0)."""
    if pd.isna(row.get("j_per_output_token")):
        return "absent"
    above = row.get("j_per_output_token_above_idle")
    return (f"{row['j_per_output_token']:.3g} ({'-' if pd.isna(above) else format(above, '.3g')}; "
            f"{row.get('energy_source')})")


def _objective_words(objective: dict) -> str:
    bound = Objective(**objective)
    return (f" Load slo is the goodput search: the highest request rate (open loop) whose {bound.text()}, found "
            f"by bracketing from {bound.start_rate:g} req/s and bisecting to within {bound.precision:.0%} in at most "
            f"{bound.max_steps} steps; its tok/s is the goodput at that rate, its speedup the goodput over "
            f"budget 0's.")


def _none_best(row: dict) -> str:
    """A group without a best budget: nothing measured, or (the goodput search) no rate within the objective."""
    return "none within the objective" if row.get("budgets_measured") else "none measured"


def _confidence(best: pd.DataFrame) -> str:
    levels = best["confidence"].dropna()
    return f"{levels.iloc[0]:.0%}" if len(levels) else "95%"


def _basis_words(best: pd.DataFrame) -> str:
    """Said where a verdict rests on one launch's repeats: it misses the noise between launches."""
    if not (best["basis"] == verdict.REPEATS).any():
        return ""
    return (" One launch per configuration: those verdicts rest on the repeats of one server launch and miss "
            "the noise between launches; set workload.launches to 2 or more for a verdict that reproduces.")


def _interval(row: dict) -> str:
    """The speedup with its interval where the launches give one, else with the repeats' min-max."""
    if pd.isna(row.get("speedup")):
        return "no result"
    if pd.isna(row.get("speedup_low")):
        return _span(row["speedup"], row["speedup_min"], row["speedup_max"], ".2f")
    return f"{row['speedup']:.2f} [{row['speedup_low']:.2f}-{row['speedup_high']:.2f}]"


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


def configuration_pages(config: dict, frame: pd.DataFrame, launches_dir: Path, failures_dir: Path) -> dict[str, str]:
    """{configuration name: HTML page}: its command, provenance and per-section numbers, or why
    it has none."""
    pages = {}
    for spec in expand_grid(config):
        rows = frame[frame["name"] == spec.name]
        status, reason = rows["status"].iloc[0], rows["reason"].iloc[0]
        if status == OK:
            results = [store.read_result(p) for p in paths.launch_results(launches_dir, spec.name).values()]
            pages[spec.name] = _html(f"{spec.name}: measured", _measured(results, rows))
        else:
            record = store.latest_failure(Path(failures_dir), spec.name)
            body = (f"<p><b>{html.escape(status)}</b>: {html.escape(str(reason))}</p>"
                    + (f"<h2>Server log, last lines</h2><pre>{html.escape(record.server_log_tail)}</pre>"
                       if record else ""))
            pages[spec.name] = _html(f"{spec.name}: {status}", body)
    return pages


def unchecked_checks(frame: pd.DataFrame, launches_dir: Path) -> dict[str, list[str]]:
    """{configuration: the preflight checks its launches could not read} over the measured ones."""
    found = {}
    for name in frame.loc[frame["status"] == OK, "name"].unique():
        why = [line for p in paths.launch_results(launches_dir, name).values()
               for line in (store.read_result(p).server.get("preflight") or {}).get("unchecked", [])]
        if why:
            found[name] = sorted(set(why))
    return found


def _preflight_words(result: Result) -> dict[str, str]:
    preflight = result.server.get("preflight")
    if preflight is None:  # results written before the preflight was recorded
        return {"checked before measuring": "not recorded (a result from before specsweep recorded it)"}
    return {"checked before measuring": "; ".join(preflight["checked"]) or "nothing",
            "NOT checked": "; ".join(preflight["unchecked"]) or "none"}


def _measured(results: list[Result], rows: pd.DataFrame) -> str:
    """A configuration's page: its figures (the launches' mean), each launch's throughput, and
    what was measured where (the first launch's facts; every launch's times)."""
    table = rows[[*axes.within(rows.columns), "output_tok_s", "output_tok_s_min", "output_tok_s_max", "speedup",
                  "speedup_low", "speedup_high", "launch_tok_s", "ttft_p50_s", "tpot_p50_s", "acceptance_length",
                  "draft_acceptance_rate", "sustained_rate_rps"]]
    result = results[0]
    facts = {"server command": " ".join(result.server["command"]), "server version": result.server["version"],
             **_preflight_words(result), "model": json.dumps(result.model), "hardware": json.dumps(result.hardware),
             **{f"launch {r.spec.get('launch', 1)} started / finished": f"{r.started_at} / {r.finished_at}"
                for r in results}}
    items = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts.items())
    return (f"<h2>Per section (mean of {len(results)} launch(es); launch_tok_s: each launch's)</h2>"
            f"{table.to_html(index=False, float_format=lambda v: f'{v:.4g}', na_rep='-')}"
            + "".join(_gpu_readings(r) for r in results) +
            f"<h2>What was measured, where</h2><table>{items}</table>"
            f"<h2>Provenance</h2><pre>{html.escape(json.dumps(result.provenance, indent=1))}</pre>")


def _gpu_readings(result: Result) -> str:
    """Each held GPU's clocks, heat and power per section (gpu_watch.telemetry), where NVML read them."""
    rows = [{"section": s["name"], "load": s["load"], "gpu": g["gpu"], "readings": g["samples"],
             "SM MHz min": g["sm_clock_mhz"]["min"], "SM MHz mean": g["sm_clock_mhz"]["mean"],
             "max C": g["temperature_c_max"], "W mean": g["power_w"]["mean"], "W max": g["power_w"]["max"],
             "slowed": f"{g['slowed_share']:.0%}", "power-capped": f"{g['power_capped_share']:.0%}",
             "reasons": ", ".join(g["reasons"]) or "-"}
            for s in result.sections for g in (s.get("quiet_host") or {}).get("gpu_telemetry") or []]
    if not rows:
        return ""
    return (f"<h2>GPUs per section (NVML, every {gpu_watch.SAMPLE_EVERY_S:g} s)</h2>"
            f"{pd.DataFrame(rows).to_html(index=False, float_format=lambda v: f'{v:.4g}')}")


def _html(title: str, body: str) -> str:
    style = ("body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n")


def write_all(config: dict, frame: pd.DataFrame, best: pd.DataFrame, *, launches_dir: Path, failures_dir: Path,
              front: Path, failures_html: Path, pages_dir: Path, tables_html: tuple[Path, Path],
              study_yaml: str, study_html: Path, deploy_dir: Path = paths.DEPLOY) -> None:
    """Every page of the report's data, showing the answer ``best`` (answer.write_best's)."""
    store.write_text_atomic(front, front_page(config, frame, best, unchecked_checks(frame, launches_dir),
                                              deploy_dir=deploy_dir))
    summary_html, best_html = tables_html
    keys = ["name", *axes.columns(frame.columns), *axes.within(frame.columns)]
    shown = frame[keys + [c for c in SUMMARY_SHOWN if c in frame.columns]]
    store.write_text_atomic(summary_html, table_page("Summary table", shown, "Every column is in results/summary.csv."))
    store.write_text_atomic(best_html, table_page("Best draft budget", best, "Also in results/best.csv."))
    store.write_text_atomic(study_html, study_page(study_yaml))
    store.write_text_atomic(failures_html, failures_page(frame))
    for name, page in configuration_pages(config, frame, launches_dir, failures_dir).items():
        store.write_text_atomic(Path(pages_dir) / f"{name}.html", page)


def terminal_answer(frame: pd.DataFrame, best: pd.DataFrame, *, summary_csv: Path, best_csv: Path, limit: int = 12,
                    deployed=None) -> str:
    """What the terminal shows when the main command succeeds: the verdict per cell (a few rows of
    the answer, ``best``, as answer.write_best wrote it to ``best_csv``), what of the summary
    ``frame`` has no result and why, and where to look next (``deployed``: the answer's server
    commands, (analysis/deploy.Deploy, its folder))."""
    keys = keys_of_best(best)
    inside = axes.within(keys)
    axes_shown, widths = keys[:-len(inside)], {k: max(len(k), _MIN_WIDTH.get(k, 0), *(len(str(v)) for v in best[k]))
                                               for k in keys}

    def where(row) -> str:
        return (" ".join(f"{row[k]!s:>{widths[k]}}" for k in axes_shown)
                + "".join(f"  {row[k]!s:<{widths[k]}}" for k in inside))

    per = f"{', '.join(keys[:-1])} and {keys[-1]}"
    over = _rests_on_words(best)
    lines = ["", f"Best draft budget per {per} ({best_csv}; 0 = speculation did not pay; {over}):",
             f"  {where({k: k for k in keys})} {'best':>5} {'tok/s':>8}  {'speedup [interval]':<19} verdict"]
    for row in best.head(limit).to_dict("records"):
        if pd.isna(row["highest_budget"]):
            lines.append(f"  {where(row)} {'-':>5}  "
                         + ("no budget within the objective" if row.get("budgets_measured") else "no budget measured"))
            continue
        sustained = (f"  (sustains {row['sustained_rate_rps']:.3g} req/s)"
                     if row.get(axes.LOAD) == SLO and not pd.isna(row.get("sustained_rate_rps")) else "")
        named = "-" if pd.isna(row["best_budget"]) else f"{int(row['best_budget'])}"
        state = verdict.state_words(row["verdict"], row["best_set"]) + _needs_words(row)
        lines.append(f"  {where(row)} {named:>5} {row['output_tok_s']:>8.1f}  {_speedup_cell(row):<19} "
                     f"{state}{sustained}")
    if len(best) > limit:
        lines.append(f"  ... {len(best) - limit} more rows in {best_csv}")
    if (best["basis"] == verdict.REPEATS).any():
        lines.append("One launch per configuration: the verdict rests on one launch's repeats and misses the noise "
                     "between launches; set workload.launches to 2 or more.")
    bad = not_ok(frame)
    lines.append("Without a result: " + ("none." if bad.empty else ", ".join(
        f"{r.name} ({r.status}: {r.reason})" for r in bad.itertuples())))
    if deployed is not None:
        lines.append(_deploy_words(*deployed))
    lines += [f"Figures: results/summary.png, results/tradeoff.png (per user against per GPU); table: {summary_csv}.",
              "Report: snakemake --report results/report.html   (one file, opened in any browser)"]
    return "\n".join(lines)


def _deploy_words(found, folder: Path) -> str:
    """Where the named configurations' server commands are: "Deploy: results/deploy/tp1-b4-ctx128.sh
    (context 128, short), ...; every cell in results/deploy/deploy.json"."""
    named = {}
    for where, script in found.named_scripts():
        named.setdefault(script, []).append(", ".join(str(v) for k, v in where.items() if k != "tp"))
    shown = "; ".join(f"{Path(folder) / script} ({' | '.join(cells)})" for script, cells in list(named.items())[:4])
    more = f"; {len(named) - 4} more" if len(named) > 4 else ""
    if not shown:
        return (f"Deploy: no cell names one budget; a script per best-set member in {folder}/, every cell and "
                f"why in {Path(folder) / 'deploy.json'}.")
    return f"Deploy: {shown}{more}; every cell, its best set and its commands in {Path(folder) / 'deploy.json'}."


def _rests_on_words(best: pd.DataFrame) -> str:
    """What the verdicts rest on: "95% confidence over 2 launch(es) of 8 prompts, paired"."""
    launches = best["launches"].dropna()
    if not len(launches):
        return ""
    words = f"{_confidence(best)} confidence over {int(launches.min())} launch(es)"
    prompts = best["prompts"].dropna() if "prompts" in best else pd.Series(dtype=float)
    if len(prompts):
        low, high = int(prompts.min()), int(prompts.max())
        count = low if low == high else f"{low}-{high}"
        words += f" of {count} prompt{'' if high == 1 else 's'} per section, paired across budgets"
    return words


def _set_words(row: dict) -> str:
    """The front page's best-set cell: the set and, undecided, what it needs; "none" without one."""
    members = row.get("best_set")
    return (members if isinstance(members, str) and members else "none") + _needs_words(row)


def _needs_words(row: dict) -> str:
    """An undecided verdict's price: " (needs about 6 launches of 16 prompts per section)"."""
    needs = row.get("needs")
    return "" if not isinstance(needs, str) or not needs else f" (needs {needs})"


def _speedup_cell(row: dict) -> str:
    """1.07x [0.98-1.17], or 1.07x alone where no interval could be had."""
    if pd.isna(row.get("speedup")):
        return "-"
    if pd.isna(row.get("speedup_low")):
        return f"{row['speedup']:.2f}x"
    return f"{row['speedup']:.2f}x [{row['speedup_low']:.2f}-{row['speedup_high']:.2f}]"


# The terminal's columns as they were before axes were data (and load a column).
_MIN_WIDTH = {"tp": 3, "context": 8, axes.SECTION: 12, axes.LOAD: 4}
