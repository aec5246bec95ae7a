"""Files of a study: atomic writes, reading result documents (their model is result.Result),
failure records (their model is failure.Failure), and the history of every result ever measured."""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import zlib
from datetime import UTC, datetime
from pathlib import Path

from specsweep.errors import ResultWriteError, SpecsweepError
from specsweep.records import paths
from specsweep.records.failure import Failure
from specsweep.records.result import SCHEMA as RESULT_SCHEMA
from specsweep.records.result import VERSION as RESULT_VERSION
from specsweep.records.result import InvalidResult, Result

__all__ = ["RESULT_SCHEMA", "RESULT_VERSION", "InvalidResult", "Result"]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def write_json_atomic(path: Path, doc: dict) -> None:
    """Write a JSON document atomically (see write_text_atomic)."""
    write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write text atomically (see write_bytes_atomic)."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temp file in the same directory, fsync, then rename: never a partial file."""
    path = Path(path)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
        _fsync_dir(path.parent)
    except OSError as exc:
        raise ResultWriteError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_result(path: Path) -> Result:
    """Read, validate (and migrate) a result file; raise InvalidResult naming the problem."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidResult(f"{path}: unreadable: {exc}") from exc
    return Result.from_json(doc)


def failure_record(*, name: str, spec: dict, error, started_at: str, attempt: int, server_log: str | None,
                   log_tail: str, compute_capability: str | None = None) -> Failure:
    """The record of one failed attempt, failing now."""
    return Failure.of(error, name=name, spec=spec, started_at=started_at, failed_at=utc_now(), attempt=attempt,
                      server_log=server_log, log_tail=log_tail, compute_capability=compute_capability)


def write_failure(failures_dir: Path, record: Failure) -> Path:
    """Add a record under failures_dir/<name>/; earlier attempts are kept."""
    folder = Path(failures_dir) / record.name
    stamp = record.failed_at.replace(":", "").replace("+0000", "Z")
    path = folder / f"{stamp}-attempt{record.attempt}.json"
    write_json_atomic(path, record.to_json())
    return path


def next_attempt(failures_dir: Path, name: str) -> int:
    folder = Path(failures_dir) / name
    return 1 + (len(list(folder.glob("*.json"))) if folder.is_dir() else 0)


def latest_failure(failures_dir: Path, name: str) -> Failure | None:
    """The newest failure record of a configuration, or None."""
    found = latest_failure_at(failures_dir, name)
    return found[1] if found else None


def latest_failure_at(failures_dir: Path, name: str) -> tuple[Path, Failure] | None:
    """The newest readable failure record of a configuration and its path, or None."""
    folder = Path(failures_dir) / name
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.json"), reverse=True):
        try:
            return path, Failure.from_json(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError, AttributeError, TypeError):
            continue
    return None


def copy_to_history(launches_dir: Path, history_dir: Path, *, only: Path | None = None, skip=frozenset()) -> int:
    """Copy every result into history_dir/<name>/<sha256>.json, read-only; return how many were new.

    Snakemake deletes a job's old output before it reruns it (after a params change, say), so a
    rerun that fails would otherwise lose a measurement. A real copy, never a hard link: a result
    truncated or edited in place (by a person or a tool) must not change its history too. A
    content-hash name makes the history copy idempotent. ``skip``: files planning refused.
    """
    import hashlib

    added = 0
    for path in [Path(only)] if only else paths.result_files(launches_dir):
        if path in skip:
            continue
        data = path.read_bytes()
        target = Path(history_dir) / paths.configuration_of(path) / f"{hashlib.sha256(data).hexdigest()[:16]}.json"
        if target.exists():
            continue
        write_bytes_atomic(target, data)
        os.chmod(target, 0o444)
        added += 1
    return added


def read_race_round(path: str | Path) -> list[str]:
    """The configurations a racing round's decision (analysis/race.py) gives another launch."""
    return list(json.loads(Path(path).read_text())["contenders"])


def extract_tar(archive: Path, dest: Path, refusal: type[SpecsweepError]) -> None:
    """Unpack a (gzipped) tar archive into ``dest``; a damaged or truncated one is refused by name,
    as ``refusal``. The data filter refuses absolute paths and links that point out of ``dest``."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise refusal(f"{archive} cannot be unpacked ({type(exc).__name__}: {exc}): it is damaged or "
                      f"truncated; copy it again from where it was made") from exc
