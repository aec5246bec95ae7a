"""The quiet-host guard: did anything else take CPU from the server while a section was measured?

The question is contention, not activity: on a 64-core GPU host, monitoring daemons and another
user's editor run all the time and take nothing from a server that has idle cores beside it.
Per section the guard measures

- what the others used: the CPU time of processes outside the server's tree, the harness,
  specsweep's own Snakemake process and queued jobs, and other measurements holding devices
  (per-process counters, psutil: only this machine's or container's processes), in all and on
  the CPUs the server may run on (its affinity: a process pinned elsewhere cannot take them);
- what the server waited: the time its threads spent runnable on a run queue without a CPU
  (the kernel's per-task schedstat, /proc/<pid>/task/<tid>/schedstat, second field), in
  cores-worth over the section; the host's CPU pressure (PSI, /proc/pressure/cpu "some") as a
  figure of its own; and the PSI "some" share of the server's own cgroup (v2, cpu.pressure),
  with whether it is the server's alone (the cgroup holds no other process) and why;

and counts as contended the smaller of the two: the server waited, and others ran where it could
have. Without schedstat, the server's cgroup pressure where it is trusted (a share of the time
at least one of its tasks waited: a lower bound of its waiting in cores-worth); else the others'
load on the server's CPUs beyond the cores the server and the harness left idle. On a many-core
host unpinned tenants count in full on the server's CPUs (their affinity covers them), so the
verdict rests on the server's waiting. Above quiet_host.max_foreign_cores the section fails as host-not-quiet.
GPUs (read by gpu_watch): other processes that NVML lists on the job's GPUs; and each held GPU's
clocks, heat, power and NVML clock-event reasons, read through the section, failing it as
gpu-throttled when heat or a power brake slowed a GPU in more than quiet_host.max_gpu_slowed_share
of the readings. Every figure goes into the result either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from specsweep.errors import GpuThrottled, HostNotQuiet
from specsweep.host import gpu_watch, host_facts

Snapshot = dict[int, tuple]  # pid -> (create time, CPU seconds, name[, parent pid])
# CPU time is counted in clock ticks (10 ms): below a few ticks a figure is resolution, not load,
# so a section is judged only once the others' CPU time exceeds this as well as the threshold.
FLOOR_CPU_S = 0.05
PROC = "/proc"  # the kernel's process figures (a test points it at a fixture tree of a bigger host)
CGROUP_ROOT = "/sys/fs/cgroup"  # the cgroup v2 hierarchy


@dataclass(frozen=True)
class Settings:
    """The study's quiet-host settings (``quiet_host:`` in the config)."""

    max_foreign_cores: float
    max_repeat_spread: float
    retry_pause_s: float
    max_gpu_slowed_share: float


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


def foreign_used(before: Snapshot, after: Snapshot, *, own: set[int]) -> list[tuple[float, int, str]]:
    """(CPU seconds, pid, name) of every process not in ``own`` that ran between two snapshots, most first."""
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
    return sorted(used, reverse=True)


def foreign_cpu(before: Snapshot, after: Snapshot, *, own: set[int], wall_s: float,
                used: list[tuple[float, int, str]] | None = None) -> dict:
    """CPU used by processes not in ``own`` between two snapshots: seconds, cores, the top users
    (``used``: foreign_used's list, where the caller has it already)."""
    used = foreign_used(before, after, own=own) if used is None else used
    total = sum(d for d, _, _ in used)
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


def on_cpus(used: list[dict], cpus: set[int] | None) -> float:
    """CPU seconds of the listed processes that may run on these CPUs (their affinity meets them).

    A process whose affinity cannot be read, or without a known CPU set, counts: the guard errs
    towards failing a section, never towards passing a contended one.
    """
    total = 0.0
    for proc in used:
        try:
            theirs = set(psutil.Process(proc["pid"]).cpu_affinity())
        except (psutil.Error, AttributeError, OSError):
            theirs = None
        if cpus is None or theirs is None or theirs & cpus:
            total += proc["cpu_s"]
    return total


