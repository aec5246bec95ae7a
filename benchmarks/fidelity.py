"""Does the harness measure what the server did? On the real llama-server:

1. per request, the client's decode tok/s (tokens after the first over the time after the
   first token, from stream arrival times) against the server's own
   timings.predicted_per_second: relative error;
2. per section, the output tokens the harness counted (from the server's usage fields)
   against the delta of the server's llamacpp:tokens_predicted_total counter.

Usage: python benchmarks/fidelity.py [--budgets 0,4] [--requests 4] [--tokens 256]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from specsweep.measure import client, section_stats, workload
from specsweep.servers import probes
from specsweep.servers.backends import get as get_backend
from specsweep.servers.command import server_argv
from specsweep.servers.process import ServerProcess
from specsweep.spec import Section
from specsweep.study import loading
from specsweep.study.grid import expand_grid
from specsweep.study.loading import load_study, validate_study
from specsweep.study.targets import provision_embedded

LLAMA = get_backend("llama-server")

REPO = Path(__file__).resolve().parents[1]


def measure(budget: int, requests: int, tokens: int, context: int) -> tuple[list[float], int, int]:
    config = load_study(REPO / "config" / "config.yaml")
    build_log = Path(tempfile.gettempdir()) / "specsweep-build.log"
    embedded = provision_embedded(config, build_log)
    binary, model = embedded["binary"], embedded["model"]
    section = {"name": "fidelity", "output_tokens": tokens, "requests": requests}
    study = validate_study({"grid": {"budget": [budget], "context": [context]},
                            "workload": {"sections": [section]}})
    spec = expand_grid(study)[0].resolved(binary=binary, model_path=model)
    port = probes.free_port()
    log = Path(tempfile.gettempdir()) / f"specsweep-fidelity-b{budget}.log"
    argv = server_argv(spec, port)
    with ServerProcess(argv, port=port, log_path=log, startup_timeout_s=120, backend=LLAMA) as server:
        server.wait_ready()
        prompts = workload.set_prompts(server, loading.default_prompts(), count=requests, length=context,
                                       output_tokens=tokens)
        before = client.metrics(server.base_url)
        records, _ = workload.run_section(server, Section(**section), prompts, stall_timeout_s=60)
        delta = section_stats.counter_delta(before, client.metrics(server.base_url))
    errors = [abs(r.decode_tok_s - r.server_predicted_per_second) / r.server_predicted_per_second
              for r in records]
    return errors, sum(r.output_tokens for r in records), int(delta["llamacpp:tokens_predicted_total"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="0,4")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--context", type=int, default=128)
    args = parser.parse_args()
    for budget in map(int, args.budgets.split(",")):
        errors, counted, server_counted = measure(budget, args.requests, args.tokens, args.context)
        print(f"budget {budget}: decode tok/s vs server predicted_per_second: median relative error "
              f"{statistics.median(errors) * 100:.2f}%, max {max(errors) * 100:.2f}% over {len(errors)} requests; "
              f"section tokens: harness {counted}, server counter {server_counted} "
              f"(error {abs(counted - server_counted) / server_counted * 100:.2f}%)")


if __name__ == "__main__":
    main()
