"""Summary table from valid results only; every other configuration keeps its status and reason."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from specsweep import axes
from specsweep.errors import ConfigError, IncomparableResults, ResultRefused, advice_for
from specsweep.records import paths
from specsweep.records.failure import Failure
from specsweep.records.result import METRICS, SEARCH_COLUMNS
from specsweep.records.store import (
    InvalidResult,
    failure_record,
    latest_failure,
    next_attempt,
    read_result,
    utc_now,
    write_failure,
    write_text_atomic,
)
from specsweep.spec import RunSpec
from specsweep.study.grid import expand_grid

OK, FAILED, EXCLUDED, MISSING, INVALID = "ok", "failed", "excluded", "not run", "invalid result"
METRIC_COLUMNS = [*METRICS, *SEARCH_COLUMNS]  # declared with the result document that fills them


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


def summarize(config: dict, runs_dir: Path, failures_dir: Path) -> pd.DataFrame:
    """One row per configuration x section, in grid order, with speedup over budget 0."""
    rows = []
    for spec in expand_grid(config):
        rows.extend(_rows_for(config, spec, Path(runs_dir), Path(failures_dir)))
    frame = pd.DataFrame(rows, columns=key_columns(axes.names(config["grid"])) + METRIC_COLUMNS)
    return add_speedup(frame)


def _rows_for(config: dict, spec: RunSpec, runs_dir: Path, failures_dir: Path) -> list[dict]:
    base = {"name": spec.name, **spec.values}
    reason = exclusion_reason(config, spec)
    if reason is not None:
        return _status_rows(base, spec, EXCLUDED, reason)
    path = runs_dir / f"{spec.name}.json"
    if path.exists():
        try:
            result = read_result(path)
        except InvalidResult as exc:
            return _status_rows(base, spec, INVALID, str(exc))
        if (other := measured_otherwise(result, spec)) is not None:
            return _status_rows(base, spec, INVALID, other)
        return [{**base, "status": OK, "reason": "", **row} for row in result.summary_rows()]
    failure = latest_failure(failures_dir, spec.name)
    if failure is not None:
        return _status_rows(base, spec, FAILED, f"[{failure.failure_class}] {failure.reason}")
    return _status_rows(base, spec, MISSING, "no result and no failure record")


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


def add_speedup(frame: pd.DataFrame) -> pd.DataFrame:
    """speedup = output tok/s over that of budget 0 at the same values of every other axis, section
    and load (in the goodput search's row: goodput over budget 0's goodput).

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
    return frame


def check_comparable(config: dict, runs_dir: Path) -> None:
    """Refuse to summarise results of different models, server versions, host classes or studies.

    A summary mixes them silently otherwise (pyperf refuses the same way); the message names
    the files on each side so the odd ones can be moved aside and measured again.
    """
    groups: dict[str, dict[str, list[str]]] = {}
    for spec in expand_grid(config):
        path = Path(runs_dir) / f"{spec.name}.json"
        try:
            facts = read_result(path).comparability()
        except (InvalidResult, FileNotFoundError):
            continue
        for key, value in facts.items():
            groups.setdefault(key, {}).setdefault(value, []).append(path.name)
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
    lines = [quarantine(specs[row.name], row.reason, runs_dir, invalid_dir, failures_dir) for row in bad.itertuples()]
    for path in stale:
        Path(path).unlink(missing_ok=True)
    raise ResultRefused(
        f"{len(lines)} result file(s) cannot be aggregated:\n  " + "\n  ".join(lines)
        + "\nRun the same command again: those configurations will be measured anew."
    )


def quarantine(spec: RunSpec, reason: str, runs_dir: Path, invalid_dir: Path, failures_dir: Path) -> str:
    """Move one refused result into invalid_dir with a failure record; return the line that says so."""
    stamp = utc_now().replace(":", "").replace("+0000", "Z")
    source, target = Path(runs_dir) / f"{spec.name}.json", Path(invalid_dir) / f"{spec.name}-{stamp}.json"
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
        path = paths.run_result(spec.name, root)
        if not path.exists():
            gone.append(spec.name)
            continue
        if made is not None and path.stat().st_mtime <= made:
            continue  # aggregated (and so validated) since it was last written
        try:
            problem = measured_otherwise(read_result(path), spec)
        except InvalidResult as exc:
            problem = str(exc)
        if problem is not None:
            lines.append(quarantine(spec, problem, root / paths.RUNS, root / paths.INVALID, root / paths.FAILURES))
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
