"""The study's ledger: which launches each configuration is owed, which results stand as this
study's measurements, and those refused (moved aside with a failure record, never deleted) or
left out by the study's exclusions."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
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
    write_bytes_atomic,
    write_failure,
)
from specsweep.spec import LaunchSpec
from specsweep.study.grid import capabilities_of, excluded_here, expand_grid, matching_exclusions

if TYPE_CHECKING:  # the planning Snakefile and `specsweep launch` import this module: no pandas for them
    import pandas as pd


def exclusion_reason(config: dict, spec: LaunchSpec) -> str | None:
    """The reason of the first exclusion rule that matches this configuration, if any.

    A rule that names compute capabilities matches only on that hardware: the study's
    hardware.compute_capability, else what NVML reports for this host's GPUs.
    """
    here = planning_capability(config)
    for rule in matching_exclusions(config, spec.values):
        if not (caps := capabilities_of(rule)):
            return rule["reason"]
        if here is not None and excluded_here(caps, {here}):
            return f"{rule['reason']} (on compute capability {here})"
    return None


def planning_capability(config: dict) -> str | None:
    from specsweep.host.host_facts import local_compute_capability

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


def looks(config: dict) -> int:
    """How often the verdict looks at the data before the answer: once, or with racing once after
    each round it may run (workload.launches up to max_launches), the last one the answer's."""
    return most_launches(config) - launches_planned(config) + 1


def launch_words(launch: int, reason: str) -> str:
    return reason if launch == 1 else f"launch {launch}: {reason}"


def measured_otherwise(result, spec: LaunchSpec) -> str | None:
    """Why a valid result is not this grid point's measurement (another study or configuration).

    A result written outside this study's workflow (a hand run of another study file, a file
    copied in) has no Snakemake metadata, so nothing would ever rerun it: aggregation refuses it.
    """
    try:
        stored = LaunchSpec.from_dict(result.spec)
    except ConfigError:
        return "its spec cannot be read as a configuration of this specsweep"
    if stored.study != spec.study:
        return f"measured for study {stored.study!r}, not this study {spec.study!r}"
    if stored != spec.resolved(binary=stored.binary, model_path=stored.model_path):
        differ = sorted(f for f in vars(spec) if getattr(stored, f) != getattr(
            spec.resolved(binary=stored.binary, model_path=stored.model_path), f))
        return f"measured with another configuration than the study's ({', '.join(differ)} differ)"
    return None


def refused_launches(spec: LaunchSpec, launches_dir: Path) -> list[tuple[int, Path, str]]:
    """(launch, file, why) of every launch result of a configuration that cannot be aggregated; the
    launches that can are kept."""
    refused = []
    for launch, path in paths.launch_results(launches_dir, spec.name).items():
        try:
            problem = measured_otherwise(read_result(path), replace(spec, launch=launch))
        except InvalidResult as exc:
            problem = str(exc)
        if problem is not None:
            refused.append((launch, path, launch_words(launch, problem)))
    return refused


def set_aside_file(spec: LaunchSpec, source: Path, reason: str, into: Path, failures_dir: Path) -> str:
    """Set one refused result file aside: moved into ``into`` with a failure record; return the line
    that says so."""
    stamp = utc_now().replace(":", "").replace("+0000", "Z")
    launch = "" if source.name in (f"{spec.name}.json", "launch1.json") else f"-{source.stem}"
    source, target = Path(source), Path(into) / f"{spec.name}{launch}-{stamp}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    source.replace(target)
    error = ResultRefused(f"result refused by aggregation ({reason}); moved to {target}")
    write_failure(failures_dir, failure_record(
        name=spec.name, spec=json.loads(spec.to_json()), error=error, started_at=utc_now(),
        attempt=next_attempt(failures_dir, spec.name), server_log=None, log_tail=""))
    return f"{source}: {reason} (moved to {target})"


def set_aside_refused(config: dict, frame: pd.DataFrame, launches_dir: Path, into: Path,
                      failures_dir: Path) -> None:
    """Set every result aggregation refused aside, with a failure record, and fail.

    A refused file left in place would look finished to Snakemake and never be rerun; moved
    aside (never deleted) it is kept for inspection, and the next run measures it anew. What the
    summary job made from the refused results goes with the failed job (Snakemake deletes a failed
    job's outputs); after a hand run, the next main command measures the moved launch again and
    so remakes the summary.
    """
    bad = frame[frame["status"] == INVALID].drop_duplicates("name")
    if bad.empty:
        return
    specs = {s.name: s for s in expand_grid(config)}
    lines = [set_aside_file(specs[row.name], path, reason, into, failures_dir)
             for row in bad.itertuples() for _, path, reason in refused_launches(specs[row.name], launches_dir)]
    raise ResultRefused(
        f"{len(lines)} result file(s) cannot be aggregated:\n  " + "\n  ".join(lines)
        + "\nRun the same command again: those configurations will be measured anew."
    )


@dataclass(frozen=True)
class Refused:
    """One launch result that cannot stand as this study's measurement, and why."""

    name: str
    launch: int
    path: str
    reason: str


