"""The quiet-host guard's figures: cores used by the rest of the machine per section, on a quiet
host and beside a CPU hog, with the real llama-server and the real CLI.

    python benchmarks/quiet_host.py [--runs 3] [--loaded-runs 1]

Prints, per run and section, `host_load.cores` (what the guard compares with
guard.max_foreign_cores) and the spread of the repeats, then the verdicts. The guard is set out of
the way here (max_foreign_cores 100) so that every figure is measured, never cut short.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
HOG = "import time\nend = time.time() + 300\nwhile time.time() < end:\n    pass\n"


def study(binary: str, model: str) -> dict:
    doc = yaml.safe_load((REPO / "config/config.yaml").read_text())
    doc["server"]["binary"], doc["model"]["path"] = binary, model
    doc["grid"] = {"budget": [0], "tp": [1], "context": [128]}
    return doc


def run_once(doc: dict, folder: Path) -> list[dict]:
    from specsweep import study as config

    spec = config.expand_grid(config.validate_study(doc))[0]
    out = folder / "result.json"
    proc = subprocess.run([sys.executable, "-m", "specsweep", "run", "--spec", spec.to_json(), "--out", str(out),
                           "--server-log", str(folder / "server.log"), "--failures-dir", str(folder / "failures"),
                           "--guard", json.dumps({"max_foreign_cores": 100, "max_repeat_spread": 100})],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(out.read_text())["sections"]


def main() -> None:
    from specsweep import study as config
    from specsweep.measure import quiet_host
    from specsweep.servers.backends import llama_server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs on the quiet host")
    parser.add_argument("--loaded-runs", type=int, default=1,
                        help="runs beside the hog (each takes minutes: the hog slows the server tenfold)")
    args = parser.parse_args()
    pins = config.load_study(REPO / "config/config.yaml")["provision"]
    binary, model = llama_server.provision_embedded(pins, log_path=Path(tempfile.gettempdir()) / "build.log")
    threshold = config.validate_study({})["guard"]["max_foreign_cores"]
    doc = study(binary, model)
    print(f"guard.max_foreign_cores = {threshold}; default study sections, prompt 128, budget 0, 2 repeats")
    print(f"{'host':<8}{'run':>4}  {'section':<8}{'cores':>8}{'CPU-s':>8}{'tok/s':>8}{'spread':>8}  top process")
    for loaded in (False, True):
        worst = 0.0
        for run in range(args.loaded_runs if loaded else args.runs):
            hog = subprocess.Popen([sys.executable, "-c", HOG]) if loaded else None
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    sections = run_once(doc, Path(tmp))
            finally:
                if hog:
                    hog.kill()
                    hog.wait()
            for s in sections:
                load = s["host_load"]
                worst = max(worst, load["cores"])
                spread = quiet_host.repeat_spread(s["output_tok_s_repeats"]) or 0.0
                top = load["top"][0] if load["top"] else {"name": "-", "cpu_s": 0}
                print(f"{'loaded' if loaded else 'quiet':<8}{run:>4}  {s['name']:<8}{load['cores']:>8.3f}"
                      f"{load['cpu_s']:>8.2f}{s['output_tok_s']:>8.1f}{spread:>8.1%}  "
                      f"{top['name']} {top['cpu_s']:.2f} s")
        verdict = "all pass" if worst <= threshold else "would fail as noisy-host"
        print(f"-> {'loaded' if loaded else 'quiet'}: worst section {worst:.3f} cores: {verdict}")


if __name__ == "__main__":
    main()
