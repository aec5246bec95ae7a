"""The GPU smoke check: what holds end to end on a real GPU, in one JSON, inside one device call.

On the GPU machine (no package index, at most 64 MiB carried, one call of 600 s), in the
checkout with the carry that benchmarks/gpu_carry.sh made beside it (docs/gpus.md):

    python3 benchmarks/gpu_smoke.py --carry .gpu --out "$OUT"

Each stage is a subprocess with its own time limit (STAGES), and $OUT's two files, the JSON
(gpu_smoke.json) and every log in one archive (logs.tar.xz), are written again after every stage,
so a call cut short still says what was done and where it stopped; the output ends with a plain
summary that fits the 12,000 characters sure to come back. A server built beforehand and carried
(gpu_carry.sh --server) is unpacked into the work cache first, so the build stage finds it. This
script is the call; what it carries is made by benchmarks/gpu_carry.py (gpu_carry.sh), a server
for the GPU is compiled beforehand by benchmarks/cuda_compile.py, and the study and its checks are
benchmarks/gpu_checks.py's:

1. install: the carried wheels (Snakemake and what the image lacks) into WORK/site, no index.
2. import: the checkout's specsweep, not installed (workflow/ on PYTHONPATH), loads the smoke
   study against its own schema, and Snakemake imports.
3. offline: everything the study takes from the package index is in the carried cache
   (``specsweep provision check``: where no index answers, a missing piece fails here).
4. build: the carried server found in the cache, else llama-server from the carried source
   archive with CUDA for Hopper (90-real, without the
   flash-attention kernels the tiny model cannot use), Ninja, in WORK/build: a second call
   continues a build the first one's limit cut short.
5. model: a tiny random-weight Llama GGUF written by llama.cpp's own gguf-py (no hub, no torch).
6. pipeline: the real ``snakemake --cores 1 results/summary.png`` on budgets 0 and --budget with
   ngram-mod drafts, all layers on the GPU, the GPU lease and NVML telemetry on; each GPU's memory
   read every 0.25 s meanwhile.
7. checks: NVML sees a GPU; each section's tokens are the server's counter's; the drafting
   configuration drafted; each section's telemetry holds clocks, power and memory; the server
   logs show the model's weights in a CUDA buffer; GPU memory rose above its level before during the run
   and came back after it; no llama-server process is left.

With --cpu it builds for the CPU and runs without a GPU, under the CPU column's limits (a 2-core
machine): the same script where no GPU is, as tests/e2e/test_gpu_smoke_offline.py runs it under
the GPU machine's terms. The GPU checks are then reported as not applicable, never as held.
Exit 0 only when every stage ran and every check held.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow"  # the checkout's specsweep, used where it lies: nothing is installed
sys.path[:0] = [str(PACKAGE), str(Path(__file__).resolve().parent)]

# The study and its checks (gpu_checks.py) and the carry's format (gpu_carry.py): sibling scripts.
from gpu_carry import unpack_server  # noqa: E402
from gpu_checks import MemoryPeak, gpu_memory, judge, smoke_study  # noqa: E402

# Seconds each stage may take: (on the GPU machine's 16 cores, with --cpu on a 2-core machine).
# The GPU column stays under CALL_BUDGET_S: the device call's 600 s less the machine's start-up
# and the files' return. The GPU build's None is what the call has left when it starts, less the
# stages after it: with the server built beforehand and carried (PREBUILT) the stage only finds it
# in the cache; the in-call compile is the fallback and gets every second there is (issue 40.2).
STAGES = {"install": (20, 120), "import": (20, 90), "offline": (20, 90), "build": (None, 1200),
          "model": (20, 90), "pipeline": (75, 420)}
CALL_BUDGET_S = 540
# What comes back from $OUT (the device tool's terms): at most 8 files, each under 16 MiB, no more
# than two folders down; of the output only the last 12,000 characters are sure to. So $OUT holds
# the JSON and one archive of every log, and stdout ends with a plain summary under that size.
RETURN_FILES, RETURN_BYTES, RETURN_DEPTH, RETURN_CHARS = 8, 16 << 20, 2, 12_000
LOGS_ARCHIVE = "logs.tar.xz"
LOG_TAIL_BYTES = 1 << 20  # each log's last MiB, where the whole archive would not come back


class Report:
    """The JSON under --out, written again after every stage."""

    def __init__(self, out: Path, gpu: bool, limits: dict[str, int], logs: Path):
        self.out, self.logs, self.t0 = out, logs, time.monotonic()
        logs.mkdir(parents=True, exist_ok=True)
        self.doc: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "mode": "gpu" if gpu else "cpu",
                          "limits_s": limits, "stages": [], "stopped_at": None, "checks": [], "held": False}

    def save(self) -> None:
        """The logs' archive and the JSON, each replaced whole: a call cut short leaves both."""
        self.doc["logs"] = pack_logs(self.logs, self.out / LOGS_ARCHIVE)
        tmp = self.out / ".gpu_smoke.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        os.replace(tmp, self.out / "gpu_smoke.json")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def stage(self, entry: dict) -> None:
        self.doc["stages"].append(entry)
        if entry["status"] != "ok":
            self.doc["stopped_at"] = entry["stage"]
        self.save()


