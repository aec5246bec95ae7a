"""The GPUs a job may take on a shared box: which ones it was handed, which are free of other
processes' memory, which tp group of them to take, and the wait for a GPU's memory to be released.

On a shared box a GPU nobody holds a lock on may still run another user's job: a job takes only
GPUs without foreign memory, and when too few are free it waits in the queue (up to
``$SPECSWEEP_GPU_QUEUE_TIMEOUT_S``), saying which processes hold them, then fails as device-busy
(``leases.acquire``).
"""

from __future__ import annotations

import itertools
import math
import os
import time

from specsweep.host import gpu_memory, host_facts
from specsweep.host.locks import POLL_S, lock_dir


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


def release_timeout_s() -> float:
    """How long a GPU's memory may take to be freed after teardown ($SPECSWEEP_GPU_RELEASE_TIMEOUT_S)."""
    return float(os.environ.get("SPECSWEEP_GPU_RELEASE_TIMEOUT_S") or 120)


def queue_timeout_s() -> float:
    """How long a job waits for GPUs that other processes' memory keeps from it
    ($SPECSWEEP_GPU_QUEUE_TIMEOUT_S; the wait for other specsweep jobs' locks has no limit)."""
    return float(os.environ.get("SPECSWEEP_GPU_QUEUE_TIMEOUT_S") or 1800)


def free_gpus(gpus: list[str]) -> list[str]:
    """The GPUs without memory in use (by NVML; unreadable ones count as free), in their order."""
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


def foreign(gpus: list[str]) -> str:
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
