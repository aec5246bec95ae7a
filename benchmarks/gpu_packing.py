"""How fully a mixed tp 1/2 study packs 8 GPUs: makespan against the ideal.

Real Snakemake (--cores 8 --resources gpu=8, every job declaring gpu=<tp> as the workflow's
launch_configuration rule does) schedules fixed-duration stand-in jobs; each job takes its GPUs
through specsweep's own device locks (leases.acquire, simulated GPU ids 0-7), holds them for
its duration and records when and which. Printed: the makespan from the first job's start to the
last job's end, the ideal (total GPU-seconds / 8, or the longest job if longer), their ratio
(target: within 10%), and whether any two overlapping jobs ever shared a GPU.

    python benchmarks/gpu_packing.py [--tp1 16] [--tp2 8] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

GPUS = 8
SNAKEFILE = """
JOBS = {jobs}

rule all:
    input: [f"done/{{name}}.json" for name in JOBS]

rule job:
    output: "done/{{name}}.json"
    resources: gpu=lambda wc: JOBS[wc.name][0]
    params: seconds=lambda wc: JOBS[wc.name][1]
    shell: "{python} {script} --job {{wildcards.name}} --tp {{resources.gpu}} "
           "--seconds {{params.seconds}} --out {{output}}"
"""


def job(args) -> None:
    """One stand-in configuration: hold tp GPUs for a fixed time, as a measurement would."""
    from specsweep.host import leases

    with leases.acquire(args.tp, holder=args.job, announce=print, gpu=True) as lease:
        start = time.time()
        time.sleep(args.seconds)
        end = time.time()
    Path(args.out).write_text(json.dumps({"name": args.job, "tp": args.tp, "gpus": list(lease.gpus),
                                          "start": start, "end": end, "seconds": args.seconds}))


def study(args) -> None:
    jobs = {f"tp1-{i}": (1, args.seconds) for i in range(args.tp1)}
    jobs |= {f"tp2-{i}": (2, args.seconds * 1.5) for i in range(args.tp2)}
    with tempfile.TemporaryDirectory(prefix="gpu-packing-") as tmp:
        work = Path(tmp)
        (work / "Snakefile").write_text(SNAKEFILE.format(jobs=repr(jobs), python=sys.executable,
                                                         script=Path(__file__).resolve()))
        env = {**os.environ, "SPECSWEEP_GPUS": ",".join(str(i) for i in range(GPUS)),
               "SPECSWEEP_LOCK_DIR": str(work / "locks"), "SPECSWEEP_GPU_RELEASE_TIMEOUT_S": "5"}
        t0 = time.time()
        # The target first: --resources (and --quiet) take several values and would swallow it.
        out = subprocess.run([sys.executable, "-m", "snakemake", "all", "--cores", str(GPUS), "--resources",
                              f"gpu={GPUS}"], cwd=work, env=env, capture_output=True, text=True)
        wall = time.time() - t0
        if out.returncode != 0:
            sys.exit(out.stdout[-3000:] + out.stderr[-3000:])
        records = [json.loads(p.read_text()) for p in (work / "done").glob("*.json")]
    report(records, wall)


def report(records: list[dict], wall: float) -> None:
    gpu_seconds = sum(r["tp"] * (r["end"] - r["start"]) for r in records)
    ideal = max(gpu_seconds / GPUS, max(r["end"] - r["start"] for r in records))
    makespan = max(r["end"] for r in records) - min(r["start"] for r in records)
    shared = [(a["name"], b["name"]) for a, b in combinations(records, 2)
              if a["start"] < b["end"] and b["start"] < a["end"] and set(a["gpus"]) & set(b["gpus"])]
    peak = max(sum(r["tp"] for r in records if r["start"] <= t < r["end"]) for t in (r["start"] for r in records))
    print(f"jobs: {sum(r['tp'] == 1 for r in records)} x tp1, {sum(r['tp'] == 2 for r in records)} x tp2 "
          f"on {GPUS} simulated GPUs; GPU-seconds {gpu_seconds:.1f}")
    print(f"makespan {makespan:.1f} s, ideal {ideal:.1f} s, ratio {makespan / ideal:.3f} "
          f"(target <= 1.10); Snakemake wall time {wall:.1f} s")
    print(f"peak GPUs in use {peak}/{GPUS}; overlapping jobs sharing a GPU: {len(shared)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tp1", type=int, default=16)
    parser.add_argument("--tp2", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of a tp1 job; tp2 jobs take 1.5x")
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--tp", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    job(args) if args.job else study(args)


if __name__ == "__main__":
    main()
