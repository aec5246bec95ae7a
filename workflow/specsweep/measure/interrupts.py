"""SIGINT and SIGTERM during a launch: the launch ends as ``interrupted`` (128 + the signal), its
server tree torn down, and no result written.

The handler raises Interrupted wherever the program is, so the teardown of every context around
it runs. Python ignores an exception raised inside a finalizer, though: a signal that lands while
a garbage-collected connection pool closes its sockets (urllib3's ``_close_pool_connections``,
seen in a full run on 2026-12-05) is printed as "Exception ignored" and lost, and the launch ran
on to write its result and exit 0. So the signal is also kept, and the runner asks for it at its
checkpoints (``check``): at the end of each phase (startup, prompts, warmup, each section and
search step: runner._phase) and before the result is written.
"""

from __future__ import annotations

import signal

from specsweep.errors import Interrupted

received: int | None = None  # the first signal that arrived, once it has


def install() -> None:
    """Turn SIGINT and SIGTERM into Interrupted for the rest of this process."""
    global received
    received = None
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def _handler(signum, _frame) -> None:
    # Ignore further signals while the server tree is torn down, then report once.
    global received
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    received = signum
    raise Interrupted(signum)


def check() -> None:
    """Raise Interrupted if a signal arrived, even one whose exception something swallowed."""
    if received is not None:
        raise Interrupted(received)
