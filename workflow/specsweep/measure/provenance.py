"""Where a number came from, in the spirit of pyperf's metadata: code, invocation, study config,
environment and package versions. The hardware is hardware.py's; the model's identity and the
server's own version are the runner's; this module holds the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from specsweep import __version__
from specsweep.servers import templates

# Set by the Snakefile for every job it runs: the exact command and the merged study config.
INVOCATION_ENV = "SPECSWEEP_INVOCATION"
STUDY_SHA_ENV = "SPECSWEEP_STUDY_SHA256"
PACKAGES = ("snakemake", "requests", "psutil", "pandas", "seaborn", "matplotlib", "scipy", "prometheus_client",
            "pyyaml", "numpy")
# Environment variables that change what a server or the harness does; recorded (secrets redacted).
ENV_ALLOW = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
             "NCCL_DEBUG", "SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURMD_NODENAME", "SPECSWEEP_GPUS",
             "SPECSWEEP_CACHE", "SPECSWEEP_LOCK_DIR", "HF_HUB_OFFLINE")
ENV_PREFIXES = ("VLLM_", "SGLANG_", "LLAMA_", "GGML_", "NCCL_")


def source_root() -> Path:
    """The checkout specsweep runs from (the package lives in workflow/specsweep/)."""
    import specsweep

    return Path(specsweep.__file__).resolve().parents[2]


def git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=source_root(), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code() -> dict:
    """specsweep's version and the git commit of its checkout, and whether that tree was dirty."""
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"specsweep_version": __version__, "git_commit": commit,
            "git_dirty": bool(status) if status is not None else None,
            "source": str(source_root())}


def packages() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment(secrets: tuple[str, ...] = ()) -> dict[str, str]:
    """The allow-listed part of this process's environment, secret-named values redacted."""
    chosen = {k: v for k, v in os.environ.items() if k in ENV_ALLOW or k.startswith(ENV_PREFIXES)}
    return templates.redact_env(dict(sorted(chosen.items())), secrets)


def study_sha256(config: dict) -> str:
    """The hash of a merged, validated study config, as the Snakefile stores it once per study."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def collect(secrets: tuple[str, ...] = ()) -> dict:
    """The provenance block of a result."""
    return {
        "code": code(),
        "invocation": templates.redact_text(os.environ.get(INVOCATION_ENV) or shlex.join(sys.argv), secrets),
        "study_config_sha256": os.environ.get(STUDY_SHA_ENV),
        "environment": environment(secrets),
        "packages": packages(),
        "os": platform.platform(),
    }
