"""Summary table from valid results only; every other configuration keeps its status and reason."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from specsweep import axes
from specsweep.analysis import verdict
from specsweep.errors import ConfigError, IncomparableResults, ResultRefused, advice_for
from specsweep.records import paths
from specsweep.records.failure import Failure
from specsweep.records.result import METRICS, SEARCH_COLUMNS
from specsweep.records.store import (
    InvalidResult,
    failure_record,
    latest_failure,
    next_attempt,
    read_race_round,
    read_result,
    utc_now,
    write_failure,
    write_text_atomic,
)
from specsweep.spec import RunSpec
from specsweep.study.grid import expand_grid

OK, FAILED, EXCLUDED, MISSING, INVALID = "ok", "failed", "excluded", "not run", "invalid result"
# Declared with the result document that fills them; then how many launches a row's figures are
# the mean of, and each launch's and each repeat's throughput (the verdict's units).
METRIC_COLUMNS = [*METRICS, *SEARCH_COLUMNS, "launches", "launch_tok_s", "repeat_tok_s"]


def key_columns(axis_names: list[str]) -> list[str]:
    """The summary's first columns: the name, every axis (axes.columns finds them again), the
    section and the load level."""
    return ["name", *axis_names, axes.SECTION, axes.LOAD, "status", "reason"]


def exclusion_reason(config: dict, spec: RunSpec) -> str | None:
    """The reason of the first exclusion rule that matches this configuration, if any.

    A rule that names compute capabilities matches only on that hardware: the study's
    hardware.compute_capability, else what NVML reports for this host's GPUs.
    """
    here = planning_capability(config)
    for rule in config.get("exclude", []):
        if not axes.rule_matches(rule, spec.values):
            continue
        caps = rule.get("compute_capability")
        if caps is None:
            return rule["reason"]
        if here is not None and here in (caps if isinstance(caps, list) else [caps]):
            return f"{rule['reason']} (on compute capability {here})"
    return None


def planning_capability(config: dict) -> str | None:
    from specsweep.measure.host_facts import local_compute_capability

    return (config.get("hardware") or {}).get("compute_capability") or local_compute_capability()


def summarize(config: dict, runs_dir: Path, failures_dir: Path, *, upto: int | None = None) -> pd.DataFrame:
    """One row per configuration x section, in grid order, with speedup over budget 0, from every
    launch up to ``upto`` (default: the most the study may reach)."""
    rows = []
    last = upto or most_launches(config)
    for spec in expand_grid(config):
        rows.extend(_rows_for(config, spec, Path(runs_dir), Path(failures_dir), last))
    frame = pd.DataFrame(rows, columns=key_columns(axes.names(config["grid"])) + METRIC_COLUMNS)
    return add_speedup(frame, confidence=config["verdict"]["confidence"])


def _rows_for(config: dict, spec: RunSpec, runs_dir: Path, failures_dir: Path, last: int) -> list[dict]:
    base = {"name": spec.name, **spec.values}
    reason = exclusion_reason(config, spec)
    if reason is not None:
        return _status_rows(base, spec, EXCLUDED, reason)
    found = {k: p for k, p in paths.launch_results(runs_dir, spec.name).items() if k <= last}
    results = []
    for launch, path in found.items():
        try:
            result = read_result(path)
        except InvalidResult as exc:
            return _status_rows(base, spec, INVALID, _launch_words(launch, str(exc)))
        if (other := measured_otherwise(result, replace(spec, launch=launch))) is not None:
            return _status_rows(base, spec, INVALID, _launch_words(launch, other))
        results.append(result)
    wanted = range(1, min(launches_planned(config), last) + 1)
    if results and all(k in found for k in wanted):
        return [{**base, "status": OK, "reason": "", **row} for row in merged_rows(results)]
    failure = latest_failure(failures_dir, spec.name)
    if failure is not None:
        return _status_rows(base, spec, FAILED, f"[{failure.failure_class}] {failure.reason}")
    missing = [k for k in wanted if k not in found]
    return _status_rows(base, spec, MISSING, "no result and no failure record" if not found else
                        f"launch {' '.join(map(str, missing))} of {len(wanted)} not run, and no failure record")


def launches_planned(config: dict) -> int:
    """Launches every configuration gets before any racing (workload.launches)."""
    return config["workload"]["launches"]


def launches_expected(config: dict, name: str, root: Path = Path(".")) -> int:
    """The launches a configuration has had planned so far: workload.launches, plus one per
    racing round whose decision (results/race/round<r>.json) gave it another."""
    racing = config["verdict"]["until_decided"]
    if not racing:
        return launches_planned(config)
    more = 0
    for round_ in range(launches_planned(config), racing["max_launches"]):
        try:
            if name not in read_race_round(root / paths.race_round(round_)):
                break
        except (OSError, ValueError, KeyError):  # not decided yet, or a damaged record: made again
            break
        more += 1
    return launches_planned(config) + more


def most_launches(config: dict) -> int:
    """The most launches a configuration may have: racing's max_launches, else workload.launches."""
    racing = config["verdict"]["until_decided"]
    return racing["max_launches"] if racing else launches_planned(config)


