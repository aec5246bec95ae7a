"""How much load can specsweep's client generate before it, not the server, is measured?

The endpoint is tests/fault_server.py streaming with no delay between tokens (as fast as a
Python server can), pinned to one core; the client (this process) is pinned to another.

1. closed loop at rising concurrency: streamed tokens/s, client CPU-seconds per million
   streamed tokens, schedule lag p99;
2. open loop (seeded Poisson schedule) at rising request rates: schedule lag p99, and the
   largest rate whose lag p99 stays under 5 ms.

Usage: python benchmarks/client_headroom.py [--tokens 256]
Needs 2 cores. Peer clients are not run here: see the note at the end of the output.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from specsweep import probes, workload
from specsweep.config import Section
from specsweep.metrics import percentile
from specsweep.server import ServerProcess

FAULT_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fault_server.py"
PROMPT = [[101 + i for i in range(16)]]


def run(server: ServerProcess, section: Section) -> dict:
    send_times = workload.schedule(section, seed=0)
    cpu0, t0 = time.process_time(), time.monotonic()
    records, wall = workload.run_section(server, section, PROMPT, stall_timeout_s=30, send_times=send_times)
    cpu = time.process_time() - cpu0
    tokens = sum(r.output_tokens for r in records)
    return {"tok_s": tokens / wall, "cpu_s_per_mtok": cpu / tokens * 1e6,
            "lag_p99_ms": percentile([r.schedule_lag_s for r in records], 99) * 1000,
            "elapsed_s": time.monotonic() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs 2 cores: one for the endpoint, one for the client")
    server_core, client_core = sorted(os.sched_getaffinity(0))[:2]
    port = probes.free_port()
    argv = [sys.executable, str(FAULT_SERVER), "--port", str(port), "--token-delay", "0"]
    log = Path(tempfile.gettempdir()) / "specsweep-headroom-server.log"
    with ServerProcess(argv, port=port, log_path=log, startup_timeout_s=30) as server:
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
    print("peer clients (guidellm, aiperf) are not run: both build synthetic prompts with a Hugging Face "
          "tokenizer fetched from a hub, which this environment cannot reach.")


if __name__ == "__main__":
    main()
