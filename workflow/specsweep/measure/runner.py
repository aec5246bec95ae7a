"""One configuration end to end: preflight, launch, warmup, sections with liveness, result."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from specsweep import __version__
from specsweep.errors import ClientOverload, ConfigError, InvalidResponse, PromptReused, SpecsweepError
from specsweep.measure import client, goodput, host_facts, leases, provenance, quiet_host, section_stats, workload
from specsweep.records import paths
from specsweep.records.request import RequestRecord
from specsweep.records.result import Result
from specsweep.records.store import utc_now, write_json_atomic
from specsweep.servers import backends, command, templates
from specsweep.servers.process import ServerProcess
from specsweep.spec import EMBEDDED, RunSpec, Section, loads_named
from specsweep.study import targets
from specsweep.study.loading import check_spec_command, model_path_problem
from specsweep.study.prompts import read_prompts_file


def say(spec: RunSpec, message: str, *, terminal: bool = False) -> None:
    """Progress on stderr (the job's log), one line each, prefixed with the configuration's name.

    ``terminal``: also on stdout, which Snakemake shows on the terminal (waiting for devices).
    """
    print(f"[{spec.label}] {message}", file=sys.stderr, flush=True)
    if terminal:
        print(f"[{spec.label}] {message}", flush=True)


def api_key(spec: RunSpec) -> str | None:
    """The server's API key from the environment variable the study names; never written."""
    if not spec.api_key_env:
        return None
    value = os.environ.get(spec.api_key_env)
    if not value:
        raise ConfigError(f"server.api_key_env names {spec.api_key_env}, which is not set in this "
                          f"environment; export it before running the study")
    return value


def secrets(spec: RunSpec) -> tuple[str, ...]:
    """Values to hide wherever a command, log line or record is written."""
    try:
        key = api_key(spec)
    except ConfigError:
        return ()
    return (key,) if key else ()


def preflight(spec: RunSpec, prompt_source: dict | None = None) -> None:
    """Everything that can be refused before a server starts."""
    spec.check_fits()  # again here: a spec can also come by hand, as JSON
    check_spec_command(spec)
    api_key(spec)
    backends.get(spec.backend).check_launch(list(spec.command) + list(spec.speculative_args))
    if EMBEDDED in (spec.binary, spec.model_path):
        raise ConfigError("the run spec still says 'embedded': pass the provisioned server and model paths")
    check_model_path(spec)
    if spec.prompts_file:
        read_prompts_file(spec.prompts_file)  # a malformed file fails before any launch
    if spec.prompt_set and prompt_source is None:
        raise ConfigError(f"the spec uses prompt set {spec.prompt_set}; pass its manifest "
                          f"({paths.manifest(targets.PROMPTS + spec.prompt_set)})")


def check_model_path(spec: RunSpec) -> None:
    """llama-server needs a model file; the others load a folder, or a hub id they resolve themselves."""
    if problem := model_path_problem(backends.get(spec.backend), spec.model_path):
        raise ConfigError(problem)


HASH_LIMIT_BYTES = 4 << 30  # hashing a larger model file would cost each job a minute or more


def model_facts(path: str) -> dict:
    """Which model was measured, so studies can be compared: a file's size and SHA-256; a folder's
    total size and the SHA-256 of its listing (each file's relative path, size and SHA-256); a
    hub id as given (the server resolves it). Nothing larger than HASH_LIMIT_BYTES is hashed."""
    from specsweep.servers.provision import sha256_file

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


def run_configuration(spec: RunSpec, *, out: Path, server_log: Path, settings: quiet_host.Settings,
                      port: int | None = None, prompt_source: dict | None = None) -> dict:
    """Measure one configuration and write its result; raise a typed error on any failure.

    ``prompt_source``: the manifest of the provisioned prompt set (spec.prompt_set), if it uses one.
    """
    preflight(spec, prompt_source)
    backend = backends.get(spec.backend)
    key = api_key(spec)
    t_job = time.monotonic()
    started_at = utc_now()
    # Held from launch to teardown: no other measurement shares these devices meanwhile.
    with ExitStack() as stack:
        lease = stack.enter_context(leases.acquire(
            spec.tp, holder=spec.name, gpu=spec.gpu, port=port, announce=lambda m: say(spec, m, terminal=True),
            derived=lambda p: backend.derived_ports(command.server_argv(spec, p, key), p)))
        hw = host_facts.facts(lease.gpus)
        leases.check_exclusions(spec.excluded_on, hw)
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"specsweep-{spec.name}-",
                                                                     ignore_cleanup_errors=True))
        server = ServerProcess(command.server_argv(spec, lease.port, key, scratch, lease.side_port), port=lease.port,
                               log_path=server_log,
                               startup_timeout_s=spec.startup_timeout_s, api_key=key, backend=backend,
                               env={**command.server_env(spec, lease.port, scratch, lease.side_port), **lease.env()})
        say(spec, f"launching on {','.join(lease.devices)}: {' '.join(server.shown_argv)}")
        t_launch = time.monotonic()
        with server:
            say(spec, f"server pid {server.pid}, log {server_log}")
            with _phase("startup"):
                server.wait_ready()
            startup_s = time.monotonic() - t_launch
            say(spec, f"ready after {startup_s:.1f} s")
            facts = backend.facts(server.base_url, spec, headers=server.headers)
            checked = _server_checks(spec, backend, facts)
            measured = _measure(spec, server, settings, lease.gpus, prompt_source)
        held = {"devices": list(lease.devices), "waited_s": round(lease.waited_s, 3), "port": lease.port,
                "side_port": lease.side_port, "derived_ports": list(lease.derived_ports),
                "lock_dir": str(leases.lock_dir())}
        result = build_result(spec, argv=server.shown_argv, facts=facts, checked=checked, measured=measured,
                              started_at=started_at, startup_s=startup_s, job_s=time.monotonic() - t_job, lease=held,
                              settings=settings,
                              hardware=hw, env=templates.redact_env(server.env, secrets(spec)),
                              provenance=provenance.collect(secrets(spec)))
        doc = result.to_json()
        Result.from_json(doc)  # the same check aggregation applies: never write what it would refuse
        write_json_atomic(out, doc)
        say(spec, f"result written to {out}")
    say(spec, measured_line(spec, doc, paths.runs_of(out)), terminal=True)
    return doc