def _launch_words(launch: int, reason: str) -> str:
    return reason if launch == 1 else f"launch {launch}: {reason}"


def merged_rows(results: list) -> list[dict]:
    """A configuration's summary rows from all its launches: per section and load the mean of the
    launches' figures (output tok/s: each launch's tokens over its wall time), the extremes of
    their repeats, and every launch's and repeat's throughput for the verdict."""
    per_launch = [result.summary_rows() for result in results]
    repeats = [result.repeat_rates() for result in results]
    rows = []
    for index, first in enumerate(per_launch[0]):
        same = [rows_k[index] for rows_k in per_launch]
        row = {key: _mean_of([r.get(key) for r in same]) for key in first}
        where = (first["section"], first["load"])  # the same in every launch, as _mean_of keeps it
        row.update(launches=len(same), launch_tok_s=_values([r.get("output_tok_s") for r in same]),
                   repeat_tok_s=_values([v for rates in repeats for v in rates.get(where, ())]))
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


def values_of(cell) -> list[float]:
    """The numbers of a launch_tok_s or repeat_tok_s cell."""
    if isinstance(cell, str):
        return [float(v) for v in cell.split()]
    return [] if cell is None or not axes.is_number(cell) or math.isnan(cell) else [float(cell)]


def measured_otherwise(result, spec: RunSpec) -> str | None:
    """Why a valid result is not this grid point's measurement (another study or configuration).

    A result written outside this study's workflow (a hand run of another study file, a file
    copied in) has no Snakemake metadata, so nothing would ever rerun it: aggregation refuses it.
    """
    try:
        stored = RunSpec.from_dict(result.spec)
    except ConfigError:
        return "its spec cannot be read as a configuration of this specsweep"
    if stored.study != spec.study:
        return f"measured for study {stored.study!r}, not this study {spec.study!r}"
    if stored != spec.resolved(binary=stored.binary, model_path=stored.model_path):
        differ = sorted(f for f in vars(spec) if getattr(stored, f) != getattr(
            spec.resolved(binary=stored.binary, model_path=stored.model_path), f))
        return f"measured with another configuration than the study's ({', '.join(differ)} differ)"
    return None


def _status_rows(base: dict, spec: RunSpec, status: str, reason: str) -> list[dict]:
    return [{**base, axes.SECTION: section, axes.LOAD: load, "status": status, "reason": reason}
            for section, load in spec.points]


