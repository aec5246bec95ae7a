"""Workload: reproducible prompts of exact token length, and sections run against a live server.

A section never turns a failure into a number: any request that fails aborts the section with a
typed error, and the server's death is noticed while requests are in flight (the watcher's
event), not only between sections.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from importlib import resources

from . import client
from .config import Section
from .errors import InvalidResponse, ServerDied, SpecsweepError
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


def make_prompts(base_url: str, *, seed: int, count: int, length: int) -> list[list[int]]:
    """``count`` distinct prompts of exactly ``length`` tokens as the server tokenizes them."""
    prompts = []
    for index in range(count):
        words = max(16, length)  # English runs above one token per word: enough text, then cut
        tokens = client.tokenize(base_url, prompt_text(seed, index, words))
        while len(tokens) < length:
            words *= 2
            tokens = client.tokenize(base_url, prompt_text(seed, index, words))
        prompts.append(tokens[:length])
    return prompts


def run_section(
    server: ServerProcess,
    section: Section,
    prompts: list[list[int]],
    *,
    stall_timeout_s: float,
) -> tuple[list[client.RequestRecord], float]:
    """Run a section's requests, ``concurrency`` at a time; return the records and wall time."""
    todo: queue.Queue[int] = queue.Queue()
    for index in range(section.requests):
        todo.put(index)
    done: queue.Queue = queue.Queue()
    t0 = time.monotonic()

    def worker() -> None:
        while True:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            try:
                record = client.stream_completion(
                    server.base_url, prompt=prompts[index % len(prompts)], n_predict=section.output_tokens,
                    stall_timeout_s=stall_timeout_s, section=section.name, index=index, t0=t0,
                )
                done.put(record)
            except BaseException as exc:  # handed to the main thread, which decides
                done.put(exc)
                return

    # Daemon threads: a thread stuck on a dead socket must never keep the job alive.
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(section.concurrency)]
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
    section = Section(name="warmup", output_tokens=output_tokens, requests=len(prompts), concurrency=1)
    records, _ = run_section(server, section, prompts, stall_timeout_s=stall_timeout_s)
    return records
