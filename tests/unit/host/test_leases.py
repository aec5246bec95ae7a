"""Device and port leases: disjoint GPUs that wait for a release, a crashed holder's devices
free again, GPUs by NVML (faked at its boundary) handed out free first and given back before the
next job, the hardware a job held, and ports (derived ones too) reserved. The inherited pool
through the real CLI: tests/workflow/test_leases_cli.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import psutil
import pytest

from specsweep.errors import ConfigError, DeviceBusy, PortConflict
from specsweep.host import host_facts, leases, locks

# --- device leases ------------------------------------------------------------------------------

@pytest.fixture
def gpus(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("SPECSWEEP_GPUS", "0,1,2,3")


def test_leases_on_simulated_gpus_are_disjoint_and_wait_for_a_release(gpus):
    said = []
    first = leases.acquire(2, holder="a", announce=said.append, gpu=True)
    second = leases.acquire(2, holder="b", announce=said.append, gpu=True)
    assert set(first.gpus).isdisjoint(second.gpus) and len(first.gpus) == len(second.gpus) == 2
    assert second.env() == {"CUDA_VISIBLE_DEVICES": ",".join(second.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    got = []
    waiter = threading.Thread(target=lambda: got.append(leases.acquire(1, holder="c", announce=said.append, gpu=True)))
    waiter.start()
    time.sleep(1.0)
    assert not got and any("held by a" in s and "held by b" in s for s in said)
    first.release()
    waiter.join(timeout=10)
    assert got and got[0].gpus[0] in first.gpus
    got[0].release()
    second.release()


def test_a_tp_larger_than_the_host_is_a_config_error(gpus):
    with pytest.raises(ConfigError, match="tp 8 needs 8 GPUs, this host has 4"):
        leases.acquire(8, holder="x", announce=print, gpu=True)


@pytest.mark.parametrize("gpu", [False, True])
def test_a_crashed_holders_devices_are_free_again(monkeypatch, tmp_path, gpu):
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "locks"))
    if gpu:
        monkeypatch.setenv("SPECSWEEP_GPUS", "0")  # one GPU: the waiter needs the crasher's
    else:
        monkeypatch.delenv("SPECSWEEP_GPUS", raising=False)
    holder = subprocess.Popen([sys.executable, "-c", "from specsweep.host import leases; import time; "
                               f"leases.acquire(1, holder='crasher', announce=print, gpu={gpu}); "
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert holder.pid in locks.other_measurements()
    said = []
    waiter = threading.Thread(target=lambda: said.append(leases.acquire(1, holder="me", announce=said.append,
                                                                         gpu=gpu)))
    waiter.start()
    time.sleep(0.8)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    waiter.join(timeout=10)
    lease = said[-1]
    assert isinstance(lease, leases.Lease) and lease.devices == (("0",) if gpu else ("host",))
    assert any("held by crasher" in s for s in said if isinstance(s, str))
    lease.release()
    assert not psutil.pid_exists(holder.pid) or psutil.Process(holder.pid).status() == psutil.STATUS_ZOMBIE


# --- GPUs by NVML (mocked at its boundary) -------------------------------------------------------

class FakeNVML:
    """pynvml's calls specsweep makes, over a table of GPUs whose used memory a test changes."""

    def __init__(self, used: dict[int, int], cc=(12, 0), pid: int = 4242):
        self.used, self.cc, self.pid = used, cc, pid

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.split("-")[1])

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=self.used[h], total=96 << 30)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self.cc

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA RTX PRO 6000 Blackwell Workstation Edition"

    def nvmlSystemGetDriverVersion(self):
        return "580.95.05"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08d}-0000-0000-0000-000000000000"

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [types.SimpleNamespace(pid=self.pid, usedGpuMemory=self.used[h])] if self.used[h] > 2 << 30 else []


def test_a_lease_waits_for_its_gpus_memory_to_be_released_before_the_next_job(gpus, monkeypatch):
    nvml = FakeNVML({0: 0, 1: 0, 2: 0, 3: 0})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    lease = leases.acquire(2, holder="a", announce=print, gpu=True)
    held = [int(g) for g in lease.gpus]
    for g in held:
        nvml.used[g] = 40 << 30  # the server's weights and KV cache
    # back to its idle level (0 here), within the margin of the driver keeping a little (gpu_memory)
    threading.Timer(0.6, lambda: nvml.used.update({g: 128 << 20 for g in held})).start()
    t0 = time.monotonic()
    lease.release()
    assert 0.5 < time.monotonic() - t0 < 5 and lease.memory_wait_s >= 0.5


