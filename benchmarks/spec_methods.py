"""Which llama-server speculation method makes the draft-budget axis meaningful on this CPU?

Launches the embedded llama-server once per (method, budget), sends the same greedy
ignore_eos requests through specsweep's own client, and prints decode tok/s and acceptance.
Usage: python benchmarks/spec_methods.py [--tokens 128] [--requests 2]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specsweep.measure import client, workload
from specsweep.servers import probes
from specsweep.servers.backends import get as get_backend
from specsweep.servers.process import ServerProcess
from specsweep.study import loading
from specsweep.study.loading import load_study
from specsweep.study.targets import provision_embedded

LLAMA = get_backend("llama-server")

REPO = Path(__file__).resolve().parents[1]
METHODS = {
    "none": [],
    "ngram-mod": ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "1",
                  "--spec-ngram-mod-n-max", "{budget}"],
    "ngram-simple": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4",
                     "--spec-ngram-simple-size-m", "{budget}"],
    "draft-simple(self)": ["--spec-type", "draft-simple", "-md", "{model}", "--spec-draft-n-max", "{budget}"],
}


def measure(binary: str, model: str, extra: list[str], *, context: int, tokens: int, requests: int) -> dict:
    port = probes.free_port()
    argv = [binary, "-m", model, "--host", probes.HOST, "--port", str(port), "-c", str(context + tokens + 64),
            "-np", "1", "-t", "2", "--metrics", "--no-webui", *extra]
    log = Path("/tmp/spec_methods.log")
    with ServerProcess(argv, port=port, log_path=log, startup_timeout_s=120, backend=LLAMA) as server:
        server.wait_ready()
        # Distinct ShareGPT prompts, the same for every method and budget: none re-sent on a server.
        prompts = workload.set_prompts(server, loading.default_prompts(), count=requests + 1, length=context,
                                       output_tokens=tokens)
        client.stream_completion(server.backend, server.base_url, prompt=list(prompts[-1].tokens), n_predict=16,
                                 stall_timeout_s=60, section="warmup", index=0, t0=0)
        before = client.metrics(server.base_url)
        recs = [client.stream_completion(server.backend, server.base_url, prompt=list(p.tokens), n_predict=tokens,
                                         stall_timeout_s=60, section="s", index=i, t0=0)
                for i, p in enumerate(prompts[:requests])]
        after = client.metrics(server.base_url)
    wall = sum(r.e2e_s for r in recs)
    drafts = after["llamacpp:spec_decode_num_drafts_total"] - before["llamacpp:spec_decode_num_drafts_total"]
    accepted = "llamacpp:spec_decode_num_accepted_tokens_total"
    acc = after[accepted] - before[accepted]
    drafted = sum(r.draft_tokens for r in recs)
    return {"tok_s": sum(r.output_tokens for r in recs) / wall,
            "decode_tok_s": sum(r.decode_tok_s for r in recs) / len(recs),
            "acceptance_rate": (acc / drafted) if drafted else None,
            "acceptance_length": (1 + acc / drafts) if drafts else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--budgets", default="2,4,8")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args()
    config = load_study(REPO / "config" / "config.yaml")
    embedded = provision_embedded(config, Path("/tmp/specsweep-build.log"))
    binary, model = embedded["binary"], embedded["model"]
    for method in args.methods.split(","):
        budgets = [0] if method == "none" else [int(b) for b in args.budgets.split(",")]
        for budget in budgets:
            extra = [a.format(budget=budget, model=model) for a in METHODS[method]]
            row = measure(binary, model, extra, context=args.context, tokens=args.tokens, requests=args.requests)
            print(json.dumps({"method": method, "budget": budget, **{k: v and round(v, 3) for k, v in row.items()}}),
                  flush=True)


if __name__ == "__main__":
    main()
