"""One measurement at a time per device: host-wide locks that every specsweep job on a host shares.

A measurement that shares compute with another measures neither. On a host without GPUs the
whole machine is one device ("host"); on a GPU host each GPU is one, and a job of tensor-parallel
size tp holds tp of them, handed to its server through CUDA_VISIBLE_DEVICES. The locks are
flock(2) locks on files in one folder per host (``$SPECSWEEP_LOCK_DIR``, default
``/tmp/specsweep-locks``), so they hold across ``--cores N`` and across Snakemake invocations in
different folders, and the kernel releases them when a job dies, however it dies. A GPU's lock
is named by its NVML UUID, whatever index or UUID the job was handed, so one GPU is one lock.

On a shared box a GPU nobody holds a lock on may still run another user's job: a job takes only
GPUs without foreign memory, and when too few are free it waits in the queue (up to
``$SPECSWEEP_GPU_QUEUE_TIMEOUT_S``), saying which processes hold them, then fails as device-busy.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from specsweep.errors import ConfigError, DeviceBusy, Excluded, PortConflict
from specsweep.measure import gpu_memory, host_facts
from specsweep.servers import probes
from specsweep.study.grid import excluded_here

HOST_DEVICE = "host"
POLL_S = 0.25
ANNOUNCE_EVERY_S = 60.0


def lock_dir() -> Path:
    return Path(os.environ.get("SPECSWEEP_LOCK_DIR") or "/tmp/specsweep-locks")


def host_gpus() -> list[str]:
    """The GPUs this job may use, as a shared box hands them out: $SPECSWEEP_GPUS if set (an
    override, and simulated GPUs in tests), else the CUDA_VISIBLE_DEVICES the job inherited (what
    a scheduler or a colleague allotted it), else every GPU NVML counts, else none.

    Ids are NVML's, in PCI bus order; the server gets CUDA_DEVICE_ORDER=PCI_BUS_ID (Lease.env) so
    that CUDA numbers them the same way (its default order, fastest first, is another).
    """
    for variable in ("SPECSWEEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        given = os.environ.get(variable)
        if given is not None:
            return [g.strip() for g in given.split(",") if g.strip()]
    lib = host_facts.nvml()
    try:
        return [str(i) for i in range(lib.nvmlDeviceGetCount())] if lib else []
    except Exception:  # no device NVML can count: a CPU host
        return []


@dataclass
class Lease:
    """The devices one job holds until release(); ``waited_s`` is how long it queued for them."""

    devices: tuple[str, ...]
    waited_s: float = 0.0
    port: int = 0  # reserved for this job's server: no other job on the host is handed it
    side_port: int = 0  # a second one, for a port the server opens beside it ({side_port})
    derived_ports: tuple[int, ...] = ()  # those the server opens at places derived from port
    memory_wait_s: float = 0.0  # how long teardown waited for the GPUs' memory to be released
    locks: tuple[str, ...] = ()  # the lock name of each device (a GPU's UUID where NVML knows it)
    _fds: list[int] = field(default_factory=list, repr=False)

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d != HOST_DEVICE)

    def env(self) -> dict[str, str]:
        """What the server's environment needs to see exactly its devices, numbered as NVML numbers them."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if self.gpus else {}

    def release(self, *, wait: bool = True) -> None:
        if wait and self._fds and self.gpus:
            # The next job must find these GPUs as empty as this one did.
            self.memory_wait_s, _ = await_free_memory(self.gpus, release_timeout_s())
        for name in self.locks if self._fds else ():
            try:
                (lock_dir() / f"{name}.holder").unlink()
            except OSError:
                pass
        for fd in self._fds:
            os.close(fd)  # closing the descriptor drops the flock
        self._fds.clear()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def release_timeout_s() -> float:
    """How long a GPU's memory may take to be freed after teardown ($SPECSWEEP_GPU_RELEASE_TIMEOUT_S)."""
    return float(os.environ.get("SPECSWEEP_GPU_RELEASE_TIMEOUT_S") or 120)