def schedstat(pids: set[int]) -> dict[tuple[int, int], tuple[float, float]] | None:
    """{(pid, tid): (seconds on a CPU, seconds waiting on a run queue)} of every thread of the
    processes; None where the kernel does not keep the figures (no /proc/<pid>/task/*/schedstat)."""
    out: dict[tuple[int, int], tuple[float, float]] = {}
    readable = False
    for pid in pids:
        try:
            tids = os.listdir(f"{PROC}/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                ran, waited, _ = open(f"{PROC}/{pid}/task/{tid}/schedstat").read().split()
            except (OSError, ValueError):
                continue
            readable = True
            out[(pid, int(tid))] = (int(ran) / 1e9, int(waited) / 1e9)
    return out if readable else None


def waited_s(before: dict | None, after: dict | None) -> tuple[float, float] | None:
    """(seconds run, seconds waited) of the threads between two schedstat readings; a thread new
    at the end counts whole, one gone by then is lost (its time is no longer anywhere to read)."""
    if before is None or after is None:
        return None
    ran = waited = 0.0
    for key, (r, w) in after.items():
        r0, w0 = before.get(key, (0.0, 0.0))
        ran, waited = ran + max(0.0, r - r0), waited + max(0.0, w - w0)
    return ran, waited


def cpu_pressure(path: str | None = None) -> float | None:
    """A PSI "some" total for CPU, in seconds (time at least one task waited): the host's, or
    the cgroup's file at ``path``; None where the kernel keeps none."""
    try:
        for line in open(path or f"{PROC}/pressure/cpu"):
            if line.startswith("some"):
                return int(line.split("total=")[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None
    return None


def server_cgroup(pids: set[int]) -> dict:
    """The cgroup v2 the server runs in, its CPU pressure total, and whether that figure is the
    server's own: {"cgroup", "some_s", "trusted", "why"}. A cgroup that holds other processes
    too (the job's shell, Snakemake, a whole user session) measures their waiting as well."""
    paths = {_cgroup_path(pid) for pid in pids} - {None}
    if len(paths) != 1:
        why = ("no cgroup v2 path in /proc/<pid>/cgroup (cgroup v1, or the server is gone)" if not paths else
               f"the server's processes are in {len(paths)} cgroups")
        return {"cgroup": None, "some_s": None, "trusted": False, "why": why}
    path = paths.pop()
    folder = os.path.join(_unified_root(), path.lstrip("/"))
    some = cpu_pressure(os.path.join(folder, "cpu.pressure"))
    if some is None:
        return {"cgroup": path, "some_s": None, "trusted": False,
                "why": f"no PSI in {folder}/cpu.pressure (a kernel without PSI, or psi=0)"}
    try:
        members = {int(x) for x in open(os.path.join(folder, "cgroup.procs")).read().split()}
    except (OSError, ValueError):
        return {"cgroup": path, "some_s": some, "trusted": False, "why": f"{folder}/cgroup.procs unreadable"}
    others = members - set(pids)
    if others:
        return {"cgroup": path, "some_s": some, "trusted": False,
                "why": f"the cgroup {path} holds {len(others)} process(es) besides the server's: its pressure "
                       f"is theirs too"}
    return {"cgroup": path, "some_s": some, "trusted": True, "why": f"the cgroup {path} holds the server alone"}


def _unified_root() -> str:
    """Where the cgroup v2 hierarchy is mounted: CGROUP_ROOT itself, or its ``unified`` folder on
    a host that mounts v1 controllers beside it (systemd's hybrid mode)."""
    hybrid = os.path.join(CGROUP_ROOT, "unified")
    return hybrid if not os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.procs")) and os.path.isdir(hybrid) \
        else CGROUP_ROOT


def _cgroup_path(pid: int) -> str | None:
    try:
        for line in open(f"{PROC}/{pid}/cgroup"):
            if line.startswith("0::"):
                return line[3:].strip()
    except OSError:
        return None
    return None


def contention(load: dict, server: tuple[float, float] | None, server_cpus: set[int] | None,
               own_cores: float, wall_s: float, *, psi_share: float | None = None) -> dict:
    """The contended figure (cores-worth) and how it was found; see the module docstring.
    ``psi_share``: the server's own cgroup's CPU pressure over the section, where trusted."""
    theirs = load["cores_on_server_cpus"]
    if server is not None and wall_s > 0:
        ran, waited = server
        wait_cores = waited / wall_s
        return {"method": "schedstat", "server_wait_cores": round(wait_cores, 4),
                "server_wait_share": round(waited / (ran + waited), 4) if ran + waited > 0 else 0.0,
                "contended_cores": round(min(theirs, wait_cores), 4)}
    if psi_share is not None:
        return {"method": "cgroup-psi", "server_wait_cores": round(psi_share, 4), "server_wait_share": None,
                "contended_cores": round(min(theirs, psi_share), 4)}
    idle = max(0.0, (len(server_cpus) if server_cpus else os.cpu_count() or 1) - own_cores)
    return {"method": "idle-cores", "server_wait_cores": None, "server_wait_share": None,
            "contended_cores": round(max(0.0, theirs - idle), 4)}


def ours(harness: int) -> set[int]:
    """specsweep's own processes beside the server: the harness's ancestors (the job's shell, the
    Snakemake that runs it) and every specsweep process on the host (jobs queued for devices)."""
    found: set[int] = set()
    try:
        found |= {p.pid for p in psutil.Process(harness).parents()}
    except psutil.Error:
        pass
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(a == "-m" and b == "specsweep" for a, b in zip(cmd, cmd[1:])) or (
                cmd and os.path.basename(cmd[0]) == "specsweep"):
            found.add(proc.pid)
    return found


class SectionWatch:
    """Measure the rest of the machine and the server's waiting around one section; judge it."""

    def __init__(self, settings: Settings, own_pids, gpus: tuple[str, ...] = (), server_pids=None):
        self.settings = settings
        self.own_pids = own_pids  # a callable: the server tree changes while it runs
        self.server_pids = server_pids or own_pids  # the server's tree alone, for its waiting
        self.gpus = gpus
        self.before: Snapshot = {}
        self.sched_before: dict | None = None
        self.pressure_before: float | None = None
        self.cgroup_before: dict = {}
        self.sampler = gpu_watch.Sampler(gpus)

    def start(self) -> None:
        self.sampler.start()
        self.before = snapshot()
        self.sched_before = schedstat(set(self.server_pids()))
        self.pressure_before = cpu_pressure()
        self.cgroup_before = server_cgroup(set(self.server_pids()))

    def stop(self, wall_s: float) -> dict:
        server = set(self.server_pids())
        sched_after, pressure, cgroup = schedstat(server), cpu_pressure(), server_cgroup(server)
        after = snapshot()
        own = set(self.own_pids()) | {os.getpid()} | ours(os.getpid())
        used = foreign_used(self.before, after, own=own)
        doc = foreign_cpu(self.before, after, own=own, wall_s=wall_s, used=used)
        cpus = server_cpus(server)
        theirs = on_cpus([{"pid": pid, "cpu_s": d} for d, pid, _ in used], cpus)
        doc["cores_on_server_cpus"] = round(theirs / wall_s, 4) if wall_s > 0 else 0.0
        own_cpu = sum(after[p][1] - self.before.get(p, after[p])[1] for p in own if p in after)
        doc["server_cgroup_psi"] = cgroup_psi(self.cgroup_before, cgroup, wall_s)
        trusted = doc["server_cgroup_psi"]["some_share"] if doc["server_cgroup_psi"]["trusted"] else None
        doc.update(contention(doc, waited_s(self.sched_before, sched_after), cpus,
                              own_cpu / wall_s if wall_s > 0 else 0.0, wall_s, psi_share=trusted))
        doc["server_cpus"] = sorted(cpus) if cpus else None
        doc["cpu_pressure_share"] = (round((pressure - self.pressure_before) / wall_s, 4)
                                     if pressure is not None and self.pressure_before is not None and wall_s > 0
                                     else None)
        doc["max_cores"] = self.settings.max_foreign_cores
        doc["gpu_processes"] = gpu_watch.foreign(self.gpus, own)
        doc["gpu_telemetry"] = self.sampler.stop()
        return doc


def cgroup_psi(before: dict, after: dict, wall_s: float) -> dict:
    """The server's cgroup's CPU pressure over a section: {cgroup, some_share, trusted, why}; trusted
    only when the same cgroup held the server alone at both ends."""
    same = after["cgroup"] is not None and before.get("cgroup") == after["cgroup"]
    share = (round((after["some_s"] - before["some_s"]) / wall_s, 4)
             if same and wall_s > 0 and None not in (before.get("some_s"), after["some_s"]) else None)
    trusted = bool(before.get("trusted") and after["trusted"] and share is not None)
    why = after["why"] if same or not before else "the server moved to another cgroup during the section"
    return {"cgroup": after["cgroup"], "some_share": share, "trusted": trusted, "why": why}


def server_cpus(pids: set[int]) -> set[int] | None:
    """The CPUs the server may run on (the union of its processes' affinity), or None if unreadable."""
    cpus: set[int] = set()
    for pid in pids:
        try:
            cpus |= set(psutil.Process(pid).cpu_affinity())
        except (psutil.Error, AttributeError, OSError):
            continue
    return cpus or None


def check(where: str, load: dict, settings: Settings, repeats_tok_s: list[float], closed_loop: bool) -> None:
    """Raise HostNotQuiet when the section was not measured alone or its repeats disagree.

    ``where`` begins each message ("section chat at c2", "search step 3"); the record's section
    is the runner's phase, as for every failure inside it."""
    contended = load["contended_cores"]
    if contended is not None and contended > settings.max_foreign_cores and load["cpu_s"] > FLOOR_CPU_S:
        top = ", ".join(f"{p['name']} (pid {p['pid']}) {p['cpu_s']:.1f} s" for p in load["top"])
        waited = (f"the server waited for a CPU {load['server_wait_cores']:.2f} cores-worth"
                  if load["server_wait_cores"] is not None else "the server's cores had none idle")
        raise HostNotQuiet(
            f"{where}: other processes took {contended:.2f} cores from the server ({waited}, while "
            f"they used {load['cores_on_server_cpus']:.2f} cores where it runs; {load['cpu_s']:.1f} CPU-s in all: "
            f"{top}), above quiet_host.max_foreign_cores = {settings.max_foreign_cores:g}; stop them, pin them to "
            f"other cores, or wait for a quiet host")
    visible = [p for p in load["gpu_processes"] if p["visible"]]
    if visible:
        raise HostNotQuiet(f"{where}: other processes on the job's GPUs: "
                           + ", ".join(f"pid {p['pid']} on GPU {p['gpu']}" for p in visible))
    for gpu in load.get("gpu_telemetry") or []:
        if gpu["slowed_share"] > settings.max_gpu_slowed_share:
            slowed = [r for r in gpu["reasons"] if r in host_facts.clock_events(host_facts.SLOWED)]
            raise GpuThrottled(
                f"{where}: GPU {gpu['gpu']} ran slowed ({', '.join(slowed)}) in {gpu['slowed_share']:.0%} of "
                f"{gpu['samples']} readings (SM clock {gpu['sm_clock_mhz']['min']}-{gpu['sm_clock_mhz']['max']} "
                f"MHz, up to {gpu['temperature_c_max']} C), above quiet_host.max_gpu_slowed_share = "
                f"{settings.max_gpu_slowed_share:.0%}: its pace was the GPU's state, not the configuration's")
    spread = repeat_spread(repeats_tok_s)
    if closed_loop and spread is not None and spread > settings.max_repeat_spread:
        raise HostNotQuiet(
            f"{where}: its repeats ran at {min(repeats_tok_s):.1f}-{max(repeats_tok_s):.1f} tok/s, "
            f"a spread of {spread:.0%} of their mean, above quiet_host.max_repeat_spread = "
            f"{settings.max_repeat_spread:.0%}: something else changed the pace")


def repeat_spread(values: list[float]) -> float | None:
    """(max - min) / mean of the repeats' throughput; None for fewer than two repeats."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else None