@dataclass(frozen=True)
class SetAside:
    """What the next run sets aside and measures again, found by reading alone.

    Planning writes nothing (`snakemake -n` is a preview): the plan names the refused results
    (damaged, or measured otherwise) and the configurations with a launch missing while a summary
    made without it stands. The run's set-aside job (rule set_aside) moves the refused files into
    results/set-aside/results/ and writes this plan as its marker, which the refused launches' jobs and the
    summary take as input, so Snakemake measures exactly those again and makes the summary anew.
    ``made`` is the mtime (ns) of the newest summary table (full or partial) the plan was made
    against: the same state planned twice names one marker, a new damage or a new summary another.
    """

    refused: tuple[Refused, ...] = ()
    missing: tuple[str, ...] = ()
    made: int | None = None

    def __bool__(self) -> bool:
        return bool(self.refused or self.missing)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SetAside:
        doc = json.loads(text)
        return cls(tuple(Refused(**r) for r in doc["refused"]), tuple(doc["missing"]), doc["made"])

    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:12]

    def launches(self) -> set[tuple[str, int]]:
        return {(r.name, r.launch) for r in self.refused}

    def lines(self) -> list[str]:
        """What the run will do, for the person who plans it."""
        lines = [f"{r.path}: {r.reason}: set aside in {paths.SET_ASIDE_RESULTS}/ and measured again"
                 for r in self.refused]
        if self.missing:
            more = len(self.missing) - 4
            shown = ", ".join(self.missing[:4]) + (f" and {more} more" if more > 0 else "")
            lines.append(f"{paths.SUMMARY_CSV} was made without results that are not there now ({shown}): "
                         f"measured again, then the summary is made anew")
        return lines


def plan_set_aside(config: dict, root: Path = Path(".")) -> SetAside:
    """The results the next run must set aside or measure again; reads, never writes.

    A result damaged or replaced by hand since the summary was made (only results newer than
    the summary are read, so a large finished study plans as fast as before), and a launch
    missing while a summary stands (Snakemake does not remake a missing input of a file that is
    up to date, so without the plan the summary would keep the gap).
    """
    root = Path(root)
    made = max((p.stat().st_mtime_ns for p in (root / paths.SUMMARY_CSV, root / paths.PARTIAL_CSV) if p.exists()),
               default=None)
    stands = any(p.exists() for p in (root / paths.SUMMARY_CSV, root / paths.SUMMARY_PNG))
    refused, missing = [], []
    for spec in expand_grid(config):
        if exclusion_reason(config, spec) is not None:
            continue
        found = paths.launch_results(root / paths.LAUNCHES, spec.name)
        if any(k not in found for k in range(1, launches_expected(config, spec.name, root) + 1)):
            missing.append(spec.name)
        if made is not None and all(path.stat().st_mtime_ns <= made for path in found.values()):
            continue  # aggregated (and so validated) since it was last written
        refused += [Refused(spec.name, launch, str(path.relative_to(root)), reason)
                    for launch, path, reason in refused_launches(spec, root / paths.LAUNCHES)]
    missing = missing if stands else []  # no summary yet: the missing are planned like any target
    return SetAside(tuple(refused), tuple(missing), made) if refused or missing else SetAside()


def recorded_set_asides(root: Path = Path(".")) -> dict[str, SetAside]:
    """{marker path: plan} of every set-aside a run of this study has done (rule set_aside).

    A job whose launch was set aside keeps its marker as an input for good: Snakemake reruns a
    job whose recorded inputs differ from the planned ones, so a marker dropped from the list
    would measure the configuration a second time.
    """
    found = {}
    for marker in sorted((Path(root) / paths.SET_ASIDE).glob("*.json")):
        try:
            found[str(marker.relative_to(root))] = SetAside.from_json(marker.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged marker: its launches plan as if never set aside
    return found


def markers_by_launch(markers: dict[str, SetAside]) -> dict[tuple[str, int], list[str]]:
    """{(configuration, launch): the markers that set it aside}, for each launch's job inputs."""
    found: dict[tuple[str, int], list[str]] = {}
    for marker, plan in markers.items():
        for launch in plan.launches():
            found.setdefault(launch, []).append(marker)
    return found


def set_aside(config: dict, plan: SetAside, marker: Path, root: Path = Path(".")) -> list[str]:
    """Do what the plan says (the run's set-aside job): move each refused result into
    results/set-aside/results/ with a failure record, then write the plan as the marker."""
    root = Path(root)
    specs = {spec.name: spec for spec in expand_grid(config)}
    lines = []
    for r in plan.refused:
        source = root / r.path
        if source.exists():
            spec = replace(specs[r.name], launch=r.launch)
            lines.append(set_aside_file(spec, source, r.reason, root / paths.SET_ASIDE_RESULTS, root / paths.FAILURES))
        else:
            lines.append(f"{r.path}: already gone ({r.reason})")
    lines += [f"{name}: a launch is missing; measured again" for name in plan.missing]
    write_bytes_atomic(Path(marker), plan.to_json().encode())
    return lines