def _server_checks(spec: RunSpec, backend, facts: backends.Facts) -> backends.Preflight:
    """The checks against the running server before the first section; what they could not read
    is said, or refused in strict mode (server.preflight)."""
    checked = backend.check_context(spec, facts)
    if checked.unchecked and spec.preflight == "strict":
        raise ConfigError(f"{'; '.join(checked.unchecked)}: refused by server.preflight: strict (make the "
                          f"server report it, or set server.preflight: record to measure and say so)")
    for line in checked.unchecked:
        say(spec, line, terminal=True)
    return checked


def measured_line(spec: RunSpec, doc: dict, runs_dir: Path) -> str:
    """One line for the terminal: per section tok/s, speedup over budget 0 (when it is measured
    already, in this study's folder) and acceptance length."""
    base = _baseline_rates(spec, runs_dir) if spec.budget > 0 else {}
    levels = loads_named((s["name"], s["load"]) for s in doc["sections"])
    parts = []
    for section in doc["sections"]:
        extra, key = [], (section["name"], section["load"])
        if key in base:
            extra.append(f"{section['output_tok_s'] / base[key]:.2f}x budget 0")
        if section.get("acceptance_length") is not None:
            extra.append(f"acceptance {section['acceptance_length']:.2f}")
        shown = f" ({', '.join(extra)})" if extra else ""
        parts.append(f"{section['name']}{' ' + section['load'] if levels else ''} "
                     f"{section['output_tok_s']:.1f} tok/s{shown}")
    if doc.get("search") and doc["search"]["goodput_tok_s"] is not None:
        parts.append(f"goodput {doc['search']['goodput_tok_s']:.1f} tok/s at {doc['search']['sustained_rate_rps']:.3g} "
                     f"req/s")
    return "measured: " + "; ".join(parts)


def _baseline_rates(spec: RunSpec, runs_dir: Path) -> dict[tuple[str, str], float]:
    """Output tok/s per section and load of the same other axes at budget 0 and the same launch, if
    its result is here."""
    from specsweep.axes import run_name
    from specsweep.records.store import InvalidResult, read_result

    try:
        base = read_result(paths.run_result(run_name({**spec.values, 'budget': 0}), launch=spec.launch,
                                            runs=Path(runs_dir)))
    except (InvalidResult, FileNotFoundError):
        return {}
    if base.spec.get("study") != spec.study:
        return {}
    return {(s["name"], s["load"]): s["output_tok_s"] for s in base.sections}


