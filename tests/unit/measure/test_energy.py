"""Energy per token (measure/energy.py, from host/gpu_watch.py's readings): NVML's energy counter
over the window, power integrated where there is none or where it reset, what a token cost above
idle, and none without a GPU."""

from __future__ import annotations

import pytest

from gpu_box import box, h100
from specsweep.host import gpu_watch, host_facts
from specsweep.measure import energy


def _samples(times, power_w, counter_mj=None):
    return [{"gpu": "0", "at_s": t, "power_w": w, "energy_mj": None if counter_mj is None else counter_mj[i],
             "sm_clock_mhz": 1980, "temperature_c": 40, "reasons": 0}
            for i, (t, w) in enumerate(zip(times, power_w))]


def test_the_counter_gives_the_energy_where_the_gpu_has_one():
    found = gpu_watch.gpu_energy(_samples([10.0, 10.5, 12.0], [300, 500, 500], [1_000_000, 1_150_000, 1_900_000]))
    assert found == {"joules": 900.0, "source": "counter", "window_s": 2.0}
    # NVML updates the counter about every 10 ms: two readings closer than that read the same, and
    # a counter that stood still between them has not reset.
    held = gpu_watch.gpu_energy(_samples([0.0, 0.005, 1.0], [300, 300, 300], [2_000_000, 2_000_000, 2_300_000]))
    assert held == {"joules": 300.0, "source": "counter", "window_s": 1.0}


def test_power_integrated_over_time_where_the_counter_is_missing():
    found = gpu_watch.gpu_energy(_samples([0.0, 1.0, 3.0], [100, 300, 500]))
    # Trapezoids: 1 s at (100 + 300) / 2 and 2 s at (300 + 500) / 2.
    assert found == {"joules": 200.0 + 800.0, "source": "power", "window_s": 3.0}


def test_a_counter_that_went_backwards_is_not_trusted():
    found = gpu_watch.gpu_energy(_samples([0.0, 1.0, 2.0], [200, 200, 200], [5_000_000, 200, 400_200]))
    assert found["joules"] == pytest.approx(400.0) and found["source"].startswith("power (the counter went backwards")


def test_one_sample_measures_no_window():
    assert gpu_watch.gpu_energy(_samples([0.0], [200])) is None


def test_a_section_says_what_a_token_cost_gross_above_idle_and_per_token_of_either_kind():
    per_gpu = gpu_watch.telemetry(_samples([0.0, 2.0], [400, 400], [0, 1_000_000])
                                  + [{**s, "gpu": "1"} for s in _samples([0.0, 2.0], [300, 300])])
    assert [(g["energy_j"], g["energy_source"]) for g in per_gpu] == [(1000.0, "counter"), (600.0, "power")]
    spent = energy.section_energy(per_gpu, {"0": 100.0, "1": 50.0}, output_tokens=400, prompt_tokens=1200)
    assert spent["joules"] == 1600.0 and spent["source"] == "counter + power" and spent["gpus"] == 2
    assert spent["j_per_output_token"] == 4.0 and spent["j_per_token"] == 1.0
    assert spent["j_per_output_token_above_idle"] == pytest.approx((1600 - 100 * 2 - 50 * 2) / 400)
    assert spent["output_tokens_per_j"] == 0.25
    # Without an idle reading of every GPU, no figure above idle (never one that leaves a GPU out).
    assert energy.section_energy(per_gpu, {"0": 100.0}, output_tokens=400, prompt_tokens=0)[
        "j_per_output_token_above_idle"] is None


def test_no_gpu_no_energy_never_zero():
    assert energy.section_energy([], {}, output_tokens=100, prompt_tokens=10) is None
    assert gpu_watch.idle_power(()) == {}


def test_nvml_answers_the_counter_or_says_the_gpu_has_none(nvml):
    nvml({"gpus": [h100(0, energy_mj=123_456), h100(1)]})
    samples = {s["gpu"]: s for s in host_facts.gpu_sample(("0", "1"))}
    assert samples["0"]["energy_mj"] == 123_456 and samples["1"]["energy_mj"] is None
    assert samples["0"]["at_s"] > 0
    assert gpu_watch.idle_power(("0", "1")) == {"0": 118.0, "1": 118.0}  # the box's idle draw, in W


def test_the_counter_read_through_nvml_gives_the_sampled_window(nvml):
    nvml(box(energy_mj=1_000_000))
    sampler = gpu_watch.Sampler(("0",))
    sampler.start()
    nvml(box(energy_mj=1_250_000))  # 250 J later, as the section ran
    row = sampler.stop()[0]
    assert row["energy_j"] == 250.0 and row["energy_source"] == "counter" and row["energy_window_s"] > 0


def test_a_dip_between_two_readings_is_a_reset_even_when_the_ends_agree():
    found = gpu_watch.gpu_energy(_samples([0.0, 1.0, 2.0], [100, 100, 100], [1_000, 500, 2_000]))
    assert found["source"].startswith("power") and found["joules"] == pytest.approx(200.0)


def test_the_edges_of_a_sections_energy():
    def one(joules: float) -> list[dict]:
        return [{"gpu": "0", "energy_j": joules, "energy_source": "counter", "energy_window_s": 1.0}]

    assert energy.section_energy(one(5.0), {}, output_tokens=0, prompt_tokens=10) is None  # no token: no per-token
    single = energy.section_energy(one(5.0), {}, output_tokens=1, prompt_tokens=0)
    assert single["j_per_output_token"] == 5.0
    small = energy.section_energy(one(0.5), {}, output_tokens=2, prompt_tokens=0)
    assert small["output_tokens_per_j"] == 4.0  # under a joule is still energy
    assert energy.section_energy(one(1000.12345), {}, output_tokens=10, prompt_tokens=0)["joules"] == 1000.123
