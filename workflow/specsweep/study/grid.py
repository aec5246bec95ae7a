"""The grid: every configuration of a study as a LaunchSpec, in a stable order, and by name."""

from __future__ import annotations

from dataclasses import replace

from specsweep import axes
from specsweep.errors import ConfigError
from specsweep.spec import LaunchSpec, Objective, Section
from specsweep.study import prompt_sets


def expand_grid(config: dict) -> list[LaunchSpec]:
    """One LaunchSpec per grid point (every combination of every axis), in a stable order."""
    out = []
    for point in axes.points(config["grid"]):
        tp, budget, context = (point.pop(a) for a in axes.BUILTIN)
        out.append(make_spec(config, tp=tp, budget=budget, context=context, own=point))
    return out


def make_spec(config: dict, *, tp: int, budget: int, context: int, own: dict | None = None) -> LaunchSpec:
    server, model, workload = config["server"], config["model"], config["workload"]
    return LaunchSpec(
        study=config["study"],
        backend=config["backend"],
        model_name=model["name"],
        model_path=model["path"],
        context_limit=model["context_limit"],
        binary=server["binary"],
        command=tuple(server["command"]),
        # Budget 0 never uses them: leaving them out keeps the baseline's params (and so its
        # result) untouched when only the speculation flags change.
        speculative_args=tuple(server["speculative_args"]) if budget > 0 else (),
        threads=server["threads"],
        startup_timeout_s=float(server["startup_timeout_s"]),
        stall_timeout_s=float(server["stall_timeout_s"]),
        budget=int(budget),
        tp=int(tp),
        context=int(context),
        seed=workload["seed"],
        warmup_requests=workload["warmup_requests"],
        warmup_output_tokens=workload["warmup_output_tokens"],
        max_schedule_lag_s=float(workload["max_schedule_lag_s"]),
        prompts_file=workload["prompts_file"],
        prompt_set=None if workload["prompts_file"] else workload["prompt_set"],
        prompt_pins={} if workload["prompts_file"] else prompt_sets.pins(config, workload["prompt_set"]),
        reuse_prompts=workload["reuse_prompts"],
        repeats=workload["repeats"],
        sections=sections_at_levels(workload),
        api_key_env=server["api_key_env"],
        allow_remote_bind=server["allow_remote_bind"],
        gpu=server["gpu"],
        env=dict(server["env"]),
        preflight=server["preflight"],
        axes=dict(own or {}),
        excluded_on=architecture_exclusions(config, tp=tp, budget=budget, context=context, **(own or {})),
        objective=Objective(**workload["objective"]) if workload.get("objective") else None,
        launch=1,
    )


def sections_at_levels(workload: dict) -> tuple[Section, ...]:
    """The sections one launch runs: each declared section once, or once per load level (in the
    order given), the level replacing its concurrency or request rate."""
    sections = [Section(**s) for s in workload["sections"]]
    levels = workload.get("load_levels")
    if not levels:
        return tuple(sections)
    (kind, values), = levels.items()
    return tuple(replace(s, **{kind: value}) for s in sections for value in values)


def matching_exclusions(config: dict, values: dict) -> list[dict]:
    """The study's exclude rules whose axes all match these values (compute capability aside):
    the one place a rule is matched, for the plan (analysis.ledger) and for the job on its GPUs."""
    return [rule for rule in config.get("exclude", []) if axes.rule_matches(rule, values)]


def architecture_exclusions(config: dict, **values) -> tuple:
    """((capabilities), reason) of the exclude rules that name an architecture and match these axes."""
    named = [(capabilities_of(rule), rule["reason"]) for rule in matching_exclusions(config, values)]
    return tuple((caps, reason) for caps, reason in named if caps)


def capabilities_of(rule: dict) -> tuple[str, ...]:
    """The compute capabilities an exclude rule names (one, or a list); () where it names none."""
    caps = rule.get("compute_capability")
    return () if caps is None else tuple(caps) if isinstance(caps, list) else (caps,)


def excluded_here(capabilities: tuple[str, ...], present: set[str]) -> list[str]:
    """Which of the GPUs' compute capabilities ``present`` a rule's ``capabilities`` exclude: the one
    place an architecture is matched, for the plan (analysis.ledger) and for the job on its GPUs
    (measure.before_start)."""
    return sorted(set(capabilities) & present)


def find_spec(config: dict, name: str) -> LaunchSpec:
    """The spec whose name is ``name``; the error lists the names that exist."""
    specs = {s.name: s for s in expand_grid(config)}
    if name not in specs:
        raise ConfigError(f"no configuration named {name!r} in the grid; known: {', '.join(specs)}")
    return specs[name]


def check_unique_names(specs: list[LaunchSpec]) -> None:
    """Two grid points must not share a result file (axis values like 1 and "1" would)."""
    seen: dict[str, LaunchSpec] = {}
    for spec in specs:
        if spec.name in seen:
            raise ConfigError(f"grid points {seen[spec.name].values} and {spec.values} share the name {spec.name}; "
                              f"give the axes values that read differently")
        seen[spec.name] = spec


def cell_major(specs: list[LaunchSpec]) -> list[str]:
    """The configurations' names with the budgets of one cell side by side (grid order otherwise):
    the verdict compares budgets at the same launch index, so the closer in time they run, the less
    a machine that drifts between minutes moves one budget against another."""
    cells: dict[tuple, list[str]] = {}
    for spec in specs:
        key = tuple(sorted((k, str(v)) for k, v in spec.values.items() if k != "budget"))
        cells.setdefault(key, []).append(spec.name)
    return [name for names in cells.values() for name in names]


def launch_order(names: list[str], launch: int) -> list[str]:
    """The order configurations run in at one launch index (on --cores 1): ``names`` (cell_major)
    at odd launches, reversed at even ones, so that drift over a sweep (a machine warming up, a
    cache filling) reaches every budget alike instead of always favouring whoever runs first."""
    return list(names) if launch % 2 else list(reversed(names))


def launch_priority(names: list[str], name: str, launch: int, most: int) -> int:
    """Snakemake's priority of one launch job: every job of launch k above every job of launch
    k + 1 (launch k of all configurations runs before launch k + 1 of any), and within a launch
    the order of launch_order. ``most``: the highest launch index the study may reach."""
    order = launch_order(names, launch)
    return (most - launch) * len(names) + (len(names) - order.index(name))
