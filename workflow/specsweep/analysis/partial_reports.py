"""After a run with failures: the partial summary of what did succeed, and the table of what did
not; after a complete one, the partial reports go.

Called from the Snakefile's onerror and onsuccess, because Snakemake skips the aggregate rules
once a benchmark job fails. It writes beside, never over, the rules' outputs: a
results/summary.png made here would look up to date and stop the next run from retrying the
failed configurations.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from specsweep import axes
from specsweep.analysis import aggregate
from specsweep.errors import InferredToFail, advice_for
from specsweep.records import paths
from specsweep.records.failure import Failure
from specsweep.records.status import EXCLUDED, FAILED, INFERRED, INVALID, NOT_ENGAGED, SETTLED
from specsweep.records.store import latest_failure


def report_failed_run(config: dict, root: Path = Path(".")) -> str:
    """Write results/partial/summary.{csv,png} and results/failed.csv; return what the terminal shows."""
    from specsweep.analysis.plot import Facets, plot_summary, study_title

    csv, png, failed = (root / p for p in (paths.PARTIAL_CSV, paths.PARTIAL_PNG, paths.FAILED_CSV))
    try:
        frame = aggregate.summarize(config, root / paths.LAUNCHES, root / paths.FAILURES)
        aggregate.write_summary(frame, csv, failed)
        plot_summary(frame, png, title=f"{study_title(config)} (partial)", facets=Facets.of(frame, **config["plot"]))
    except Exception as exc:  # never hide the original failure behind a reporting error
        return f"specsweep: could not build the partial summary: {exc}"
    table = failure_report(frame, root / paths.FAILURES)
    return ("\n" + (table or "No configuration failed; the step named above did (its log is under logs/): fix its "
                    "cause and run the same command again.")
            + f"\nPartial summary with the failures marked: {paths.PARTIAL_PNG}, {paths.PARTIAL_CSV}; failed "
              f"configurations: {paths.FAILED_CSV}; records: results/failures/<name>/.\n"
              "The same command runs only the configurations without a result.")


def clean(config: dict, root: Path = Path(".")) -> None:
    """Once every configuration has a valid result or is excluded, drop the partial reports."""
    frame = aggregate.summarize(config, root / paths.LAUNCHES, root / paths.FAILURES)
    if not frame["status"].isin(SETTLED).all():
        return
    for path in paths.PARTIAL_REPORTS:
        (root / path).unlink(missing_ok=True)
    folder = root / paths.PARTIAL_PNG.parent
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


# Signatures that come back on every attempt: a kernel that does not run on this GPU, memory
# that does not suffice, a flag the server refuses. A configuration failing with one is a
# candidate for an exclusion, not for another retry.
REPRODUCING_SIGNATURES = ("cuda-illegal-instruction", "gpu-oom", "context-exceeded", "bad-arguments")


def failure_report(frame: pd.DataFrame, failures_dir: Path | str | None = None) -> str:
    """The terminal table a person reads after a run with failures, what to do for each class that
    happened, and the exclusions to paste for failures that reproduce on the server's side."""
    bad = aggregate.not_ok(frame)
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
        name = _class_of(row.status, record)
        by_class.setdefault(name, []).append(row.name)
    lines = []
    for name, names in by_class.items():
        what = {"not run": "run the main command: they have neither a result nor a failure record",
                NOT_ENGAGED: "check that the server applies the budget (server.speculative_args: the flag before "
                             "{budget}) and that the prompts give the method something to draft (an n-gram method "
                             "drafts nothing without repeated n-grams); the launches stand, measuring them again "
                             "would change nothing"}.get(name) or advice_for(name)
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"Next, for {name} ({shown}): {what}.")
    return lines


def _class_of(status: str, record: Failure | None) -> str:
    """What a row without a result is listed under: inferred ones by their class (their record may
    be their own refusal's, or none where the plan left them out), else the record's class."""
    if status == INFERRED:
        return InferredToFail.failure_class
    if record:
        return record.failure_class
    return {INVALID: "invalid-result", NOT_ENGAGED: NOT_ENGAGED}.get(status, "not run")


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
