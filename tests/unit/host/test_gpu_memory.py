"""A GPU's memory as NVML reports it on Hopper (issue 40.3), with NVML faked at its boundary
(tests/doubles/nvml/pynvml.py answers v1 and v2 as nvidia-ml-py's pynvml.py does): an idle H200
that reports reserved memory is free and leased at once, under v2 (reserved apart) and under a v1
driver alike, while another user's memory still shows, hidden processes or not."""

from __future__ import annotations

import json

from gpu_box import h100
from specsweep.host import gpu_memory, gpu_pool, host_facts, leases, locks

MIB, GIB = 1 << 20, 1 << 30


def h200_box(**gpu0) -> dict:
    """Four idle H200s as NVML reports them: 141 GB each, 900 MiB of it reserved by the driver."""
    h200 = {"name": "NVIDIA H200", "memory_total": 143771 * MIB, "memory_reserved": 900 * MIB}
    return {"gpus": [h100(0, **{**h200, **gpu0}), *(h100(i, **h200) for i in (1, 2, 3))], "nvlink": [[0, 3], [1, 2]],
            "ancestor": {"0,1": 20, "2,3": 20}}


def test_v2_reports_reserved_memory_apart_and_v1_counts_it_as_used(nvml):
    nvml(h200_box())
    v2 = host_facts.memory_reading("0")
    assert (v2.structure, v2.used, v2.reserved, v2.total) == ("v2", 0, 900 * MIB, 143771 * MIB)
    nvml(h200_box(memory_v2=False))  # an older driver: v1 only
    v1 = host_facts.memory_reading("0")
    assert (v1.structure, v1.used, v1.reserved) == ("v1", 900 * MIB, None)
    assert host_facts.memory_used("0") == 900 * MIB


def test_an_idle_gpu_reporting_reserved_memory_is_leased_at_once(nvml, tmp_path):
    """The fixed 1024 MiB of before judged this GPU busy and queued the job until its stage's limit."""
    nvml(h200_box(memory_v2=False, memory_reserved=1300 * MIB))  # v1: idle reads 1300 MiB "used"
    said = []
    lease = leases.acquire(4, holder="a", announce=said.append, gpu=True)
    assert lease.gpus == ("0", "1", "2", "3") and not said  # taken, nobody waited for
    lease.release()
    waited, busy = gpu_pool.await_free_memory(("0", "1"), timeout_s=5)
    assert busy == [] and waited < 1


def test_another_users_memory_shows_above_the_gpus_own_idle_level(nvml):
    nvml(h200_box(memory_v2=False))
    assert gpu_memory.is_free("0", locks.lock_dir())  # idle: its level, 900 MiB, recorded
    record = json.loads(next(locks.lock_dir().glob("idle-memory-GPU-00000000-*.json")).read_text())
    assert record == {"used": 900 * MIB, "structure": "v1", "reserved": None}
    # Another user's job, its process hidden from NVML (a container): 2 GiB more, under the cap.
    nvml(h200_box(memory_v2=False, memory_used=2 * GIB))
    assert not gpu_memory.is_free("0", locks.lock_dir())
    assert gpu_pool.free_gpus(["0", "1"]) == ["1"]
    # The level stays the lowest reading: the busy one did not raise it.
    assert json.loads(next(locks.lock_dir().glob("idle-memory-GPU-00000000-*.json")).read_text())["used"] == 900 * MIB


def test_a_busy_gpu_first_seen_with_its_processes_hidden_is_not_taken_for_idle(nvml):
    nvml(h200_box(memory_used=30 * GIB))  # no level recorded yet, no process listed
    assert not gpu_memory.is_free("0", locks.lock_dir())  # the level is capped at 2% of its memory


def test_a_reading_while_a_process_is_listed_sets_no_level(nvml):
    nvml(h200_box(memory_used=200 * MIB, pids=[4242]))  # within the margin of a level of 0
    assert gpu_memory.is_free("0", locks.lock_dir())
    assert not list(locks.lock_dir().glob("idle-memory-GPU-00000000-*.json"))  # not an idle reading
    nvml(h200_box(memory_used=600 * MIB, pids=[4242]))
    assert not gpu_memory.is_free("0", locks.lock_dir())


def test_the_margin_above_the_level_is_the_last_byte_that_counts_as_free(nvml):
    margin = gpu_memory.BUSY_MARGIN_MIB * MIB
    nvml(h200_box(memory_used=margin, pids=[4242]))  # no idle reading: the level is 0
    assert gpu_memory.is_free("0", locks.lock_dir())
    nvml(h200_box(memory_used=margin + 1, pids=[4242]))
    assert not gpu_memory.is_free("0", locks.lock_dir())


def test_a_small_gpus_idle_level_may_reach_a_gib_whatever_its_share(nvml):
    """2% of 8 GiB is 164 MiB; a small GPU's driver may still reserve more than that when idle."""
    nvml(h200_box(memory_v2=False, memory_total=8 * GIB, memory_reserved=900 * MIB))
    assert gpu_memory.is_free("0", locks.lock_dir())


def test_a_gpu_nvml_cannot_read_counts_as_free(nvml):
    assert host_facts.memory_reading("7") is None  # the table has four GPUs
    assert gpu_memory.is_free("7", locks.lock_dir())
