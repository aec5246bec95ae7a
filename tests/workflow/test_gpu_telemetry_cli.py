"""GPUs through the real CLI with NVML faked at its boundary (tests/doubles/gpu_box.py): a result
names its GPUs by UUID and their clocks, a section whose GPU was slowed for heat fails the
configuration as gpu-throttled, and the configuration page shows each GPU's readings per section.
The choice of GPUs and the telemetry's arithmetic: tests/unit/measure/test_gpu_topology_and_clocks.py."""

from __future__ import annotations

import pytest

from conftest import NAME, fault_study, launch_cli, load
from gpu_box import HW_THERMAL, SW_POWER_CAP, box, h100
from specsweep.records import store


def test_through_the_cli_a_result_records_its_gpus_and_their_clocks(nvml, tmp_path, model):
    nvml(box(reasons=SW_POWER_CAP, power_mw=700_000))
    rc, err = launch_cli(tmp_path, fault_study(model, gpu=True))
    assert rc == 0, err
    doc = load(tmp_path / "launches" / f"{NAME}.json")
    assert doc["hardware"]["gpus"][0]["uuid"] == h100(0)["uuid"] and doc["hardware"]["gpu_link"] is None
    for section in doc["sections"]:
        [gpu] = section["quiet_host"]["gpu_telemetry"]
        assert gpu["gpu"] == "0" and gpu["samples"] >= 2 and gpu["power_capped_share"] == 1.0
        assert gpu["slowed_share"] == 0.0 and gpu["power_w"]["max"] == 700.0 and gpu["reasons"] == ["sw_power_cap"]
        # No energy counter on this box: the power integrated over the section's window, 700 W
        # throughout (and at idle, read before the server started), so nothing above idle.
        spent = section["energy"]
        assert spent["source"] == "power" and spent["joules"] == pytest.approx(700 * gpu["energy_window_s"], rel=1e-3)
        assert spent["j_per_output_token"] == pytest.approx(spent["joules"] / section["output_tokens"])
        assert abs(spent["j_per_output_token_above_idle"]) < 0.01 * spent["j_per_output_token"]  # rounding
    assert doc["lease"]["idle_power_w"] == {"0": 700.0}


def test_through_the_cli_the_energy_counter_gives_each_sections_energy(nvml, tmp_path, model):
    nvml(box(energy_mj=5_000_000))  # a counter that does not move: no energy spent, and said so
    rc, err = launch_cli(tmp_path, fault_study(model, gpu=True))
    assert rc == 0, err
    doc = load(tmp_path / "launches" / f"{NAME}.json")
    assert all(s["energy"]["source"] == "counter" and s["energy"]["joules"] == 0.0 for s in doc["sections"])
    assert all(s["energy"]["output_tokens_per_j"] is None for s in doc["sections"])  # no division by zero


def test_through_the_cli_a_hot_gpu_fails_the_configuration_as_gpu_throttled(nvml, tmp_path, model):
    nvml(box(reasons=HW_THERMAL, sm_clock_mhz=1100, temperature_c=91))
    rc, err = launch_cli(tmp_path, fault_study(model, gpu=True))
    assert rc == 28, err
    assert not (tmp_path / "launches" / f"{NAME}.json").exists()
    record = store.latest_failure(tmp_path / "failures", NAME)
    assert record.failure_class == "gpu-throttled" and record.section == "short" and record.transient
    assert "GPU 0 ran slowed (hw_thermal) in 100% of" in record.reason and "up to 91 C" in record.reason


def test_the_configuration_page_shows_each_gpus_readings_per_section(nvml, tmp_path, model):
    from specsweep.analysis import report
    from specsweep.records.result import Result

    nvml(box(reasons=SW_POWER_CAP, temperature_c=77))
    rc, err = launch_cli(tmp_path, fault_study(model, gpu=True))
    assert rc == 0, err
    page = report._gpu_readings(Result.from_json(load(tmp_path / "launches" / f"{NAME}.json")))
    assert "GPUs per section (NVML, every 0.2 s)" in page and page.count("<td>sw_power_cap</td>") == 3
    assert "<td>77</td>" in page and "<td>100%</td>" in page
    cpu = load(tmp_path / "launches" / f"{NAME}.json")
    for section in cpu["sections"]:
        section["quiet_host"]["gpu_telemetry"] = []  # what a CPU host or simulated GPUs record
    assert report._gpu_readings(Result.from_json(cpu)) == ""

