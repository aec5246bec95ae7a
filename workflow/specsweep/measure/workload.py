"""Workload: the prompts one launch sends, and sections run against a live server.

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
from dataclasses import replace

from specsweep.errors import InvalidResponse, ServerDied, SpecsweepError
from specsweep.measure import client
from specsweep.records.request import RequestRecord
from specsweep.servers.process import ServerProcess
from specsweep.spec import LaunchSpec, Section
from specsweep.study.prompts import Prompt, build_prompts, read_documents, read_prompts_file, seeded_order

POLL_S = 0.02


def make_prompts(server: ServerProcess, spec: LaunchSpec, prompt_source: dict | None) -> list[Prompt]:
    """Every prompt one launch of this configuration sends, exactly ``spec.context`` tokens each as
    the server tokenizes them, none from text another of them used.

    From the user's JSONL file (each line one prompt, in order) or the provisioned prompt set
    (its documents in the order of the launch's seed, so every configuration gets the same prompts
    at the same launch index; a user's file sends the same prompts at every launch).
    """
    if spec.prompts_file:
        return build_prompts(_tokenizer(server), read_prompts_file(spec.prompts_file), count=spec.prompts_needed,
                             length=spec.context, chunk_chars=_chunk_chars(spec.context, spec.max_output_tokens),
                             source=spec.prompts_file, join=False)
    return set_prompts(server, prompt_source, count=spec.prompts_needed, length=spec.context, seed=spec.prompt_seed,
                       output_tokens=spec.max_output_tokens)


def set_prompts(server: ServerProcess, source: dict, *, count: int, length: int, seed: int | str = 0,
                output_tokens: int = 0) -> list[Prompt]:
    """``count`` prompts of ``length`` tokens from a provisioned prompt set (its manifest ``source``)."""
    documents = read_documents(source["prompts"])
    order = seeded_order(len(documents), seed)
    built = build_prompts(_tokenizer(server), documents.in_order(order), count=count, length=length,
                          chunk_chars=_chunk_chars(length, output_tokens),
                          source=f"prompt set {source.get('set')} ({source.get('source')})")
    return [replace(p, documents=tuple(order[i] for i in p.documents)) for p in built]


def _tokenizer(server: ServerProcess):
    return lambda text: server.backend.tokenize(server.base_url, text, headers=server.headers)


def _chunk_chars(length: int, output_tokens: int) -> int:
    # A piece of n characters is at most 4n bytes, so at most 4n tokens: never more than one
    # request's context, which the server's tokenizer may enforce (vLLM's /tokenize does).
    return max(32, (length + output_tokens) // 4)


class PromptPlan:
    """Hands out the built prompts: the warmup's first, then each section's in each repeat.

    Each request gets the next unused prompt, unless the study reuses prompts on purpose
    (workload.reuse_prompts): then every repeat of a section sends the same ones again.
    """

    def __init__(self, spec: LaunchSpec, prompts: list[Prompt]):
        self.spec, self.prompts, self.next = spec, prompts, spec.warmup_requests

    def warmup(self) -> list[Prompt]:
        return self.prompts[:self.spec.warmup_requests]

    def take(self, section: Section) -> list[Prompt]:
        if self.spec.reuse_prompts:
            start = self.spec.warmup_requests
            return self.prompts[start:start + section.requests]
        taken = self.prompts[self.next:self.next + section.requests]
        self.next += section.requests
        return taken


def prompt_set_hash(prompts: list[Prompt]) -> str:
    """SHA-256 of the exact token ids sent, so two results can be checked for the same input."""
    return hashlib.sha256(json.dumps([list(p.tokens) for p in prompts], separators=(",", ":")).encode()).hexdigest()


def schedule(section: Section, seed: int, *, arrival: str = "poisson") -> list[float] | None:
    """Send times (s after the section starts) of a seeded Poisson process, or evenly spaced
    (``arrival="constant"``); None = closed loop.

    The seed names the section, not its rate: every level of one section gets the same gaps
    scaled, so two rates differ by their rate alone, not by another draw of bursts.
    """
    if section.request_rate is None:
        return None
    if arrival == "constant":
        return [i / section.request_rate for i in range(section.requests)]
    rng = random.Random(f"{seed}:{section.name}")
    times, t = [], 0.0
    for _ in range(section.requests):
        times.append(t)
        t += rng.expovariate(section.request_rate)
    return times


def run_section(
    server: ServerProcess,
    section: Section,
    prompts: list[Prompt],
    *,
    stall_timeout_s: float,
    send_times: list[float] | None = None,
) -> tuple[list[RequestRecord], float]:
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
            prompt = prompts[index]
            try:
                record = client.stream_completion(
                    server.backend, server.base_url, prompt=list(prompt.tokens), n_predict=section.output_tokens,
                    stall_timeout_s=stall_timeout_s, section=section.name, index=index, t0=t0,
                    t_scheduled=t_scheduled, headers=server.headers,
                )
                done.put(replace(record, prompt_sha256=prompt.sha256))
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
    records: list[RequestRecord] = []
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


def warmup(server: ServerProcess, prompts: list[Prompt], *, output_tokens: int, stall_timeout_s: float) -> list:
    """Warmup requests: validated like any other, kept out of every statistic."""
    if not prompts:
        return []
    section = Section(name="warmup", output_tokens=output_tokens, requests=len(prompts))
    records, _ = run_section(server, section, prompts, stall_timeout_s=stall_timeout_s)
    return records
