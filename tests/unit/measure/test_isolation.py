"""A number measured alone, the cause of this attempt read right, secrets never written.

Unit tests for the pure parts (redaction, bind checks, the guard's arithmetic, device leases
with simulated GPU ids) and CLI runs against tests/doubles/fault_server.py for the rest; the real
llama-server tests are in test_isolation_e2e.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types

import psutil
import pytest

from conftest import NAME, REPO, fault_study, run_cli
from specsweep.errors import ConfigError, DeviceBusy, NoisyHost, PortConflict
from specsweep.measure import host_facts as hardware
from specsweep.measure import leases as devices
from specsweep.measure import quiet_host as hostload
from specsweep.records import store as results
from specsweep.servers import templates as command

GUARD = hostload.Guard(max_foreign_cores=0.25, max_repeat_spread=0.5, retry_pause_s=0, max_gpu_slowed_share=0.05)


# --- secrets and exposure ---------------------------------------------------------------------

def test_redact_hides_secret_flags_variables_and_known_values():
    argv = ["srv", "--api-key", "sk-1", "--hf-token=abc", "HF_TOKEN=xyz", "--tokenizer", "tok",
            "--num-speculative-tokens", "4", "--token-delay", "0.1", "--note", "has sk-1 inside"]
    assert command.redact(argv, ("sk-1",)) == [
        "srv", "--api-key", "<redacted>", "--hf-token=<redacted>", "HF_TOKEN=<redacted>", "--tokenizer", "tok",
        "--num-speculative-tokens", "4", "--token-delay", "0.1", "--note", "has <redacted> inside"]


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token", "--db-password"])
def test_a_literal_secret_in_the_study_is_refused(flag):
    with pytest.raises(ConfigError, match="api_key_env"):
        command.check_no_literal_secret("server.command", ["srv", flag, "s3cret"])
    command.check_no_literal_secret("server.command", ["srv", flag, "{api_key}"])  # the way to do it


@pytest.mark.parametrize("host, refused", [("0.0.0.0", True), ("::", True), ("10.1.2.3", True),
                                           ("gpu-node-7", True), ("127.0.0.1", False), ("127.0.0.9", False),
                                           ("localhost", False), ("::1", False), ("{host}", False)])
def test_binding_beyond_loopback_must_be_meant(host, refused):
    args = ["srv", "--host", host, "--port", "{port}"]
    if refused:
        with pytest.raises(ConfigError, match="allow_remote_bind"):
            command.check_bind("server.command", args, allowed=False)
        command.check_bind("server.command", args, allowed=True)
    else:
        command.check_bind("server.command", args, allowed=False)


def test_missing_api_key_variable_fails_before_any_launch(tmp_path, model, monkeypatch):
    monkeypatch.delenv("SPECSWEEP_TEST_NO_SUCH_KEY", raising=False)
    study = fault_study(model, api_key_env="SPECSWEEP_TEST_NO_SUCH_KEY")
    study["server"]["command"] += ["--api-key", "{api_key}"]
    rc, err = run_cli(tmp_path, study)
    assert rc == 2 and "SPECSWEEP_TEST_NO_SUCH_KEY" in err and "not set" in err
    assert "server pid" not in err


def test_a_failure_record_never_holds_the_key(tmp_path, model, monkeypatch):
    key = "sk-planted-0123456789"
    monkeypatch.setenv("SPECSWEEP_TEST_KEY", key)
    study = fault_study(model, "die-at-request:2", api_key_env="SPECSWEEP_TEST_KEY")
    study["server"]["command"] += ["--api-key", "{api_key}", "--echo-args"]  # the server prints its argv
    rc, err = run_cli(tmp_path, study)
    assert rc == 12, err
    assert "--api-key <redacted>" in err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path


# --- the cause of this attempt only -------------------------------------------------------------

@pytest.mark.parametrize("earlier", ["cuda-crash", "bind-error"])
def test_an_earlier_attempts_log_lines_never_name_this_failure(tmp_path, model, earlier):
    if earlier == "cuda-crash":
        rc, _ = run_cli(tmp_path, fault_study(model, "crash-at-request:2"))
        assert rc == 12
        assert results.latest_failure(tmp_path / "failures", NAME).to_json()["signature"] == "cuda-illegal-instruction"
    else:
        (tmp_path / "server.log").write_text("error: couldn't bind HTTP server socket, hostname: 127.0.0.1\n")
    rc, err = run_cli(tmp_path, fault_study(model, "exit-at-startup"), "--attempt", "2")
    record = results.latest_failure(tmp_path / "failures", NAME).to_json()
    assert rc == 10, err
    assert record["class"] == "server-start" and record["transient"] is False
    assert record["signature"] == "bad-arguments"
    assert "illegal instruction" not in record["server_log_tail"] and "couldn't bind" not in record["server_log_tail"]
    assert "the argument has been removed" in record["server_log_tail"]


# --- manifests and internal errors: never a traceback -----------------------------------------

def test_a_manifest_that_is_not_an_object_is_a_clear_error(tmp_path):
    (tmp_path / "server.json").write_text("[1, 2]")
    (tmp_path / "model.json").write_text('{"model": "/m.gguf"}')
    proc = subprocess.run([sys.executable, "-m", "specsweep", "run", "--config", "config/config.yaml",
                           "--name", "tp1-b0-ctx128", "--server-manifest", str(tmp_path / "server.json"),
                           "--model-manifest", str(tmp_path / "model.json")],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    assert "must be a JSON object" in proc.stderr and "Traceback" not in proc.stderr


# --- the quiet-host guard -----------------------------------------------------------------------

def test_foreign_cpu_counts_others_and_new_processes_only():
    before = {1: (100.0, 5.0, "me"), 2: (100.0, 1.0, "server"), 3: (100.0, 2.0, "hog"), 4: (100.0, 9.0, "gone")}
    after = {1: (100.0, 6.0, "me"), 2: (100.0, 3.0, "server"), 3: (100.0, 3.5, "hog"),
             5: (150.0, 0.5, "newcomer"), 6: (50.0, 0.0, "idle")}
    load = hostload.foreign_cpu(before, after, own={1, 2}, wall_s=2.0)
    assert load["cpu_s"] == pytest.approx(2.0) and load["cores"] == pytest.approx(1.0)
    assert [p["name"] for p in load["top"]] == ["hog", "newcomer"]
    reused = hostload.foreign_cpu({7: (1.0, 50.0, "old")}, {7: (2.0, 0.25, "new")}, own=set(), wall_s=1.0)
    assert reused["cpu_s"] == pytest.approx(0.25)  # a reused pid is a new process, not a negative delta


def test_a_child_reaped_during_the_section_counts_only_its_time_inside_it():
    # cc1plus had used 40 s before the section and 0.5 s inside it, then ended: make's children
    # times jump by 40.5 s, of which only 0.5 s belong to the section.
    before = {10: (100.0, 3.0, "make", 1), 11: (100.0, 40.0, "cc1plus", 10), 12: (100.0, 7.0, "orphan", 99)}
    after = {10: (100.0, 43.5, "make", 1), 1: (1.0, 7.0 + 0.2, "init", 0)}
    load = hostload.foreign_cpu(before, after, own=set(), wall_s=1.0)
    assert load["cpu_s"] == pytest.approx(0.5 + 0.2)
    assert [p["name"] for p in load["top"]] == ["make", "init"]


def _load(cores: float, wall: float = 2.0, gpu=(), waited: float | None = None) -> dict:
    """A section's figures: others used ``cores`` on the server's CPUs, the server waited ``waited`` (all of it)."""
    waited = cores if waited is None else waited
    return {"cpu_s": cores * wall, "cores": cores, "top": [{"pid": 9, "name": "hog", "cpu_s": cores * wall}],
            "cores_on_server_cpus": cores, "server_wait_cores": waited, "contended_cores": min(cores, waited),
            "gpu_processes": list(gpu)}


def test_guard_fails_a_section_above_its_threshold_and_passes_one_below():
    with pytest.raises(NoisyHost, match=r"0\.60 cores.*hog.*max_foreign_cores"):
        hostload.check("section medium", _load(0.6), GUARD, [100.0, 101.0], closed_loop=True)
    hostload.check("section medium", _load(0.2), GUARD, [100.0, 101.0], closed_loop=True)
    # Below the clock-tick floor a figure is resolution, not load: 0.04 CPU-s in a 40 ms section.
    hostload.check("section short", _load(1.0, wall=0.04), GUARD, [100.0], closed_loop=True)


def test_others_busy_while_the_server_never_waited_is_no_contention():
    """A 64-core host: daemons used 0.6 cores, the server found a CPU every time it was runnable."""
    hostload.check("section medium", _load(0.6, waited=0.01), GUARD, [100.0, 101.0], closed_loop=True)
    with pytest.raises(NoisyHost, match=r"took 0\.40 cores from the server \(the server waited for a CPU 0\.40"):
        hostload.check("section medium", _load(0.6, waited=0.4), GUARD, [100.0, 101.0], closed_loop=True)


def test_contention_is_the_smaller_of_the_servers_waiting_and_the_others_load_on_its_cpus():
    load = {"cores_on_server_cpus": 0.9}
    found = hostload.contention(load, (3.0, 1.0), {0, 1}, own_cores=1.8, wall_s=2.0)
    assert found == {"method": "schedstat", "server_wait_cores": 0.5, "server_wait_share": 0.25,
                     "contended_cores": 0.5}
    assert hostload.contention({"cores_on_server_cpus": 0.1}, (3.0, 1.0), {0, 1}, 1.8, 2.0)["contended_cores"] == 0.1
    # Without schedstat: the others' load beyond what the server and the harness left idle.
    idle = hostload.contention({"cores_on_server_cpus": 0.9}, None, {0, 1}, own_cores=1.5, wall_s=2.0)
    assert idle["method"] == "idle-cores" and idle["contended_cores"] == pytest.approx(0.4)
    assert hostload.contention({"cores_on_server_cpus": 3.0}, None, set(range(64)), 2.0, 2.0)["contended_cores"] == 0


def test_a_process_pinned_to_other_cpus_takes_nothing_from_the_server():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("needs 2 CPUs: this suite's machines have them (README, Testing)")
    cpus = sorted(os.sched_getaffinity(0))
    pinned = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              preexec_fn=lambda: os.sched_setaffinity(0, {cpus[1]}))
    try:
        used = [{"pid": pinned.pid, "cpu_s": 1.0}, {"pid": os.getpid(), "cpu_s": 0.5}]
        assert hostload.on_cpus(used, {cpus[0]}) == pytest.approx(0.5)  # ours may run there, the pinned one not
        assert hostload.on_cpus(used, {cpus[1]}) == pytest.approx(1.5)
        assert hostload.on_cpus(used, None) == pytest.approx(1.5)  # the server's CPUs unknown: all count
    finally:
        pinned.kill()
        pinned.wait()


def test_the_servers_waiting_is_read_from_the_kernels_per_thread_schedstat():
    before = hostload.schedstat({os.getpid()})
    assert before, "Linux keeps /proc/<pid>/task/<tid>/schedstat"
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        pass
    ran, waited = hostload.waited_s(before, hostload.schedstat({os.getpid()}))
    assert 0.15 < ran < 1.0 and waited >= 0
    assert hostload.waited_s(None, before) is None


def test_specsweeps_own_snakemake_and_queued_jobs_are_not_foreign():
    # A job queued for devices is `python -m specsweep run ...`; this one only looks like one.
    queued = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "-m", "specsweep", "run"])
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "specsweep"])
    try:
        time.sleep(0.3)
        found = hostload.ours(os.getpid())
        assert os.getppid() in found  # what started this process (Snakemake, for a job)
        assert queued.pid in found and stranger.pid not in found
    finally:
        for proc in (queued, stranger):
            proc.kill()
            proc.wait()


def test_guard_catches_closed_loop_repeats_that_disagree():
    with pytest.raises(NoisyHost, match="spread of 86%"):
        hostload.check("section long", _load(0.0), GUARD, [100.0, 40.0], closed_loop=True)
    hostload.check("section long", _load(0.0), GUARD, [100.0, 40.0], closed_loop=False)  # open loop: arrivals differ
    hostload.check("section long", _load(0.0), GUARD, [100.0, 80.0], closed_loop=True)


def test_guard_fails_on_another_visible_process_on_our_gpus(monkeypatch):
    """NVML mocked at its boundary: one process of ours, one stranger, one pid from another namespace."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        procs = [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=1),
                 types.SimpleNamespace(pid=stranger.pid, usedGpuMemory=2),
                 types.SimpleNamespace(pid=4_000_000, usedGpuMemory=3)]
        fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: i,
                                     nvmlDeviceGetComputeRunningProcesses=lambda h: procs if h == 1 else [])
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        found = hostload.gpu_foreign(("1",), own={os.getpid()})
        assert [(p["pid"], p["visible"]) for p in found] == [(stranger.pid, True), (4_000_000, False)]
        with pytest.raises(NoisyHost, match=f"pid {stranger.pid} on GPU 1"):
            hostload.check("section short", _load(0.0, gpu=found), GUARD, [1.0], closed_loop=True)
        hostload.check("section short", _load(0.0, gpu=found[1:]), GUARD, [1.0], closed_loop=True)  # unresolvable pid
    finally:
        stranger.kill()
        stranger.wait()