def stop_stage(proc: subprocess.Popen) -> None:
    """Every process a stage cut short started, its servers too (they run in sessions of their
    own), through the package's own teardown: SIGTERM, which `specsweep launch` answers by tearing
    its server down, then SIGKILL what is left, and every one reaped."""
    import psutil

    from specsweep.servers.process import stop_tree

    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    stop_tree(proc.pid, tree, grace_s=10)
    proc.wait()


# --- what comes back ------------------------------------------------------------------------------

def pack_logs(logs: Path, archive: Path, *, limit: int = RETURN_BYTES) -> dict:
    """Every file under ``logs`` into one .tar.xz (replaced whole); where that is not under
    ``limit``, each log's last LOG_TAIL_BYTES instead (a log's end says how it ended)."""
    files = sorted(p for p in logs.rglob("*") if p.is_file())
    for tail in (None, LOG_TAIL_BYTES, LOG_TAIL_BYTES >> 6):
        tmp = archive.with_name(f".{archive.name}.tmp")
        with tarfile.open(tmp, "w:xz") as tar:
            for path in files:
                whole = path.read_bytes()
                data = whole[-tail:] if tail is not None else whole
                info = tarfile.TarInfo(str(path.relative_to(logs)) + (".tail" if len(data) < len(whole) else ""))
                info.size, info.mtime = len(data), int(path.stat().st_mtime)
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, archive)
        if archive.stat().st_size < limit:
            break
    return {"archive": archive.name, "bytes": archive.stat().st_size, "files": len(files),
            "cut_to_tail_bytes": tail}


def unreturnable(out: Path) -> list[str]:
    """What in ``out`` would not come back from the device call: one clause per problem, [] if none."""
    files = sorted(p for p in out.rglob("*") if p.is_file() or p.is_symlink())
    problems = [f"{len(files)} files, more than the {RETURN_FILES} that come back"] if len(files) > RETURN_FILES else []
    for path in files:
        name = path.relative_to(out)
        if len(name.parts) - 1 > RETURN_DEPTH:
            problems.append(f"{name}: {len(name.parts) - 1} folders down, more than {RETURN_DEPTH}")
        if path.is_symlink() or not path.is_file():
            problems.append(f"{name}: not a plain file")
        elif path.stat().st_size >= RETURN_BYTES:
            problems.append(f"{name}: {path.stat().st_size} bytes, not under {RETURN_BYTES}")
    return problems


