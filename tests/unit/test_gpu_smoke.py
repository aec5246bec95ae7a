"""The GPU smoke check's own judgement (benchmarks/gpu_smoke.py), where a GPU cannot be had: its
stages fit one device call, and a check that found nothing to check fails instead of passing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import benchmark_module

gpu_smoke = benchmark_module("gpu_smoke")


def test_the_stages_fit_one_device_call():
    limits = gpu_smoke.limits_for(True, [])
    assert list(limits) == ["install", "import", "offline", "build", "model", "pipeline"]
    assert sum(limits.values()) < gpu_smoke.CALL_BUDGET_S == 540  # of the call's 600 s
    assert gpu_smoke.limits_for(True, ["build=5"])["build"] == 5
    with pytest.raises(SystemExit, match="STAGE one of install"):
        gpu_smoke.limits_for(True, ["compile=5"])


def _study(tmp_path, *, telemetry: list, log: str, unchecked=()):
    launch = tmp_path / "results" / "runs" / "tp1-b4-ctx128" / "launch1.json"
    launch.parent.mkdir(parents=True)
    section = {"name": "short", "output_tokens": 64, "output_tok_s": 900.0, "acceptance_length": 2.0,
               "counters": {"llamacpp:tokens_predicted_total": 64}, "draft_tokens": 30, "draft_accepted": 20,
               "quiet_host": {"gpu_telemetry": telemetry}}
    launch.write_text(json.dumps({"name": "tp1-b4-ctx128", "sections": [section], "lease": {"devices": ["0"]},
                                  "hardware": {"gpus": []}, "server": {"version": "b1", "preflight": {
                                      "checked": ["context: 4096 tokens, 161 needed"], "unchecked": list(unchecked)}}}))
    server_log = tmp_path / "logs" / "server" / "tp1-b4-ctx128" / "launch1.log"
    server_log.parent.mkdir(parents=True)
    server_log.write_text(log)
    return tmp_path


GOOD_TELEMETRY = [{"gpu": "0", "sm_clock_mhz": {"min": 1400, "mean": 1800, "max": 1980},
                   "power_w": {"mean": 200.0, "max": 250.0}, "memory_used_mib_max": 1200}]
# As llama.cpp logs a load (src/llama-model.cpp), all of the weights on the GPU:
OFFLOADED = ("llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H200) - 140000 MiB free\n"
             "load_tensors: offloaded 5/5 layers to GPU\n"
             "load_tensors:   CPU_Mapped model buffer size =     0.50 MiB\n"
             "load_tensors:        CUDA0 model buffer size =    12.00 MiB\n")
# The same request with the weights left on the CPU: the layer count and the device line read the
# request, not the placement (issue 40.5); only the buffer lines tell.
ON_THE_CPU = [OFFLOADED.replace("       CUDA0 model", "  CPU_Mapped model"), OFFLOADED.replace("12.00 MiB", "0.00 MiB")]


def held(checks: list[dict]) -> dict:
    return {c["check"]: c["held"] for c in checks}


def test_a_gpu_that_nvml_does_not_see_fails_instead_of_passing_empty(tmp_path):
    study = _study(tmp_path, telemetry=[], log="load_tensors: offloaded 0/5 layers to GPU\n")
    checks = held(gpu_smoke.judge(study, str(tmp_path / "llama-server"), {"before": {}, "peak": {}, "after": {}},
                                  gpu=True))
    assert checks["NVML sees a GPU"] is False and checks["GPU memory came back after it"] is False
    assert checks["GPU memory rose during the run"] is False
    assert checks["each section's telemetry holds clocks, power and memory"] is False
    assert checks["the server logs show the model's weights in a CUDA buffer"] is False


def test_a_run_on_the_gpu_that_held_passes_each_check(tmp_path):
    study = _study(tmp_path, telemetry=GOOD_TELEMETRY, log=OFFLOADED)
    memory = {"before": {"0": 500 << 20}, "peak": {"0": 1700 << 20}, "after": {"0": 510 << 20}}
    checks = held(gpu_smoke.judge(study, str(tmp_path / "llama-server"), memory, gpu=True))
    gpu_checks = {k: v for k, v in checks.items() if "GPU" in k or "CUDA" in k or "telemetry" in k}
    assert gpu_checks and all(gpu_checks.values()), checks
    assert checks["tokens are the server's counter's"] and checks["no llama-server process left"]
    assert checks["both configurations measured"] is False  # one launch file was written here, not two


@pytest.mark.parametrize("broken", ["no memory reading", "layers on the CPU", "weights in an empty CUDA buffer",
                                    "memory kept", "memory never rose"])
def test_each_gpu_check_fails_on_its_own_fault(tmp_path, broken):
    unread = [{**GOOD_TELEMETRY[0], "memory_used_mib_max": None}]
    telemetry = unread if broken == "no memory reading" else GOOD_TELEMETRY
    log = {"layers on the CPU": ON_THE_CPU[0], "weights in an empty CUDA buffer": ON_THE_CPU[1]}.get(broken, OFFLOADED)
    after = (900 << 20) if broken == "memory kept" else (500 << 20)
    peak = (510 << 20) if broken == "memory never rose" else (1700 << 20)
    study = _study(tmp_path, telemetry=telemetry, log=log)
    memory = {"before": {"0": 500 << 20}, "peak": {"0": peak}, "after": {"0": after}}
    checks = held(gpu_smoke.judge(study, str(tmp_path / "llama-server"), memory, gpu=True))
    one_launch = {"both configurations measured", "the budget configuration drafted"}  # one file written here
    failed = {k for k, v in checks.items() if v is False} - one_launch
    expected = {"no memory reading": "each section's telemetry holds clocks, power and memory",
                "layers on the CPU": "the server logs show the model's weights in a CUDA buffer",
                "weights in an empty CUDA buffer": "the server logs show the model's weights in a CUDA buffer",
                "memory kept": "GPU memory came back after it", "memory never rose": "GPU memory rose during the run"}
    assert failed == {expected[broken]}


def test_a_server_left_running_is_found_by_its_program_not_by_a_word_in_another_command_line(tmp_path):
    binary = tmp_path / "llama-server"
    shutil.copy(shutil.which("sleep"), binary)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(binary)])
    try:
        assert gpu_smoke.llama_processes(str(binary)) == []  # the path is only an argument here
        server = subprocess.Popen([str(binary), "60"])
        try:
            assert [p["pid"] for p in gpu_smoke.llama_processes(str(binary))] == [server.pid]
        finally:
            server.kill()
            server.wait()
    finally:
        bystander.kill()
        bystander.wait()


def test_a_launch_whose_checks_read_nothing_fails_the_smoke_check(tmp_path):
    unread = ["context not checked: /props answered 404"]
    study = _study(tmp_path, telemetry=GOOD_TELEMETRY, log=OFFLOADED, unchecked=unread)
    memory = {"before": {"0": 500 << 20}, "peak": {"0": 1700 << 20}, "after": {"0": 510 << 20}}
    checks = gpu_smoke.judge(study, str(tmp_path / "llama-server"), memory, gpu=True)
    said = next(c for c in checks if c["check"] == "the server said its limits before measuring")
    assert said["held"] is False and said["detail"] == unread


def test_a_judgement_that_raises_still_leaves_the_json_saying_so(tmp_path, monkeypatch):
    """Issue 40.5: judge() runs inside the try, so a failure of the check itself is in the JSON."""
    def broken_judge(*args, **kwargs):
        raise KeyError("sections")

    monkeypatch.setattr(gpu_smoke, "prepare", lambda carry, work: None)
    def built(args, report, *rest):
        report.doc["binary"] = str(tmp_path / "llama-server")
        return True

    monkeypatch.setattr(gpu_smoke, "stages", built)
    monkeypatch.setattr(gpu_smoke, "judge", broken_judge)
    monkeypatch.setattr(sys, "argv", ["gpu_smoke.py", "--cpu", "--out", str(tmp_path / "out"),
                                      "--work", str(tmp_path / "work"), "--carry", str(tmp_path / "carry")])
    assert gpu_smoke.main() == 1
    doc = json.loads((tmp_path / "out" / "gpu_smoke.json").read_text())
    assert doc["error"] == "KeyError: 'sections'" and doc["stopped_at"] == "script" and doc["held"] is False


def test_the_smoke_study_retries_a_transient_failure_as_any_study_does():
    """Issue 40.5: one host-not-quiet section must not end the device call's only pipeline run."""
    from specsweep import study

    doc = study.validate_study(gpu_smoke.smoke_study("/x/llama-server", "/x/model.gguf", 4, gpu=True))
    assert doc["retries"] >= 1 and doc["retries"] == study.validate_study({})["retries"]
