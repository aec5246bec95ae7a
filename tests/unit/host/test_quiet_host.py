"""The quiet-host guard: what the others took from the server (their CPU, the server's run-queue
wait), the repeats' spread and foreign processes on our GPUs. What is never foreign, the retry's
pause and the figures every result keeps, through the real CLI: tests/workflow/test_quiet_host_cli.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import psutil
import pytest

from specsweep.errors import GpuThrottled, HostNotQuiet
from specsweep.host import gpu_watch, quiet_host

SETTINGS = quiet_host.Settings(max_foreign_cores=0.25, max_repeat_spread=0.5, retry_pause_s=0,
                               max_gpu_slowed_share=0.05)


# --- the quiet-host guard -----------------------------------------------------------------------

def test_foreign_cpu_counts_others_and_new_processes_only():
    before = {1: (100.0, 5.0, "me"), 2: (100.0, 1.0, "server"), 3: (100.0, 2.0, "hog"), 4: (100.0, 9.0, "gone")}
    after = {1: (100.0, 6.0, "me"), 2: (100.0, 3.0, "server"), 3: (100.0, 3.5, "hog"),
             5: (150.0, 0.5, "newcomer"), 6: (50.0, 0.0, "idle")}
    load = quiet_host.foreign_cpu(before, after, own={1, 2}, wall_s=2.0)
    assert load["cpu_s"] == pytest.approx(2.0) and load["cores"] == pytest.approx(1.0)
    assert [p["name"] for p in load["top"]] == ["hog", "newcomer"]
    reused = quiet_host.foreign_cpu({7: (1.0, 50.0, "old")}, {7: (2.0, 0.25, "new")}, own=set(), wall_s=1.0)
    assert reused["cpu_s"] == pytest.approx(0.25)  # a reused pid is a new process, not a negative delta


def test_a_child_reaped_during_the_section_counts_only_its_time_inside_it():
    # cc1plus had used 40 s before the section and 0.5 s inside it, then ended: make's children
    # times jump by 40.5 s, of which only 0.5 s belong to the section.
    before = {10: (100.0, 3.0, "make", 1), 11: (100.0, 40.0, "cc1plus", 10), 12: (100.0, 7.0, "orphan", 99)}
    after = {10: (100.0, 43.5, "make", 1), 1: (1.0, 7.0 + 0.2, "init", 0)}
    load = quiet_host.foreign_cpu(before, after, own=set(), wall_s=1.0)
    assert load["cpu_s"] == pytest.approx(0.5 + 0.2)
    assert [p["name"] for p in load["top"]] == ["make", "init"]


def _load(cores: float, wall: float = 2.0, gpu=(), waited: float | None = None) -> dict:
    """A section's figures: others used ``cores`` on the server's CPUs, the server waited ``waited`` (all of it)."""
    waited = cores if waited is None else waited
    return {"cpu_s": cores * wall, "cores": cores, "top": [{"pid": 9, "name": "hog", "cpu_s": cores * wall}],
            "cores_on_server_cpus": cores, "server_wait_cores": waited, "contended_cores": min(cores, waited),
            "gpu_processes": list(gpu)}


def test_quiet_host_fails_a_section_above_its_threshold_and_passes_one_below():
    with pytest.raises(HostNotQuiet, match=r"0\.60 cores.*hog.*max_foreign_cores"):
        quiet_host.check("section medium", _load(0.6), SETTINGS, [100.0, 101.0], closed_loop=True)
    quiet_host.check("section medium", _load(0.2), SETTINGS, [100.0, 101.0], closed_loop=True)
    # Below the clock-tick floor a figure is resolution, not load: 0.04 CPU-s in a 40 ms section.
    quiet_host.check("section short", _load(1.0, wall=0.04), SETTINGS, [100.0], closed_loop=True)


def test_the_limit_and_the_floor_themselves_pass_and_the_refusal_names_every_process():
    """From the mutation run of 2026-12-04: at exactly max_foreign_cores, the clock-tick floor of
    others' CPU or max_repeat_spread, a section passes; each refusal lists every process, reason or
    stranger, and says when the server's waiting could not be read."""
    at_limit = _load(0.25)
    quiet_host.check("section short", at_limit, SETTINGS, [100.0], closed_loop=True)
    at_floor = {**_load(1.0), "cpu_s": quiet_host.FLOOR_CPU_S}
    quiet_host.check("section short", at_floor, SETTINGS, [100.0], closed_loop=True)
    two = {**_load(0.6), "server_wait_cores": None,
           "top": [{"pid": 9, "name": "hog", "cpu_s": 1.2}, {"pid": 10, "name": "cc1plus", "cpu_s": 0.3}]}
    with pytest.raises(HostNotQuiet, match=r"\(the server's cores had none idle, while .*: hog \(pid 9\) 1\.2 s, "
                                           r"cc1plus \(pid 10\) 0\.3 s\)"):
        quiet_host.check("section short", two, SETTINGS, [100.0], closed_loop=True)
    quiet_host.check("section short", _load(0.0), SETTINGS, [75.0, 125.0], closed_loop=True)  # spread 0.5 exactly
    hot = {"gpu": "0", "slowed_share": 0.5, "reasons": ["hw_slowdown", "sw_thermal", "sw_power_cap"], "samples": 10,
           "sm_clock_mhz": {"min": 900, "max": 1980}, "temperature_c_max": 91}
    with pytest.raises(GpuThrottled, match=r"GPU 0 ran slowed \(hw_slowdown, sw_thermal\) in 50% of 10 readings"):
        quiet_host.check("section short", {**_load(0.0), "gpu_telemetry": [hot]}, SETTINGS, [100.0], closed_loop=True)
    strangers = [{"pid": 7, "gpu": "0", "visible": True}, {"pid": 8, "gpu": "1", "visible": True}]
    with pytest.raises(HostNotQuiet, match=r"other processes on the job's GPUs: pid 7 on GPU 0, pid 8 on GPU 1$"):
        quiet_host.check("section short", _load(0.0, gpu=strangers), SETTINGS, [100.0], closed_loop=True)