def summary(doc: dict, *, limit: int = RETURN_CHARS - 1000) -> str:
    """The report as plain text for stdout, under ``limit`` characters: each stage, each check with
    its figures, where it stopped; the stopping stage's log tail gets what room is left."""
    def short(value, width=160) -> str:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return text if len(text) <= width else text[:width - 3] + "..."

    lines = [f"gpu_smoke: mode {doc['mode']}, held {doc['held']}, stopped at {doc['stopped_at'] or 'nothing'}"]
    lines += [f"  prebuilt server: {short(doc['prebuilt'], 300)}"] if doc.get("prebuilt") else []
    lines += [f"  stage {s['stage']:<8} {s['status']:<9} {s['seconds']:>7.1f} s of {s['limit_s']}"
              for s in doc["stages"]]
    lines += [f"  build: {short(note)}" for note in (doc.get("build") or {}).get("cuda_libraries") or []]
    lines += [f"  check {'held' if c['held'] else 'n/a ' if c['held'] is None else 'FAIL'} {c['check']}: "
              f"{short(c['detail'])}" for c in doc["checks"]]
    lines += [f"  gpu memory (bytes): {short(doc['gpu_memory'], 400)}"] if doc.get("gpu_memory") else []
    lines += [f"  verdict: {short(v)}" for v in doc.get("verdicts", [])[:12]]
    for key in ("error", "next", "logs", "unreturnable"):
        lines += [f"  {key}: {short(doc[key], 400)}"] if doc.get(key) else []
    text = "\n".join(lines)
    stopped = next((s for s in doc["stages"] if s["status"] != "ok"), None)
    if stopped and len(text) < limit - 200:
        room = limit - len(text) - 100
        text += f"\n--- the last of {stopped['log']} ---\n" + stopped["tail"][-room:]
    return text[:limit]


def run_stage(report: Report, name: str, argv: list[str], *, env: dict, limit: int) -> bool:
    """One stage as a subprocess under its limit, its output in the logs folder (and so in the
    archive that comes back) as <name>.log; True if it held."""
    log, t0 = report.logs / f"{name}.log", time.monotonic()
    with open(log, "w") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                start_new_session=True)  # its own group: the teardown reaches it whole
        try:
            code, status = proc.wait(timeout=limit), None
        except subprocess.TimeoutExpired:
            stop_stage(proc)
            code, status = None, "timed-out"
    status = status or ("ok" if code == 0 else "failed")
    report.stage({"stage": name, "status": status, "exit_code": code, "seconds": round(time.monotonic() - t0, 1),
                  "limit_s": limit, "log": log.name, "tail": log.read_text(errors="replace")[-1500:]})
    return status == "ok"




















def limits_for(gpu: bool, overrides: list[str]) -> dict[str, int | None]:
    limits = {name: pair[0 if gpu else 1] for name, pair in STAGES.items()}
    for item in overrides:
        name, _, seconds = item.partition("=")
        if name not in limits or not seconds.isdigit():
            raise SystemExit(f"--stage-timeout {item}: give STAGE=SECONDS, STAGE one of {', '.join(limits)}")
        limits[name] = int(seconds)
    return limits


def stage_limit(name: str, limits: dict[str, int | None], elapsed: float) -> int:
    """A stage's limit; the GPU build's is what the call has left, less the stages after it."""
    if limits[name] is not None:
        return limits[name]
    after = list(limits)[list(limits).index(name) + 1:]
    return max(1, int(CALL_BUDGET_S - elapsed - sum(limits[n] or 0 for n in after)))


def nvidia_library_folders() -> list[str]:
    """The lib/ folders of NVIDIA's wheels in this Python (nvidia/cu13/lib holds libcudart.so.13,
    libcublas.so.13 and libcublasLt.so.13 on the image): where a server built on another machine
    finds the image's CUDA runtime and cuBLAS."""
    try:
        import nvidia  # a namespace package: one folder per wheel family, no __init__
    except ImportError:
        return []
    return sorted({str(lib) for root in nvidia.__path__ for lib in Path(root).glob("*/lib")
                   if any(lib.glob("lib*.so*"))})