def test_when_other_processes_fill_every_gpu_the_job_queues_names_them_and_gives_up_at_the_limit(gpus, monkeypatch):
    tenant = subprocess.Popen(["sleep", "60"])  # a real process, so its name and user can be read
    try:
        nvml = FakeNVML({0: 40 << 30, 1: 40 << 30, 2: 40 << 30, 3: 40 << 30}, pid=tenant.pid)
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        monkeypatch.setenv("SPECSWEEP_GPU_QUEUE_TIMEOUT_S", "0.6")
        said: list[str] = []
        t0 = time.monotonic()
        with pytest.raises(DeviceBusy) as busy:
            leases.acquire(1, holder="b", announce=said.append, gpu=True)
        assert 0.6 <= time.monotonic() - t0 < 5  # queued, not failed at once, not past the limit
        user = psutil.Process(tenant.pid).username()
        named = f"pid {tenant.pid} (sleep, user {user}, 40960 MiB)"
        assert "without other processes' memory after waiting" in str(busy.value) and named in str(busy.value)
        assert said and "GPU 0 has 40960 MiB in use by " + named in said[0]
        again = leases.acquire(4, holder="c", announce=print, gpu=False)  # the failed job held nothing
        again.release()
        # A GPU freed while the job queues is taken then: the wait ends with the tenant's job.
        threading.Timer(0.5, lambda: nvml.used.update({2: 0})).start()
        monkeypatch.setenv("SPECSWEEP_GPU_QUEUE_TIMEOUT_S", "30")
        lease = leases.acquire(1, holder="d", announce=print, gpu=True)
        assert lease.gpus == ("2",) and 0.4 < lease.waited_s < 5
        lease.release()
    finally:
        tenant.kill()
        tenant.wait()


def test_a_wait_for_another_specsweep_jobs_gpus_is_no_foreign_wait_and_has_no_limit(gpus, monkeypatch):
    """GPUs 0-2 carry a sibling job's server (its locks explain the memory); GPU 3 is another user's.
    A tp-2 job waits for the sibling however long, never failing at the queue limit."""
    nvml = FakeNVML({0: 0, 1: 0, 2: 0, 3: 0})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("SPECSWEEP_GPUS", "0,1,2")
    sibling = leases.acquire(2, holder="sibling", announce=print, gpu=True)
    nvml.used.update({int(g): 40 << 30 for g in sibling.gpus})
    monkeypatch.setenv("SPECSWEEP_GPU_QUEUE_TIMEOUT_S", "0.3")
    said: list[str] = []

    def free_later():
        nvml.used.update({int(g): 0 for g in sibling.gpus})
        sibling.release(wait=False)

    threading.Timer(1.0, free_later).start()
    lease = leases.acquire(2, holder="next", announce=said.append, gpu=True)
    assert lease.waited_s >= 0.9 and "held by sibling" in said[0]
    lease.release()


def test_one_gpu_named_by_index_in_one_job_and_by_uuid_in_another_is_one_lock(gpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML({0: 0}))
    monkeypatch.setenv("SPECSWEEP_GPUS", "0")
    first = leases.acquire(1, holder="by index", announce=print, gpu=True)
    assert first.lock_names == ("GPU-00000000-0000-0000-0000-000000000000",)
    monkeypatch.setenv("SPECSWEEP_GPUS", "GPU-00000000-0000-0000-0000-000000000000")
    said: list[str] = []
    threading.Timer(0.8, first.release, kwargs={"wait": False}).start()
    second = leases.acquire(1, holder="by uuid", announce=said.append, gpu=True)
    assert second.waited_s >= 0.7 and "held by by index" in said[0]  # it waited for the same GPU
    assert second.devices == ("GPU-00000000-0000-0000-0000-000000000000",)  # handed on as the job named it
    second.release()


