"""Summary table from valid results only; every other configuration keeps its status and reason."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from specsweep import axes
from specsweep.analysis import cells
from specsweep.analysis.ledger import (
    exclusion_reason,
    launch_words,
    launches_planned,
    measured_otherwise,
    most_launches,
)
from specsweep.errors import IncomparableResults
from specsweep.records import paths
from specsweep.records.inferred import inferred, sources
from specsweep.records.result import ENERGY_COLUMNS, IN_FLIGHT_COLUMNS, METRICS, SEARCH_COLUMNS, Result
from specsweep.records.status import EXCLUDED, FAILED, INFERRED, INVALID, NOT_ENGAGED, NOT_RUN, OK
from specsweep.records.store import InvalidResult, latest_failure, read_result, write_text_atomic
from specsweep.spec import LaunchSpec
from specsweep.study.grid import expand_grid

# Declared with the result document that fills them; then how many launches a row's figures are
# the mean of, each launch's and each repeat's throughput, each request's by launch and prompt (the
# verdict's units), and what a launch costs beside its sections (the verdict's price of a launch).
METRIC_COLUMNS = [*METRICS, *ENERGY_COLUMNS, "energy_source", *IN_FLIGHT_COLUMNS, *SEARCH_COLUMNS,
                  "launches", "launch_tok_s", "repeat_tok_s", "prompt_tok_s",
                  "launch_overhead_s"]


def key_columns(axis_names: list[str]) -> list[str]:
    """The summary's first columns: the name, every axis (axes.columns finds them again), the
    section and the load level."""
    return ["name", *axis_names, axes.SECTION, axes.LOAD, "status", "reason"]


def summarize(config: dict, launches_dir: Path, failures_dir: Path, *, upto: int | None = None) -> pd.DataFrame:
    """One row per configuration x section, in grid order, with speedup over budget 0, from every
    launch up to ``upto`` (default: the most the study may reach)."""
    rows = []
    last = upto or most_launches(config)
    for spec in expand_grid(config):
        rows.extend(_rows_for(config, spec, Path(launches_dir), Path(failures_dir), last))
    frame = pd.DataFrame(rows, columns=key_columns(axes.names(config["grid"])) + METRIC_COLUMNS)
    return add_speedup(frame, config["verdict"])


def _rows_for(config: dict, spec: LaunchSpec, launches_dir: Path, failures_dir: Path, last: int) -> list[dict]:
    base = {"name": spec.name, **spec.values}
    reason = exclusion_reason(config, spec)
    if reason is not None:
        return _status_rows(base, spec, EXCLUDED, reason)
    found = {k: p for k, p in paths.launch_results(launches_dir, spec.name).items() if k <= last}
    results = []
    for launch, path in found.items():
        try:
            result = read_result(path)
        except InvalidResult as exc:
            return _status_rows(base, spec, INVALID, launch_words(launch, str(exc)))
        if (other := measured_otherwise(result, replace(spec, launch=launch))) is not None:
            return _status_rows(base, spec, INVALID, launch_words(launch, other))
        results.append((launch, result))
    wanted = range(1, min(launches_planned(config), last) + 1)
    if results and all(k in found for k in wanted):
        if spec.budget > 0 and not drafted(result for _, result in results):
            return _status_rows(base, spec, NOT_ENGAGED, f"budget {spec.budget}: the server drafted no token in any "
                                f"section of {len(results)} launch(es), so this is not a measurement of the budget")
        return [{**base, "status": OK, "reason": "", **row} for row in merged_rows(results)]
    if (why := inferred(sources(config, spec.values), failures_dir, launches_dir)) is not None:
        return _status_rows(base, spec, INFERRED, why.reason)
    failure = latest_failure(failures_dir, spec.name)
    if failure is not None:
        return _status_rows(base, spec, FAILED, f"[{failure.failure_class}] {failure.reason}")
    missing = [k for k in wanted if k not in found]
    return _status_rows(base, spec, NOT_RUN, "no result and no failure record" if not found else
                        f"launch {' '.join(map(str, missing))} of {len(wanted)} not run, and no failure record")


def drafted(results) -> bool:
    """Whether any section (goodput search steps included) of any launch drafted a token; True where
    a section does not say (older results), so that only a server's own zero counts as none."""
    for result in results:
        for section in result.sections + result.search_sections:
            if section.get("draft_tokens") is None or section["draft_tokens"] > 0:
                return True
    return False


def merged_rows(launches: list[tuple[int, Result]]) -> list[dict]:
    """A configuration's summary rows from all its launches (launch index, result): per section and
    load the mean of the launches' figures (output tok/s: each launch's tokens over its wall time),
    the extremes of their repeats, and every launch's, repeat's and request's throughput for the
    verdict."""
    per_launch = [result.summary_rows() for _, result in launches]
    repeats = [result.repeat_rates() for _, result in launches]
    prompts = [(k, result.prompt_rates()) for k, result in launches]
    overhead = _mean_of([_overhead(result) for _, result in launches])
    rows = []
    for index, first in enumerate(per_launch[0]):
        same = [rows_k[index] for rows_k in per_launch]
        row = {key: _mean_of([r.get(key) for r in same]) for key in first}
        where = (first["section"], first["load"])  # the same in every launch, as _mean_of keeps it
        row.update(launches=len(same), launch_tok_s=_values([r.get("output_tok_s") for r in same]),
                   repeat_tok_s=_values([v for rates in repeats for v in rates.get(where, ())]),
                   prompt_tok_s=" ".join(f"{k}:{sha[:16]}:{v:.6g}" for k, rates in prompts
                                         for sha, v in rates.get(where, ())),
                   launch_overhead_s=overhead)
        for key, pick in (("output_tok_s_min", min), ("output_tok_s_max", max)):
            values = [r.get(key) for r in same if r.get(key) is not None]
            row[key] = pick(values) if values else None
        for key in ("requests", "output_tokens", "wall_s", "search_steps"):
            if first.get(key) is not None:
                row[key] = sum(r[key] for r in same)
        if "search_converged" in first:
            row["search_converged"] = all(bool(r.get("search_converged")) for r in same)
        rows.append(row)
    return rows