def queue_timeout_s() -> float:
    """How long a job waits for GPUs that other processes' memory keeps from it
    ($SPECSWEEP_GPU_QUEUE_TIMEOUT_S; the wait for other specsweep jobs' locks has no limit)."""
    return float(os.environ.get("SPECSWEEP_GPU_QUEUE_TIMEOUT_S") or 1800)


def lock_name(device: str) -> str:
    """The file name of a device's lock: a GPU's NVML UUID (index 0 in one job and GPU-<uuid> in
    another are one GPU), else the id as given (simulated GPUs, no NVML; the host)."""
    return (host_facts.uuid(device) if device != HOST_DEVICE else None) or device


def acquire(tp: int, *, holder: str, announce: Callable[[str], None], gpu: bool = False,
            port: int | None = None, derived: Callable[[int], tuple[int, ...]] | None = None) -> Lease:
    """Block until this job holds its devices and a port; say who it waits for while it waits.

    ``gpu``: the server runs on tp GPUs of this host (server.gpu); otherwise it is a CPU
    measurement and the whole machine is its one device. ``derived``: the ports the server will
    open given its port (Backend.derived_ports), reserved with it.
    """
    candidates, want = _candidates(tp, gpu)
    names = {d: lock_name(d) for d in candidates}
    folder = lock_dir()
    make_shared_dir(folder)
    t0 = time.monotonic()
    last_said, kept_out_s, last_poll = None, 0.0, t0
    while True:
        usable = free_gpus(candidates) if gpu else candidates
        lease = _try_take(folder, usable, want, names, pick=best_group if gpu and want > 1 else None)
        if lease is not None:
            break
        now, unlocked = time.monotonic(), _unlocked(folder, candidates, names)
        foreign = [g for g in unlocked if g not in usable]  # memory no specsweep job's lock explains
        # Time counts against the queue limit only while other processes' memory, not other
        # specsweep jobs' locks, is what keeps the job from enough GPUs.
        if foreign and len(unlocked) >= want:
            kept_out_s += now - last_poll
            if kept_out_s >= queue_timeout_s():
                raise DeviceBusy(f"no {want} GPU(s) without other processes' memory after waiting "
                                 f"{kept_out_s:.0f} s ($SPECSWEEP_GPU_QUEUE_TIMEOUT_S): {_foreign(foreign)}")
        last_poll = now
        if last_said is None or now - last_said >= ANNOUNCE_EVERY_S:
            held = [d for d in candidates if d not in unlocked]
            announce("waiting for device(s): " + "; ".join(
                ([_holders(folder, held, names)] if held else []) + ([_foreign(foreign)] if foreign else [])))
            last_said = now
        time.sleep(POLL_S)
    lease.waited_s = time.monotonic() - t0
    _write_holder(folder, lease.locks, holder)
    if last_said is not None:
        announce(f"got device(s) {','.join(lease.devices)} after waiting {lease.waited_s:.1f} s")
    try:
        if lease.gpus:
            _, busy = await_free_memory(lease.gpus, release_timeout_s())
            if busy:
                raise DeviceBusy(f"GPU(s) {busy} still have memory in use after {release_timeout_s():g} s, "
                                 f"by pid(s) {sorted({p for g in lease.gpus for p in host_facts.gpu_pids(g)})}; "
                                 f"a server of an earlier job may not have exited (see nvidia-smi)")
        lease.port = _reserve_with_derived(folder, lease, port, derived or (lambda _port: ()))
        # Never the same as port: this lease's own lock on it refuses a second flock too.
        lease.side_port = _reserve_port(folder, lease, None)
    except BaseException:
        lease.release(wait=False)  # nothing of ours ran on them
        raise
    return lease


def _candidates(tp: int, gpu: bool) -> tuple[list[str], int]:
    if not gpu:
        return [HOST_DEVICE], 1
    gpus = host_gpus()
    if not gpus:
        raise ConfigError("server.gpu is true but this host has no GPUs that NVML can see; run on a GPU host, "
                          "or name the GPUs with SPECSWEEP_GPUS=0,1,...")
    if tp > len(gpus):
        raise ConfigError(f"tp {tp} needs {tp} GPUs, this host has {len(gpus)} ({','.join(gpus)}); "
                          f"exclude the configuration or run it on a larger host")
    return gpus, tp


