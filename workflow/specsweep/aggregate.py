"""Summary table from valid results only; every other configuration keeps its status and reason."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .config import RunSpec, axis_matches, expand_grid
from .errors import IncomparableResults, ResultRefused
from .results import (InvalidResult, failure_record, latest_failure, next_attempt, read_result, utc_now,
                      write_failure, write_text_atomic)

OK, FAILED, EXCLUDED, MISSING, INVALID = "ok", "failed", "excluded", "not run", "invalid result"
METRIC_COLUMNS = [
    "requests", "repeats", "output_tokens", "wall_s", "output_tok_s", "output_tok_s_min", "output_tok_s_max",
    "request_s",
    "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p50_s", "itl_p99_s",
    "e2e_p50_s", "e2e_p99_s", "schedule_lag_p99_s",
    "decode_tok_s_mean", "decode_tok_s_p50", "decode_tok_s_min", "decode_tok_s_max",
    "draft_acceptance_rate", "acceptance_length",
]
KEY_COLUMNS = ["name", "tp", "budget", "context", "section", "status", "reason"]


def exclusion_reason(config: dict, spec: RunSpec) -> str | None:
    """The reason of the first exclusion rule that matches this configuration, if any.

    A rule that names compute capabilities matches only on that hardware: the study's
    hardware.compute_capability, else what NVML reports for this host's GPUs.
    """
    here = planning_capability(config)
    for rule in config.get("exclude", []):
        if not all(axis_matches(rule.get(axis), getattr(spec, axis)) for axis in ("budget", "tp", "context")):
            continue
        caps = rule.get("compute_capability")
        if caps is None:
            return rule["reason"]
        if here is not None and here in (caps if isinstance(caps, list) else [caps]):
            return f"{rule['reason']} (on compute capability {here})"
    return None


def planning_capability(config: dict) -> str | None:
    from .hardware import local_compute_capability

    return (config.get("hardware") or {}).get("compute_capability") or local_compute_capability()


def summarize(config: dict, runs_dir: Path, failures_dir: Path) -> pd.DataFrame:
    """One row per configuration x section, in grid order, with speedup over budget 0."""
    rows = []
    for spec in expand_grid(config):
        rows.extend(_rows_for(config, spec, Path(runs_dir), Path(failures_dir)))
    frame = pd.DataFrame(rows, columns=KEY_COLUMNS + METRIC_COLUMNS)
    return add_speedup(frame)


def _rows_for(config: dict, spec: RunSpec, runs_dir: Path, failures_dir: Path) -> list[dict]:
    base = {"name": spec.name, "tp": spec.tp, "budget": spec.budget, "context": spec.context}
    reason = exclusion_reason(config, spec)
    if reason is not None:
        return _status_rows(base, spec, EXCLUDED, reason)
    path = runs_dir / f"{spec.name}.json"
    if path.exists():
        try:
            result = read_result(path)
        except InvalidResult as exc:
            return _status_rows(base, spec, INVALID, str(exc))
        return [{**base, "status": OK, "reason": "", **row} for row in result.summary_rows()]
    failure = latest_failure(failures_dir, spec.name)
    if failure is not None:
        return _status_rows(base, spec, FAILED, f"[{failure['class']}] {failure['reason']}")
    return _status_rows(base, spec, MISSING, "no result and no failure record")


def _status_rows(base: dict, spec: RunSpec, status: str, reason: str) -> list[dict]:
    return [{**base, "section": s.name, "status": status, "reason": reason} for s in spec.sections]


def add_speedup(frame: pd.DataFrame) -> pd.DataFrame:
    """speedup = output tok/s over that of budget 0 at the same (tp, context, section).

    Left empty where either side has no valid result: a missing baseline is not a speedup of 1.
    """
    ok = frame[frame["status"] == OK]
    base = ok[ok["budget"] == 0].set_index(["tp", "context", "section"])["output_tok_s"]
    keys = list(zip(frame["tp"], frame["context"], frame["section"]))
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
    return bad.drop_duplicates("name")[["name", "tp", "budget", "context", "status", "reason"]].reset_index(drop=True)


def write_summary(frame: pd.DataFrame, csv_path: Path, failed_path: Path | None = None) -> None:
    """The tidy summary and, if asked, the table of configurations without a valid result."""
    write_text_atomic(Path(csv_path), frame.to_csv(index=False))
    if failed_path is not None:
        write_text_atomic(Path(failed_path), not_ok(frame).to_csv(index=False))


def quarantine_invalid(config: dict, frame: pd.DataFrame, runs_dir: Path, invalid_dir: Path,
                       failures_dir: Path) -> None:
    """Move every result aggregation refused out of the way, with a failure record, and fail.

    A refused file left in place would look finished to Snakemake and never be rerun; moved
    aside (never deleted) it is kept for inspection, and the next run measures it anew.
    """
    bad = frame[frame["status"] == INVALID].drop_duplicates("name")
    if bad.empty:
        return
    stamp = utc_now().replace(":", "").replace("+0000", "Z")
    specs = {s.name: s for s in expand_grid(config)}
    lines = []
    for row in bad.itertuples():
        source, target = Path(runs_dir) / f"{row.name}.json", Path(invalid_dir) / f"{row.name}-{stamp}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        source.replace(target)
        error = ResultRefused(f"result refused by aggregation ({row.reason}); moved to {target}")
        write_failure(failures_dir, failure_record(
            name=row.name, spec=json.loads(specs[row.name].to_json()), error=error, started_at=utc_now(),
            attempt=next_attempt(failures_dir, row.name), server_log=None, log_tail=""))
        lines.append(f"{source}: {row.reason} (moved to {target})")
    raise ResultRefused(
        f"{len(lines)} result file(s) cannot be aggregated:\n  " + "\n  ".join(lines)
        + "\nRun the same command again: those configurations will be measured anew."
    )


# Signatures that come back on every attempt: a kernel that does not run on this GPU, memory
# that does not suffice, a flag the server refuses. A configuration failing with one is a
# candidate for an exclusion, not for another retry.
REPRODUCING_SIGNATURES = ("cuda-illegal-instruction", "gpu-oom", "context-exceeded", "bad-arguments")


def failure_report(frame: pd.DataFrame, failures_dir: Path | str | None = None) -> str:
    """The terminal table a person reads after a run with failures, and the exclusions to paste."""
    bad = not_ok(frame)
    if bad.empty:
        return ""
    lines = [f"{len(bad)} of {frame['name'].nunique()} configurations have no valid result:"]
    for row in bad.itertuples():
        lines.append(f"  {row.name:<20} {row.status:<14} {row.reason}")
    entries = [e for row in bad.itertuples() if row.status == FAILED and failures_dir is not None
               and (e := exclude_entry(row, latest_failure(Path(failures_dir), row.name)))]
    if entries:
        lines.append("These fail with a signature that reproduces; to leave them out where they fail, paste "
                     "into the study's exclude: list:")
        lines += [f"  {e}" for e in entries]
    return "\n".join(lines)


def exclude_entry(row, record: dict | None) -> str | None:
    """A ready-to-paste exclude rule (one YAML line) for a deterministic failure with a known signature."""
    if not record or (record.get("signature") not in REPRODUCING_SIGNATURES and record.get("transient", True)):
        return None
    cause = (record.get("evidence") or [record.get("reason", "")])[0]
    reason = f"{record.get('signature') or record.get('class')}: {cause}"[:200]
    rule = {"tp": int(row.tp), "budget": int(row.budget), "context": int(row.context)}
    if record.get("compute_capability"):
        rule["compute_capability"] = record["compute_capability"]
    rule["reason"] = reason
    return "- " + json.dumps(rule)  # JSON is YAML: one line, quoting done right
