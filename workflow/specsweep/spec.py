"""The spec of one configuration: everything that defines its measurement, and its name.

The bottom of the package with ``errors`` and ``axes``: the study layer makes specs, the servers
render them into launch commands, the measurement runs them, the records keep them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace

from specsweep import axes
from specsweep.errors import ConfigError

EMBEDDED = "embedded"  # a server binary or model path the pipeline provisions


@dataclass(frozen=True)
class Section:
    name: str
    output_tokens: int
    requests: int
    concurrency: int = 1
    request_rate: float | None = None  # requests/s of a seeded Poisson schedule; None = closed loop

    @property
    def load(self) -> str:
        """The load level this section ran at, as the summary's load column names it."""
        return load_label(self.concurrency, self.request_rate)


SLO = "slo"  # the load column of the goodput search's row


def load_label(concurrency: int, request_rate: float | None) -> str:
    """c<concurrency> for a closed loop, r<requests/s> for an open one."""
    return f"c{concurrency}" if request_rate is None else f"r{request_rate:g}"


def loads_named(pairs: Iterable[tuple[str, str]]) -> bool:
    """Whether labels name each section's load, given (section, load) pairs: they do where some
    section ran at more than one load (the goodput search's slo row counts as one). Where every
    section ran at one, its load says nothing and is left out of labels, lines and titles."""
    seen: dict[str, set[str]] = {}
    for name, load in pairs:
        seen.setdefault(name, set()).add(load)
    return any(len(loads) > 1 for loads in seen.values())


