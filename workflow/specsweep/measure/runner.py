"""One configuration end to end: the checks before a start (before_start), the launch on leased
devices, the server's own checks, warmup, the sections (each watched by the quiet-host guard and
checked by section_checks), the goodput search, and the result (result_doc) written only once
it validates."""

from __future__ import annotations

import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from specsweep.errors import ConfigError, SpecsweepError
from specsweep.host import gpu_watch, host_facts, leases, locks, quiet_host
from specsweep.measure import (
    before_start,
    client,
    energy,
    goodput,
    in_flight,
    interrupts,
    provenance,
    section_stats,
    workload,
)
from specsweep.measure.progress import measured_line, ms, say
from specsweep.measure.result_doc import build_result, prompts_facts, record_doc
from specsweep.measure.section_checks import check_counters, check_distinct, check_schedule, counters_after
from specsweep.records import paths
from specsweep.records.result import Result
from specsweep.records.store import utc_now, write_json_atomic
from specsweep.servers import backends, command, templates
from specsweep.servers.process import ServerProcess
from specsweep.spec import LaunchSpec, Section, loads_named

# How much of this launch's server log a backend reads its stated settings from (vLLM states its
# whole configuration once, as its engine starts, after a few dozen lines).
LOGGED_LINES = 2000


def launch_configuration(spec: LaunchSpec, *, out: Path, server_log: Path, settings: quiet_host.Settings,
                      port: int | None = None, prompt_source: dict | None = None) -> dict:
    """Measure one configuration and write its result; raise a typed error on any failure.

    ``prompt_source``: the manifest of the provisioned prompt set (spec.prompt_set), if it uses one.
    """
    before_start.preflight(spec, prompt_source)
    backend = backends.get(spec.backend)
    key = before_start.api_key(spec)
    hidden = before_start.secrets(spec)  # what no record, log line or environment may show
    t_job = time.monotonic()
    started_at = utc_now()
    # Held from launch to teardown: no other measurement shares these devices meanwhile.
    with ExitStack() as stack:
        lease = stack.enter_context(leases.acquire(
            spec.tp, holder=spec.name, gpu=spec.gpu, port=port, announce=lambda m: say(spec, m, terminal=True),
            derived=lambda p: backend.derived_ports(command.server_argv(spec, p, key), p)))
        hw = host_facts.facts(lease.gpus)
        before_start.check_exclusions(spec.excluded_on, hw)
        idle_w = gpu_watch.idle_power(lease.gpus)  # before the server loads: energy above idle
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"specsweep-{spec.name}-",
                                                                     ignore_cleanup_errors=True))
        server = _server(spec, lease, key, scratch, server_log)
        say(spec, f"launching on {','.join(lease.devices)}: {' '.join(server.shown_argv)}")
        t_launch = time.monotonic()
        with server:
            say(spec, f"server pid {server.pid}, log {server_log}")
            with _phase("startup"):
                server.wait_ready()
            startup_s = time.monotonic() - t_launch
            say(spec, f"ready after {startup_s:.1f} s")
            facts = backend.facts(server.base_url, spec, headers=server.headers)
            facts.detail.update(backend.logged_settings(server.log_tail(LOGGED_LINES)))
            checked = _server_checks(spec, backend, facts)
            measured = _measure(spec, server, settings, lease.gpus, prompt_source, idle_w)
        result = build_result(spec, argv=server.shown_argv, facts=facts, checked=checked, measured=measured,
                              started_at=started_at, startup_s=startup_s, job_s=time.monotonic() - t_job,
                              lease=_held(lease, idle_w), settings=settings, hardware=hw,
                              env=templates.redact_env(server.env, hidden), provenance=provenance.collect(hidden))
        doc = result.to_json()
        interrupts.check()  # a signal whose exception a finalizer swallowed still ends the launch
        Result.from_json(doc)  # the same check aggregation applies: never write what it would refuse
        write_json_atomic(out, doc)
        say(spec, f"result written to {out}")
    say(spec, measured_line(spec, doc, paths.launches_of(out)), terminal=True)
    return doc


def _server(spec: LaunchSpec, lease: leases.Lease, key: str | None, scratch: str, server_log: Path) -> ServerProcess:
    """The server of one launch on what its lease holds: its port, side port and devices."""
    return ServerProcess(command.server_argv(spec, lease.port, key, scratch, lease.side_port), port=lease.port,
                         log_path=server_log, startup_timeout_s=spec.startup_timeout_s, api_key=key,
                         backend=backends.get(spec.backend),
                         env={**command.server_env(spec, lease.port, scratch, lease.side_port), **lease.env()})


def _held(lease: leases.Lease, idle_w: dict[str, float]) -> dict:
    """What the result records of the lease: devices, the wait, ports, locks, the GPUs' idle power."""
    return {"devices": list(lease.devices), "waited_s": round(lease.waited_s, 3), "port": lease.port,
            "side_port": lease.side_port, "derived_ports": list(lease.derived_ports),
            "lock_dir": str(locks.lock_dir()), "idle_power_w": idle_w}


