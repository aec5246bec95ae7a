"""The llama.cpp source for a machine without the package index: cut from the pinned sdist,
checked against it, and refused when it is not what the pin says."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from specsweep.errors import ProvisionError
from specsweep.servers.backends.llama_cpp import cuda, source

FILES = {"vendor/llama.cpp/CMakeLists.txt": "project(llama)", "vendor/llama.cpp/ggml/src/ggml.c": "int x;",
         "vendor/llama.cpp/tools/server/server.cpp": "int main;",
         "vendor/llama.cpp/gguf-py/gguf/__init__.py": "", "vendor/llama.cpp/models/ggml-vocab.gguf": "x" * 5000,
         "vendor/llama.cpp/docs/build.md": "docs", "vendor/llama.cpp/tests/test.cpp": "t", "pyproject.toml": "[x]"}


def fake_sdist(folder: Path) -> tuple[Path, str]:
    """An sdist laid out as llama-cpp-python's: llama_cpp_python-V/vendor/llama.cpp/..."""
    path = folder / "llama_cpp_python-0.0.1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_python-0.0.1/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_archive_keeps_what_the_build_needs_and_names_its_origin(tmp_path):
    sdist, pin = fake_sdist(tmp_path)
    out = tmp_path / "carry" / "llama-source.tar.xz"
    manifest = source.source_cut("0.0.1", pin, out, sdist=sdist)
    with tarfile.open(out) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    assert names == {"vendor/llama.cpp/CMakeLists.txt", "vendor/llama.cpp/ggml/src/ggml.c",
                     "vendor/llama.cpp/tools/server/server.cpp", "vendor/llama.cpp/gguf-py/gguf/__init__.py"}
    assert manifest == json.loads(Path(f"{out}.json").read_text())
    assert manifest["sdist_sha256"] == pin
    assert manifest["archive_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert source.local_source(out, "0.0.1", pin) == out
    assert source.local_source(sdist, "0.0.1", pin) == sdist  # the sdist itself passes on its pin


def test_the_build_here_unpacks_from_the_whole_sdist_exactly_what_the_cut_holds(tmp_path):
    # So every embedded build proves the cut is enough, and the offline GPU rehearsal may share it.
    sdist, pin = fake_sdist(tmp_path)
    out = tmp_path / "llama-source.tar.xz"
    source.source_cut("0.0.1", pin, out, sdist=sdist)

    def unpacked(archive: Path, into: str) -> set[str]:
        tree = source.source_tree(archive, tmp_path / into)
        return {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()}

    whole, cut = unpacked(sdist, "from-sdist"), unpacked(out, "from-cut")
    assert whole == cut == {"CMakeLists.txt", "ggml/src/ggml.c", "tools/server/server.cpp", "gguf-py/gguf/__init__.py"}


def test_a_source_not_cut_from_the_pin_or_changed_since_is_refused(tmp_path):
    sdist, pin = fake_sdist(tmp_path)
    out = tmp_path / "llama-source.tar.xz"
    with pytest.raises(ProvisionError, match="SHA-256 differs"):
        source.source_cut("0.0.1", "0" * 64, out, sdist=sdist)
    source.source_cut("0.0.1", pin, out, sdist=sdist)
    with pytest.raises(ProvisionError, match="not cut from llama-cpp-python 0.0.1 as pinned"):
        source.local_source(out, "0.0.1", "f" * 64)
    out.write_bytes(out.read_bytes() + b"tampered")
    with pytest.raises(ProvisionError, match="or changed since"):
        source.local_source(out, "0.0.1", pin)
    Path(f"{out}.json").unlink()
    with pytest.raises(ProvisionError, match="no readable manifest"):
        source.local_source(out, "0.0.1", pin)
    with pytest.raises(ProvisionError, match="no such source file"):
        source.local_source(tmp_path / "missing.tar.xz", "0.0.1", pin)


def test_a_cuda_build_adds_its_flags_and_a_cache_key_of_its_own():
    assert cuda.cuda_flags(None) == ()
    assert cuda.cuda_flags("90") == ("-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90")


def test_cuda_builds_for_the_named_architecture_with_or_without_flash_attention():
    assert cuda.cuda_flags("90-real", flash_attention=False) == (
        "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90-real", "-DGGML_CUDA_FA=OFF")


def _toolkit(tmp_path, monkeypatch, *, cublas: str | None, driver: str | None, places: int = 1):
    """A toolkit in tmp_path/cuda (its nvcc, libcudart, cuBLAS if named) and driver folders."""
    lib = tmp_path / "cuda" / "lib64"
    lib.mkdir(parents=True)
    (lib / "libcudart.so.13").write_text("")
    (tmp_path / "cuda" / "bin").mkdir()
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    if cublas:
        for name in (cublas, cublas.replace("libcublas", "libcublasLt")):
            (lib / name).write_text("")
    folders = [tmp_path / f"driver{i}" for i in range(places)]
    for folder in folders:
        folder.mkdir()
    if driver:
        (folders[-1] / driver).write_text("")
    monkeypatch.setattr(cuda, "CUDA_ROOT", str(tmp_path / "cuda"))
    monkeypatch.setattr(cuda.shutil, "which", lambda name: None)  # nvcc only under CUDA_ROOT/bin
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(cuda, "DRIVER_PLACES", tuple(map(str, folders)))
    return lib


def test_cublas_from_nvidias_wheel_is_named_to_cmake_by_its_versioned_file(tmp_path, monkeypatch):
    """The GPU image's cuBLAS is the nvidia-cublas wheel, whose libcublas.so.13 FindCUDAToolkit
    does not look for: the build names it, and its headers, to CMake, and says what it found."""
    _toolkit(tmp_path, monkeypatch, cublas=None, driver="libcuda.so.1")
    wheel = tmp_path / "site" / "nvidia" / "cu13"
    (wheel / "lib").mkdir(parents=True)
    (wheel / "include").mkdir()
    for name in ("lib/libcublas.so.12", "lib/libcublas.so.13", "lib/libcublasLt.so.13", "include/cublas_v2.h"):
        (wheel / name).write_text("")
    monkeypatch.setattr(cuda, "cublas_from_wheel", lambda: (wheel / "include", wheel / "lib"))
    flags, notes = cuda.cuda_library_flags()
    assert flags == (f"-DCMAKE_CUDA_COMPILER={tmp_path}/cuda/bin/nvcc",
                     f"-DCUDA_cublas_LIBRARY={wheel}/lib/libcublas.so.13",
                     f"-DCUDA_cublasLt_LIBRARY={wheel}/lib/libcublasLt.so.13", f"-DCMAKE_CUDA_FLAGS=-I{wheel}/include",
                     f"-DCUDA_cuda_driver_LIBRARY={tmp_path}/driver0/libcuda.so.1")
    assert notes[0] == f"nvcc: {tmp_path}/cuda/bin/nvcc (release 13.0, V13.0.88)"
    assert notes[1] == f"cuBLAS: {wheel}/lib/libcublas.so.13 (NVIDIA's wheel)"


def test_a_toolkit_with_only_the_versioned_cublas_is_named_by_full_path(tmp_path, monkeypatch):
    """nvcc off PATH is found in the toolkit's bin/; a toolkit cuBLAS that is only libcublas.so.13
    is named to CMake; the driver in a later folder by its soname before a fully versioned file."""
    lib = _toolkit(tmp_path, monkeypatch, cublas="libcublas.so.13", driver="libcuda.so.1", places=2)
    (tmp_path / "driver0" / "libcuda.so.580.95.05").write_text("")
    flags, notes = cuda.cuda_library_flags()
    assert f"-DCUDA_cublas_LIBRARY={lib}/libcublas.so.13" in flags
    assert f"-DCUDA_cuda_driver_LIBRARY={tmp_path}/driver1/libcuda.so.1" in flags
    assert not any(f.startswith("-DCMAKE_CUDA_FLAGS") for f in flags)
    assert notes[1] == f"cuBLAS: {lib}/libcublas.so.13 (the toolkit's)"


def test_the_toolkits_stub_is_the_driver_library_before_the_drivers_own(tmp_path, monkeypatch):
    lib = _toolkit(tmp_path, monkeypatch, cublas="libcublas.so", driver="libcuda.so.1")
    (lib / "stubs").mkdir()
    (lib / "stubs" / "libcuda.so").write_text("")
    flags, _ = cuda.cuda_library_flags()
    assert flags[-1] == f"-DCUDA_cuda_driver_LIBRARY={lib}/stubs/libcuda.so"


def test_a_compile_only_machine_builds_without_the_driver_and_says_so(tmp_path, monkeypatch):
    _toolkit(tmp_path, monkeypatch, cublas="libcublas.so", driver=None)
    flags, notes = cuda.cuda_library_flags()
    assert flags[-1] == "-DGGML_CUDA_NO_VMM=ON" and "compile-only" in notes[-1]


def test_no_nvcc_anywhere_is_refused_naming_where_it_looked(tmp_path, monkeypatch):
    _toolkit(tmp_path, monkeypatch, cublas="libcublas.so", driver=None)
    (tmp_path / "cuda" / "bin" / "nvcc").unlink()
    with pytest.raises(ProvisionError, match="no nvcc on PATH or in"):
        cuda.cuda_library_flags()


def test_no_cublas_anywhere_is_refused_with_the_install_line(tmp_path, monkeypatch):
    _toolkit(tmp_path, monkeypatch, cublas=None, driver="libcuda.so")
    monkeypatch.setattr(cuda, "cublas_from_wheel", lambda: None)
    with pytest.raises(ProvisionError, match="pip install nvidia-cublas"):
        cuda.cuda_library_flags()
