"""The real workflow on a real single-node SLURM, through Snakemake's SLURM executor plugin and the
repository's own profiles/slurm, with the real llama-server.

The fixture starts munged, slurmctld and slurmd (Debian's slurm-wlm, installed by
tests/system-packages.sh, which the README's test line and .ci/run call) and stops them by PID on
every path. Where SLURM is not installed or this is not root the test fails, saying why and what
to run: it never skips itself into green.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, measured, small_study
from specsweep.records import store

pytestmark = pytest.mark.e2e
DAEMONS = ("munged", "slurmctld", "slurmd")
CONF = Path("/etc/slurm/slurm.conf")


def _unavailable() -> str | None:
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing): run bash tests/system-packages.sh"
    if os.geteuid() != 0:
        return "starting slurmctld, slurmd and munged needs root"
    if CONF.exists() and not CONF.is_symlink():
        return f"{CONF} belongs to a SLURM already configured here; not touching it"
    return None


def _slurm_conf(state: Path) -> str:
    host = socket.gethostname().split(".")[0]
    memory = int(re.search(r"RealMemory=(\d+)", subprocess.run(["slurmd", "-C"], capture_output=True,
                                                                text=True).stdout).group(1))
    return "\n".join([
        "ClusterName=specsweep-test", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory", "MpiDefault=none", "MailProg=/bin/true", "ReturnToService=2",
        "MinJobAge=300", "SchedulerType=sched/backfill", "JobAcctGatherType=jobacct_gather/none",
        f"StateSaveLocation={state}/ctld", f"SlurmdSpoolDir={state}/d", f"SlurmctldLogFile={state}/ctld.log",
        f"SlurmdLogFile={state}/d.log", f"SlurmctldPidFile={state}/ctld.pid", f"SlurmdPidFile={state}/d.pid",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory - 512} State=UNKNOWN",
        f"PartitionName=main Nodes={host} Default=YES MaxTime=60 State=UP", ""])


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = _unavailable()
    if reason:
        pytest.fail(f"the SLURM test cannot run here: {reason}")
    state = tmp_path_factory.mktemp("slurm")
    for sub in ("ctld", "d"):
        (state / sub).mkdir()
    (state / "slurm.conf").write_text(_slurm_conf(state))
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.unlink(missing_ok=True)
    CONF.symlink_to(state / "slurm.conf")  # the jobstep plugin drops SLURM_CONF: it must be here
    Path("/run/munge").mkdir(exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    procs = []
    try:
        procs.append(subprocess.Popen(["runuser", "-u", "munge", "--", "munged", "-F"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.STDOUT))
        time.sleep(1)
        for daemon in ("slurmctld", "slurmd"):
            procs.append(subprocess.Popen([daemon, "-D"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True).stdout:
            assert time.monotonic() < deadline, (state / "ctld.log").read_text()[-2000:]
            assert all(p.poll() is None for p in procs), "a SLURM daemon exited during start-up"
            time.sleep(0.5)
        yield state
    finally:
        subprocess.run(["scancel", "--full", "--user", "root"], capture_output=True)
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        CONF.unlink(missing_ok=True)


def slurm_jobs() -> dict[str, tuple[str, str]]:
    """job id -> (comment, state) of every job slurmctld remembers (MinJobAge keeps finished ones)."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True).stdout
    jobs = {}
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" in fields:
            jobs[fields["JobId"]] = (fields.get("Comment", ""), fields.get("JobState", ""))
    return jobs


def run_on_slurm(python: Path, workdir: Path, study: dict) -> tuple[int, str]:
    import yaml

    (workdir / "study.yaml").write_text(yaml.safe_dump(study))
    cmd = ["timeout", "-s", "INT", "-k", "30", "900", str(python), "-m", "snakemake", "-s", str(REPO / "Snakefile"),
           "--profile", str(REPO / "profiles/slurm"), "--directory", str(workdir), "--configfile",
           str(workdir / "study.yaml"), "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks",
           "2", "results/summary.png"]
    env = {**os.environ, "PATH": str(python.parent) + os.pathsep + os.environ["PATH"]}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_study_runs_as_slurm_jobs_and_a_rerun_repeats_only_the_failed_one(slurm, slurm_python, embedded,
                                                                                 tmp_path):
    # The server binary is a wrapper that refuses budget 4 while the file `break-b4` exists.
    wrapper = tmp_path / "llama-server-wrapper"
    wrapper.write_text(f"""#!/bin/sh
case " $* " in *" --spec-ngram-mod-n-max 4 "*)
  if [ -e {tmp_path}/break-b4 ]; then
    echo "error: the argument has been removed: --spec-ngram-mod-n-max" >&2; exit 1
  fi;;
esac
exec {embedded['binary']} "$@"
""")
    wrapper.chmod(0o755)
    (tmp_path / "break-b4").touch()
    study = small_study(grid={"budget": [0, 2, 4], "tp": [1], "context": [64]}, retries=0)
    study["server"] = {**study["server"], "binary": str(wrapper)}
    # The jobs and the rerun are what this test proves: one short section each.
    study["workload"] = {**study["workload"], "repeats": 1,
                         "sections": [{"name": "short", "output_tokens": 8, "requests": 1, "concurrency": 1}]}
    before = set(slurm_jobs())

    rc, out = run_on_slurm(slurm_python, tmp_path, study)
    assert rc != 0, out
    runs = tmp_path / "results/launches"
    assert measured(runs) == ["tp1-b0-ctx64", "tp1-b2-ctx64"], out
    record = store.latest_failure(tmp_path / "results/failures", "tp1-b4-ctx64").to_json()
    assert record["class"] == "server-start" and record["signature"] == "bad-arguments"
    first = {j: v for j, v in slurm_jobs().items() if j not in before}
    configs = {re.sub(r".*wildcards_", "", c): s for c, s in first.values() if "launch_configuration" in c}
    # Every configuration was a SLURM job, named by its configuration ...
    # (the plugin joins the wildcards with "_": the name, then the launch)
    assert sorted(configs) == ["tp1-b0-ctx64_1", "tp1-b2-ctx64_1", "tp1-b4-ctx64_1"], first
    assert configs["tp1-b4-ctx64_1"] == "FAILED", configs
    assert configs["tp1-b0-ctx64_1"] == configs["tp1-b2-ctx64_1"] == "COMPLETED", configs
    assert not any("provision" in c or "summary" in c for c, _ in first.values())  # ... provisioning was not

    (tmp_path / "break-b4").unlink()
    kept = {p.relative_to(runs): p.stat().st_mtime_ns for p in runs.glob("*/launch1.json")}
    rc, out = run_on_slurm(slurm_python, tmp_path, study)
    assert rc == 0, out
    second = {j: v for j, v in slurm_jobs().items() if j not in before and j not in first}
    assert [s for c, s in second.values() if "launch_configuration" in c] == ["COMPLETED"], second
    # The plugin's comment carries the wildcards: the configuration's name, every axis in it, and the launch.
    rerun = [c for c, _ in second.values() if "launch_configuration" in c]
    assert rerun == ["rule_launch_configuration_wildcards_tp1-b4-ctx64_1"], rerun
    assert {p: runs.joinpath(p).stat().st_mtime_ns for p in kept} == kept
    assert (tmp_path / "results/summary.png").exists()
