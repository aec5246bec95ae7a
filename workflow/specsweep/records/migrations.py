"""Every older name specsweep still reads, and the one act that carries an older study folder
over: the only module that knows how an older specsweep wrote things.

- Result documents of an older ``schema_version`` are read under today's fields
  (``result_body``; the schema history is records/result.py's docstring).
- Failure records name a class that has been renamed (``failure_class``).
- A study file spells a key the old way (``RENAMED_KEYS``), the command line a subcommand or a flag
  (``RENAMED_COMMANDS``, ``RENAMED_FLAGS``: refused with the new name; ``FLAG_SPELLINGS``: still read).
- An archive made before 2026-12-05 lists its checksums as ``MANIFEST.sha256`` (``CHECKSUMS_BEFORE``).
- A study folder written before 2026-12-06 keeps its launches in ``results/runs/``
  (``runs/<name>/launch<k>.json``, or ``runs/<name>.json`` before launches were targets), and one
  written before 2026-12-07 keeps the results it set aside in ``results/invalid/``. Planning
  refuses such a folder (``older_layouts``, ``refusal``): ``specsweep migrate`` (``migrate``)
  moves every file into today's layout and measures nothing again; the run after it plans only
  what is missing or refused, as for any folder.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from specsweep.errors import ConfigError, HostNotQuiet
from specsweep.records import paths
from specsweep.spec import load_label

RENAMED_KEYS = {"guard": "quiet_host"}  # study keys: old name -> new name, read as the new one
RENAMED_CLASSES = {"noisy-host": HostNotQuiet.failure_class}  # failure classes renamed since version 1
# Subcommands and flags renamed: refused, naming the new one and why (before 2026-12-06, 2026-12-07).
RENAMED_COMMANDS = {
    "run": ("launch", "one launch of one configuration; a run is a whole invocation of the workflow: the same "
                      "arguments"),
    "adopt": ("migrate", "an older study folder is carried over whole, once, before a run: `specsweep migrate` in "
                         "the study folder"),
}
RENAMED_FLAGS = {"--quarantine": ("--set-aside", "one name for moving refused results aside: the same value")}
FLAG_SPELLINGS = {"--quiet-host": ("--guard",), "--binary-manifest": ("--server-manifest",)}  # still read
CHECKSUMS_BEFORE = "MANIFEST.sha256"

OLDER_LAUNCHES = paths.RESULTS / "runs"  # before 2026-12-06
OLDER_SET_ASIDE = paths.RESULTS / "invalid"  # before 2026-12-07
_LAUNCH_FILE = re.compile(r"launch([1-9]\d*)\.json")


# --- documents ---------------------------------------------------------------------------------
def result_body(body: dict, version: int) -> dict:
    """An older version's result body under the current version's fields (the schema history in
    records/result.py). A body of the wrong shape raises KeyError, TypeError or AttributeError, as
    validation does."""
    if version == 1:
        body = {**body, "hardware": None, "provenance": {"migrated_from": 1}}
    if version in (1, 2):
        body = {**body, "prompts": {**body["prompts"], "reused": None}}  # unknown: sent again and again
    if version in (1, 2, 3):
        body = {**body, "sections": [{**sec, "load": load_label(sec.get("concurrency", 1), sec.get("request_rate"))}
                                     for sec in body["sections"]]}
    if version in (1, 2, 3, 4):
        body = _one_quiet_host_name(body)
    if version in (1, 2, 3, 4, 5):
        body = {**body, "server": _renamed(body["server"], "slot_context", "max_context")}
    return body


def _renamed(mapping: dict, old: str, new: str) -> dict:
    """The mapping with key ``old`` called ``new``, in its place, value unchanged."""
    return {(new if k == old else k): v for k, v in mapping.items()}


def _one_quiet_host_name(body: dict) -> dict:
    """Version 5's names for a version 1-4 body: ``isolation`` split into ``lease`` and the
    ``quiet_host`` settings, and every section's (search steps' too) ``host_load`` as ``quiet_host``."""
    def renamed(sections: list[dict]) -> list[dict]:
        return [_renamed(sec, "host_load", "quiet_host") for sec in sections]

    out = {**body, "sections": renamed(body["sections"])}
    held = out.pop("isolation", None)
    if held is not None:
        out["lease"] = {k: v for k, v in held.items() if k != "guard"}
        out["quiet_host"] = held.get("guard")
    if out.get("search") is not None:
        out["search"] = {**out["search"], "sections": renamed(out["search"]["sections"])}
    return out


def study_keys(config: dict) -> list[str]:
    """Rename the old spellings of a study's keys (RENAMED_KEYS) in place, so that a study written
    for an older specsweep plans the same jobs; a note per key renamed. A study that spells one key
    both ways is refused: which of the two it means cannot be told."""
    notes = []
    for old, new in RENAMED_KEYS.items():
        if old not in config:
            continue
        if new in config:
            raise ConfigError(f"the study sets both {old}: and {new}: (its new name); keep {new}: alone")
        config[new] = config.pop(old)
        notes.append(f"the study's {old}: is now called {new}: (read as such; rename it to silence this)")
    return notes


def failure_class(written: str | None) -> str:
    """A failure record's class under its name now."""
    return RENAMED_CLASSES.get(written, written or "unknown")


