"""The study's ledger: which launches each configuration is owed, which results stand as this
study's measurements, and those refused (moved aside with a failure record, never deleted) or
left out by the study's exclusions."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from specsweep.errors import ConfigError, ResultRefused
from specsweep.records import paths
from specsweep.records.status import INVALID
from specsweep.records.store import (
    InvalidResult,
    failure_record,
    next_attempt,
    read_race_round,
    read_result,
    utc_now,
    write_failure,
)
from specsweep.spec import RunSpec
from specsweep.study.grid import expand_grid, matching_exclusions

if TYPE_CHECKING:  # the planning Snakefile and `specsweep run` import this module: no pandas for them
    import pandas as pd


def exclusion_reason(config: dict, spec: RunSpec) -> str | None:
    """The reason of the first exclusion rule that matches this configuration, if any.

    A rule that names compute capabilities matches only on that hardware: the study's
    hardware.compute_capability, else what NVML reports for this host's GPUs.
    """
    here = planning_capability(config)
    for rule in matching_exclusions(config, spec.values):
        caps = rule.get("compute_capability")
        if caps is None:
            return rule["reason"]
        if here is not None and here in (caps if isinstance(caps, list) else [caps]):
            return f"{rule['reason']} (on compute capability {here})"
    return None


def planning_capability(config: dict) -> str | None:
    from specsweep.measure.host_facts import local_compute_capability

    return (config.get("hardware") or {}).get("compute_capability") or local_compute_capability()


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


def launch_words(launch: int, reason: str) -> str:
    return reason if launch == 1 else f"launch {launch}: {reason}"


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
            refused.append((path, launch_words(launch, problem)))
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