@dataclass(frozen=True, kw_only=True)
class Objective:
    """A latency objective and the bounded search for the highest request rate that meets it.

    No field has a default here: the schema's (workload.objective) are the only ones, filled in
    before a study's objective is built, and a result keeps every field.
    """

    section: str  # the section whose output tokens and requests every step runs
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    start_rate: float
    precision: float
    max_steps: int
    arrival: str  # "poisson", or "constant": evenly spaced send times

    def met_by(self, ttft_p99_s: float | None, tpot_p99_s: float | None) -> bool:
        """Whether one step's measured p99s are within the objective (an unmeasured one is not)."""
        return all(bound is None or (got is not None and got <= bound)
                   for bound, got in ((self.ttft_p99_s, ttft_p99_s), (self.tpot_p99_s, tpot_p99_s)))

    def text(self) -> str:
        parts = [f"p99 TTFT <= {self.ttft_p99_s:g} s" if self.ttft_p99_s is not None else "",
                 f"p99 TPOT <= {self.tpot_p99_s * 1000:g} ms" if self.tpot_p99_s is not None else ""]
        return " and ".join(p for p in parts if p)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything that defines the measurement of one grid point."""

    study: str
    backend: str
    model_name: str
    model_path: str
    context_limit: int
    binary: str
    command: tuple[str, ...]
    speculative_args: tuple[str, ...]
    threads: int
    startup_timeout_s: float
    stall_timeout_s: float
    budget: int
    tp: int
    context: int
    seed: int
    warmup_requests: int
    warmup_output_tokens: int
    max_schedule_lag_s: float
    prompts_file: str | None
    repeats: int
    sections: tuple[Section, ...]
    api_key_env: str | None  # environment variable holding the server's API key
    allow_remote_bind: bool
    gpu: bool  # the server runs on tp GPUs of its host
    env: dict  # extra environment of the server (server.env)
    # ((compute capabilities), reason) of the exclusion rules that name an architecture and
    # match this configuration's axes: the job refuses to run on such GPUs.
    excluded_on: tuple
    prompt_set: str | None  # the provisioned prompt set (prompt_sets.SETS) when no prompts_file
    prompt_pins: dict  # its wheel: {"version", "sha256"}
    reuse_prompts: bool  # sections and repeats resend the same prompts (caching on purpose)
    axes: dict  # values of the study's own grid axes (axes.own), by name
    objective: Objective | None  # workload.objective: the goodput search after the sections
    launch: int  # which of the configuration's server launches this is (workload.launches)
    preflight: str  # server.preflight: "strict" refuses a launch whose checks could not read their facts

    @property
    def values(self) -> dict:
        """{axis: value} of this configuration: tp, budget, context, then the study's own axes."""
        return {"tp": self.tp, "budget": self.budget, "context": self.context, **self.axes}

    @property
    def name(self) -> str:
        return axes.config_name(self.values)

    @property
    def label(self) -> str:
        """How logs and the terminal name this launch: the name, and the launch after the first."""
        return self.name if self.launch == 1 else f"{self.name} launch {self.launch}"

    @property
    def prompt_seed(self) -> str | int:
        """What orders a prompt set's documents for this launch: the study's seed at launch 1 (the
        prompts of results written before launches were replicates), a seed of its own at every
        later launch, so that each launch is a replicate on other texts while every configuration
        at one launch index gets the same prompts."""
        return self.seed if self.launch == 1 else f"{self.seed}/launch{self.launch}"

    @property
    def max_output_tokens(self) -> int:
        return max([s.output_tokens for s in self.sections] + [self.warmup_output_tokens])

    @property
    def search_section(self) -> Section | None:
        """The shape every step of the goodput search runs (None without an objective)."""
        if self.objective is None:
            return None
        return next(s for s in self.sections if s.name == self.objective.section)

    @property
    def points(self) -> list[tuple[str, str]]:
        """(section, load) of every row this configuration gives the summary, in order."""
        rows = [(s.name, s.load) for s in self.sections]
        return rows + ([(self.objective.section, SLO)] if self.objective else [])

    @property
    def prompts_needed(self) -> int:
        """Prompts one server launch sends: warmup, every section's requests in every repeat, and
        every step the goodput search may take."""
        search = self.objective.max_steps * self.search_section.requests if self.objective else 0
        if self.reuse_prompts:
            return self.warmup_requests + max(s.requests for s in self.sections) + search
        return self.warmup_requests + self.repeats * sum(s.requests for s in self.sections) + search

    @property
    def slots(self) -> int:
        return max(s.concurrency for s in self.sections)

    def check_fits(self) -> None:
        """Prompt + longest output must fit the model's context; the message names the fix."""
        need = self.context + self.max_output_tokens
        if need > self.context_limit:
            raise ConfigError(
                f"context {self.context} + longest output {self.max_output_tokens} = {need} tokens exceeds "
                f"model.context_limit {self.context_limit}; lower grid.context or the sections' "
                f"output_tokens, or raise model.context_limit if the model allows it"
            )

    def to_json(self) -> str:
        # Shallow by hand: dataclasses.asdict deep-copies every value and costs a large grid's
        # dry run seconds (one call per job).
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        doc["command"], doc["speculative_args"] = list(self.command), list(self.speculative_args)
        doc["sections"] = [vars(s).copy() for s in self.sections]
        doc["excluded_on"] = [[list(caps), reason] for caps, reason in self.excluded_on]
        doc["env"] = dict(self.env)
        doc["prompt_pins"] = dict(self.prompt_pins)
        doc["axes"] = dict(self.axes)
        doc["objective"] = vars(self.objective).copy() if self.objective else None
        # Fields added after the first release are left out at their defaults, so that
        # upgrading specsweep never changes a finished configuration's params (and reruns it).
        for name, default in _LATER_FIELDS.items():
            if doc[name] == default:
                del doc[name]
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> LaunchSpec:
        try:
            sections = tuple(Section(**s) for s in data["sections"])
            fields = {**WRITTEN_BEFORE, **{k: v for k, v in data.items() if k != "sections"}}
            fields["command"] = tuple(fields["command"])
            fields["speculative_args"] = tuple(fields["speculative_args"])
            fields["excluded_on"] = tuple((tuple(c), r) for c, r in fields.get("excluded_on", ()))
            if fields.get("objective") is not None:
                fields["objective"] = Objective(**fields["objective"])
            return cls(**fields, sections=sections)
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"launch spec is incomplete or has unknown keys: {exc}") from exc

    def resolved(self, *, binary: str | None = None, model_path: str | None = None) -> LaunchSpec:
        """This spec with the 'embedded' placeholders replaced by provisioned paths."""
        return replace(
            self,
            binary=binary if self.binary == EMBEDDED and binary else self.binary,
            model_path=model_path if self.model_path == EMBEDDED and model_path else self.model_path,
        )


_LATER_FIELDS = {"api_key_env": None, "allow_remote_bind": False, "gpu": False, "env": {}, "excluded_on": [],
                 "prompt_set": None, "prompt_pins": {}, "reuse_prompts": False, "axes": {},
                 "objective": None, "launch": 1}
# What a spec written before a field existed meant by its absence (read by from_dict): the
# measurement as that specsweep made it, not a study's default (those are the schema's alone:
# workload.repeats is 2 there, while a spec from before repeats measured each section once).
WRITTEN_BEFORE = {"max_schedule_lag_s": 0.05, "prompts_file": None, "repeats": 1, "preflight": "record",
                  **_LATER_FIELDS}
