"""GPUs the way a shared box hands them out, with NVML faked at its boundary (tests/doubles/nvml/
pynvml.py, answering as nvidia-ml-py's pynvml.py does): a tp 2 job takes the NVLink pair rather
than the lowest two, a result names its GPUs by UUID and the link between them, and a section
whose GPU was slowed for heat fails as gpu-throttled while one at the power cap is recorded."""

from __future__ import annotations

import pytest

from gpu_box import HW_THERMAL, IDLE, SW_POWER_CAP, box, h100
from specsweep.errors import GpuThrottled
from specsweep.host import gpu_pool, gpu_watch, host_facts, leases, quiet_host

SETTINGS = quiet_host.Settings(max_foreign_cores=0.25, max_repeat_spread=0.5, retry_pause_s=0,
                               max_gpu_slowed_share=0.05)


def test_links_are_named_as_nvidia_smi_topo_names_them(nvml):
    assert host_facts.link("0", "3") == "NVLINK" and host_facts.link("1", "2") == "NVLINK"
    assert host_facts.link("0", "1") == "PXB" and host_facts.link("0", "2") == "SYS"
    assert host_facts.worst_link(host_facts.link(a, b) for a, b in (("0", "1"), ("0", "3"), ("1", "3"))) == "SYS"
    assert host_facts.worst_link([None, None]) is None


def test_tp2_takes_the_nvlink_pair_rather_than_the_lowest_two(nvml):
    first = leases.acquire(2, holder="a", announce=print, gpu=True)
    second = leases.acquire(2, holder="b", announce=print, gpu=True)
    assert first.gpus == ("0", "3") and second.gpus == ("1", "2")
    hw = host_facts.facts(first.gpus)
    assert hw["gpu_link"] == "NVLINK" and hw["gpu_links"] == [{"gpus": ["0", "3"], "link": "NVLINK"}]
    assert [g["uuid"] for g in hw["gpus"]] == [h100(0)["uuid"], h100(3)["uuid"]]
    assert [g["pci_bus_id"] for g in hw["gpus"]] == ["00000000:18:00.0", "00000000:78:00.0"]
    first.release()
    second.release()


def test_a_gpu_with_foreign_memory_moves_the_pair_to_the_free_nvlink_one(nvml):
    nvml(box(memory_used=30 << 30))  # another user's process on GPU 0
    # A group with GPU 0 would wait for its memory and fail (device-busy); the free pair is taken.
    lease = leases.acquire(2, holder="a", announce=print, gpu=True)
    assert lease.gpus == ("1", "2")
    lease.release()


def test_fewest_busy_gpus_come_before_the_best_link(nvml):
    nvml(box(memory_used=30 << 30))
    assert gpu_pool.best_group(["0", "1", "2", "3"], 2) == ("1", "2")  # free and NVLink
    assert gpu_pool.best_group(["0", "1", "3"], 2) == ("1", "3")  # free over SYS beats NVLink with a busy GPU
    assert gpu_pool.best_group(["0", "1", "2", "3"], 3) == ("1", "2", "3")


def test_past_the_groups_worth_weighing_the_first_free_gpus_are_taken(monkeypatch):
    monkeypatch.setattr(host_facts, "link", lambda a, b: pytest.fail("no link is read past MAX_GROUPS"))
    sixteen = [str(i) for i in range(16)]  # tp 8 of 16: 12870 groups
    assert gpu_pool.best_group(sixteen, 8) == tuple(sixteen[:8])