@contextmanager
def _phase(name: str):
    """Tag any failure inside with the workload phase it happened in (for the record)."""
    try:
        yield
    except SpecsweepError as exc:
        exc.section = exc.section or name
        raise


def _measure(spec: RunSpec, server: ServerProcess, settings: quiet_host.Settings, gpus: tuple[str, ...],
             prompt_source: dict | None) -> dict:
    with _phase("prompts"):
        prompts = workload.make_prompts(server, spec, prompt_source)
    plan, seen = workload.PromptPlan(spec, prompts), {}
    say(spec, f"warmup: {spec.warmup_requests} request(s)")
    t = time.monotonic()
    with _phase("warmup"):
        warm = workload.warmup(server, plan.warmup(), output_tokens=spec.warmup_output_tokens,
                               stall_timeout_s=spec.stall_timeout_s)
        server.check_alive("after warmup")
        check_distinct(seen, warm, "the warmup", reuse=spec.reuse_prompts)
    warm_doc = {"requests": len(warm), "output_tokens": sum(r.output_tokens for r in warm),
                "wall_s": time.monotonic() - t, "prompt_sha256": [r.prompt_sha256 for r in warm]}
    sections = []
    for section in spec.sections:
        say(spec, f"section {section.name}: start ({section.requests} x {section.output_tokens} tokens, "
                  f"concurrency {section.concurrency})")
        with _phase(section.name):
            sections.append(_run_one_section(spec, server, section, plan, seen, _watch(server, settings, gpus)))
    search = _search_goodput(spec, server, settings, gpus, plan, seen) if spec.objective else None
    return {"warmup": warm_doc, "prompts": prompts_facts(spec, prompt_source, prompts), "sections": sections,
            "search": search}


def _watch(server: ServerProcess, settings: quiet_host.Settings, gpus: tuple[str, ...]) -> quiet_host.SectionWatch:
    """The quiet-host guard for one section: our own processes are the server's tree and the
    other measurements holding devices; the server's waiting is its tree's alone."""
    return quiet_host.SectionWatch(settings, lambda: server.tree_pids() | leases.other_measurements(), gpus,
                                   server_pids=server.tree_pids)


def _search_goodput(spec: RunSpec, server: ServerProcess, settings: quiet_host.Settings, gpus: tuple[str, ...],
                    plan: workload.PromptPlan, seen: dict[str, str]) -> dict:
    """The highest request rate within the objective, on this launch (goodput.Search).

    Each step is a section of its own: fresh prompts, the liveness checks, counters, schedule and
    quiet-host guard exactly as for the study's sections, so a step the client could not schedule
    fails the configuration (client-overload) and a death or hang fails it as anywhere else. Steps put
    no cap on requests in flight: past its capacity the server queues, and the latency shows it.
    """
    shape, docs = spec.search_section, {}

    def measure(number: int, rate: float) -> dict:
        step = replace(shape, request_rate=rate, concurrency=shape.requests)
        say(spec, f"search step {number}: {rate:.4g} req/s ({step.requests} x {step.output_tokens} tokens)")
        with _phase(f"search step {number}"):
            docs[rate] = _run_one_section(spec, server, step, plan, seen, _watch(server, settings, gpus), repeats=1,
                                          arrival=spec.objective.arrival, title=f"search step {number}")
        figures = goodput.step_figures(spec.objective, docs[rate])
        say(spec, f"search step {number}: p99 TTFT {_ms(figures['ttft_p99_s'])}, p99 TPOT "
                  f"{_ms(figures['tpot_p99_s'])}: {'meets' if figures['meets'] else 'misses'} {spec.objective.text()}")
        return figures

    search = goodput.Search(spec.objective).run(measure)
    say(spec, f"search: {'sustains ' + format(search.met, '.4g') + ' req/s' if search.met else 'no rate met'} "
              f"within {spec.objective.text()} after {len(search.steps)} step(s)"
              + ("" if search.converged() else " (not converged)"), terminal=True)
    return {**search.to_json(docs.get(search.met)), "sections": [docs[step["rate"]] for step in search.steps]}


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def prompts_facts(spec: RunSpec, prompt_source: dict | None, prompts: list) -> dict:
    """What the result says of its prompts: where they came from, and whether any was re-sent."""
    return {"source": spec.prompts_file or prompt_source["source"], "set": spec.prompt_set,
            "kind": (prompt_source or {}).get("kind", "own"),
            "documents_sha256": (prompt_source or {}).get("prompts_sha256"), "seed": spec.prompt_seed,
            "count": len(prompts), "tokens_each": spec.context, "sha256": workload.prompt_set_hash(prompts),
            "reused": spec.reuse_prompts}


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


