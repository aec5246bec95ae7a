"""Host-wide locks that every specsweep job on a host shares: flock(2) locks on files in one folder
per host (``$SPECSWEEP_LOCK_DIR``, default ``/tmp/specsweep-locks``), so they hold across ``--cores
N`` and across Snakemake invocations in different folders, and the kernel releases them when a job
dies, however it dies. Beside each lock a holder file says who holds it, for those who wait and for
the quiet-host guard (whose processes are another measurement's, not a stranger's).

What is locked, a device or a port, and for how long: ``leases``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

import psutil

from specsweep.errors import ConfigError
from specsweep.host import host_facts

HOST_DEVICE = "host"  # the whole machine, as one device, on a host without GPUs
POLL_S = 0.25  # how often a waiting job looks at the locks and the GPUs' memory again


def lock_dir() -> Path:
    """The host's one lock folder: every job on the host must name the same one."""
    return Path(os.environ.get("SPECSWEEP_LOCK_DIR") or "/tmp/specsweep-locks")


def lock_name(device: str) -> str:
    """The file name of a device's lock: a GPU's NVML UUID (index 0 in one job and GPU-<uuid> in
    another are one GPU), else the id as given (simulated GPUs, no NVML; the host)."""
    return (host_facts.uuid(device) if device != HOST_DEVICE else None) or device


def try_lock(path: Path) -> int | None:
    """The descriptor holding an exclusive flock on ``path``, without waiting; None if another job holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def make_shared_dir(folder: Path) -> None:
    """Sticky and world-writable, like /tmp: jobs of every user on the host share the locks."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if folder.stat().st_uid == os.getuid():
            folder.chmod(0o1777)
    except OSError as exc:
        raise ConfigError(f"cannot use the device lock folder {folder}: {exc.strerror}; "
                          f"set SPECSWEEP_LOCK_DIR to a folder every job on this host can write") from exc


def write_holder(folder: Path, devices: tuple[str, ...], holder: str) -> None:
    """Who holds a device, for the messages of those who wait (best effort)."""
    doc = {"holder": holder, "pid": os.getpid(), "cwd": os.getcwd(), "since": time.strftime("%H:%M:%S")}
    for device in devices:
        try:
            (folder / f"{device}.holder").write_text(json.dumps(doc))
        except OSError:
            pass


def remove_holder(folder: Path, devices: tuple[str, ...]) -> None:
    """Before the locks are let go (best effort: a stale holder file names nobody who holds the lock)."""
    for device in devices:
        try:
            (folder / f"{device}.holder").unlink()
        except OSError:
            pass


def holders(folder: Path, devices: list[str], names: dict[str, str]) -> str:
    """Who holds each of these devices (by its lock's name), for the one who waits."""
    parts = []
    for device in devices:
        try:
            doc = json.loads((folder / f"{names[device]}.holder").read_text())
            parts.append(f"{device} held by {doc['holder']} (pid {doc['pid']}, {doc['cwd']}) since {doc['since']}")
        except (OSError, ValueError, KeyError):
            parts.append(f"{device} busy")
    return "; ".join(parts)


def other_measurements() -> set[int]:
    """Processes of the other measurements that hold devices on this host (a job and its server).

    On a GPU host, jobs on other GPUs run beside this one by design; their CPU use is theirs,
    not a stranger's, and the quiet-host guard leaves it out.
    """
    pids: set[int] = set()
    for path in lock_dir().glob("*.holder"):
        try:
            pid = json.loads(path.read_text())["pid"]
            if pid == os.getpid():
                continue
            proc = psutil.Process(pid)
            pids |= {pid, *(child.pid for child in proc.children(recursive=True))}
        except (OSError, ValueError, KeyError, TypeError, psutil.Error):
            continue  # released meanwhile, or its job died: the kernel dropped its lock
    return pids