def test_gpus_handed_out_by_uuid_are_read_by_uuid(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{h100(2)['uuid']},{h100(1)['uuid']}")
    pool = gpu_pool.host_gpus()
    assert pool == [h100(2)["uuid"], h100(1)["uuid"]]
    assert host_facts.link(*pool) == "NVLINK" and host_facts.memory_used(pool[0]) == 0
    assert host_facts.facts(tuple(pool))["gpus"][1]["pci_bus_id"] == "00000000:38:00.0"


def _readings(reasons: list[int], gpu: str = "0") -> list[dict]:
    return [{"gpu": gpu, "sm_clock_mhz": 1980 - 600 * bool(r & host_facts.SLOWED), "temperature_c": 70 + i,
             "power_w": 300.0 + i, "reasons": r, "memory_used_mib": 900 + 10 * i} for i, r in enumerate(reasons)]


def test_telemetry_gives_each_gpus_clocks_heat_power_and_shares():
    [gpu] = gpu_watch.telemetry(_readings([0, HW_THERMAL, SW_POWER_CAP, SW_POWER_CAP | IDLE]))
    assert gpu["samples"] == 4 and gpu["sm_clock_mhz"] == {"min": 1380, "mean": 1830.0, "max": 1980}
    assert gpu["temperature_c_max"] == 73 and gpu["power_w"] == {"mean": 301.5, "max": 303.0}
    assert gpu["memory_used_mib_max"] == 930
    assert gpu["slowed_share"] == 0.25 and gpu["power_capped_share"] == 0.5
    assert gpu["reasons"] == ["gpu_idle", "sw_power_cap", "hw_thermal"]


def test_telemetry_keeps_each_gpu_apart_and_rounds_as_documented():
    one = _readings([HW_THERMAL | SW_POWER_CAP, 0, 0])
    other = [{**r, "gpu": "1", "sm_clock_mhz": 1410, "reasons": 0} for r in one]
    for reading, clock, watts in zip(one, (1980, 1380, 1981), (300.0, 300.0, 301.04)):
        reading.update(sm_clock_mhz=clock, power_w=watts)
    first, second = gpu_watch.telemetry([r for pair in zip(one, other) for r in pair])
    assert first["gpu"] == "0" and second["gpu"] == "1" and first["samples"] == second["samples"] == 3
    assert first["sm_clock_mhz"] == {"min": 1380, "mean": 1780.3, "max": 1981}
    assert first["power_w"] == {"mean": 300.3, "max": 301.0}
    assert first["slowed_share"] == first["power_capped_share"] == 0.3333
    assert second["slowed_share"] == 0.0 and second["reasons"] == [] and second["sm_clock_mhz"]["max"] == 1410


def _check(telemetry: list[dict]) -> None:
    load = {"contended_cores": 0.0, "cpu_s": 0.0, "gpu_processes": [], "gpu_telemetry": telemetry}
    quiet_host.check("section short", load, SETTINGS, [100.0], closed_loop=True)


def test_a_gpu_slowed_for_heat_beyond_the_share_fails_the_section_and_the_power_cap_does_not():
    with pytest.raises(GpuThrottled, match=r"^section short: GPU 0 ran slowed \(hw_thermal\) in 10% of 10 readings "
                                           r"\(SM clock 1380-1980 MHz, up to 79 C\), above "
                                           r"quiet_host.max_gpu_slowed_share = 5%"):
        _check(gpu_watch.telemetry(_readings([HW_THERMAL] + [0] * 9)))
    _check(gpu_watch.telemetry(_readings([HW_THERMAL] + [0] * 19)))  # 5%: at the share, kept
    _check(gpu_watch.telemetry(_readings([SW_POWER_CAP] * 20)))  # the configuration's own draw
    _check([])  # no NVML: nothing to judge


def test_a_sampler_without_nvml_reads_nothing_and_starts_no_thread(monkeypatch):
    monkeypatch.setattr(host_facts, "nvml", lambda: None)
    sampler = gpu_watch.Sampler(("0",))
    sampler.start()
    assert sampler._thread is None and sampler.stop() == []


def test_doctor_names_the_group_and_link_a_job_of_the_largest_tp_would_get(nvml):
    from specsweep.measure import doctor

    nvml(box(memory_used=30 << 30, pids=[4242]))
    check = doctor.gpu_check(2)
    assert check.ok and "3 free; largest tp 2 (GPUs 1,2 over NVLINK)" in check.detail, check
    assert not doctor.gpu_check(4).ok  # three free GPUs for tp 4




def test_telemetry_rounds_power_to_a_tenth_and_reads_results_from_before_memory_was_sampled():
    readings = _readings([0, 0])
    readings[1]["power_w"] = 301.26
    [gpu] = gpu_watch.telemetry(readings)
    assert gpu["power_w"] == {"mean": 300.6, "max": 301.3}  # a tenth of a watt, not whole watts
    older = [{k: v for k, v in r.items() if k != "memory_used_mib"} for r in readings]  # before 2026-12
    [gpu] = gpu_watch.telemetry(older)
    assert gpu["memory_used_mib_max"] is None and gpu["samples"] == 2
