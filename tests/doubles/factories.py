"""Result documents built through the package's own code from synthetic request records."""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace

from specsweep import study
from specsweep.measure import section_stats
from specsweep.measure.result_doc import build_result, record_doc
from specsweep.records.request import RequestRecord
from specsweep.servers import backends
from specsweep.study.prompts import prompt_id


def records_for(section: study.Section, *, tok_s: float, ttft: float = 0.05, drafts: int = 0) -> list[RequestRecord]:
    out, t = [], 0.0
    for index in range(section.requests):
        end = t + ttft + (section.output_tokens - 1) / tok_s
        chunk_t = tuple(t + ttft + k / tok_s for k in range(section.output_tokens))
        out.append(RequestRecord(
            section=section.name, index=index, prompt_tokens=64, output_tokens=section.output_tokens,
            t_scheduled=t, t_send=t, t_first_token=t + ttft, t_end=end, chunk_t=chunk_t,
            chunk_tokens=(1,) * section.output_tokens,
            server_predicted_per_second=tok_s, draft_tokens=drafts, draft_accepted=drafts // 2,
        ))
        t = end
    return out


def result_doc(spec: study.LaunchSpec, *, tok_s: float = 100.0, drafts: int | None = None) -> dict:
    """A valid result document for a spec, every section at about tok_s; each request drafted
    ``drafts`` tokens (default: four per unit of budget, none at budget 0)."""
    drafts = 4 * spec.budget if drafts is None else drafts
    sections = []
    for section in spec.sections:
        by_repeat = []
        for repeat in range(spec.repeats):
            records = [replace(r, repeat=repeat)
                       for r in records_for(section, tok_s=tok_s * (1 + 0.01 * repeat), drafts=drafts)]
            by_repeat.append((records, records[-1].t_end - records[0].t_send))
        key = (section.name, section.load)
        by_repeat = [([replace(r, prompt_sha256=prompt_id((*key, r.repeat, r.index))) for r in records], wall)
                for records, wall in by_repeat]
        stats = section_stats.section_metrics(by_repeat, {}, backends.get("llama-server"))
        sections.append({"name": section.name, **asdict(section), "load": section.load, **stats,
                         "records": [record_doc(r) for recs, _ in by_repeat for r in recs]})
    measured = {"warmup": {"prompt_sha256": [prompt_id("warmup")]},
                "prompts": {"source": "test", "set": spec.prompt_set, "reused": False}, "sections": sections}
    return build_result(spec, argv=["llama-server"], facts=backends.Facts(version="test"), measured=measured,
                               started_at="t0", startup_s=1.0, job_s=2.0).to_json()


def as_version_4(doc: dict) -> dict:
    """A version-5 result document as version 4 wrote it: the lease and quiet-host settings as
    ``isolation`` (settings under ``guard``), each section's (search steps' too) figures as ``host_load``."""
    def old(sections: list[dict]) -> list[dict]:
        return [{("host_load" if k == "quiet_host" else k): v for k, v in s.items()} for s in sections]

    out = {k: v for k, v in doc.items() if k not in ("lease", "quiet_host")}
    held = None if doc["lease"] is None and doc["quiet_host"] is None else {**(doc["lease"] or {}),
                                                                             "guard": doc["quiet_host"]}
    out.update(schema_version=4, isolation=held, sections=old(doc["sections"]))
    if doc.get("search"):
        out["search"] = {**doc["search"], "sections": old(doc["search"]["sections"])}
    return out


def launches(rng: random.Random, true: dict[int, float], *, n: int, between: float, within: float = 0.01,
             repeats: int = 2) -> dict[int, list[float]]:
    """Each launch's throughput: the truth times a launch factor, times the mean of its repeats' jitter."""
    return {b: [rate * math.exp(rng.gauss(0, between)) * sum(math.exp(rng.gauss(0, within))
                                                             for _ in range(repeats)) / repeats
                for _ in range(n)] for b, rate in true.items()}


BUDGETS = (0, 2, 4, 8)


@dataclass
class PairedStudy:
    """A simulated study whose log throughput is mu_b + pi_kp + u_bk + e_bkp (docs/verdicts.md):
    two prompt lengths x three sections, each launch's noise u shared by that launch's sections,
    every budget's launch k sent the same prompts. ``frame`` gives its summary rows as aggregation
    makes them, each configuration with its first ``taken`` launches (default all)."""

    requests: dict  # (context, budget, section, launch) -> each prompt's tok/s
    launches: int
    contexts: tuple = (128, 1024)
    sections: tuple = ("short", "medium", "long")

    def frame(self, taken: dict | None = None):
        import pandas as pd

        from specsweep.records import status

        rows = []
        for context in self.contexts:
            for budget in BUDGETS:
                last = (taken or {}).get((context, budget), self.launches)
                for section in self.sections:
                    items, per_launch, wall = [], [], 0.0
                    for k in range(1, last + 1):
                        rates = self.requests[context, budget, section, k]
                        items += [f"{k}:{section}{k}p{p}:{v:.6g}" for p, v in enumerate(rates)]
                        per_launch.append(len(rates) / sum(1 / v for v in rates))  # one token a request
                        wall += sum(1 / v for v in rates)
                    rows.append({"name": f"tp1-b{budget}-ctx{context}", "tp": 1, "budget": budget,
                                 "context": context, "section": section, "load": "c1", "status": status.OK,
                                 "reason": "", "output_tok_s": sum(per_launch) / len(per_launch),
                                 "output_tok_s_min": min(per_launch), "output_tok_s_max": max(per_launch),
                                 "launches": last, "requests": len(items), "wall_s": wall,
                                 "launch_overhead_s": 20.0,
                                 "launch_tok_s": " ".join(f"{v:.6g}" for v in per_launch), "repeat_tok_s": "",
                                 "prompt_tok_s": " ".join(items)})
        return pd.DataFrame(rows)


def paired_study(rng: random.Random, mu: dict[int, float], *, launch: float, prompt: float, interaction: float,
                 launches: int = 2, prompts: int = 8) -> PairedStudy:
    """Draw a PairedStudy: sigma_u ``launch``, sigma_pi ``prompt``, sigma_e ``interaction`` (log scale)."""
    study_ = PairedStudy({}, launches)
    for context in study_.contexts:
        shared = {(b, k): rng.gauss(0, launch) for b in BUDGETS for k in range(1, launches + 1)}
        pi = {(s, k, p): rng.gauss(0, prompt) for s in study_.sections for k in range(1, launches + 1)
              for p in range(prompts)}
        for b in BUDGETS:
            for section in study_.sections:
                for k in range(1, launches + 1):
                    study_.requests[context, b, section, k] = [
                        math.exp(4.0 + mu[b] + pi[section, k, p] + shared[b, k] + rng.gauss(0, interaction))
                        for p in range(prompts)]
    return study_
