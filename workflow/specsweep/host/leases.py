"""One measurement at a time per device, and a port no other job is handed: what a job holds
from before its server starts until its GPUs' memory is released.

A measurement that shares compute with another measures neither. On a host without GPUs the
whole machine is one device ("host"); on a GPU host each GPU is one, and a job of tensor-parallel
size tp holds tp of them, handed to its server through CUDA_VISIBLE_DEVICES. Each device and
port is a host-wide lock (``locks``); a GPU's lock is named by its NVML UUID, whatever index or
UUID the job was handed, so one GPU is one lock. Which GPUs may be taken at all, and which tp
group of them: ``gpu_pool``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specsweep.errors import ConfigError, DeviceBusy, PortConflict
from specsweep.host import gpu_pool, host_facts, locks
from specsweep.servers import probes

ANNOUNCE_EVERY_S = 60.0


@dataclass
class Lease:
    """The devices one job holds until release(); ``waited_s`` is how long it queued for them."""

    devices: tuple[str, ...]
    waited_s: float = 0.0
    port: int = 0  # reserved for this job's server: no other job on the host is handed it
    side_port: int = 0  # a second one, for a port the server opens beside it ({side_port})
    derived_ports: tuple[int, ...] = ()  # those the server opens at places derived from port
    memory_wait_s: float = 0.0  # how long teardown waited for the GPUs' memory to be released
    lock_names: tuple[str, ...] = ()  # the lock name of each device (a GPU's UUID where NVML knows it)
    _fds: list[int] = field(default_factory=list, repr=False)

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d != locks.HOST_DEVICE)

    def env(self) -> dict[str, str]:
        """What the server's environment needs to see exactly its devices, numbered as NVML numbers them."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if self.gpus else {}

    def release(self, *, wait: bool = True) -> None:
        if wait and self._fds and self.gpus:
            # The next job must find these GPUs as empty as this one did.
            self.memory_wait_s, _ = gpu_pool.await_free_memory(self.gpus, gpu_pool.release_timeout_s())
        if self._fds:
            locks.remove_holder(locks.lock_dir(), self.lock_names)
        for fd in self._fds:
            os.close(fd)  # closing the descriptor drops the flock
        self._fds.clear()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(tp: int, *, holder: str, announce: Callable[[str], None], gpu: bool = False,
            port: int | None = None, derived: Callable[[int], tuple[int, ...]] | None = None) -> Lease:
    """Block until this job holds its devices and a port; say who it waits for while it waits.

    ``gpu``: the server runs on tp GPUs of this host (server.gpu); otherwise it is a CPU
    measurement and the whole machine is its one device. ``derived``: the ports the server will
    open given its port (Backend.derived_ports), reserved with it.
    """
    candidates, want = _candidates(tp, gpu)
    names = {d: locks.lock_name(d) for d in candidates}
    folder = locks.lock_dir()
    locks.make_shared_dir(folder)
    t0 = time.monotonic()
    last_said, kept_out_s, last_poll = None, 0.0, t0
    while True:
        usable = gpu_pool.free_gpus(candidates) if gpu else candidates
        lease = _try_take(folder, usable, want, names, pick=gpu_pool.best_group if gpu and want > 1 else None)
        if lease is not None:
            break
        now, unlocked = time.monotonic(), _unlocked(folder, candidates, names)
        foreign = [g for g in unlocked if g not in usable]  # memory no specsweep job's lock explains
        # Time counts against the queue limit only while other processes' memory, not other
        # specsweep jobs' locks, is what keeps the job from enough GPUs.
        if foreign and len(unlocked) >= want:
            kept_out_s += now - last_poll
            if kept_out_s >= gpu_pool.queue_timeout_s():
                raise DeviceBusy(f"no {want} GPU(s) without other processes' memory after waiting "
                                 f"{kept_out_s:.0f} s ($SPECSWEEP_GPU_QUEUE_TIMEOUT_S): {gpu_pool.foreign(foreign)}")
        last_poll = now
        if last_said is None or now - last_said >= ANNOUNCE_EVERY_S:
            held = [d for d in candidates if d not in unlocked]
            why = ([locks.holders(folder, held, names)] if held else []) + (
                [gpu_pool.foreign(foreign)] if foreign else [])
            announce("waiting for device(s): " + "; ".join(why))
            last_said = now
        time.sleep(locks.POLL_S)
    lease.waited_s = time.monotonic() - t0
    locks.write_holder(folder, lease.lock_names, holder)
    if last_said is not None:
        announce(f"got device(s) {','.join(lease.devices)} after waiting {lease.waited_s:.1f} s")
    try:
        _await_memory(lease.gpus)
        lease.port = _reserve_with_derived(folder, lease, port, derived or (lambda _port: ()))
        # Never the same as port: this lease's own lock on it refuses a second flock too.
        lease.side_port = _reserve_port(folder, lease, None)
    except BaseException:
        lease.release(wait=False)  # nothing of ours ran on them
        raise
    return lease