def environment(work: Path) -> dict:
    """What every stage runs under: the checkout's package and the carried wheels on the path, the
    carried cache as specsweep's cache, NVIDIA's wheels' libraries on the loader's path."""
    path = os.pathsep.join([str(PACKAGE), str(work / "site")])
    loader = os.pathsep.join([*nvidia_library_folders(), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
    return {**os.environ, "PYTHONPATH": path, "SPECSWEEP_CACHE": str(work / "cache"),
            "SPECSWEEP_LOCK_DIR": str(work / "locks"), **({"LD_LIBRARY_PATH": loader} if loader else {})}




def prepare(carry: Path, work: Path) -> None:
    """The work folder (kept between calls, never carried): the carried cache copied in, so that
    what the GPU machine builds stays out of the carry."""
    work.mkdir(parents=True, exist_ok=True)
    if (carry / "cache").is_dir() and not (work / "cache").is_dir():
        shutil.copytree(carry / "cache", work / "cache")


def stages(args, report: Report, limits: dict[str, int], py: str, memory: dict) -> bool:
    """Stages 1-6; False at the first that did not hold (the report says which). The pipeline's
    GPU memory, before it, its peak and after it, goes into ``memory``."""
    carry, work, env = args.carry, args.work, environment(args.work)
    study_file = work / "study.yaml"
    study_file.write_text(yaml.safe_dump(smoke_study(str(work / "to-be-built"), str(work / "tiny.gguf"),
                                                     args.budget, gpu=not args.cpu)))
    wheels = sorted(str(p) for p in (carry / "whl").glob("*.whl"))
    source = str(carry / "llama-source.tar.xz")
    cuda = [] if args.cpu else ["--cuda-arch", "90-real", "--no-flash-attention"]
    plan = [
        ("install", [py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade",
                     "--target", str(work / "site"), *wheels]),
        ("import", [py, "-c", "import sys, snakemake, specsweep.cli as cli; "
                    f"sys.exit(cli.main(['grid', '--config', {str(study_file)!r}]))"]),
        ("offline", [py, "-m", "specsweep", "provision", "check", "--config", str(study_file)]),
        ("build", [py, "-m", "specsweep", "provision", "llama-server", "--source", source, *cuda, "--build-dir",
                   str(work / "build"), "--log", str(report.logs / "build-cmake.log"), "--out",
                   str(work / "llama-server.json")]),
        ("model", [py, "-m", "specsweep", "provision", "tiny-gguf", "--source", source, "--out",
                   str(work / "tiny.json")]),
    ]
    report.doc["prebuilt"] = unpack_server(carry, work, env, report.logs, gpu=not args.cpu)
    for name, argv in plan:
        if not run_stage(report, name, argv, env=env, limit=stage_limit(name, limits, report.elapsed())):
            return False
    return pipeline(args, report, limits["pipeline"], py, env, memory)


def pipeline(args, report: Report, limit: int, py: str, env: dict, memory: dict) -> bool:
    """Stage 6: the real workflow on the built server and the tiny model, GPU memory watched."""
    work = args.work
    study_file, folder = work / "study.yaml", work / "study"
    server = json.loads((work / "llama-server.json").read_text())
    report.doc["build"] = {k: server.get(k) for k in ("cmake_flags", "machine_flags", "cuda_libraries",
                                                       "build_seconds", "built_at", "cuda_arch")}
    report.doc["binary"] = server["binary"]
    study_file.write_text(yaml.safe_dump(smoke_study(server["binary"], str(work / "tiny.gguf"), args.budget,
                                                     gpu=not args.cpu)))
    shutil.rmtree(folder, ignore_errors=True)  # each call measures afresh
    folder.mkdir()
    if args.fail_last_step:  # the rehearsal of a study whose last step fails: its figure cannot be written
        (folder / "results" / "tradeoff.png" / "blocked").mkdir(parents=True)
    gpu, sampler = not args.cpu, MemoryPeak()
    memory["before"] = gpu_memory() if gpu else {}
    if gpu:
        sampler.start()
    ran = run_stage(report, "pipeline", [py, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
                                         str(folder), "--configfile", str(study_file), "--cores", "1",
                                         "results/summary.png"], env=env, limit=limit)
    sampler.done.set()
    time.sleep(2)  # teardown is synchronous; this is only for NVML's view to settle
    memory.update(peak=sampler.peak, after=gpu_memory() if gpu else {})
    if (folder / "logs").is_dir():  # the jobs' and servers' logs, into the archive that comes back
        shutil.copytree(folder / "logs", report.logs / "study-logs", dirs_exist_ok=True)
    keep_results(folder, report.logs / "study-results")
    return ran


def keep_results(folder: Path, into: Path) -> list[str]:
    """Every launch result and failure record the study left (the GPU's name, driver, memory and
    telemetry are in them), into the archive that comes back, whatever stopped the study."""
    kept = []
    for kind in ("launches", "failures"):
        for path in sorted((folder / "results" / kind).glob("**/*.json")):
            target = into / kind / path.relative_to(folder / "results" / kind)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            kept.append(str(target.relative_to(into)))
    return kept




def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carry", type=Path, default=REPO / ".gpu", help="what gpu_carry.sh made (default .gpu)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-smoke-out")),
                        help="folder for gpu_smoke.json and the stages' logs (default $OUT)")
    parser.add_argument("--work", type=Path, default=REPO / ".gpu-work",
                        help="kept between calls, never carried: the build, the cache, the study (default .gpu-work)")
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--cpu", action="store_true", help="build and run llama-server on the CPU (no GPU here)")
    parser.add_argument("--stage-timeout", action="append", default=[], metavar="STAGE=SECONDS",
                        help="another limit for one stage")
    parser.add_argument("--fail-last-step", action="store_true",
                        help="rehearsal: the study's last step (its figures) fails on purpose, after the launches, "
                             "to see the checks judged and the launch results returned all the same")
    args = parser.parse_args()
    args.carry, args.work = args.carry.resolve(), args.work.resolve()
    gpu = not args.cpu
    limits = limits_for(gpu, args.stage_timeout)
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.work / "logs", ignore_errors=True)  # this call's logs only; the build stays
    report = Report(args.out.resolve(), gpu, limits, args.work / "logs")
    report.save()
    memory: dict = {"before": {}, "peak": {}, "after": {}}
    try:
        prepare(args.carry, args.work)
        ran = stages(args, report, limits, sys.executable, memory)
        # Judged on whatever the study left, once it ran at all (a launch refused, a summary or plot
        # that failed late), inside the try: an exception here is a finding in the JSON too.
        if ran or any(s["stage"] == "pipeline" for s in report.doc["stages"]):
            report.doc["gpu_memory"] = memory
            report.doc["checks"] = judge(args.work / "study", report.doc["binary"], memory, gpu=gpu)
            best = args.work / "study" / "results" / "best.csv"
            report.doc["verdicts"] = best.read_text().splitlines() if best.is_file() else []
            if ran and any(c["held"] is False for c in report.doc["checks"]):
                report.doc["stopped_at"] = "checks"
    except Exception as exc:  # the script's own failure is a finding too, written like the others
        report.doc.update(error=f"{type(exc).__name__}: {exc}", stopped_at=report.doc["stopped_at"] or "script")
        ran = False
    if not ran and report.doc["stopped_at"] == "build" and report.doc["stages"][-1]["status"] == "timed-out":
        report.doc["next"] = ("call the same command again while the machine is warm: the build continues in "
                              f"{args.work}/build where this call's limit stopped it")
    report.doc["held"] = ran and all(c["held"] is not False for c in report.doc["checks"])
    report.doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    report.save()
    if problems := unreturnable(report.out):  # said in the JSON and on stdout, the one sure to come back
        report.doc["unreturnable"] = problems
        report.save()
    print(summary(report.doc))
    return 0 if report.doc["held"] else 1


if __name__ == "__main__":
    sys.exit(main())
