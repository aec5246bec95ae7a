"""Workload: reproducible prompts of exact token length, and sections run against a live server.

A section never turns a failure into a number: any request that fails aborts the section with a
typed error, and the server's death is noticed while requests are in flight (the watcher's
event), not only between sections.
"""

from __future__ import annotations

import hashlib
import json
import queue
import random
import threading
import time
from importlib import resources

from . import client
from .config import Section
from .errors import ConfigError, InvalidResponse, ServerDied, SpecsweepError
from .prompts import read_prompts_file
from .server import ServerProcess

POLL_S = 0.02


def corpus_paragraphs() -> list[str]:
    text = resources.files("specsweep.data").joinpath("corpus.txt").read_text()
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def prompt_text(seed: int, index: int, min_words: int) -> str:
    """Real text: corpus paragraphs in a seeded order, repeated until long enough."""
    paragraphs = corpus_paragraphs()
    rng = random.Random(f"{seed}:{index}")
    out: list[str] = []
    words = 0
    while words < min_words:
        order = paragraphs[:]
        rng.shuffle(order)
        for para in order:
            out.append(para)
            words += len(para.split())
            if words >= min_words:
                break
    return "\n\n".join(out)


def make_prompts(server: ServerProcess, *, seed: int, count: int, length: int,
                 prompts_file: str | None = None) -> list[list[int]]:
    """``count`` prompts of exactly ``length`` tokens as the server tokenizes them.

    From the bundled corpus in a seeded order, or from the user's JSONL file (one
    {"prompt": text} per line, used in order, each cut to ``length`` tokens).
    """
    def tokenize(text: str) -> list[int]:
        return server.backend.tokenize(server.base_url, text, headers=server.headers)

    if prompts_file:
        texts = read_prompts_file(prompts_file)
        return [_cut(tokenize(texts[i % len(texts)]), length, f"{prompts_file} line {i % len(texts) + 1}")
                for i in range(count)]
    prompts = []
    for index in range(count):
        words = max(16, length)  # English runs above one token per word: enough text, then cut
        tokens = tokenize(prompt_text(seed, index, words))
        while len(tokens) < length:
            words *= 2
            tokens = tokenize(prompt_text(seed, index, words))
        prompts.append(tokens[:length])
    return prompts


def _cut(tokens: list[int], length: int, where: str) -> list[int]:
    if len(tokens) < length:
        raise ConfigError(f"{where}: the prompt has {len(tokens)} tokens, the grid asks for {length}; "
                          f"use longer prompts or a smaller grid.context")
    return tokens[:length]


def prompt_set_hash(prompts: list[list[int]]) -> str:
    """SHA-256 of the exact token ids sent, so two results can be checked for the same input."""
    return hashlib.sha256(json.dumps(prompts, separators=(",", ":")).encode()).hexdigest()


def schedule(section: Section, seed: int) -> list[float] | None:
    """Send times (s after the section starts) of a seeded Poisson process; None = closed loop."""
    if section.request_rate is None:
        return None
    rng = random.Random(f"{seed}:{section.name}")
    times, t = [], 0.0
    for _ in range(section.requests):
        times.append(t)
        t += rng.expovariate(section.request_rate)
    return times


def run_section(
    server: ServerProcess,
    section: Section,
    prompts: list[list[int]],
    *,
    stall_timeout_s: float,
    send_times: list[float] | None = None,
) -> tuple[list[client.RequestRecord], float]:
    """Run a section's requests, at most ``concurrency`` in flight; return records and wall time.

    Closed loop (no send_times): a request is due the moment a worker is free. Open loop: each
    request is due at its scheduled time; waiting for a free worker counts as schedule lag.
    """
    due: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()
    t0 = time.monotonic()

    def worker() -> None:
        while (item := due.get()) is not None:
            index, t_scheduled = item
            try:
                done.put(client.stream_completion(
                    server.backend, server.base_url, prompt=prompts[index % len(prompts)], n_predict=section.output_tokens,
                    stall_timeout_s=stall_timeout_s, section=section.name, index=index, t0=t0,
                    t_scheduled=t_scheduled, headers=server.headers,
                ))
            except BaseException as exc:  # handed to the main thread, which decides
                done.put(exc)
                return

    def dispatch() -> None:
        for index in range(section.requests):
            at = send_times[index] if send_times else None
            if at is not None:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
            due.put((index, at))
        for _ in range(section.concurrency):
            due.put(None)

    # Daemon threads: a thread stuck on a dead socket must never keep the job alive.
    threads = [threading.Thread(target=dispatch, daemon=True)]
    threads += [threading.Thread(target=worker, daemon=True) for _ in range(section.concurrency)]
    for thread in threads:
        thread.start()
    records = _collect(server, section, done, expected=section.requests)
    wall = max(r.t_end for r in records) - min(r.t_send for r in records)
    return sorted(records, key=lambda r: r.index), wall


def _collect(server: ServerProcess, section: Section, done: queue.Queue, *, expected: int) -> list:
    records: list[client.RequestRecord] = []
    where = f"in section {section.name}"
    while len(records) < expected:
        if server.died.is_set():
            raise server.death_error(ServerDied, f"server died {where}")
        try:
            item = done.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if isinstance(item, client.ConnectionLost):
            # A broken connection: find out at once whether the server is the cause.
            server.check_alive(where)
            raise InvalidResponse(f"connection lost {where} while the server stayed up: {item}")
        if isinstance(item, SpecsweepError):
            if not server.alive():
                raise server.death_error(ServerDied, f"server died {where}")
            item.section = section.name
            raise item
        if isinstance(item, BaseException):
            raise item
        records.append(item)
    return records


def warmup(server: ServerProcess, prompts: list[list[int]], *, output_tokens: int, stall_timeout_s: float) -> list:
    """Warmup requests: validated like any other, kept out of every statistic."""
    if not prompts:
        return []
    section = Section(name="warmup", output_tokens=output_tokens, requests=len(prompts))
    records, _ = run_section(server, section, prompts, stall_timeout_s=stall_timeout_s)
    return records