def test_a_noisy_host_retry_waits_before_it_launches(tmp_path, model):
    folder = tmp_path / "failures" / NAME
    folder.mkdir(parents=True)
    (folder / "2026-01-01T000000.000Z-attempt1.json").write_text(json.dumps({"class": "noisy-host", "transient": True}))
    t0 = time.monotonic()
    rc, err = run_cli(tmp_path, fault_study(model), "--attempt", "2", "--guard", json.dumps({"retry_pause_s": 1.5}))
    assert rc == 0, err
    assert "found the host busy: waiting 1.5 s" in err and time.monotonic() - t0 >= 1.5


def test_result_records_the_guard_figures(tmp_path, model):
    rc, err = run_cli(tmp_path, fault_study(model, token_delay=0.01))
    assert rc == 0, err
    doc = results.load_result(tmp_path / "runs" / f"{NAME}.json")
    assert doc["isolation"]["devices"] == ["host"] and doc["isolation"]["guard"]["max_foreign_cores"] == 0.25
    for section in doc["sections"]:
        load = section["host_load"]
        assert load["cores"] is not None and load["cores"] <= 0.25 and load["max_cores"] == 0.25
        assert section["started_at"] < section["finished_at"]


# --- device leases ------------------------------------------------------------------------------

@pytest.fixture
def gpus(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("SPECSWEEP_GPUS", "0,1,2,3")


def test_leases_on_simulated_gpus_are_disjoint_and_wait_for_a_release(gpus):
    said = []
    first = devices.acquire(2, holder="a", announce=said.append, gpu=True)
    second = devices.acquire(2, holder="b", announce=said.append, gpu=True)
    assert set(first.gpus).isdisjoint(second.gpus) and len(first.gpus) == len(second.gpus) == 2
    assert second.env() == {"CUDA_VISIBLE_DEVICES": ",".join(second.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    got = []
    waiter = threading.Thread(target=lambda: got.append(devices.acquire(1, holder="c", announce=said.append, gpu=True)))
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
        devices.acquire(8, holder="x", announce=print, gpu=True)


@pytest.mark.parametrize("gpu", [False, True])
def test_a_crashed_holders_devices_are_free_again(monkeypatch, tmp_path, gpu):
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "locks"))
    if gpu:
        monkeypatch.setenv("SPECSWEEP_GPUS", "0")  # one GPU: the waiter needs the crasher's
    else:
        monkeypatch.delenv("SPECSWEEP_GPUS", raising=False)
    holder = subprocess.Popen([sys.executable, "-c", "from specsweep.measure import leases as devices; import time; "
                               f"devices.acquire(1, holder='crasher', announce=print, gpu={gpu}); "
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert holder.pid in devices.other_measurements()
    said = []
    waiter = threading.Thread(target=lambda: said.append(devices.acquire(1, holder="me", announce=said.append,
                                                                         gpu=gpu)))
    waiter.start()
    time.sleep(0.8)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    waiter.join(timeout=10)
    lease = said[-1]
    assert isinstance(lease, devices.Lease) and lease.devices == (("0",) if gpu else ("host",))
    assert any("held by crasher" in s for s in said if isinstance(s, str))
    lease.release()
    assert not psutil.pid_exists(holder.pid) or psutil.Process(holder.pid).status() == psutil.STATUS_ZOMBIE


# --- GPUs by NVML (mocked at its boundary) -------------------------------------------------------

class FakeNVML:
    """pynvml's calls specsweep makes, over a table of GPUs whose used memory a test changes."""

    def __init__(self, used: dict[int, int], cc=(12, 0)):
        self.used, self.cc = used, cc

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

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
        return [types.SimpleNamespace(pid=4242, usedGpuMemory=self.used[h])] if self.used[h] > 2 << 30 else []


def test_a_lease_waits_for_its_gpus_memory_to_be_released_before_the_next_job(gpus, monkeypatch):
    nvml = FakeNVML({0: 0, 1: 0, 2: 0, 3: 0})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    lease = devices.acquire(2, holder="a", announce=print, gpu=True)
    held = [int(g) for g in lease.gpus]
    for g in held:
        nvml.used[g] = 40 << 30  # the server's weights and KV cache
    threading.Timer(0.6, lambda: nvml.used.update({g: 300 << 20 for g in held})).start()  # driver keeps a little
    t0 = time.monotonic()
    lease.release()
    assert 0.5 < time.monotonic() - t0 < 5 and lease.memory_wait_s >= 0.5


def test_gpus_whose_memory_is_never_released_fail_the_next_job_clearly(gpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML({0: 40 << 30, 1: 40 << 30, 2: 40 << 30, 3: 40 << 30}))
    monkeypatch.setenv("SPECSWEEP_GPU_RELEASE_TIMEOUT_S", "0.3")
    with pytest.raises(DeviceBusy, match=r"still have memory in use after 0.3 s, by pid\(s\) \[4242\]"):
        devices.acquire(1, holder="b", announce=print, gpu=True)
    again = devices.acquire(4, holder="c", announce=print, gpu=False)  # the failed job held nothing
    again.release()


def test_a_job_takes_a_free_gpu_at_once_rather_than_the_lowest_one_another_user_fills(gpus, monkeypatch):
    """GPU 0 holds another user's 30 GiB (no specsweep lock on it): the job takes GPU 1 without waiting."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML({0: 30 << 30, 1: 0, 2: 0, 3: 0}))
    monkeypatch.setenv("SPECSWEEP_GPU_RELEASE_TIMEOUT_S", "30")
    t0 = time.monotonic()
    lease = devices.acquire(1, holder="a", announce=print, gpu=True)
    assert lease.gpus == ("1",) and time.monotonic() - t0 < 2
    pair = devices.acquire(2, holder="b", announce=print, gpu=True)
    assert pair.gpus == ("2", "3")  # the free ones, not the busy GPU 0
    lease.release()
    pair.release()


def test_the_pool_is_the_inherited_cuda_visible_devices(monkeypatch, tmp_path, model):
    """A scheduler (or a colleague) allotted GPUs 2 and 3: jobs use those and the server sees only them."""
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("SPECSWEEP_GPUS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert devices.host_gpus() == ["2", "3"]
    with pytest.raises(ConfigError, match=r"tp 4 needs 4 GPUs, this host has 2 \(2,3\)"):
        devices.acquire(4, holder="x", announce=print, gpu=True)
    rc, err = run_cli(tmp_path, fault_study(model, gpu=True))
    assert rc == 0, err
    log = (tmp_path / "server.log").read_text()
    assert re.findall(r"CUDA_VISIBLE_DEVICES=([\d,]*)", log) == ["2"], log
    doc = json.loads((tmp_path / "runs" / f"{NAME}.json").read_text())
    assert doc["isolation"]["devices"] == ["2"] and doc["server"]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_hardware_facts_name_the_gpus_a_job_held(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML({0: 0, 1: 0}))
    hw = hardware.facts(("1",))
    # This NVML has no PCI facts (nvmlDeviceGetPciInfo): that one is left out, the rest kept.
    assert hw["gpus"] == [{"index": "1", "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                           "uuid": "GPU-00000001-0000-0000-0000-000000000000",
                           "memory_bytes": 96 << 30, "compute_capability": "12.0"}]
    assert hw["compute_capability"] == "12.0" and hw["gpu_driver"] == "580.95.05" and hw["gpu_count"] == 1
    assert hw["logical_cores"] == os.cpu_count() and hw["memory_bytes"] > 0 and hw["cpu_model"]
    monkeypatch.delitem(sys.modules, "pynvml")
    monkeypatch.setattr(hardware, "nvml", lambda: None)
    assert hardware.facts(("0",))["gpus"] == [{"index": "0"}]  # simulated: nothing guessed


def test_each_job_gets_its_own_port_even_when_asked_for_one_in_use(gpus):
    first = devices.acquire(1, holder="a", announce=print, gpu=True)
    second = devices.acquire(1, holder="b", announce=print, gpu=True)
    assert first.port != second.port and first.port > 0
    # And a second port each ({side_port}: SGLang's --nccl-port), none shared by the two jobs.
    held = [first.port, first.side_port, second.port, second.side_port]
    assert len(set(held)) == 4 and min(held) > 0
    with pytest.raises(PortConflict, match="reserved by another specsweep job"):
        devices.acquire(1, holder="c", announce=print, gpu=True, port=first.port)
    with pytest.raises(PortConflict, match="reserved by another specsweep job"):
        devices.acquire(1, holder="c", announce=print, gpu=True, port=second.side_port)
    first.release()
    second.release()


def test_ports_a_server_derives_from_its_own_are_reserved_with_it(gpus):
    """SGLang with DP attention opens port + 233 .. port + 239 (Backend.derived_ports)."""
    from specsweep.servers.backends import sglang

    def derive(port: int) -> tuple[int, ...]:
        return sglang.BACKEND.derived_ports(["--enable-dp-attention"], port)

    first = devices.acquire(1, holder="a", announce=print, gpu=True, derived=derive)
    second = devices.acquire(1, holder="b", announce=print, gpu=True, derived=derive)
    assert first.derived_ports == tuple(range(first.port + 233, first.port + 240))
    ports = [p for lease in (first, second) for p in (lease.port, lease.side_port, *lease.derived_ports)]
    assert len(ports) == len(set(ports)) == 18  # no port of one job is the other's
    # A job asking for the port whose derived ports are held is refused with the fix, and holds nothing.
    with pytest.raises(PortConflict, match=rf"beside port {first.port - 1} \({first.port + 232}-{first.port + 238}\) "
                                           r"are reserved by another specsweep job or in use on this host; let "
                                           r"specsweep pick the port"):
        devices.acquire(1, holder="c", announce=print, gpu=True, port=first.port - 1, derived=derive)
    first.release()
    second.release()
    again = devices.acquire(1, holder="c", announce=print, gpu=True, port=first.port - 1, derived=derive)
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

        lease = devices.acquire(1, holder="a", announce=print, gpu=True, derived=derive)
        assert len(tries) >= 2 and lease.derived_ports == (lease.port + 1,)
        if tries[0] != lease.port:  # the port passed over is let go at once, not held to the end
            devices.acquire(1, holder="b", announce=print, gpu=True, port=tries[0]).release()
        # ... and the job still holds its GPU: none of its device locks was let go with the port.
        assert devices._try_take(devices.lock_dir(), list(lease.gpus), 1) is None
        lease.release()
        with pytest.raises(PortConflict, match="in use on this host"):
            devices.acquire(1, holder="b", announce=print, gpu=True, port=lease.port, derived=lambda _p: (taken,))
        calls = []
        with pytest.raises(PortConflict, match="no port whose derived ports are free after 50 tries"):
            devices.acquire(1, holder="b", announce=print, gpu=True, derived=lambda p: calls.append(p) or (taken,))
        assert len(calls) == 50
