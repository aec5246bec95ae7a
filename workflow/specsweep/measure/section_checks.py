"""What a section's requests must pass before its figures count: no prompt sent twice on one
server, the server's own token counter equal to the responses' counts (and still reported), and
the open-loop schedule kept by the client. Each failure is typed (errors.py): the launch fails
and nothing is written."""

from __future__ import annotations

from specsweep.errors import ClientOverload, InvalidResponse, PromptReused
from specsweep.measure import client
from specsweep.servers.process import ServerProcess
from specsweep.spec import LaunchSpec


def check_distinct(seen: dict[str, str], records, where: str, *, reuse: bool) -> None:
    """No prompt twice on one server, unless the study measures caching on purpose.

    A server that saw a text before may answer it from memory (llama-server's ngram-mod pool,
    SGLang's radix cache and NGRAM drafts, vLLM's prefix cache): the numbers would then show the
    cache, not the configuration. ``seen`` maps each prompt sent so far to where it was sent.
    """
    for record in records:
        first = seen.get(record.prompt_sha256)
        if record.prompt_sha256 is None or (first is not None and not reuse):
            raise PromptReused(
                f"{where}: request {record.index} sent prompt {str(record.prompt_sha256)[:12]} that this server "
                f"already got in {first}; a re-sent prompt may be answered from the server's caches, so this is "
                f"not a measurement" if first else f"{where}: request {record.index} carries no prompt identity",
                section=record.section)
        seen.setdefault(record.prompt_sha256, where)


def counters_after(server: ServerProcess, before: dict[str, float], where: str) -> dict[str, float]:
    """The counters after a window; the token counter read before it must still be there.

    A /metrics that stops answering (or drops the counter) would silently skip the check of the
    server's count against the responses: a server that died or hangs is named as such, any
    other server's section is refused.
    """
    after = client.metrics(server.base_url, headers=server.headers)
    counter = server.backend.token_counter
    if counter and counter in before and counter not in after:
        server.check_alive(where)
        raise InvalidResponse(f"{where}: /metrics no longer reports {counter}, so the server's token count "
                              f"cannot be checked against the responses")
    return after


def check_counters(where: str, stats: dict, counter: str | None) -> None:
    """The server's own token counter must agree with the per-request counts (``where``: the
    section's label; the record's section is the runner's phase)."""
    counted = stats["counters"].get(counter) if counter else None
    if counted is not None and int(counted) != stats["output_tokens"]:
        raise InvalidResponse(
            f"{where}: server counted {int(counted)} generated tokens, responses say {stats['output_tokens']}")


def check_schedule(spec: LaunchSpec, where: str, stats: dict) -> None:
    lag = stats["schedule_lag_s"]["p99"]
    if lag is not None and lag > spec.max_schedule_lag_s:
        raise ClientOverload(
            f"{where}: requests left the client {lag * 1000:.1f} ms late (p99) against their "
            f"schedule, above workload.max_schedule_lag_s = {spec.max_schedule_lag_s * 1000:.1f} ms; "
            f"lower the request rate or concurrency, or give the client a core of its own"
        )