def test_others_busy_while_the_server_never_waited_is_no_contention():
    """A 64-core host: daemons used 0.6 cores, the server found a CPU every time it was runnable."""
    quiet_host.check("section medium", _load(0.6, waited=0.01), SETTINGS, [100.0, 101.0], closed_loop=True)
    with pytest.raises(HostNotQuiet, match=r"took 0\.40 cores from the server \(the server waited for a CPU 0\.40"):
        quiet_host.check("section medium", _load(0.6, waited=0.4), SETTINGS, [100.0, 101.0], closed_loop=True)


def test_contention_is_the_smaller_of_the_servers_waiting_and_the_others_load_on_its_cpus():
    load = {"cores_on_server_cpus": 0.9}
    found = quiet_host.contention(load, (3.0, 1.0), {0, 1}, own_cores=1.8, wall_s=2.0)
    assert found == {"method": "schedstat", "server_wait_cores": 0.5, "server_wait_share": 0.25,
                     "contended_cores": 0.5}
    assert quiet_host.contention({"cores_on_server_cpus": 0.1}, (3.0, 1.0), {0, 1}, 1.8, 2.0)["contended_cores"] == 0.1
    # Without schedstat: the others' load beyond what the server and the harness left idle.
    idle = quiet_host.contention({"cores_on_server_cpus": 0.9}, None, {0, 1}, own_cores=1.5, wall_s=2.0)
    assert idle["method"] == "idle-cores" and idle["contended_cores"] == pytest.approx(0.4)
    assert quiet_host.contention({"cores_on_server_cpus": 3.0}, None, set(range(64)), 2.0, 2.0)["contended_cores"] == 0


def test_a_process_pinned_to_other_cpus_takes_nothing_from_the_server():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("needs 2 CPUs: this suite's machines have them (docs/development.md)")
    cpus = sorted(os.sched_getaffinity(0))
    pinned = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                              preexec_fn=lambda: os.sched_setaffinity(0, {cpus[1]}))
    try:
        used = [{"pid": pinned.pid, "cpu_s": 1.0}, {"pid": os.getpid(), "cpu_s": 0.5}]
        assert quiet_host.on_cpus(used, {cpus[0]}) == pytest.approx(0.5)  # ours may run there, the pinned one not
        assert quiet_host.on_cpus(used, {cpus[1]}) == pytest.approx(1.5)
        assert quiet_host.on_cpus(used, None) == pytest.approx(1.5)  # the server's CPUs unknown: all count
    finally:
        pinned.kill()
        pinned.wait()


def test_the_servers_waiting_is_read_from_the_kernels_per_thread_schedstat():
    before = quiet_host.schedstat({os.getpid()})
    assert before, "Linux keeps /proc/<pid>/task/<tid>/schedstat"
    cpu, end = time.process_time(), time.monotonic() + 0.2
    while time.monotonic() < end:
        pass
    cpu = time.process_time() - cpu
    ran, waited = quiet_host.waited_s(before, quiet_host.schedstat({os.getpid()}))
    # What the kernel says this process ran is the CPU time it had, however much of the 0.2 s a busy
    # host left it; and what it did not run of that time it waited or slept.
    assert cpu > 0.02 and ran == pytest.approx(cpu, abs=0.02) and waited >= 0
    assert quiet_host.waited_s(None, before) is None