def free_gpus(gpus: list[str]) -> list[str]:
    """The GPUs without memory in use (by NVML; unreadable ones count as free), in their order.

    On a shared box a GPU nobody holds a lock on may still run another user's process: a job
    takes only free GPUs, and waits in the queue while too few are free, never on a busy one.
    """
    return [g for g in gpus if gpu_memory.is_free(g, lock_dir())]


def await_free_memory(gpus: tuple[str, ...], timeout_s: float) -> tuple[float, list[str]]:
    """Wait until NVML shows each GPU's memory released; (seconds waited, GPUs still busy).

    GPUs NVML cannot read (simulated ids, no NVML) count as free: there is nothing to wait for.
    """
    t0 = time.monotonic()
    while True:
        busy = [g for g in gpus if not gpu_memory.is_free(g, lock_dir())]
        if not busy or time.monotonic() - t0 >= timeout_s:
            return time.monotonic() - t0, busy
        time.sleep(POLL_S)


def _reserve_with_derived(folder: Path, lease: Lease, port: int | None,
                          derived: Callable[[int], tuple[int, ...]]) -> int:
    """The server's port and every port derived from it, all reserved; another free port (unless
    one was asked for) while some derived one is another job's or in use on the host."""
    for _ in range(50):
        chosen = _reserve_port(folder, lease, port)
        mark, wanted = len(lease._fds), derived(chosen)
        if all(_lock_port(folder, lease, p) and probes.port_is_free(p) for p in wanted):
            lease.derived_ports = wanted
            return chosen
        for fd in lease._fds[mark - 1:]:  # the port and the derived ones locked so far
            os.close(fd)
        del lease._fds[mark - 1:]
        if port:
            raise PortConflict(f"the ports the server would open beside port {port} ({_ranges(wanted)}) are "
                               f"reserved by another specsweep job or in use on this host; let specsweep pick the "
                               f"port, and drop any fixed --dist-init-addr")
    raise PortConflict("no port whose derived ports are free after 50 tries")


def _ranges(ports: tuple[int, ...]) -> str:
    return f"{min(ports)}-{max(ports)}" if ports else "none"


def _try_lock(path: Path) -> int | None:
    """The descriptor holding an exclusive flock on ``path``, without waiting; None if another job holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _lock_port(folder: Path, lease: Lease, port: int) -> bool:
    """Lock one port's file for the lease, without waiting; False if another job holds it."""
    fd = _try_lock(folder / f"port-{port}.lock")
    if fd is not None:
        lease._fds.append(fd)
    return fd is not None


def _reserve_port(folder: Path, lease: Lease, port: int | None) -> int:
    """A port no other job on this host is handed meanwhile: a free one, locked for the lease."""
    for _ in range(50):
        candidate = port or probes.free_port()
        if _lock_port(folder, lease, candidate):
            return candidate
        if port:
            raise PortConflict(f"port {port} is reserved by another specsweep job on this host")
    raise PortConflict("no free port after 50 tries")


def check_exclusions(excluded_on: tuple, hw: dict) -> None:
    """Refuse to measure where the study excludes this configuration by architecture."""
    held = {g.get("compute_capability") for g in hw.get("gpus", [])} - {None}
    for capabilities, reason in excluded_on:
        if hit := excluded_here(capabilities, held):
            raise Excluded(f"excluded on compute capability {', '.join(hit)}: {reason}; the plan did not "
                           f"leave it out because it was made on a host of another kind: plan on this kind of "
                           f"host, or set hardware.compute_capability in the study")