def _run_one_section(spec: RunSpec, server: ServerProcess, section: Section, plan: workload.PromptPlan,
                     seen: dict[str, str], watch: quiet_host.SectionWatch, *, repeats: int | None = None,
                     arrival: str = "poisson", title: str | None = None) -> dict:
    started_at, t0 = utc_now(), time.monotonic()
    watch.start()
    runs, delta = [], {}
    repeats = spec.repeats if repeats is None else repeats
    label = title or f"section {section.name}" + (
        f" at {section.load}" if loads_named((s.name, s.load) for s in spec.sections) else "")
    for repeat in range(repeats):
        # Counters are read around the requests alone: a health probe may generate (SGLang's does).
        before = client.metrics(server.base_url, headers=server.headers)
        records, wall = workload.run_section(server, section, plan.take(section), stall_timeout_s=spec.stall_timeout_s,
                                             send_times=workload.schedule(section, spec.seed, arrival=arrival))
        where = f"after {label}" + (f" repeat {repeat}" if repeats > 1 else "")
        check_distinct(seen, records, f"{label} repeat {repeat}", reuse=spec.reuse_prompts)
        after = _counters_after(server, before, where)
        delta = section_stats.add_deltas(delta, section_stats.counter_delta(before, after))
        runs.append(([replace(r, repeat=repeat) for r in records], wall))
        server.check_alive(where)
    load = watch.stop(time.monotonic() - t0)
    finished_at = utc_now()
    stats = section_stats.section_metrics(runs, delta, server.backend)
    _check_counters(label, stats, server.backend.token_counter)
    _check_schedule(spec, label, stats)
    quiet_host.check(label, load, watch.settings, stats["output_tok_s_repeats"],
                     closed_loop=section.request_rate is None)
    say(spec, f"section {section.name}: {stats['output_tok_s']:.1f} tok/s over {stats['wall_s']:.2f} s"
              + (f" (repeats {stats['output_tok_s_min']:.1f}-{stats['output_tok_s_max']:.1f})"
                 if repeats > 1 else ""))
    say(spec, f"section {section.name}: other processes used {load['cores'] or 0.0:.3f} cores and took "
              f"{load['contended_cores'] or 0.0:.3f} from the server (at most {watch.settings.max_foreign_cores:g})")
    return {"name": section.name, **asdict(section), "load": section.load, **stats, "quiet_host": load,
            "started_at": started_at, "finished_at": finished_at,
            "records": [record_doc(r) for recs, _ in runs for r in recs]}


def _counters_after(server: ServerProcess, before: dict[str, float], where: str) -> dict[str, float]:
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


def _check_counters(where: str, stats: dict, counter: str | None) -> None:
    """The server's own token counter must agree with the per-request counts (``where``: the
    section's label; the record's section is the runner's phase)."""
    counted = stats["counters"].get(counter) if counter else None
    if counted is not None and int(counted) != stats["output_tokens"]:
        raise InvalidResponse(
            f"{where}: server counted {int(counted)} generated tokens, responses say {stats['output_tokens']}")


def _check_schedule(spec: RunSpec, where: str, stats: dict) -> None:
    lag = stats["schedule_lag_s"]["p99"]
    if lag is not None and lag > spec.max_schedule_lag_s:
        raise ClientOverload(
            f"{where}: requests left the client {lag * 1000:.1f} ms late (p99) against their "
            f"schedule, above workload.max_schedule_lag_s = {spec.max_schedule_lag_s * 1000:.1f} ms; "
            f"lower the request rate or concurrency, or give the client a core of its own"
        )


def record_doc(record: RequestRecord) -> dict:
    """The raw record plus its derived figures, so every statistic can be recomputed."""
    return {**asdict(record), "ttft_s": record.ttft_s, "tpot_s": record.tpot_s, "e2e_s": record.e2e_s,
            "decode_tok_s": record.decode_tok_s, "schedule_lag_s": record.schedule_lag_s}


def build_result(spec: RunSpec, *, argv, facts: backends.Facts, checked: backends.Preflight | None = None,
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