# --- the study folder --------------------------------------------------------------------------
def older_files(root: Path = Path(".")) -> dict[Path, Path]:
    """{file in an older layout: where it belongs now} in the study folder ``root``."""
    return _older_in(Path(root) / paths.RESULTS)


def _older_in(results: Path) -> dict[Path, Path]:
    """The same for one results folder: every launch result of runs/ at
    launches/<name>/launch<k>.json, every file of invalid/ in set-aside/results/."""
    found = {}
    runs, launches = results / OLDER_LAUNCHES.name, results / paths.LAUNCHES.name
    for path in sorted(runs.glob("*/launch*.json")):  # a folder that is not there globs nothing
        if match := _LAUNCH_FILE.fullmatch(path.name):
            found[path] = launches / path.parent.name / f"launch{match[1]}.json"
    for path in sorted(runs.glob("*.json")):  # before launches were targets
        found[path] = launches / path.stem / "launch1.json"
    older = results / OLDER_SET_ASIDE.name
    for path in sorted(older.glob("*.json")):
        found[path] = results / paths.SET_ASIDE_RESULTS.relative_to(paths.RESULTS) / path.name
    return found


def older_layouts(root: Path = Path(".")) -> list[str]:
    """What of an older layout the study folder ``root`` holds, one phrase per older folder; [] for none."""
    files = older_files(root)
    found = []
    for folder, now in ((OLDER_LAUNCHES, paths.LAUNCHES), (OLDER_SET_ASIDE, paths.SET_ASIDE_RESULTS)):
        count = sum(1 for path in files if path.is_relative_to(Path(root) / folder))
        if count:  # a folder of that name holding nothing of ours is no older layout
            found.append(f"{folder}/ ({count} file(s), today's {now}/)")
    return found


def refusal(found: list[str]) -> str:
    """What planning says of a folder an older specsweep wrote."""
    return (f"this study folder was written by an older specsweep: {'; '.join(found)}. Run "
            f"`python -m specsweep migrate` here once: it moves them into today's layout and measures "
            f"nothing again; then this command again")


def migrate(root: Path = Path(".")) -> list[str]:
    """Move every file of an older layout in the study folder ``root`` where it belongs now."""
    return _migrate_in(Path(root) / paths.RESULTS)


def _migrate_in(results: Path) -> list[str]:
    """One line per file moved, and the older folders removed once empty. A launch already in
    launches/ keeps its place: the older file of that launch (which today's specsweep would not
    have read) is set aside beside the others, never deleted. A moved launch result is touched,
    so that Snakemake finds it newer than the inputs of the job that would make it (it records
    nothing of a file it did not make, so nothing else can ask for it again)."""
    lines = []
    for older, now in _older_in(results).items():
        if now.exists():
            now = results / paths.SET_ASIDE_RESULTS.relative_to(paths.RESULTS) / (
                f"{now.parent.name}-{now.stem}-superseded-{older.name}")
            lines.append(f"{older}: superseded by the launch already in {paths.LAUNCHES.name}/; set aside as {now}")
        else:
            lines.append(f"{older} -> {now}")
        now.parent.mkdir(parents=True, exist_ok=True)
        os.replace(older, now)
        os.utime(now)
    for folder in (results / OLDER_LAUNCHES.name, results / OLDER_SET_ASIDE.name):
        for empty in folder.glob("*/"):  # runs/<name>/: one level, so any order
            _remove_if_empty(empty)
        _remove_if_empty(folder)
    return lines


def readable(results: Path, scratch: Path) -> Path:
    """A results folder to read in today's layout (``specsweep compare``, a baseline): the folder
    itself, or where an older specsweep wrote it, a copy in ``scratch`` carried over; the folder
    given is never changed."""
    results = Path(results)
    if not _older_in(results):
        return results
    copy = Path(scratch) / "migrated" / results.name
    shutil.copytree(results, copy)
    _migrate_in(copy)
    return copy


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # absent, or holds something that is not ours to move: left as it is
        pass