def test_quiet_host_catches_closed_loop_repeats_that_disagree():
    with pytest.raises(HostNotQuiet, match="spread of 86%"):
        quiet_host.check("section long", _load(0.0), SETTINGS, [100.0, 40.0], closed_loop=True)
    # open loop: arrivals differ
    quiet_host.check("section long", _load(0.0), SETTINGS, [100.0, 40.0], closed_loop=False)
    quiet_host.check("section long", _load(0.0), SETTINGS, [100.0, 80.0], closed_loop=True)


def test_quiet_host_fails_on_another_visible_process_on_our_gpus(monkeypatch):
    """NVML mocked at its boundary: one process of ours, one stranger, one pid from another namespace."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        procs = [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=1),
                 types.SimpleNamespace(pid=stranger.pid, usedGpuMemory=2),
                 types.SimpleNamespace(pid=4_000_000, usedGpuMemory=3)]
        fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: i,
                                     nvmlDeviceGetComputeRunningProcesses=lambda h: procs if h == 1 else [])
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        found = gpu_watch.foreign(("1",), own={os.getpid()})
        assert [(p["pid"], p["visible"]) for p in found] == [(stranger.pid, True), (4_000_000, False)]
        with pytest.raises(HostNotQuiet, match=f"pid {stranger.pid} on GPU 1"):
            quiet_host.check("section short", _load(0.0, gpu=found), SETTINGS, [1.0], closed_loop=True)
        # an unresolvable pid
        quiet_host.check("section short", _load(0.0, gpu=found[1:]), SETTINGS, [1.0], closed_loop=True)
    finally:
        stranger.kill()
        stranger.wait()


# --- a simulated 64-core shared host --------------------------------------------------------------

SERVER, TENANTS = 5000, range(7000, 7016)


class ManyCoreHost:
    """A 64-core host from fixtures at the guard's boundary: psutil's process table and affinity
    (as psutil answers), and a /proc and cgroup v2 tree in the kernel's own formats
    (/proc/<pid>/task/<tid>/schedstat: ns on a CPU, ns waiting, timeslices; cpu.pressure:
    "some avg10=.. total=<us>"; /proc/<pid>/cgroup: "0::<path>")."""

    def __init__(self, root, monkeypatch):
        self.root, self.cpu, self.affinity = root, {}, {}
        self.ran_ns = self.waited_ns = self.psi_us = 0
        self.schedstat = True  # False: a kernel built without schedstats
        self.add(SERVER, "llama-server", range(64))  # unpinned, as a server usually is
        for pid in TENANTS:
            self.add(pid, "tenant-job", range(64))  # other users' jobs: unpinned, so they count in full
        (root / "cg" / "job").mkdir(parents=True)
        (root / "cg" / "cgroup.procs").write_text("1\n")
        (root / "cg" / "job" / "cgroup.procs").write_text(f"{SERVER}\n")
        (root / "proc" / str(SERVER) / "task" / str(SERVER)).mkdir(parents=True)
        (root / "proc" / str(SERVER) / "cgroup").write_text("0::/job\n")
        (root / "proc" / "pressure").mkdir()
        self.write()
        monkeypatch.setattr(quiet_host, "PROC", str(root / "proc"))
        monkeypatch.setattr(quiet_host, "CGROUP_ROOT", str(root / "cg"))
        monkeypatch.setattr(quiet_host, "psutil", types.SimpleNamespace(
            process_iter=self.process_iter, Process=self.process, Error=psutil.Error))
        monkeypatch.setattr(quiet_host.os, "cpu_count", lambda: 64)

    def add(self, pid, name, cpus):
        self.cpu[pid], self.affinity[pid] = (name, 0.0), set(cpus)

    def process_iter(self, attrs=None):
        for pid, (name, cpu) in list(self.cpu.items()):
            times = types.SimpleNamespace(user=cpu, system=0.0, children_user=0.0, children_system=0.0)
            yield types.SimpleNamespace(pid=pid, info={"create_time": 1.0, "name": name, "ppid": 1, "cmdline": [name]},
                                        cpu_times=lambda times=times: times)

    def process(self, pid):
        if pid not in self.cpu:
            raise psutil.NoSuchProcess(pid)
        return types.SimpleNamespace(cpu_affinity=lambda: sorted(self.affinity[pid]), parents=lambda: [])

    def run(self, wall_s, *, tenant_cores, server_cores=8.0, server_wait_cores=0.0, cgroup_psi_share=0.0):
        for pid in TENANTS:
            name, cpu = self.cpu[pid]
            self.cpu[pid] = (name, cpu + tenant_cores * wall_s / len(TENANTS))
        name, cpu = self.cpu[SERVER]
        self.cpu[SERVER] = (name, cpu + server_cores * wall_s)
        self.ran_ns += int(server_cores * wall_s * 1e9)
        self.waited_ns += int(server_wait_cores * wall_s * 1e9)
        self.psi_us += int(cgroup_psi_share * wall_s * 1e6)
        self.write()

    def write(self):
        task = self.root / "proc" / str(SERVER) / "task" / str(SERVER)
        if self.schedstat:
            (task / "schedstat").write_text(f"{self.ran_ns} {self.waited_ns} 1000\n")
        pressure = f"some avg10=0.00 avg60=0.00 avg300=0.00 total={self.psi_us}\nfull avg10=0.00 total=0\n"
        (self.root / "cg" / "job" / "cpu.pressure").write_text(pressure)
        (self.root / "proc" / "pressure" / "cpu").write_text(pressure)


def _section(host: ManyCoreHost, **run) -> dict:
    watch = quiet_host.SectionWatch(SETTINGS, own_pids=lambda: {SERVER})
    watch.start()
    host.run(10.0, **run)
    return watch.stop(10.0)


def test_on_a_64_core_host_unpinned_tenants_on_other_cores_take_nothing_from_the_server(tmp_path, monkeypatch):
    host = ManyCoreHost(tmp_path, monkeypatch)
    load = _section(host, tenant_cores=40.0, server_wait_cores=0.02)
    assert load["cores_on_server_cpus"] == pytest.approx(40.0)  # unpinned: all of it could be the server's
    assert load["method"] == "schedstat" and load["contended_cores"] == pytest.approx(0.02)
    quiet_host.check("section chat", load, SETTINGS, [100.0, 101.0], closed_loop=True)  # no alarm
    # The same tenants on the server's cores: it waited 3 cores-worth for a CPU.
    load = _section(host, tenant_cores=40.0, server_wait_cores=3.0)
    with pytest.raises(HostNotQuiet, match=r"took 3\.00 cores from the server \(the server waited for a CPU 3\.00"):
        quiet_host.check("section chat", load, SETTINGS, [100.0, 101.0], closed_loop=True)


def test_without_schedstat_the_servers_cgroup_pressure_judges_where_it_holds_the_server_alone(tmp_path, monkeypatch):
    host = ManyCoreHost(tmp_path, monkeypatch)
    host.schedstat = False
    (tmp_path / "proc" / str(SERVER) / "task" / str(SERVER) / "schedstat").unlink()
    quiet = _section(host, tenant_cores=40.0, cgroup_psi_share=0.01)
    assert quiet["server_cgroup_psi"] == {"cgroup": "/job", "some_share": 0.01, "trusted": True,
                                          "why": "the cgroup /job holds the server alone"}
    assert quiet["method"] == "cgroup-psi" and quiet["contended_cores"] == pytest.approx(0.01)
    quiet_host.check("section chat", quiet, SETTINGS, [100.0, 101.0], closed_loop=True)
    busy = _section(host, tenant_cores=40.0, cgroup_psi_share=0.8)
    with pytest.raises(HostNotQuiet, match=r"took 0\.80 cores"):
        quiet_host.check("section chat", busy, SETTINGS, [100.0, 101.0], closed_loop=True)
    # A cgroup shared with another process: its pressure is not the server's, so it is recorded
    # with why and not judged; the idle cores decide (64 - the server's 8 = 56 left for 40).
    (tmp_path / "cg" / "job" / "cgroup.procs").write_text(f"{SERVER}\n7000\n")
    shared = _section(host, tenant_cores=40.0, cgroup_psi_share=0.8)
    assert shared["server_cgroup_psi"]["trusted"] is False and "holds 1 process(es) besides" in \
        shared["server_cgroup_psi"]["why"]
    assert shared["method"] == "idle-cores" and shared["contended_cores"] == 0
    full = _section(host, tenant_cores=60.0)
    assert full["method"] == "idle-cores" and full["contended_cores"] == pytest.approx(4.0)
