"""The quiet-host guard: what the rest of the machine did while a section was measured.

CPU: the CPU time that processes outside the server's tree and the harness used during the
section, from per-process counters (psutil), so that only this machine's (or container's)
processes count, never a neighbour's on a shared host. GPUs: other processes that NVML lists
on the job's GPUs. Both figures go into the result either way; above the study's threshold the
section fails as noisy-host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from specsweep.errors import NoisyHost
from specsweep.measure import host_facts

Snapshot = dict[int, tuple]  # pid -> (create time, CPU seconds, name[, parent pid])
# CPU time is counted in clock ticks (10 ms): below a few ticks a figure is resolution, not load,
# so a section is judged only once the others' CPU time exceeds this as well as the threshold.
FLOOR_CPU_S = 0.05


@dataclass(frozen=True)
class Guard:
    """The study's guard settings (``guard:`` in the config)."""

    max_foreign_cores: float
    max_repeat_spread: float
    retry_pause_s: float


def snapshot() -> Snapshot:
    """CPU seconds so far of every process this machine lets us see (reaped children included)."""
    out: Snapshot = {}
    for proc in psutil.process_iter(["create_time", "name", "ppid"]):
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue  # gone, or not ours to read
        out[proc.pid] = (proc.info["create_time"], t.user + t.system + t.children_user + t.children_system,
                         proc.info["name"] or "?", proc.info["ppid"])
    return out


def foreign_cpu(before: Snapshot, after: Snapshot, *, own: set[int], wall_s: float) -> dict:
    """CPU used by processes not in ``own`` between two snapshots: seconds, cores, the top users."""
    # A process reaped during the window moves its whole life's CPU into its parent's children
    # times: only the part after ``before`` is the window's, so its earlier part is taken back.
    earlier = _reaped_earlier(before, after)
    used: list[tuple[float, int, str]] = []
    for pid, (created, cpu, name, *_) in after.items():
        if pid in own:
            continue
        prev = before.get(pid)
        delta = cpu - prev[1] if prev and prev[0] == created else cpu  # a new process: all of it
        delta -= earlier.get(pid, 0.0)
        if delta > 0:
            used.append((delta, pid, name))
    total = sum(d for d, _, _ in used)
    used.sort(reverse=True)
    return {
        "cpu_s": round(total, 4),
        "cores": round(total / wall_s, 4) if wall_s > 0 else None,
        "top": [{"pid": pid, "name": name, "cpu_s": round(d, 4)} for d, pid, name in used[:3]],
    }


def _reaped_earlier(before: Snapshot, after: Snapshot) -> dict[int, float]:
    """{parent pid: CPU its children that ended during the window had used before it}."""
    out: dict[int, float] = {}
    for pid, (created, cpu, *rest) in before.items():
        if pid in after and after[pid][0] == created:
            continue  # still running
        parent = rest[1] if len(rest) > 1 else None
        if parent not in after:
            parent = 1  # an orphan is reaped by init (or the container's first process)
        out[parent] = out.get(parent, 0.0) + cpu
    return out


def gpu_foreign(gpus: tuple[str, ...], own: set[int]) -> list[dict]:
    """Processes on the job's GPUs other than its own, by NVML; [] without NVML or GPUs.

    Inside a container NVML may report host pids that mean nothing here: those are listed with
    ``visible: false`` and do not fail a section, since they cannot be told apart from our own.
    """
    lib = host_facts.nvml() if gpus else None
    if lib is None:
        return []
    found = []
    try:
        for gpu in gpus:
            handle = lib.nvmlDeviceGetHandleByIndex(int(gpu))
            for proc in lib.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid not in own:
                    found.append({"gpu": gpu, "pid": proc.pid, "visible": psutil.pid_exists(proc.pid),
                                  "used_memory": getattr(proc, "usedGpuMemory", None)})
    except Exception:  # NVML errors never fail a measurement; they only leave the list short
        return found
    return found


class SectionWatch:
    """Measure the rest of the machine around one section; judge it against the guard."""

    def __init__(self, guard: Guard, own_pids, gpus: tuple[str, ...] = ()):
        self.guard = guard
        self.own_pids = own_pids  # a callable: the server tree changes while it runs
        self.gpus = gpus
        self.before: Snapshot = {}

    def start(self) -> None:
        self.before = snapshot()

    def stop(self, wall_s: float) -> dict:
        own = set(self.own_pids()) | {os.getpid()}
        doc = foreign_cpu(self.before, snapshot(), own=own, wall_s=wall_s)
        doc["max_cores"] = self.guard.max_foreign_cores
        doc["gpu_processes"] = gpu_foreign(self.gpus, own)
        return doc


def check(section: str, load: dict, guard: Guard, repeats_tok_s: list[float], closed_loop: bool) -> None:
    """Raise NoisyHost when the section was not measured alone or its repeats disagree."""
    if load["cores"] is not None and load["cores"] > guard.max_foreign_cores and load["cpu_s"] > FLOOR_CPU_S:
        top = ", ".join(f"{p['name']} (pid {p['pid']}) {p['cpu_s']:.1f} s" for p in load["top"])
        raise NoisyHost(
            f"section {section}: other processes used {load['cores']:.2f} cores on average "
            f"({load['cpu_s']:.1f} CPU-s: {top}), above guard.max_foreign_cores = "
            f"{guard.max_foreign_cores:g}; stop them or wait for a quiet host", section=section)
    visible = [p for p in load["gpu_processes"] if p["visible"]]
    if visible:
        raise NoisyHost(f"section {section}: other processes on the job's GPUs: "
                        + ", ".join(f"pid {p['pid']} on GPU {p['gpu']}" for p in visible), section=section)
    spread = repeat_spread(repeats_tok_s)
    if closed_loop and spread is not None and spread > guard.max_repeat_spread:
        raise NoisyHost(
            f"section {section}: its repeats ran at {min(repeats_tok_s):.1f}-{max(repeats_tok_s):.1f} tok/s, "
            f"a spread of {spread:.0%} of their mean, above guard.max_repeat_spread = "
            f"{guard.max_repeat_spread:.0%}: something else changed the pace", section=section)


def repeat_spread(values: list[float]) -> float | None:
    """(max - min) / mean of the repeats' throughput; None for fewer than two repeats."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else None