def _server_checks(spec: LaunchSpec, backend, facts: backends.Facts) -> backends.Preflight:
    """The checks against the running server before the first section; what they could not read
    is said, or refused in strict mode (server.preflight)."""
    checked = backend.check_context(spec, facts) + backend.check_applied(command.server_argv(spec, 0), facts)
    if checked.unchecked and spec.preflight == "strict":
        raise ConfigError(f"{'; '.join(checked.unchecked)}: refused by server.preflight: strict (make the "
                          f"server report it, or set server.preflight: record to measure and say so)")
    for line in checked.unchecked:
        say(spec, line, terminal=True)
    return checked


@contextmanager
def _phase(name: str):
    """Tag any failure inside with the workload phase it happened in (for the record); a signal
    whose exception a finalizer swallowed ends the launch at the end of the phase it came in."""
    try:
        yield
        interrupts.check()
    except SpecsweepError as exc:
        exc.section = exc.section or name
        raise


def _measure(spec: LaunchSpec, server: ServerProcess, settings: quiet_host.Settings, gpus: tuple[str, ...],
             prompt_source: dict | None, idle_w: dict[str, float]) -> dict:
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
            sections.append(_run_one_section(spec, server, section, plan, seen, _watch(server, settings, gpus),
                                             idle_w=idle_w))
    search = _search_goodput(spec, server, settings, gpus, plan, seen, idle_w) if spec.objective else None
    return {"warmup": warm_doc, "prompts": prompts_facts(spec, prompt_source, prompts), "sections": sections,
            "search": search}


def _watch(server: ServerProcess, settings: quiet_host.Settings, gpus: tuple[str, ...]) -> quiet_host.SectionWatch:
    """The quiet-host guard for one section: our own processes are the server's tree and the
    other measurements holding devices; the server's waiting is its tree's alone."""
    return quiet_host.SectionWatch(settings, lambda: server.tree_pids() | locks.other_measurements(), gpus,
                                   server_pids=server.tree_pids)


def _search_goodput(spec: LaunchSpec, server: ServerProcess, settings: quiet_host.Settings, gpus: tuple[str, ...],
                    plan: workload.PromptPlan, seen: dict[str, str], idle_w: dict[str, float]) -> dict:
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
                                          arrival=spec.objective.arrival, title=f"search step {number}",
                                          idle_w=idle_w)
        figures = goodput.step_figures(spec.objective, docs[rate])
        say(spec, f"search step {number}: p99 TTFT {ms(figures['ttft_p99_s'])}, p99 TPOT "
                  f"{ms(figures['tpot_p99_s'])}: {'meets' if figures['meets'] else 'misses'} {spec.objective.text()}")
        return figures

    search = goodput.Search(spec.objective).run(measure)
    say(spec, f"search: {'sustains ' + format(search.met, '.4g') + ' req/s' if search.met else 'no rate met'} "
              f"within {spec.objective.text()} after {len(search.steps)} step(s)"
              + ("" if search.converged() else " (not converged)"), terminal=True)
    return {**search.to_json(docs.get(search.met)), "sections": [docs[step["rate"]] for step in search.steps]}


def _run_one_section(spec: LaunchSpec, server: ServerProcess, section: Section, plan: workload.PromptPlan,
                     seen: dict[str, str], watch: quiet_host.SectionWatch, *, repeats: int | None = None,
                     arrival: str = "poisson", title: str | None = None, idle_w: dict[str, float] | None = None
                     ) -> dict:
    started_at, t0 = utc_now(), time.monotonic()
    watch.start()
    batch = in_flight.GaugeSampler(server.base_url, server.backend, server.headers)
    batch.start()
    by_repeat, delta = [], {}
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
        after = counters_after(server, before, where)
        delta = section_stats.add_deltas(delta, section_stats.counter_delta(
            {**before, **server.backend.batch_totals(before)}, {**after, **server.backend.batch_totals(after)}))
        by_repeat.append(([replace(r, repeat=repeat) for r in records], wall))
        server.check_alive(where)
    load = watch.stop(time.monotonic() - t0)
    finished_at = utc_now()
    stats = section_stats.section_metrics(by_repeat, delta, server.backend)
    check_counters(label, stats, server.backend.token_counter)
    check_schedule(spec, label, stats)
    held = in_flight.count(server.backend, [r.e2e_s for recs, _ in by_repeat for r in recs], stats["wall_s"], delta,
                           batch.stop(), closed_loop=section.request_rate is None)
    in_flight.check(label, held)
    quiet_host.check(label, load, watch.settings, stats["output_tok_s_repeats"],
                     closed_loop=section.request_rate is None)
    say(spec, f"section {section.name}: {stats['output_tok_s']:.1f} tok/s over {stats['wall_s']:.2f} s"
              + (f" (repeats {stats['output_tok_s_min']:.1f}-{stats['output_tok_s_max']:.1f})"
                 if repeats > 1 else ""))
    say(spec, f"section {section.name}: other processes used {load['cores'] or 0.0:.3f} cores and took "
              f"{load['contended_cores'] or 0.0:.3f} from the server (at most {watch.settings.max_foreign_cores:g})")
    spent = energy.section_energy(load["gpu_telemetry"], idle_w or {}, output_tokens=stats["output_tokens"],
                                  prompt_tokens=stats["prompt_tokens"])
    return {"name": section.name, **asdict(section), "load": section.load, **stats, "in_flight": held,
            "quiet_host": load, "energy": spent, "started_at": started_at, "finished_at": finished_at,
            "records": [record_doc(r) for recs, _ in by_repeat for r in recs]}


