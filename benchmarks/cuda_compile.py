"""The CUDA build of llama-server for Hopper, compiled on a machine without a GPU: the flags, the
sources and CMake's finding of cuBLAS checked before a GPU is lent, and the compile's cost measured.

    python benchmarks/cuda_compile.py [--work DIR] [--stop-after SECONDS]

Needs nvcc (CUDA's compiler) and the package index: cuBLAS comes from NVIDIA's nvidia-cublas
wheel (pinned below), installed into WORK/cublas and put on this Python's path, as the GPU
image's Python has it. The build is the smoke check's (benchmarks/gpu_smoke.py: CUDA 90-real, no
flash-attention kernels, Ninja) through the same `specsweep provision llama-server`, in WORK/build,
kept: run again and it continues where it stopped (--stop-after cuts it short on purpose).

Prints the wall time, the compile's own seconds summed over Ninja's steps (.ninja_log), and what
they imply for the GPU machine's 16 cores (the summed seconds over 16, on cores as fast as
these). Too slow for every CI run (tens of minutes on 2 cores), so it is run by hand, not by
the suite; docs/gpus.md gives its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
CUBLAS = "nvidia-cublas==13.0.0.19"  # CUDA 13.0's cuBLAS, the toolkit release nvcc here is


def ninja_steps(build: Path) -> list[tuple[int, int, str]]:
    """(start ms, end ms, output) of each step Ninja ran, its last run of each output."""
    log = build / ".ninja_log"
    if not log.is_file():
        return []
    steps = {}
    for line in log.read_text().splitlines()[1:]:
        start, end, _, output, _ = line.split("\t")
        steps[output] = (int(start), int(end), output)
    return list(steps.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / "build" / "cuda-compile")
    parser.add_argument("--stop-after", type=int, help="stop the build after this many seconds (to continue later)")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    site = work / "cublas"
    if not (site / "nvidia").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), CUBLAS],
                       check=True)
    source = work / "llama-source.tar.xz"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "workflow"), str(site)]),
           "SPECSWEEP_CACHE": str(work / "cache")}
    if not source.is_file():
        subprocess.run([sys.executable, "-m", "specsweep", "provision", "llama-source", "--out", str(source)],
                       env=env, check=True)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "specsweep", "provision", "llama-server", "--source", str(source),
                             "--cuda-arch", "90-real", "--no-flash-attention", "--build-dir", str(work / "build"),
                             "--log", str(work / "build.log"), "--out", str(work / "llama-server.json")], env=env)
    try:
        code = proc.wait(timeout=args.stop_after)
    except subprocess.TimeoutExpired:  # the whole tree (cmake, ninja, nvcc), as a time limit would
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        for p in tree:
            p.kill()
        psutil.wait_procs(tree, timeout=10)
        code = None
    wall = time.monotonic() - t0
    [tree] = list((work / "build").glob("*/build")) or [work / "build"]
    steps = ninja_steps(tree)
    summed = sum(end - start for start, end, _ in steps) / 1000
    cuda = sum(end - start for start, end, out in steps if out.endswith(".cu.o")) / 1000
    manifest = json.loads((work / "llama-server.json").read_text()) if code == 0 else {}
    print(json.dumps({
        "finished": code == 0, "stopped_after_s": args.stop_after if code is None else None,
        "wall_s_this_call": round(wall, 1), "cores": os.cpu_count(), "ninja_steps_done": len(steps),
        "compile_s_summed": round(summed, 1), "cuda_compile_s_summed": round(cuda, 1),
        "estimated_wall_s_on_16_cores": round(summed / 16, 1), "cmake_flags": manifest.get("cmake_flags"),
        "machine_flags": manifest.get("machine_flags"), "cuda_libraries": manifest.get("cuda_libraries"),
        "binary_bytes": Path(manifest["binary"]).stat().st_size if manifest else None}, indent=1))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
