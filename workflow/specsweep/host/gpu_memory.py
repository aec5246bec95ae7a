"""Whether a GPU's memory is free, judged against that GPU's own idle level (issue 40.3).

NVML's "used" is not zero on an idle GPU: under the v1 structure it counts the driver's and
firmware's reserved memory (a few hundred MiB to about 1 GiB on an idle H200), and even v2's,
with reserved apart, holds the driver's bookkeeping. A fixed threshold that idle may exceed sends
a job into the queue for a GPU nobody uses. So each GPU's idle level is its own lowest reading
taken while NVML listed no compute process on it, kept in the lock folder that every job of the
host shares (the lowest stays, so a job that starts while another user's process is hidden from
NVML, as in a container, does not raise it for good), and capped at IDLE_SHARE of its memory so
that a first reading of a busy GPU whose processes are hidden is not taken for idle. A GPU is
free while its memory in use is at most BUSY_MARGIN_MIB above that level: a CUDA context alone
holds more than that, so any process that computes on it shows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from specsweep.host import host_facts
from specsweep.records import store

MIB = 1 << 20
BUSY_MARGIN_MIB = 256  # above its idle level a GPU holds someone's memory (a CUDA context: ~500 MiB)
IDLE_SHARE = 0.02  # no idle GPU holds more than this share of its memory (2.8 GB of an H200's 141 GB)
IDLE_FLOOR_MIB = 1024  # ... nor is an idle level of this much doubted on a small GPU


def _record(folder: Path, gpu: str) -> Path:
    name = host_facts.uuid(gpu) or f"gpu{gpu}"  # the UUID names it whatever index a job was handed
    return folder / f"idle-memory-{name}.json"


def idle_level(gpu: str, reading: host_facts.MemoryReading, folder: Path) -> int:
    """The bytes this GPU holds when idle, by its own readings (see the module docstring)."""
    path = _record(folder, gpu)
    try:
        recorded = int(json.loads(path.read_text())["used"])
    except (OSError, ValueError, KeyError, TypeError):
        recorded = None
    cap = max(IDLE_FLOOR_MIB * MIB, int(reading.total * IDLE_SHARE))
    idle_now = reading.used if not host_facts.gpu_processes(gpu) else None
    known = [b for b in (recorded, idle_now) if b is not None]
    level = min(min(known, default=0), cap)
    if known and level != recorded:
        _write(path, {"used": level, "structure": reading.structure, "reserved": reading.reserved})
    return level


def _write(path: Path, doc: dict) -> None:
    """Best effort: a folder this job cannot write only means the level is not kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        store.write_json_atomic(path, doc)
        os.chmod(path, 0o666)  # every user's jobs share the level, as they share the locks
    except OSError:
        pass


def is_free(gpu: str, folder: Path) -> bool:
    """Whether this GPU counts as free: no more memory in use than its idle level and a margin.
    A GPU NVML cannot read (a simulated id, no NVML) counts as free: there is nothing to judge."""
    reading = host_facts.memory_reading(gpu)
    if reading is None:
        return True
    return reading.used <= idle_level(gpu, reading, folder) + BUSY_MARGIN_MIB * MIB
