"""The result document of one launch, put together from what the runner measured: the server's
facts, the model's identity (size and SHA-256), the prompts' provenance, every request's raw
record with its derived figures. records/result.py owns the document and its validation."""

from __future__ import annotations

import hashlib
import platform
from dataclasses import asdict
from pathlib import Path

from specsweep import __version__
from specsweep.host import quiet_host
from specsweep.measure import workload
from specsweep.records.request import RequestRecord
from specsweep.records.result import Result
from specsweep.records.store import utc_now
from specsweep.servers import backends
from specsweep.spec import LaunchSpec

HASH_LIMIT_BYTES = 4 << 30  # hashing a larger model file would cost each job a minute or more


def model_facts(path: str) -> dict:
    """Which model was measured, so studies can be compared: a file's size and SHA-256; a folder's
    total size and the SHA-256 of its listing (each file's relative path, size and SHA-256); a
    hub id as given (the server resolves it). Nothing larger than HASH_LIMIT_BYTES is hashed."""
    from specsweep.cache import sha256_file

    facts = {"path": path, "bytes": None, "sha256": None}
    target = Path(path).expanduser()
    if target.is_file():
        facts["bytes"] = target.stat().st_size
        if facts["bytes"] <= HASH_LIMIT_BYTES:
            facts["sha256"] = sha256_file(target)
    elif target.is_dir():
        files = sorted(p for p in target.rglob("*") if p.is_file())
        facts["bytes"], facts["files"] = sum(p.stat().st_size for p in files), len(files)
        if facts["bytes"] <= HASH_LIMIT_BYTES:
            listing = "".join(f"{p.relative_to(target)} {p.stat().st_size} {sha256_file(p)}\n" for p in files)
            facts["sha256"] = hashlib.sha256(listing.encode()).hexdigest()
    else:
        facts["hub_id"] = path
    return facts


def prompts_facts(spec: LaunchSpec, prompt_source: dict | None, prompts: list) -> dict:
    """What the result says of its prompts: where they came from, and whether any was re-sent."""
    return {"source": spec.prompts_file or prompt_source["source"], "set": spec.prompt_set,
            "kind": (prompt_source or {}).get("kind", "own"),
            "documents_sha256": (prompt_source or {}).get("prompts_sha256"), "seed": spec.prompt_seed,
            "count": len(prompts), "tokens_each": spec.context, "sha256": workload.prompt_set_hash(prompts),
            "reused": spec.reuse_prompts}


def record_doc(record: RequestRecord) -> dict:
    """The raw record plus its derived figures, so every statistic can be recomputed."""
    return {**asdict(record), "ttft_s": record.ttft_s, "tpot_s": record.tpot_s, "e2e_s": record.e2e_s,
            "decode_tok_s": record.decode_tok_s, "schedule_lag_s": record.schedule_lag_s}


def build_result(spec: LaunchSpec, *, argv, facts: backends.Facts, checked: backends.Preflight | None = None,
                 measured, started_at, startup_s, job_s,
                 lease: dict | None = None, settings: quiet_host.Settings | None = None,
                 hardware: dict | None = None, env: dict | None = None, provenance: dict | None = None) -> Result:
    """The result document of one measured configuration (``settings``: the quiet-host settings
    its sections were judged by)."""
    sections = measured["sections"]
    return Result(
        name=spec.name,
        specsweep_version=__version__,
        spec=asdict(spec),
        server={
            "backend": spec.backend,
            "command": argv,
            "env": env or {},
            "version": facts.version,
            "build_info": facts.build_info,
            "max_context": facts.max_context,
            "budget": backends.get(spec.backend).budget_meaning(spec),
            "total_slots": facts.total_slots,
            "reported": facts.detail,
            "preflight": asdict(checked or backends.Preflight()),
        },
        model=model_facts(spec.model_path),
        host={"hostname": platform.node(), "machine": platform.machine(), "python": platform.python_version()},
        hardware=hardware,
        provenance=provenance or {},
        started_at=started_at,
        finished_at=utc_now(),
        timing={"startup_s": startup_s, "job_s": job_s, "sections_s": sum(s["wall_s"] for s in sections)},
        lease=lease,
        quiet_host=asdict(settings) if settings else None,
        warmup=measured["warmup"],
        prompts=measured["prompts"],
        sections=sections,
        search=measured.get("search"),
    )