def _try_take(folder: Path, candidates: list[str], want: int, names: dict[str, str],
              pick: Callable[[list[str], int], tuple[str, ...]] | None = None) -> Lease | None:
    """Lock ``want`` free devices without blocking, or none: never hold some while waiting.

    Without ``pick`` the first ``want`` unlocked candidates; with it, every unlocked one is
    locked for a moment and ``pick`` chooses among them (the others are let go at once).
    """
    taken: dict[str, int] = {}
    for device in candidates:
        fd = _try_lock(folder / f"{names[device]}.lock")
        if fd is None:
            continue
        taken[device] = fd
        if len(taken) == want and pick is None:
            break
    chosen = (pick(list(taken), want) if pick else tuple(taken)) if len(taken) >= want else ()
    for device, fd in taken.items():
        if device not in chosen:
            os.close(fd)
    return (Lease(devices=tuple(chosen), locks=tuple(names[d] for d in chosen), _fds=[taken[d] for d in chosen])
            if chosen else None)


def _unlocked(folder: Path, devices: list[str], names: dict[str, str]) -> list[str]:
    """The devices no specsweep job holds a lock on at this moment (each tried and let go at once)."""
    out = []
    for device in devices:
        fd = _try_lock(folder / f"{names[device]}.lock")
        if fd is not None:
            os.close(fd)
            out.append(device)
    return out


def _foreign(gpus: list[str]) -> str:
    """Who holds memory on GPUs no specsweep lock explains, by NVML, for the one who waits."""
    parts = []
    for g in gpus:
        used = host_facts.memory_used(g)
        procs = ", ".join(f"pid {p['pid']} ({p['name']}, user {p['user']}"
                          + (f", {p['memory_mib']} MiB)" if p["memory_mib"] is not None else ")")
                          for p in host_facts.gpu_processes(g))
        parts.append(f"GPU {g} has {(used or 0) >> 20} MiB in use by " + (procs or "processes NVML does not list"))
    return "; ".join(parts)


# Past this many groups to weigh, the first free ones are taken (a 16-GPU box at tp 8: 12870).
MAX_GROUPS = 5000


def best_group(gpus: list[str], want: int) -> tuple[str, ...]:
    """The tp group to take of these unlocked GPUs (free ones first, in pool order): fewest with
    foreign memory, then the best slowest link between any two (NVLink before a PCIe switch
    before the CPU's interconnect), then the earliest in the pool."""
    if math.comb(len(gpus), want) > MAX_GROUPS:
        return tuple(gpus[:want])
    busy = {g for g in gpus if not gpu_memory.is_free(g, lock_dir())}
    links = {pair: host_facts.link(*pair) for pair in host_facts.pairs(gpus)}

    def cost(group: tuple[str, ...]) -> tuple:
        slowest = host_facts.worst_link(links[pair] for pair in host_facts.pairs(group))
        return len(busy.intersection(group)), host_facts.link_rank(slowest), [gpus.index(g) for g in group]

    return min(itertools.combinations(gpus, want), key=cost)


def make_shared_dir(folder: Path) -> None:
    """Sticky and world-writable, like /tmp: jobs of every user on the host share the locks."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if folder.stat().st_uid == os.getuid():
            folder.chmod(0o1777)
    except OSError as exc:
        raise ConfigError(f"cannot use the device lock folder {folder}: {exc.strerror}; "
                          f"set SPECSWEEP_LOCK_DIR to a folder every job on this host can write") from exc


def _write_holder(folder: Path, devices: tuple[str, ...], holder: str) -> None:
    """Who holds a device, for the messages of those who wait (best effort)."""
    doc = {"holder": holder, "pid": os.getpid(), "cwd": os.getcwd(), "since": time.strftime("%H:%M:%S")}
    for device in devices:
        try:
            (folder / f"{device}.holder").write_text(json.dumps(doc))
        except OSError:
            pass


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


def _holders(folder: Path, devices: list[str], names: dict[str, str]) -> str:
    parts = []
    for device in devices:
        try:
            doc = json.loads((folder / f"{names[device]}.holder").read_text())
            parts.append(f"{device} held by {doc['holder']} (pid {doc['pid']}, {doc['cwd']}) since {doc['since']}")
        except (OSError, ValueError, KeyError):
            parts.append(f"{device} busy")
    return "; ".join(parts)
