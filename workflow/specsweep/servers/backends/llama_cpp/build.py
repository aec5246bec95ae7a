"""llama-server built from the llama.cpp source vendored in the llama-cpp-python sdist, for a
portable CPU target, not for the build machine: GGML_NATIVE=OFF gives x86-64 with SSE4.2, AVX,
AVX2, BMI2, FMA and F16C (x86 CPUs since 2013), so a binary built on a cluster's login node does
not die with an illegal instruction on a compute node of another kind. A node without those
instructions is refused before launch, by name (check_cpu). With ``cuda_arch`` it is built with
CUDA (``cuda``'s libraries, by full path).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from specsweep.cache import Artifact, cache_dir, cached, pip_download, progress, require_tools, run_logged, sha256_file
from specsweep.errors import ProvisionError
from specsweep.records.store import utc_now
from specsweep.servers.backends.llama_cpp.cuda import cuda_flags, cuda_library_flags
from specsweep.servers.backends.llama_cpp.source import local_source, source_tree

SERVER_TARGET = "llama-server"


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


def provision_server(version: str, sha256: str, *, log_path: Path, source: Path | None = None,
                     cuda_arch: str | None = None, flash_attention: bool = True,
                     build_dir: Path | None = None) -> dict:
    """The cached llama-server for this llama-cpp-python version, built if needed.

    ``source``: a local copy of the source instead of the package index (a machine without one):
    the pinned sdist itself, or the smaller source cut (``source_cut``) taken from it, checked
    against the manifest beside it. ``cuda_arch``: build with CUDA for that architecture.
    ``build_dir``: build there and keep it, so that a build cut short (a time limit) continues
    where it stopped on the next call instead of starting over.
    """
    flags = (*CMAKE_FLAGS, *cuda_flags(cuda_arch, flash_attention=flash_attention))
    flags_key = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:8]

    def build(staging: Path, final: Path) -> dict:
        require_tools()
        # This machine's toolkit is looked for only where a build runs: a server found in the cache
        # (one built elsewhere and carried, issue 40.2) needs no compiler here.
        local_flags, notes = cuda_library_flags() if cuda_arch else ((), [])
        for note in notes:  # what the build found, said before it starts (issue 40.4)
            progress(note)
        with tempfile.TemporaryDirectory(prefix="specsweep-build-", dir=cache_dir()) as tmp:
            where = Path(build_dir) / f"{version}-{flags_key}" if build_dir else Path(tmp)
            sdist = (local_source(source, version, sha256) if source else
                     pip_download(f"llama-cpp-python=={version}", Path(tmp) / "dl", sha256=sha256, sdist=True))
            tree = source_tree(sdist, where / "src")
            seconds = _build(tree, where / "build", log_path, (*flags, *local_flags))
            binary = staging / "bin" / SERVER_TARGET
            binary.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(where / "build" / "bin" / SERVER_TARGET, binary)
        x86 = platform.machine() in ("x86_64", "AMD64")
        return {
            "binary": str(final / "bin" / SERVER_TARGET), "binary_sha256": sha256_file(binary),
            "source": f"llama-cpp-python=={version}", "source_sha256": sha256,
            "source_file": str(source) if source else None, "cuda_arch": cuda_arch,
            "cmake_flags": list(flags), "machine_flags": list(local_flags), "cuda_libraries": notes,
            "build_seconds": round(seconds, 1), "built_at": utc_now(), "machine": platform.machine(),
            "cpu_target": ("x86-64 with SSE4.2, AVX, AVX2, BMI2, FMA, F16C (GGML_NATIVE=OFF)" if x86
                           else "generic (GGML_NATIVE=OFF)"),
            "requires_cpu_flags": list(X86_REQUIRED_FLAGS) if x86 else [],
        }

    return cached(server_artifact(version, sha256, flags).folder, "binary", build)


def server_artifact(version: str, sha256: str, flags: tuple[str, ...] = CMAKE_FLAGS) -> Artifact:
    """Where the cache keeps llama-server built from the pinned sdist with these flags. The key is
    the pinned source and the flags: a binary built from the local copy of the same source with
    the same flags is the same binary."""
    flags_key = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:8]
    return Artifact("llama-server", f"llama-cpp-python=={version}",
                    cache_dir() / "llama-server" / f"{version}-{sha256[:12]}-{flags_key}", "binary")


def _build(source: Path, build: Path, log_path: Path, flags: tuple[str, ...] = CMAKE_FLAGS) -> float:
    """cmake configure + build of the server target only (Ninja where there is one: it resumes a
    build cut short without redoing what is done); full output to the log."""
    t0 = time.monotonic()
    jobs = str(os.cpu_count() or 1)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    generator = ("-G", "Ninja") if shutil.which("ninja") and not (build / "Makefile").exists() else ()
    with open(log_path, "w") as log:
        progress(f"configuring llama.cpp (log: {log_path})")
        run_logged(["cmake", "-S", str(source), "-B", str(build), *generator, *flags], log, "cmake configure")
        progress(f"building {SERVER_TARGET} with {jobs} jobs; this takes several minutes on 2 cores")
        run_logged(["cmake", "--build", str(build), "--target", SERVER_TARGET, "-j", jobs], log, "cmake build")
    seconds = time.monotonic() - t0
    progress(f"built {SERVER_TARGET} in {seconds:.0f} s")
    return seconds