def add_speedup(frame: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """speedup = output tok/s over that of budget 0 at the same values of every other axis, section
    and load (in the goodput search's row: goodput over budget 0's goodput), with its interval at
    ``confidence`` from the launches (verdict.speedup_interval).

    Left empty where either side has no valid result: a missing baseline is not a speedup of 1.
    """
    ok = frame[frame["status"] == OK]
    same = [a for a in axes.columns(frame.columns) if a != "budget"] + axes.within(frame.columns)
    base = ok[ok["budget"] == 0].set_index(same)["output_tok_s"]
    keys = list(zip(*(frame[c] for c in same)))
    baseline = pd.Series([base.get(k) for k in keys], index=frame.index, dtype="float64")
    frame = frame.copy()
    frame["baseline_tok_s"] = baseline
    frame["speedup"] = frame["output_tok_s"].astype("float64") / baseline
    # The spread of this configuration's repeats, against the baseline's mean.
    frame["speedup_min"] = frame["output_tok_s_min"].astype("float64") / baseline
    frame["speedup_max"] = frame["output_tok_s_max"].astype("float64") / baseline
    frame["speedup_low"], frame["speedup_high"] = math.nan, math.nan
    for _, cell in frame[frame["status"] == OK].groupby(same, sort=False):
        samples, basis = cell_units(cell)
        if basis != verdict.LAUNCHES:
            continue  # one launch's repeats would give an interval narrower than the noise: none
        for index, row in cell.iterrows():
            interval = verdict.speedup_interval(samples, int(row["budget"]), confidence=confidence)
            if interval is not None:
                frame.loc[index, ["speedup_low", "speedup_high"]] = interval
    return frame


def cell_units(cell: pd.DataFrame) -> tuple[dict[int, list[float]], str]:
    """The verdict's units of one cell's measured rows, by budget: their launches' throughputs, or
    (one launch each) their repeats'."""
    cell = cell.dropna(subset=["output_tok_s"])
    launches = {int(r["budget"]): values_of(r.get("launch_tok_s")) or [float(r["output_tok_s"])]
                for _, r in cell.iterrows()}
    repeats = {int(r["budget"]): values_of(r.get("repeat_tok_s")) for _, r in cell.iterrows()}
    return verdict.units(launches, repeats)


def check_comparable(config: dict, runs_dir: Path) -> None:
    """Refuse to summarise results of different models, server versions, host classes or studies.

    A summary mixes them silently otherwise (pyperf refuses the same way); the message names
    the files on each side so the odd ones can be moved aside and measured again.
    """
    groups: dict[str, dict[str, list[str]]] = {}
    for spec in expand_grid(config):
        for path in paths.launch_results(runs_dir, spec.name).values():
            try:
                facts = read_result(path).comparability()
            except (InvalidResult, FileNotFoundError):
                continue
            for key, value in facts.items():
                groups.setdefault(key, {}).setdefault(value, []).append(str(path.relative_to(runs_dir)))
    differ = {key: values for key, values in groups.items() if len(values) > 1}
    if differ:
        lines = [f"{key}: " + "; ".join(f"{value!r} in {', '.join(names)}" for value, names in values.items())
                 for key, values in differ.items()]
        raise IncomparableResults(
            "results of different provenance cannot share one summary:\n  " + "\n  ".join(lines)
            + f"\nMove the files measured under the other conditions out of {runs_dir} (they are then "
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


def quarantine_invalid(config: dict, frame: pd.DataFrame, runs_dir: Path, invalid_dir: Path,
                       failures_dir: Path, stale: tuple[Path, ...] = ()) -> None:
    """Move every result aggregation refused out of the way, with a failure record, and fail.

    A refused file left in place would look finished to Snakemake and never be rerun; moved
    aside (never deleted) it is kept for inspection, and the next run measures it anew. The
    ``stale`` files (the summary figure made from the refused results) are removed, so the next
    run cannot find them up to date.
    """
    bad = frame[frame["status"] == INVALID].drop_duplicates("name")
    if bad.empty:
        return
    specs = {s.name: s for s in expand_grid(config)}
    lines = [quarantine(specs[row.name], path, reason, invalid_dir, failures_dir)
             for row in bad.itertuples() for path, reason in refused_launches(specs[row.name], runs_dir)]
    for path in stale:
        Path(path).unlink(missing_ok=True)
    raise ResultRefused(
        f"{len(lines)} result file(s) cannot be aggregated:\n  " + "\n  ".join(lines)
        + "\nRun the same command again: those configurations will be measured anew."
    )


def refused_launches(spec: RunSpec, runs_dir: Path) -> list[tuple[Path, str]]:
    """(file, why) of every launch result of a configuration that cannot be aggregated; the
    launches that can are kept."""
    refused = []
    for launch, path in paths.launch_results(runs_dir, spec.name).items():
        try:
            problem = measured_otherwise(read_result(path), replace(spec, launch=launch))
        except InvalidResult as exc:
            problem = str(exc)
        if problem is not None:
            refused.append((path, _launch_words(launch, problem)))
    return refused


def quarantine(spec: RunSpec, source: Path, reason: str, invalid_dir: Path, failures_dir: Path) -> str:
    """Move one refused result file into invalid_dir with a failure record; return the line that says so."""
    stamp = utc_now().replace(":", "").replace("+0000", "Z")
    launch = "" if source.name in (f"{spec.name}.json", "launch1.json") else f"-{source.stem}"
    source, target = Path(source), Path(invalid_dir) / f"{spec.name}{launch}-{stamp}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    source.replace(target)
    error = ResultRefused(f"result refused by aggregation ({reason}); moved to {target}")
    write_failure(failures_dir, failure_record(
        name=spec.name, spec=json.loads(spec.to_json()), error=error, started_at=utc_now(),
        attempt=next_attempt(failures_dir, spec.name), server_log=None, log_tail=""))
    return f"{source}: {reason} (moved to {target})"


def refuse_stale(config: dict, root: Path = Path(".")) -> list[str]:
    """Before planning: results that cannot stand are moved aside, and a summary made without them goes.

    Called when the workflow is parsed, so that the very next main command measures again what
    has no valid result: a result damaged or replaced by hand since the summary was made (only
    those newer than the summary are read, so a large finished study plans as fast as before),
    and a summary figure that a result it was built from no longer backs. Returns the lines to
    show the person who runs it.
    """
    root = Path(root)
    made = max((p.stat().st_mtime for p in (root / paths.SUMMARY_CSV, root / paths.PARTIAL_CSV) if p.exists()),
               default=None)
    lines, gone = [], []
    for spec in expand_grid(config):
        if exclusion_reason(config, spec) is not None:
            continue
        found = paths.launch_results(root / paths.RUNS, spec.name)
        if any(k not in found for k in range(1, launches_expected(config, spec.name, root) + 1)):
            gone.append(spec.name)
            continue
        if made is not None and all(path.stat().st_mtime <= made for path in found.values()):
            continue  # aggregated (and so validated) since it was last written
        refused = refused_launches(spec, root / paths.RUNS)
        for path, problem in refused:
            lines.append(quarantine(spec, path, problem, root / paths.INVALID, root / paths.FAILURES))
        if refused:
            gone.append(spec.name)
    # Both go: Snakemake does not run a job for a missing input while the file made from it is
    # still there, so a summary left in place would keep the missing result unmeasured.
    stale = [p for p in (paths.SUMMARY_PNG, paths.SUMMARY_CSV) if (root / p).exists()] if gone else []
    for path in stale:
        (root / path).unlink()
    if stale:
        shown = ", ".join(gone[:4]) + (f" and {len(gone) - 4} more" if len(gone) > 4 else "")
        lines.append(f"{' and '.join(map(str, stale))} were made from results that are no longer there ({shown}): "
                     f"removed, so that this run measures them again")
    return lines


# Signatures that come back on every attempt: a kernel that does not run on this GPU, memory
# that does not suffice, a flag the server refuses. A configuration failing with one is a
# candidate for an exclusion, not for another retry.
REPRODUCING_SIGNATURES = ("cuda-illegal-instruction", "gpu-oom", "context-exceeded", "bad-arguments")


def failure_report(frame: pd.DataFrame, failures_dir: Path | str | None = None) -> str:
    """The terminal table a person reads after a run with failures, what to do for each class that
    happened, and the exclusions to paste for failures that reproduce on the server's side."""
    bad = not_ok(frame)
    if bad.empty:
        return ""
    lines = [f"{len(bad)} of {frame['name'].nunique()} configurations have no valid result:"]
    for row in bad.itertuples():
        lines.append(f"  {row.name:<20} {row.status:<14} {row.reason}")
    records = {row.name: latest_failure(Path(failures_dir), row.name) if failures_dir is not None else None
               for row in bad.itertuples() if row.status in (FAILED, INVALID)}
    lines += next_steps(bad, records)
    axis_names = axes.columns(bad.columns)
    entries = [e for row in bad.to_dict("records")
               if row["status"] == FAILED and (e := exclude_entry(row, axis_names, records[row["name"]]))]
    if entries:
        lines.append("These fail with a signature that reproduces on the server's side; to leave them out where "
                     "they fail, paste into the study's exclude: list:")
        lines += [f"  {e}" for e in entries]
    return "\n".join(lines)


def next_steps(bad: pd.DataFrame, records: dict[str, Failure | None]) -> list[str]:
    """One 'what to do' line per failure class present, naming its configurations."""
    by_class: dict[str, list[str]] = {}
    for row in bad.itertuples():
        if row.status == EXCLUDED:
            continue
        record = records.get(row.name)
        name = record.failure_class if record else ("invalid-result" if row.status == INVALID else "not run")
        by_class.setdefault(name, []).append(row.name)
    lines = []
    for name, names in by_class.items():
        what = ("run the main command: they have neither a result nor a failure record" if name == "not run"
                else advice_for(name))
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"Next, for {name} ({shown}): {what}.")
    return lines


def exclude_entry(row: dict, axis_names: list[str], record: Failure | None) -> str | None:
    """A ready-to-paste exclude rule (one YAML line) for a deterministic failure with a known signature."""
    if not record or record.signature not in REPRODUCING_SIGNATURES:
        return None  # a missing file, a full disk, an interrupt: excluding would hide the mistake
    reason = f"{record.signature}: {record.cause}"[:200]
    rule = {axis: axes.plain(row[axis]) for axis in axis_names}
    if record.compute_capability:
        rule["compute_capability"] = record.compute_capability
    rule["reason"] = reason
    return "- " + json.dumps(rule)  # JSON is YAML: one line, quoting done right
