"""The quiet-host guard's figures with the real llama-server and the real CLI, on three hosts: quiet;
beside a CPU hog free to run anywhere; beside a hog pinned to one core while the server is pinned
to the other (taskset, one server thread).

    python benchmarks/quiet_host.py [--runs 2] [--loaded-runs 1]

Prints, per run and section, what the others used (`cores`), what the server waited for a CPU
(`waited`, cores-worth, from its threads' schedstat), what the guard compares with
quiet_host.max_foreign_cores (`took`: the smaller of the others' load on the server's CPUs and the
server's waiting), the host's CPU pressure (PSI "some" share) and the throughput, then the
verdicts. The guard is set out of the way here (max_foreign_cores 100) so that every figure is
measured, never cut short.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOG = "import time\nend = time.time() + 300\nwhile time.time() < end:\n    pass\n"


def study_doc(binary: str, model: str, pinned: int | None = None) -> dict:
    from specsweep import study

    doc = study.load_study(REPO / "config/config.yaml")
    doc["server"]["binary"], doc["model"]["path"] = binary, model
    doc["grid"] = {"budget": [0], "tp": [1], "context": [128]}
    if pinned is not None:
        doc["server"]["threads"] = 1
        doc["server"]["command"] = ["taskset", "-c", str(pinned), *doc["server"]["command"]]
    return doc


def run_once(doc: dict, folder: Path) -> list[dict]:
    from specsweep import study

    spec = study.expand_grid(study.validate_study(doc))[0]
    out = folder / "result.json"
    proc = subprocess.run([sys.executable, "-m", "specsweep", "launch", "--spec", spec.to_json(), "--out", str(out),
                           "--server-log", str(folder / "server.log"), "--failures-dir", str(folder / "failures"),
                           "--quiet-host", json.dumps({"max_foreign_cores": 100, "max_repeat_spread": 100})],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(out.read_text())["sections"]


def main() -> None:
    from specsweep import study
    from specsweep.study.targets import provision_embedded

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs on the quiet host")
    parser.add_argument("--loaded-runs", type=int, default=1, help="runs beside each hog (minutes each)")
    args = parser.parse_args()
    config = study.load_study(REPO / "config/config.yaml")
    embedded = provision_embedded(config, Path(tempfile.gettempdir()) / "build.log")
    binary, model = embedded["binary"], embedded["model"]
    threshold = study.validate_study({})["quiet_host"]["max_foreign_cores"]
    cpus = sorted(os.sched_getaffinity(0))
    hosts = [("quiet", args.runs, None, None), ("hog", args.loaded_runs, None, set(cpus)),
             ("pinned", args.loaded_runs, cpus[0], {cpus[-1]})]
    print(f"quiet_host.max_foreign_cores = {threshold}; default study sections, prompt 128, budget 0, 2 repeats")
    print(f"{'host':<8}{'run':>4}  {'section':<8}{'cores':>7}{'waited':>8}{'took':>7}{'PSI':>7}{'tok/s':>8}")
    for host, runs, server_cpu, hog_cpus in hosts:
        worst = 0.0
        for run in range(runs):
            hog = None if hog_cpus is None else subprocess.Popen(
                [sys.executable, "-c", HOG], preexec_fn=lambda c=hog_cpus: os.sched_setaffinity(0, c))
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    sections = run_once(study_doc(binary, model, server_cpu), Path(tmp))
            finally:
                if hog:
                    hog.kill()
                    hog.wait()
            for s in sections:
                load = s["quiet_host"]
                worst = max(worst, load["contended_cores"])
                psi = load["cpu_pressure_share"]
                print(f"{host:<8}{run:>4}  {s['name']:<8}{load['cores']:>7.3f}{load['server_wait_cores'] or 0:>8.3f}"
                      f"{load['contended_cores']:>7.3f}{'-' if psi is None else f'{psi:.2f}':>7}"
                      f"{s['output_tok_s']:>8.1f}")
        verdict = "all pass" if worst <= threshold else "would fail as host-not-quiet"
        print(f"-> {host}: worst section took {worst:.3f} cores from the server: {verdict}")


if __name__ == "__main__":
    main()