def _await_memory(gpus: tuple[str, ...]) -> None:
    """Wait until the leased GPUs' memory is back at its idle level (an earlier job's server may
    still be exiting); DeviceBusy, naming who holds it, if it is not within the release timeout."""
    if not gpus:
        return
    _, busy = gpu_pool.await_free_memory(gpus, gpu_pool.release_timeout_s())
    if busy:
        raise DeviceBusy(f"GPU(s) {busy} still have memory in use after {gpu_pool.release_timeout_s():g} s, "
                         f"by pid(s) {sorted({p for g in gpus for p in host_facts.gpu_pids(g)})}; "
                         f"a server of an earlier job may not have exited (see nvidia-smi)")


def _candidates(tp: int, gpu: bool) -> tuple[list[str], int]:
    if not gpu:
        return [locks.HOST_DEVICE], 1
    gpus = gpu_pool.host_gpus()
    if not gpus:
        raise ConfigError("server.gpu is true but this host has no GPUs that NVML can see; run on a GPU host, "
                          "or name the GPUs with SPECSWEEP_GPUS=0,1,...")
    if tp > len(gpus):
        raise ConfigError(f"tp {tp} needs {tp} GPUs, this host has {len(gpus)} ({','.join(gpus)}); "
                          f"exclude the configuration or run it on a larger host")
    return gpus, tp


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


def _lock_port(folder: Path, lease: Lease, port: int) -> bool:
    """Lock one port's file for the lease, without waiting; False if another job holds it."""
    fd = locks.try_lock(folder / f"port-{port}.lock")
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


def _try_take(folder: Path, candidates: list[str], want: int, names: dict[str, str],
              pick: Callable[[list[str], int], tuple[str, ...]] | None = None) -> Lease | None:
    """Lock ``want`` free devices without blocking, or none: never hold some while waiting.

    Without ``pick`` the first ``want`` unlocked candidates; with it, every unlocked one is
    locked for a moment and ``pick`` chooses among them (the others are let go at once).
    """
    taken: dict[str, int] = {}
    for device in candidates:
        fd = locks.try_lock(folder / f"{names[device]}.lock")
        if fd is None:
            continue
        taken[device] = fd
        if len(taken) == want and pick is None:
            break
    chosen = (pick(list(taken), want) if pick else tuple(taken)) if len(taken) >= want else ()
    for device, fd in taken.items():
        if device not in chosen:
            os.close(fd)
    return (Lease(devices=tuple(chosen), lock_names=tuple(names[d] for d in chosen), _fds=[taken[d] for d in chosen])
            if chosen else None)


def _unlocked(folder: Path, devices: list[str], names: dict[str, str]) -> list[str]:
    """The devices no specsweep job holds a lock on at this moment (each tried and let go at once)."""
    out = []
    for device in devices:
        fd = locks.try_lock(folder / f"{names[device]}.lock")
        if fd is not None:
            os.close(fd)
            out.append(device)
    return out


