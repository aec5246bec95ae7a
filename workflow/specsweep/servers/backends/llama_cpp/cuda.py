"""The CUDA libraries a llama-server build links, found on this machine by full path: CUDA's
compiler, the toolkit's runtime, cuBLAS (the toolkit's, else NVIDIA's wheel in this Python) and
the driver library (or none, on a machine that only compiles)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from specsweep.errors import ProvisionError


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

