"""After a run with failures: the partial summary of what did succeed, and the table of what did
not; after a complete one, the partial reports go.

Called from the Snakefile's onerror and onsuccess, because Snakemake skips the aggregate rules
once a benchmark job fails. It writes beside, never over, the rules' outputs: a
results/summary.png made here would look up to date and stop the next run from retrying the
failed configurations.
"""

from __future__ import annotations

from pathlib import Path

from specsweep.analysis import aggregate
from specsweep.records import paths


def report_failed_run(config: dict, title: str, root: Path = Path(".")) -> str:
    """Write results/partial/summary.{csv,png} and results/failed.csv; return what the terminal shows."""
    from specsweep.analysis.plot import Facets, plot_summary

    csv, png, failed = (root / p for p in (paths.PARTIAL_CSV, paths.PARTIAL_PNG, paths.FAILED_CSV))
    try:
        frame = aggregate.summarize(config, root / paths.RUNS, root / paths.FAILURES)
        aggregate.write_summary(frame, csv, failed)
        plot_summary(frame, png, title=f"{title} (partial)", facets=Facets.of(frame, **config["plot"]))
    except Exception as exc:  # never hide the original failure behind a reporting error
        return f"specsweep: could not build the partial summary: {exc}"
    table = aggregate.failure_report(frame, root / paths.FAILURES)
    return ("\n" + (table or "No configuration failed; the step named above did (its log is under logs/): fix its "
                    "cause and run the same command again.")
            + f"\nPartial summary with the failures marked: {paths.PARTIAL_PNG}, {paths.PARTIAL_CSV}; failed "
              f"configurations: {paths.FAILED_CSV}; records: results/failures/<name>/.\n"
              "The same command runs only the configurations without a result.")


def clean(config: dict, root: Path = Path(".")) -> None:
    """Once every configuration has a valid result or is excluded, drop the partial reports."""
    frame = aggregate.summarize(config, root / paths.RUNS, root / paths.FAILURES)
    if not frame["status"].isin([aggregate.OK, aggregate.EXCLUDED]).all():
        return
    for path in (paths.PARTIAL_CSV, paths.PARTIAL_PNG, paths.FAILED_CSV):
        (root / path).unlink(missing_ok=True)
    folder = root / paths.PARTIAL_PNG.parent
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