def _overhead(result: Result) -> float | None:
    """Seconds of a launch not spent in its sections: the server's start, the prompts' making, the
    warmup and the teardown."""
    timing = result.timing or {}
    if timing.get("job_s") is None or timing.get("sections_s") is None:
        return None
    return max(0.0, timing["job_s"] - timing["sections_s"])


def _mean_of(values: list):
    """The launches' mean of a figure; a figure any launch lacks stays empty (never a zero)."""
    if any(v is None or isinstance(v, str) for v in values):
        return values[0] if len(set(map(str, values))) == 1 else None
    if any(isinstance(v, bool) for v in values):
        return values[0]
    return sum(values) / len(values)


def _values(values: list) -> str:
    """Numbers as one cell of a table: space-separated, in launch order."""
    return " ".join(f"{v:.6g}" for v in values if v is not None)


def _status_rows(base: dict, spec: LaunchSpec, status: str, reason: str) -> list[dict]:
    return [{**base, axes.SECTION: section, axes.LOAD: load, "status": status, "reason": reason}
            for section, load in spec.points]


def add_speedup(frame: pd.DataFrame, settings: dict) -> pd.DataFrame:
    """speedup = output tok/s over that of budget 0 at the same values of every other axis, section
    and load (in the goodput search's row: goodput over budget 0's goodput), with its interval at
    ``settings["confidence"]`` (the study's verdict:) from the cell's evidence (analysis/cells.py),
    and where the requests pair, speedup_paired: the geometric mean over the prompts of the
    per-prompt speedup, the figure that interval is about.

    Left empty where either side has no valid result: a missing baseline is not a speedup of 1.
    """
    ok = frame[frame["status"] == OK]
    same = cells.keys_of(frame.columns)
    base = ok[ok["budget"] == 0].set_index(same)["output_tok_s"]
    keys = list(zip(*(frame[c] for c in same)))
    baseline = pd.Series([base.get(k) for k in keys], index=frame.index, dtype="float64")
    frame = frame.copy()
    frame["baseline_tok_s"] = baseline
    frame["speedup"] = frame["output_tok_s"].astype("float64") / baseline
    # The spread of this configuration's repeats, against the baseline's mean.
    frame["speedup_min"] = frame["output_tok_s_min"].astype("float64") / baseline
    frame["speedup_max"] = frame["output_tok_s_max"].astype("float64") / baseline
    frame["speedup_low"], frame["speedup_high"], frame["speedup_paired"] = math.nan, math.nan, math.nan
    rows = frame[frame["status"] == OK].groupby(same, sort=False).groups
    for key, found in cells.evidence(frame).items():
        for index in rows[key]:
            budget = int(frame.loc[index, "budget"])
            interval = cells.speedup_interval(found, budget, confidence=settings["confidence"])
            if interval is not None:
                frame.loc[index, ["speedup_low", "speedup_high"]] = interval
            frame.loc[index, "speedup_paired"] = cells.paired_speedup(found, budget)
    return frame


def check_comparable(config: dict, launches_dir: Path) -> None:
    """Refuse to summarise results of different models, server versions, host classes or studies.

    A summary mixes them silently otherwise (pyperf refuses the same way); the message names
    the files on each side so the odd ones can be moved aside and measured again.
    """
    groups: dict[str, dict[str, list[str]]] = {}
    results = Path(launches_dir).parent  # files named from here: launches/...
    for spec in expand_grid(config):
        for path in paths.launch_results(launches_dir, spec.name).values():
            try:
                facts = read_result(path).comparability()
            except (InvalidResult, FileNotFoundError):
                continue
            for key, value in facts.items():
                groups.setdefault(key, {}).setdefault(value, []).append(str(path.relative_to(results)))
    differ = {key: values for key, values in groups.items() if len(values) > 1}
    if differ:
        lines = [f"{key}: " + "; ".join(f"{value!r} in {', '.join(names)}" for value, names in values.items())
                 for key, values in differ.items()]
        raise IncomparableResults(
            "results of different provenance cannot share one summary:\n  " + "\n  ".join(lines)
            + f"\nMove the files measured under the other conditions out of {launches_dir} (they are then "
            "measured again), or keep them as a study of their own."
        )


def not_ok(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration that has no valid result: name, status, reason."""
    bad = frame[frame["status"] != OK]
    columns = ["name", *axes.columns(frame.columns), "status", "reason"]
    return bad.drop_duplicates("name")[columns].reset_index(drop=True)


def write_summary(frame: pd.DataFrame, csv_path: Path, failed_path: Path | None = None) -> None:
    """The tidy summary and, if asked, the table of configurations without a valid result."""
    write_text_atomic(Path(csv_path), frame.to_csv(index=False))
    if failed_path is not None:
        write_text_atomic(Path(failed_path), not_ok(frame).to_csv(index=False))


