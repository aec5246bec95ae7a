"""The policy around one attempt at a launch, apart from the measurement itself: whether a
retry runs at all, how long it waits, which folder a hand run may write into, the history copy of
what it wrote, and the failure record of one that failed.

Snakemake retries a failed job (``retries``) with the attempt number; what a retry should do is
decided here from the failure records, so that the CLI only wires it together.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from specsweep.errors import ConfigError, GpuThrottled, HostNotQuiet, SpecsweepError
from specsweep.host import host_facts, quiet_host
from specsweep.measure.before_start import secrets
from specsweep.records import paths, store
from specsweep.records.failure import Failure
from specsweep.servers import signatures, templates
from specsweep.spec import LaunchSpec


def deterministic_failure(failures_dir: Path, spec: LaunchSpec) -> Failure | None:
    """The latest failure record, if it was deterministic and for this very spec (launch
    included): a retry would only fail the same way, so it is not run."""
    latest = store.latest_failure(failures_dir, spec.name)
    if latest and not latest.transient and latest.spec == json.loads(spec.to_json()):
        return latest
    return None


def settle_before_retry(failures_dir: Path, spec: LaunchSpec, settings: quiet_host.Settings, say) -> None:
    """A retry after a host-not-quiet (or gpu-throttled) failure gives the host time to quiet down
    (or the GPU to cool) first."""
    latest = store.latest_failure(failures_dir, spec.name)
    if latest is not None and latest.failure_class in (HostNotQuiet.failure_class, GpuThrottled.failure_class):
        say(spec, f"the last attempt found the host busy: waiting {settings.retry_pause_s:g} s before this one",
            terminal=True)
        time.sleep(settings.retry_pause_s)


def check_same_study(spec: LaunchSpec, launches_dir: Path) -> None:
    """A hand run may not drop a result of one study into another study's results folder.

    Aggregation would refuse it later (and measure that configuration again); refusing here
    keeps the folder's own result and says what to run instead.
    """
    for path in paths.result_files(launches_dir):
        try:
            other = store.read_result(path).spec.get("study")
        except store.InvalidResult:
            continue
        if other != spec.study:
            folder = paths.launches_of(path)
            raise ConfigError(
                f"{folder} holds results of study {other!r} ({path.relative_to(folder)}), and this run is of "
                f"study {spec.study!r}: pass that study's file with --config, or write elsewhere with --out "
                f"(and --failures-dir, --server-log)")


def keep_in_history(spec: LaunchSpec, out: Path, say) -> None:
    """The history copy (results/history/) from the moment a result exists; a failure here never
    costs the result."""
    folder = paths.launches_of(out)
    try:
        store.copy_to_history(folder, paths.history_of(folder), only=out)
    except (OSError, SpecsweepError) as exc:
        say(spec, f"could not keep a copy in {paths.history_of(folder)}: {exc}")


def record_failure(failures_dir: Path, spec: LaunchSpec, error: SpecsweepError, *, started_at: str,
                   server_log: Path, log_start: int) -> tuple[Path | str, str]:
    """This attempt's failure record, written with the spec's secrets hidden in all it quotes (a
    server may echo its key into the log lines), and the reason, so hidden, in one line for the
    terminal. Best effort: the exit code still tells when the record cannot be written."""
    record = store.failure_record(
        name=spec.name, spec=json.loads(spec.to_json()), error=error, started_at=started_at,
        attempt=store.next_attempt(failures_dir, spec.name), server_log=str(server_log),
        log_tail=signatures.log_tail(server_log, start=log_start),
        compute_capability=host_facts.local_compute_capability(),  # where it failed, for exclusions
    )
    hidden = secrets(spec)
    shown = Failure.from_json(json.loads(templates.redact_text(json.dumps(record.to_json()), hidden)))
    try:
        path = store.write_failure(failures_dir, shown)
    except SpecsweepError as exc:
        path = f"(not written: {exc.reason})"
    return path, " ".join(templates.redact_text(error.reason, hidden).split())