def test_a_job_takes_a_free_gpu_at_once_rather_than_the_lowest_one_another_user_fills(gpus, monkeypatch):
    """GPU 0 holds another user's 30 GiB (no specsweep lock on it): the job takes GPU 1 without waiting."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML({0: 30 << 30, 1: 0, 2: 0, 3: 0}))
    monkeypatch.setenv("SPECSWEEP_GPU_RELEASE_TIMEOUT_S", "30")
    t0 = time.monotonic()
    lease = leases.acquire(1, holder="a", announce=print, gpu=True)
    assert lease.gpus == ("1",) and time.monotonic() - t0 < 2
    pair = leases.acquire(2, holder="b", announce=print, gpu=True)
    assert pair.gpus == ("2", "3")  # the free ones, not the busy GPU 0
    lease.release()
    pair.release()


def test_hardware_facts_name_the_gpus_a_job_held(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML({0: 0, 1: 0}))
    hw = host_facts.facts(("1",))
    # This NVML has no PCI facts (nvmlDeviceGetPciInfo): that one is left out, the rest kept.
    assert hw["gpus"] == [{"index": "1", "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                           "uuid": "GPU-00000001-0000-0000-0000-000000000000",
                           "memory_bytes": 96 << 30, "compute_capability": "12.0"}]
    assert hw["compute_capability"] == "12.0" and hw["gpu_driver"] == "580.95.05" and hw["gpu_count"] == 1
    assert hw["logical_cores"] == os.cpu_count() and hw["memory_bytes"] > 0 and hw["cpu_model"]
    monkeypatch.delitem(sys.modules, "pynvml")
    monkeypatch.setattr(host_facts, "nvml", lambda: None)
    assert host_facts.facts(("0",))["gpus"] == [{"index": "0"}]  # simulated: nothing guessed


def test_each_job_gets_its_own_port_even_when_asked_for_one_in_use(gpus):
    first = leases.acquire(1, holder="a", announce=print, gpu=True)
    second = leases.acquire(1, holder="b", announce=print, gpu=True)
    assert first.port != second.port and first.port > 0
    # And a second port each ({side_port}: SGLang's --nccl-port), none shared by the two jobs.
    held = [first.port, first.side_port, second.port, second.side_port]
    assert len(set(held)) == 4 and min(held) > 0
    with pytest.raises(PortConflict, match="reserved by another specsweep job"):
        leases.acquire(1, holder="c", announce=print, gpu=True, port=first.port)
    with pytest.raises(PortConflict, match="reserved by another specsweep job"):
        leases.acquire(1, holder="c", announce=print, gpu=True, port=second.side_port)
    first.release()
    second.release()


def test_ports_a_server_derives_from_its_own_are_reserved_with_it(gpus):
    """SGLang with DP attention opens port + 233 .. port + 239 (Backend.derived_ports)."""
    from specsweep.servers.backends import sglang

    def derive(port: int) -> tuple[int, ...]:
        return sglang.BACKEND.derived_ports(["--enable-dp-attention"], port)

    first = leases.acquire(1, holder="a", announce=print, gpu=True, derived=derive)
    second = leases.acquire(1, holder="b", announce=print, gpu=True, derived=derive)
    assert first.derived_ports == tuple(range(first.port + 233, first.port + 240))
    ports = [p for lease in (first, second) for p in (lease.port, lease.side_port, *lease.derived_ports)]
    assert len(ports) == len(set(ports)) == 18  # no port of one job is the other's
    # A job asking for the port whose derived ports are held is refused with the fix, and holds nothing.
    with pytest.raises(PortConflict, match=rf"beside port {first.port - 1} \({first.port + 232}-{first.port + 238}\) "
                                           r"are reserved by another specsweep job or in use on this host; let "
                                           r"specsweep pick the port"):
        leases.acquire(1, holder="c", announce=print, gpu=True, port=first.port - 1, derived=derive)
    first.release()
    second.release()
    again = leases.acquire(1, holder="c", announce=print, gpu=True, port=first.port - 1, derived=derive)
    again.release()


def test_a_derived_port_in_use_on_the_host_moves_the_job_to_another_port(gpus):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        tries = []

        def derive(port: int) -> tuple[int, ...]:
            tries.append(port)
            return (taken,) if len(tries) == 1 else (port + 1,)  # the first port's derived one is in use

        lease = leases.acquire(1, holder="a", announce=print, gpu=True, derived=derive)
        assert len(tries) >= 2 and lease.derived_ports == (lease.port + 1,)
        if tries[0] != lease.port:  # the port passed over is let go at once, not held to the end
            leases.acquire(1, holder="b", announce=print, gpu=True, port=tries[0]).release()
        # ... and the job still holds its GPU: none of its device locks was let go with the port.
        assert leases._try_take(locks.lock_dir(), list(lease.gpus), 1, {g: g for g in lease.gpus}) is None
        lease.release()
        with pytest.raises(PortConflict, match="in use on this host"):
            leases.acquire(1, holder="b", announce=print, gpu=True, port=lease.port, derived=lambda _p: (taken,))
        calls = []
        with pytest.raises(PortConflict, match="no port whose derived ports are free after 50 tries"):
            leases.acquire(1, holder="b", announce=print, gpu=True, derived=lambda p: calls.append(p) or (taken,))
        assert len(calls) == 50
