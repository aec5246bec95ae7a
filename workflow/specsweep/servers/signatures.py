"""Known failure signatures in server logs, so a record names the cause, not the symptom."""

from __future__ import annotations

import re
from pathlib import Path

# (label, pattern); order matters: the first label that matches wins. Patterns follow the
# servers' own messages (shared/reference/servers.md), matched case-insensitively.
SIGNATURES: tuple[tuple[str, str], ...] = (
    ("cuda-illegal-instruction",
     r"illegal instruction was encountered|illegal memory access|no kernel image is available"),
    ("gpu-oom", r"CUDA out of memory|OutOfMemoryError|Not enough memory|cudaMalloc failed: out of memory"
                r"|failed to allocate buffer for kv cache|No available memory for the cache blocks"),
    # Host memory: a context or batch that does not fit the machine's RAM (llama.cpp throws
    # std::bad_alloc from its buffer allocation; the kernel's OOM killer is "killed" below).
    ("host-oom", r"std::bad_alloc|Cannot allocate memory|\bMemoryError\b"),
    ("nccl", r"NCCL error|DistBackendError|watchdog caught collective operation timeout"),
    ("port-in-use", r"Address already in use|Errno 98|couldn't bind HTTP server socket"),
    # vLLM: "However, the model's context length is only X" (renderers/params.py); SGLang: "longer
    # than the model's context length"; llama-server: exceed_context_size_error.
    ("context-exceeded", r"longer than the model's context length|maximum context length|exceed_context_size_error"
                         r"|context length is only"),
    ("bad-arguments", r"unrecognized arguments|the argument has been removed|error: invalid argument|unknown argument"),
    ("model-load", r"failed to load model|error loading model|failed to open GGUF|No such file or directory"),
    ("killed", r"\bKilled\b|Child process unexpectedly failed|out of memory: kill"),
    # A warning last: NCCL prints WARN lines on healthy runs too, so one may name a failure only
    # when no crash line above does.
    ("nccl-warning", r"NCCL WARN"),
)

_COMPILED = tuple((label, re.compile(pattern, re.IGNORECASE)) for label, pattern in SIGNATURES)


def classify(text: str, extra: tuple[tuple[str, str], ...] = ()) -> tuple[str | None, list[str]]:
    """(label, matching lines) of the first known signature in a log, or (None, []).

    ``extra``: a backend's own (label, regex) pairs, tried after the common ones.
    """
    lines = text.splitlines()
    compiled = _COMPILED + tuple((label, re.compile(pattern, re.IGNORECASE)) for label, pattern in extra)
    for label, pattern in compiled:
        hits = [line.strip() for line in lines if pattern.search(line)]
        if hits:
            return label, hits[:5]
    return None, []


def log_size(path: Path | str) -> int:
    """Bytes in a log now: where the next launch's lines will start."""
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def log_tail(path: Path | str, lines: int = 40, max_bytes: int = 256_000, *, start: int = 0) -> str:
    """The last lines of a log file from byte ``start`` on; empty if it cannot be read.

    The server log is appended to across attempts: ``start`` (the size before this launch)
    keeps an earlier attempt's error from naming this one's failure.
    """
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(start, size - max_bytes))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def describe_exit(returncode: int | None) -> str:
    """A person's words for a process exit status."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"
