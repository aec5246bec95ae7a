"""The GPU smoke check's own judgement (benchmarks/gpu_smoke.py), where a GPU cannot be had: its
stages fit one device call, and a check that found nothing to check fails instead of passing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import benchmark_module

gpu_smoke = benchmark_module("gpu_smoke")  # the call
gpu_checks = benchmark_module("gpu_checks")  # its study and checks
gpu_carry = benchmark_module("gpu_carry")  # what it carries


def test_the_stages_fit_one_device_call():
    limits = gpu_smoke.limits_for(True, [])
    assert list(limits) == ["install", "import", "offline", "build", "model", "pipeline"]
    fixed = sum(v for v in limits.values() if v is not None)  # the GPU build takes what is left
    assert fixed + 300 < gpu_smoke.CALL_BUDGET_S == 540  # of the call's 600 s: 5 minutes or more to compile
    assert gpu_smoke.limits_for(True, ["build=5"])["build"] == 5
    with pytest.raises(SystemExit, match="STAGE one of install"):
        gpu_smoke.limits_for(True, ["compile=5"])


GOOD_ENERGY = {"joules": 51.2, "source": "counter", "gpus": 1, "j_per_output_token": 0.8,
               "j_per_output_token_above_idle": 0.3, "j_per_token": 0.2, "output_tokens_per_j": 1.25}


def _study(tmp_path, *, telemetry: list, log: str, unchecked=(), energy=GOOD_ENERGY):
    launch = tmp_path / "results" / "launches" / "tp1-b4-ctx128" / "launch1.json"
    launch.parent.mkdir(parents=True)
    section = {"name": "short", "output_tokens": 64, "output_tok_s": 900.0, "acceptance_length": 2.0,
               "counters": {"llamacpp:tokens_predicted_total": 64}, "draft_tokens": 30, "draft_accepted": 20,
               "quiet_host": {"gpu_telemetry": telemetry}, "energy": energy}
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
    checks = held(gpu_checks.judge(study, str(tmp_path / "llama-server"), {"before": {}, "peak": {}, "after": {}},
                                  gpu=True))
    assert checks["NVML sees a GPU"] is False and checks["GPU memory came back after it"] is False
    assert checks["GPU memory rose during the run"] is False
    assert checks["each section's telemetry holds clocks, power and memory"] is False
    assert checks["the server logs show the model's weights in a CUDA buffer"] is False


def test_a_run_on_the_gpu_that_held_passes_each_check(tmp_path):
    study = _study(tmp_path, telemetry=GOOD_TELEMETRY, log=OFFLOADED)
    memory = {"before": {"0": 500 << 20}, "peak": {"0": 1700 << 20}, "after": {"0": 510 << 20}}
    checks = held(gpu_checks.judge(study, str(tmp_path / "llama-server"), memory, gpu=True))
    on_gpu = {k: v for k, v in checks.items() if any(w in k for w in ("GPU", "CUDA", "telemetry", "energy"))}
    assert "each section records its energy per output token" in on_gpu
    assert on_gpu and all(on_gpu.values()), checks
    assert checks["tokens are the server's counter's"] and checks["no llama-server process left"]
    assert checks["both configurations measured"] is False  # one launch file was written here, not two


@pytest.mark.parametrize("broken", ["no memory reading", "layers on the CPU", "weights in an empty CUDA buffer",
                                    "memory kept", "memory never rose", "no energy", "energy of zero"])
def test_each_gpu_check_fails_on_its_own_fault(tmp_path, broken):
    unread = [{**GOOD_TELEMETRY[0], "memory_used_mib_max": None}]
    telemetry = unread if broken == "no memory reading" else GOOD_TELEMETRY
    log = {"layers on the CPU": ON_THE_CPU[0], "weights in an empty CUDA buffer": ON_THE_CPU[1]}.get(broken, OFFLOADED)
    after = (900 << 20) if broken == "memory kept" else (500 << 20)
    peak = (510 << 20) if broken == "memory never rose" else (1700 << 20)
    energy = {"no energy": None, "energy of zero": {**GOOD_ENERGY, "j_per_output_token": 0.0}}.get(broken, GOOD_ENERGY)
    study = _study(tmp_path, telemetry=telemetry, log=log, energy=energy)
    memory = {"before": {"0": 500 << 20}, "peak": {"0": peak}, "after": {"0": after}}
    checks = held(gpu_checks.judge(study, str(tmp_path / "llama-server"), memory, gpu=True))
    one_launch = {"both configurations measured", "the budget configuration drafted"}  # one file written here
    failed = {k for k, v in checks.items() if v is False} - one_launch
    expected = {"no memory reading": "each section's telemetry holds clocks, power and memory",
                "layers on the CPU": "the server logs show the model's weights in a CUDA buffer",
                "weights in an empty CUDA buffer": "the server logs show the model's weights in a CUDA buffer",
                "memory kept": "GPU memory came back after it", "memory never rose": "GPU memory rose during the run",
                "no energy": "each section records its energy per output token",
                "energy of zero": "each section records its energy per output token"}
    assert failed == {expected[broken]}


def test_a_server_left_running_is_found_by_its_program_not_by_a_word_in_another_command_line(tmp_path):
    binary = tmp_path / "llama-server"
    shutil.copy(shutil.which("sleep"), binary)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(binary)])
    try:
        assert gpu_checks.llama_processes(str(binary)) == []  # the path is only an argument here
        server = subprocess.Popen([str(binary), "60"])
        try:
            assert [p["pid"] for p in gpu_checks.llama_processes(str(binary))] == [server.pid]
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
    checks = gpu_checks.judge(study, str(tmp_path / "llama-server"), memory, gpu=True)
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

    doc = study.validate_study(gpu_checks.smoke_study("/x/llama-server", "/x/model.gguf", 4, gpu=True))
    assert doc["retries"] >= 1 and doc["retries"] == study.validate_study({})["retries"]


# --- what comes back from $OUT (issue 40.1) -------------------------------------------------------

def _write(path, data: bytes = b"x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_eight_files_two_folders_down_under_16_mib_come_back(tmp_path):
    for i in range(7):
        _write(tmp_path / f"f{i}.log")
    _write(tmp_path / "a" / "b" / "deepest.log")
    assert gpu_smoke.unreturnable(tmp_path) == []


@pytest.mark.parametrize("fault", ["nine files", "three folders down", "16 MiB"])
def test_what_would_not_come_back_is_named(tmp_path, fault):
    _write(tmp_path / "gpu_smoke.json", b"{}")
    if fault == "nine files":
        for i in range(8):
            _write(tmp_path / f"stage{i}.log")
    elif fault == "three folders down":
        _write(tmp_path / "study-logs" / "server" / "tp1-b0-ctx128" / "launch1.log")
    else:
        with open(tmp_path / "logs.tar.xz", "wb") as fh:
            fh.truncate(16 << 20)  # sparse: the size is what counts
    [problem] = gpu_smoke.unreturnable(tmp_path)
    expected = {"nine files": "9 files, more than the 8", "three folders down": "3 folders down, more than 2",
                "16 MiB": "logs.tar.xz: 16777216 bytes, not under 16777216"}[fault]
    assert expected in problem


def test_every_log_however_deep_goes_into_one_archive_that_comes_back(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "out"
    out.mkdir()
    _write(logs / "pipeline.log", b"snakemake said\n")
    _write(logs / "study-logs" / "server" / "tp1-b0-ctx128" / "launch1.log", b"CUDA0 model buffer size = 1 MiB\n")
    packed = gpu_smoke.pack_logs(logs, out / "logs.tar.xz")
    assert packed["files"] == 2 and packed["cut_to_tail_bytes"] is None
    assert gpu_smoke.unreturnable(out) == [] and [p.name for p in out.iterdir()] == ["logs.tar.xz"]
    with tarfile.open(out / "logs.tar.xz") as tar:
        assert sorted(tar.getnames()) == ["pipeline.log", "study-logs/server/tp1-b0-ctx128/launch1.log"]
        assert tar.extractfile("study-logs/server/tp1-b0-ctx128/launch1.log").read().startswith(b"CUDA0")


def test_an_archive_too_big_to_come_back_keeps_each_logs_end(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    _write(logs / "build-cmake.log", os.urandom(200_000) + b"\nFAILED: the last step\n")
    monkeypatch.setattr(gpu_smoke, "LOG_TAIL_BYTES", 4096)
    packed = gpu_smoke.pack_logs(logs, tmp_path / "logs.tar.xz", limit=100_000)
    assert packed["cut_to_tail_bytes"] == 4096 and packed["bytes"] < 100_000
    with tarfile.open(tmp_path / "logs.tar.xz") as tar:
        [name] = tar.getnames()
        assert name == "build-cmake.log.tail" and tar.extractfile(name).read().endswith(b"FAILED: the last step\n")


def test_the_summary_fits_the_output_that_comes_back_and_says_where_it_stopped():
    stages = [{"stage": n, "status": "ok", "seconds": 2.0, "limit_s": 20, "log": f"{n}.log", "tail": ""}
              for n in ("install", "import", "offline", "build", "model")]
    stages.append({"stage": "pipeline", "status": "failed", "exit_code": 1, "seconds": 70.0, "limit_s": 75,
                   "log": "pipeline.log", "tail": "x" * 5000 + "\nMissingOutputException: the last line"})
    checks = [{"check": f"check {i}", "held": i % 3 == 0 or None, "detail": "d" * 1000} for i in range(300)]
    doc = {"mode": "gpu", "held": False, "stopped_at": "pipeline", "stages": stages, "checks": checks,
           "error": "E" * 9000, "logs": {"archive": "logs.tar.xz", "bytes": 1234}}
    text = gpu_smoke.summary(doc)
    assert len(text) < gpu_smoke.RETURN_CHARS
    assert text.startswith("gpu_smoke: mode gpu, held False, stopped at pipeline")
    assert all(f"stage {n}" in text for n in ("install", "build", "pipeline"))
    few = gpu_smoke.summary({**doc, "checks": checks[:5], "error": None})
    assert "check held check 0" in few and "check n/a  check 1" in few
    assert few.endswith("MissingOutputException: the last line") and "logs.tar.xz" in few


# --- a first call that fits: the build's limit and the carried server (issue 40.2) ----------------

def test_the_in_call_build_gets_what_the_call_has_left():
    limits = gpu_smoke.limits_for(True, [])
    assert limits["build"] is None
    left = gpu_smoke.CALL_BUDGET_S - 100 - limits["model"] - limits["pipeline"]
    assert gpu_smoke.stage_limit("build", limits, elapsed=100) == left
    assert gpu_smoke.stage_limit("install", limits, elapsed=100) == 20
    assert gpu_smoke.stage_limit("build", gpu_smoke.limits_for(True, ["build=30"]), elapsed=100) == 30
    assert gpu_smoke.limits_for(False, [])["build"] == 1200


def _server(tmp_path, *, cuda_arch=None, link: str | None = None) -> Path:
    """A cache folder as provision_server leaves it: bin/llama-server (a real program, linked to
    ``link``'s shared library where given) and its manifest."""
    from specsweep.cache import sha256_file

    folder = tmp_path / "made" / "llama-server" / "0.3.36-abc-1234"
    binary = folder / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    if link:
        lib = tmp_path / "libs"
        lib.mkdir()
        (lib / f"{link}.c").write_text("int gone(void) { return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / f"lib{link}.so"), str(lib / f"{link}.c")],
                       check=True)
        (lib / "main.c").write_text("int gone(void); int main(void) { return gone(); }\n")
        subprocess.run(["gcc", "-o", str(binary), str(lib / "main.c"), f"-L{lib}", f"-l{link}"], check=True)
        shutil.rmtree(lib)  # the library it links is not on this machine
    else:
        shutil.copy(shutil.which("true"), binary)
    manifest = {"binary": str(binary), "binary_sha256": sha256_file(binary), "cuda_arch": cuda_arch,
                "built_at": "2026-12-04T05:00:00Z"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder / "manifest.json"


def test_a_carried_server_lands_in_the_work_cache_where_provisioning_finds_it(tmp_path):
    from specsweep.cache import valid_manifest

    carry, work, logs = tmp_path / "carry", tmp_path / "work", tmp_path / "logs"
    carry.mkdir(), logs.mkdir()
    packed = gpu_carry.pack_server(_server(tmp_path), carry)
    assert packed["archive"] == gpu_carry.PREBUILT and (carry / gpu_carry.PREBUILT).stat().st_size == packed["bytes"]
    shutil.rmtree(tmp_path / "made")  # the GPU machine has only the carry
    entry = gpu_carry.unpack_server(carry, work, dict(os.environ), logs, gpu=False)
    assert entry["used"] is True, entry
    found = valid_manifest(work / "cache" / "llama-server" / "0.3.36-abc-1234" / "manifest.json", "binary")
    assert found and found["binary"] == entry["binary"] and Path(entry["binary"]).is_relative_to(work)
    assert "libc.so" in (logs / "prebuilt-ldd.log").read_text()


@pytest.mark.parametrize("fault", ["a library the loader finds nowhere", "built for the GPU", "binary changed"])
def test_a_carried_server_that_cannot_run_here_is_set_aside_for_the_build(tmp_path, fault):
    carry, work, logs = tmp_path / "carry", tmp_path / "work", tmp_path / "logs"
    carry.mkdir(), logs.mkdir()
    manifest = _server(tmp_path, link="gone" if fault.startswith("a library") else None,
                       cuda_arch="90-real" if fault == "built for the GPU" else None)
    if fault == "binary changed":
        (manifest.parent / "bin" / "llama-server").write_bytes(b"#!/bin/sh\n")
    gpu_carry.pack_server(manifest, carry)
    entry = gpu_carry.unpack_server(carry, work, dict(os.environ), logs, gpu=False)
    why = {"a library the loader finds nowhere": "the loader finds no libgone.so",
           "built for the GPU": "built for CUDA 90-real", "binary changed": "SHA-256 differs"}[fault]
    assert entry["used"] is False and why in entry["why"] and "the build stage compiles" in entry["why"]
    assert not (work / "cache" / "llama-server" / "0.3.36-abc-1234").exists()


def test_no_carried_server_means_the_build_stage_builds(tmp_path):
    assert gpu_carry.unpack_server(tmp_path, tmp_path / "work", {}, tmp_path, gpu=True) is None


def test_the_telemetry_check_names_the_gpu_the_driver_and_the_figures_it_judged(tmp_path):
    study = _study(tmp_path, telemetry=GOOD_TELEMETRY, log=OFFLOADED)
    launch = study / "results" / "launches" / "tp1-b4-ctx128" / "launch1.json"
    doc = json.loads(launch.read_text())
    doc["hardware"] = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1"}], "gpu_driver": "580.65.06"}
    launch.write_text(json.dumps(doc))
    memory = {"before": {"0": 500 << 20}, "peak": {"0": 1700 << 20}, "after": {"0": 510 << 20}}
    checks = gpu_checks.judge(study, str(tmp_path / "llama-server"), memory, gpu=True)
    found = next(c for c in checks if c["check"] == "each section's telemetry holds clocks, power and memory")
    assert found["held"] and found["detail"] == [{
        "section": "tp1-b4-ctx128/short", "gpus": ["NVIDIA H100 80GB HBM3"], "driver": "580.65.06",
        "readings": [{"gpu": "0", "sm_clock_mhz_max": 1980, "power_w_max": 250.0, "memory_used_mib_max": 1200}]}]


def test_a_study_that_wrote_no_launch_result_says_which_checks_it_could_not_judge(tmp_path):
    failure = tmp_path / "results" / "failures" / "tp1-b4-ctx128" / "attempt1.json"
    failure.parent.mkdir(parents=True)
    failure.write_text('{"class": "server-died"}')
    memory = {"before": {"0": 500 << 20}, "peak": {"0": 1700 << 20}, "after": {"0": 510 << 20}}
    checks = {c["check"]: c for c in gpu_checks.judge(tmp_path, str(tmp_path / "llama-server"), memory, gpu=True)}
    unjudged = {k for k, c in checks.items() if c["held"] is None}
    assert unjudged == {"tokens are the server's counter's", "the budget configuration drafted",
                        "the server said its limits before measuring",
                        "each section's telemetry holds clocks, power and memory",
                        "each section records its energy per output token",
                        "the server logs show the model's weights in a CUDA buffer"}
    assert all(checks[k]["detail"].startswith("not judged: no launch result was written") for k in unjudged)
    # What needs no result is judged as ever: the launches that were owed are missing.
    assert checks["both configurations measured"]["held"] is False and checks["NVML sees a GPU"]["held"] is True
    kept = gpu_smoke.keep_results(tmp_path, tmp_path / "kept")
    assert kept == ["failures/tp1-b4-ctx128/attempt1.json"]
    assert (tmp_path / "kept" / kept[0]).read_text() == '{"class": "server-died"}'


def test_a_pipeline_that_failed_late_is_still_judged_and_says_where_it_stopped(tmp_path, monkeypatch):
    """Issue 56.7: a summary or plot that failed after the launches leaves its checks judged."""
    study = _study(tmp_path / "work" / "study", telemetry=GOOD_TELEMETRY, log=OFFLOADED)
    monkeypatch.setattr(gpu_smoke, "prepare", lambda carry, work: None)

    def failed_late(args, report, *rest):
        report.doc["binary"] = str(tmp_path / "llama-server")
        report.stage({"stage": "pipeline", "status": "failed", "exit_code": 1, "seconds": 1.0, "limit_s": 9,
                      "log": "pipeline.log", "tail": "Error in rule plot"})
        return False

    monkeypatch.setattr(gpu_smoke, "stages", failed_late)
    monkeypatch.setattr(sys, "argv", ["gpu_smoke.py", "--cpu", "--out", str(tmp_path / "out"),
                                      "--work", str(tmp_path / "work"), "--carry", str(tmp_path / "carry")])
    assert gpu_smoke.main() == 1 and study.is_dir()
    doc = json.loads((tmp_path / "out" / "gpu_smoke.json").read_text())
    assert doc["stopped_at"] == "pipeline" and doc["held"] is False
    checks = held(doc["checks"])
    assert checks["tokens are the server's counter's"] is True and checks["no llama-server process left"] is True
