"""Study configuration: validation, grid expansion, and the spec of one configuration."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import yaml

from . import axes as grid_axes
from . import backends, command, prompt_sets
from .errors import ConfigError
from .prompts import not_utf8, read_prompts_file

EMBEDDED = "embedded"


def schema_path() -> Path:
    """The JSON schema shared by the Snakefile and the CLI."""
    return Path(str(resources.files("specsweep.schemas").joinpath("config.schema.yaml")))


@dataclass(frozen=True)
class Section:
    name: str
    output_tokens: int
    requests: int
    concurrency: int = 1
    request_rate: float | None = None  # requests/s of a seeded Poisson schedule; None = closed loop


@dataclass(frozen=True)
class RunSpec:
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
    max_schedule_lag_s: float = 0.05
    prompts_file: str | None = None
    repeats: int = 1
    sections: tuple[Section, ...] = field(default_factory=tuple)
    api_key_env: str | None = None  # environment variable holding the server's API key
    allow_remote_bind: bool = False
    gpu: bool = False  # the server runs on tp GPUs of its host
    env: dict = field(default_factory=dict)  # extra environment of the server (server.env)
    # ((compute capabilities), reason) of the exclusion rules that name an architecture and
    # match this configuration's axes: the job refuses to run on such GPUs.
    excluded_on: tuple = ()
    prompt_set: str | None = None  # the provisioned prompt set (prompt_sets.SETS) when no prompts_file
    prompt_pins: dict = field(default_factory=dict)  # its wheel: {"version", "sha256"}
    reuse_prompts: bool = False  # sections and repeats resend the same prompts (caching on purpose)
    axes: dict = field(default_factory=dict)  # values of the study's own grid axes (axes.own), by name

    @property
    def values(self) -> dict:
        """{axis: value} of this configuration: tp, budget, context, then the study's own axes."""
        return {"tp": self.tp, "budget": self.budget, "context": self.context, **self.axes}

    @property
    def name(self) -> str:
        return grid_axes.run_name(self.values)

    @property
    def max_output_tokens(self) -> int:
        return max([s.output_tokens for s in self.sections] + [self.warmup_output_tokens])

    @property
    def prompts_needed(self) -> int:
        """Prompts one server launch sends: warmup, and every section's requests in every repeat."""
        if self.reuse_prompts:
            return self.warmup_requests + max(s.requests for s in self.sections)
        return self.warmup_requests + self.repeats * sum(s.requests for s in self.sections)

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

    def check_command(self) -> None:
        """Template mistakes that would otherwise surface only after a launch."""
        check_command(list(self.command), list(self.speculative_args), api_key_env=self.api_key_env,
                      allow_remote_bind=self.allow_remote_bind, axes=tuple(self.axes))

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
        # Fields added after the first release are left out at their defaults, so that
        # upgrading specsweep never changes a finished configuration's params (and reruns it).
        for name, default in _LATER_FIELDS.items():
            if doc[name] == default:
                del doc[name]
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> RunSpec:
        try:
            sections = tuple(Section(**s) for s in data["sections"])
            fields = {k: v for k, v in data.items() if k != "sections"}
            fields["command"] = tuple(fields["command"])
            fields["speculative_args"] = tuple(fields["speculative_args"])
            fields["excluded_on"] = tuple((tuple(c), r) for c, r in fields.get("excluded_on", ()))
            return cls(**fields, sections=sections)
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"run spec is incomplete or has unknown keys: {exc}") from exc

    def resolved(self, *, binary: str | None = None, model_path: str | None = None) -> RunSpec:
        """This spec with the 'embedded' placeholders replaced by provisioned paths."""
        return replace(
            self,
            binary=binary if self.binary == EMBEDDED and binary else self.binary,
            model_path=model_path if self.model_path == EMBEDDED and model_path else self.model_path,
        )


_LATER_FIELDS = {"api_key_env": None, "allow_remote_bind": False, "gpu": False, "env": {}, "excluded_on": [],
                 "prompt_set": None, "prompt_pins": {}, "reuse_prompts": False, "axes": {}}


def run_name(tp: int, budget: int, context: int, **own) -> str:
    """The file stem of one configuration, readable by a person: tp1-b4-ctx1024."""
    return grid_axes.run_name({"tp": tp, "budget": budget, "context": context, **own})


def validate_study(config: dict) -> dict:
    """Validate against the schema and fill in defaults (in place); return the config."""
    from snakemake.utils import validate  # the same validator the Snakefile uses

    try:
        validate(config, str(schema_path()), set_default=True)
    except Exception as exc:  # snakemake wraps jsonschema's error in a WorkflowError
        raise ConfigError(f"invalid study configuration: {_schema_message(exc)}") from exc
    apply_backend_defaults(config)
    check_study(config)
    return config


def apply_backend_defaults(config: dict) -> None:
    """Fill server.binary, command and speculative_args left null with the backend's own (in place)."""
    backend, server = backends.get(config["backend"]), config["server"]
    for key in ("binary", "command", "speculative_args"):
        if server.get(key) is None:
            default = getattr(backend, key)
            server[key] = list(default) if isinstance(default, tuple) else default
    if backend.name == "sglang" and EMBEDDED in (server["binary"], config["model"]["path"]):
        raise ConfigError("backend sglang has no embedded server or model (SGLang needs CUDA): set server.binary "
                          "to the Python of your SGLang install and model.path to a model folder or hub id")


def load_study(path: str | Path) -> dict:
    """Read a study YAML file, validate it and fill in defaults."""
    try:
        config = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read study config {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"study config {path} is not UTF-8 text ({not_utf8(exc)}); save it as UTF-8") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"study config {path} is not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError(
            f"study config {path} must be a mapping of keys (study:, grid:, server:, ...), not a "
            f"{type(config).__name__}; see config/config.yaml for the shape"
        )
    return validate_study(config)


def check_study(config: dict) -> None:
    """Checks JSON schema cannot express; each message names the numbers and the fix."""
    names = [s["name"] for s in config["workload"]["sections"]]
    if len(set(names)) != len(names):
        raise ConfigError(f"workload.sections: section names must be unique, got {names}")
    server, own = config["server"], tuple(grid_axes.own(config["grid"]))
    check_command(server["command"], server["speculative_args"], api_key_env=server["api_key_env"],
                  allow_remote_bind=server["allow_remote_bind"], axes=own)
    check_env(server["env"], own)
    check_axes(config)
    specs = expand_grid(config)
    check_unique_names(specs)
    for spec in specs:
        spec.check_fits()
    if not command.uses(server["speculative_args"], "budget") and any(b > 0 for b in config["grid"]["budget"]):
        raise ConfigError(
            "server.speculative_args has no {budget} placeholder, so every budget above 0 "
            "would launch the same server; add the draft-length flag with {budget}"
        )
    if len(config["grid"]["tp"]) > 1 and not command.uses(server["command"] + server["speculative_args"], "tp"):
        raise ConfigError(
            f"grid.tp has {len(config['grid']['tp'])} values but server.command has no {{tp}} placeholder, "
            "so every tp would launch the same server; pass it to the server's tensor-parallel flag, "
            "e.g. --tp {tp}"
        )
    if config["workload"]["prompts_file"]:
        check_prompts_file(config["workload"]["prompts_file"], specs)


def check_axes(config: dict) -> None:
    """The study's own axes: names free to use, each reaching the server, exclusions and facets naming axes."""
    grid, server = config["grid"], config["server"]
    used = server["command"] + server["speculative_args"] + list(server["env"].values())
    for axis in grid_axes.own(grid):
        if axis in command.PLACEHOLDERS:
            raise ConfigError(f"grid.{axis}: {axis} is a placeholder specsweep fills itself; name the axis otherwise "
                              f"(reserved: {', '.join(command.PLACEHOLDERS)})")
        if not command.uses(used, axis):
            raise ConfigError(f"grid.{axis} reaches no server: no {{{axis}}} in server.command, "
                              f"server.speculative_args or server.env, so every value would launch the same "
                              f"server; pass it with {{{axis}}} (a flag's value, or an environment variable)")
    known = grid_axes.names(grid)
    for number, rule in enumerate(config["exclude"]):
        for key in rule:
            if key not in known and key not in ("compute_capability", "reason"):
                raise ConfigError(f"exclude[{number}]: {key} is not an axis of the grid (axes: {', '.join(known)}); "
                                  f"name an axis, or add grid.{key}")
    facets = config["plot"]
    for role in ("x", "line", "column"):
        if facets.get(role) is not None and facets[role] not in known:
            raise ConfigError(f"plot.{role}: {facets[role]} is not an axis of the grid (axes: {', '.join(known)})")
    chosen = [v for v in facets.values() if v is not None]
    if len(set(chosen)) != len(chosen):
        raise ConfigError(f"plot: x, line and column must be different axes, got {facets}")


def check_unique_names(specs: list[RunSpec]) -> None:
    """Two grid points must not share a result file (axis values like 1 and "1" would)."""
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        if spec.name in seen:
            raise ConfigError(f"grid points {seen[spec.name].values} and {spec.values} share the name {spec.name}; "
                              f"give the axes values that read differently")
        seen[spec.name] = spec


def check_local_paths(config: dict) -> None:
    """What the study names on this machine exists: checked when a study is planned, so that a typo
    in a path fails in a second, not after the configurations before it were measured.

    Not part of validate_study: a study archived and rebuilt elsewhere is read without them.
    """
    import os
    import shutil

    backend, binary, model = backends.get(config["backend"]), config["server"]["binary"], config["model"]["path"]
    if binary != EMBEDDED:
        found = binary if os.sep in binary else shutil.which(binary)
        if found is None or not Path(found).expanduser().is_file():
            raise ConfigError(f"server.binary {binary} {'does not exist' if os.sep in binary else 'is not on PATH'}; "
                              f"name the server's executable (or the Python that has it) as installed here, or "
                              f"'embedded' where the backend has one")
        if not os.access(Path(found).expanduser(), os.X_OK):
            raise ConfigError(f"server.binary {binary} is not executable; chmod +x it or name the right file")
    if model != EMBEDDED and (problem := model_path_problem(backend, model)):
        raise ConfigError(f"model.path: {problem}")
    baseline = (config.get("compare") or {}).get("baseline")
    if baseline and not Path(baseline).expanduser().exists():
        raise ConfigError(f"compare.baseline {baseline} does not exist; give the results folder (or .tar.gz of one) "
                          f"of the study to compare against")


def model_path_problem(backend, model: str) -> str | None:
    """Why a backend cannot load this model path here, or None (a hub id is the server's to resolve)."""
    path = Path(model).expanduser()
    if backend.model_is_file and not path.is_file():
        return f"model file {model} does not exist ({backend.name} serves one GGUF file)"
    if not backend.model_is_file and model.startswith(("/", ".", "~")) and not path.exists():
        return (f"model path {model} does not exist; give an existing folder or file, or a hub id (org/name) that "
                f"{backend.name} resolves itself")
    return None


def check_command(template: list[str], speculative_args: list[str], *, api_key_env: str | None,
                  allow_remote_bind: bool, axes: tuple[str, ...] = ()) -> None:
    """Placeholders, {port}, secrets and the bind address of a launch template."""
    for key, args in (("server.command", template), ("server.speculative_args", speculative_args)):
        command.check_template(key, args, axes)
        command.check_no_literal_secret(key, args)
        command.check_bind(key, args, allowed=allow_remote_bind)
    if not command.uses(template, "port"):
        raise ConfigError(
            "server.command has no {port} placeholder: specsweep picks a free port per run and "
            "would wait for a server that listens elsewhere; add the port flag, e.g. --port {port}"
        )
    if command.uses(template + speculative_args, "api_key") and not api_key_env:
        raise ConfigError(
            "server.command uses {api_key} but server.api_key_env is not set; name the environment "
            "variable that holds the key, e.g. api_key_env: SERVER_API_KEY"
        )


def check_env(env: dict[str, str], axes: tuple[str, ...] = ()) -> None:
    """server.env: known placeholders only, and no secret written into the study."""
    command.check_template("server.env", list(env.values()), axes)
    for name, value in env.items():
        if command.is_secret_name(name) and value and not command.placeholders(value):
            raise ConfigError(f"server.env: {name} is given a literal value; keep secrets out of the study: export "
                              f"{name} in the environment that runs specsweep instead (the server inherits it)")


def check_prompts_file(path: str, specs: list[RunSpec]) -> None:
    """The prompts file exists, parses, and no prompt that will be used is surely too short.

    The exact token count needs the server's tokenizer (checked again at run time); here a
    prompt with fewer UTF-8 bytes than the context, plus one, cannot reach it with any tokenizer
    whose tokens each cover at least one byte.
    """
    texts = read_prompts_file(path)
    for spec in specs:
        if len(texts) < spec.prompts_needed:
            raise ConfigError(
                f"workload.prompts_file {path} holds {len(texts)} prompts, and each configuration sends "
                f"{spec.prompts_needed} that its server has not seen (warmup {spec.warmup_requests}, then "
                f"{sum(s.requests for s in spec.sections)} requests a repeat x {spec.repeats} repeats); add prompts, "
                f"send fewer, or set workload.reuse_prompts: true to measure caching on purpose")
        used = spec.prompts_needed
        for number, text in enumerate(texts[:used], 1):
            if len(text.encode()) + 1 < spec.context:
                raise ConfigError(
                    f"workload.prompts_file {path}: prompt {number} has {len(text.encode())} bytes, fewer "
                    f"than the {spec.context} tokens grid.context asks for; use longer prompts or a "
                    f"smaller grid.context"
                )


def expand_grid(config: dict) -> list[RunSpec]:
    """One RunSpec per grid point (every combination of every axis), in a stable order."""
    out = []
    for point in grid_axes.points(config["grid"]):
        tp, budget, context = (point.pop(a) for a in grid_axes.BUILTIN)
        out.append(make_spec(config, tp=tp, budget=budget, context=context, own=point))
    return out


def make_spec(config: dict, *, tp: int, budget: int, context: int, own: dict | None = None) -> RunSpec:
    server, model, workload = config["server"], config["model"], config["workload"]
    return RunSpec(
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
        sections=tuple(Section(**s) for s in workload["sections"]),
        api_key_env=server["api_key_env"],
        allow_remote_bind=server["allow_remote_bind"],
        gpu=server["gpu"],
        env=dict(server["env"]),
        axes=dict(own or {}),
        excluded_on=architecture_exclusions(config, tp=tp, budget=budget, context=context, **(own or {})),
    )


def architecture_exclusions(config: dict, **values) -> tuple:
    """((capabilities), reason) of the exclude rules that name an architecture and match these axes."""
    out = []
    for rule in config["exclude"]:
        caps = rule.get("compute_capability")
        if caps is not None and grid_axes.rule_matches(rule, values):
            out.append((tuple(caps) if isinstance(caps, list) else (caps,), rule["reason"]))
    return tuple(out)


def find_spec(config: dict, name: str) -> RunSpec:
    """The spec whose name is ``name``; the error lists the names that exist."""
    specs = {s.name: s for s in expand_grid(config)}
    if name not in specs:
        raise ConfigError(f"no configuration named {name!r} in the grid; known: {', '.join(specs)}")
    return specs[name]


def _schema_message(exc: Exception) -> str:
    """'grid.budget[0]: -1 is less than the minimum of 0 (...)' from a validation error."""
    cause = exc.__context__ if hasattr(exc.__context__, "absolute_path") else exc
    if not hasattr(cause, "absolute_path"):
        return str(exc).strip().splitlines()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in cause.absolute_path).lstrip(".")
    return f"{where or 'top level'}: {cause.message} (see config/README.md for every key)"


def provisioned(config: dict) -> dict[str, str]:
    """{"binary"|"model"|"prompts": manifest path} of what the study leaves to the pipeline: the
    embedded server and model, and the prompt set unless the study brings its own prompts file."""
    backend = backends.get(config["backend"])
    wanted = {"binary": config["server"]["binary"], "model": config["model"]["path"]}
    out = {}
    if not config["workload"]["prompts_file"]:
        out["prompts"] = f"results/provision/prompts-{config['workload']['prompt_set']}.json"
    for what, value in wanted.items():
        if value == EMBEDDED:
            if what not in backend.embedded:
                raise ConfigError(f"backend {backend.name} has no embedded {what}; name yours in the study")
            out[what] = f"results/provision/{backend.embedded[what]}.json"
    return out


def shown_command(spec: RunSpec) -> str:
    """The launch command as a plan shows it: rendered, with what is known only at run time named."""
    import shlex

    from .launch import server_argv, server_env

    shown = spec.resolved(binary=f"<embedded {spec.backend}>", model_path="<embedded model>")
    argv = server_argv(shown, "<port>", f"<key from ${spec.api_key_env}>")
    env = [f"{k}={v}" for k, v in command.redact_env(server_env(shown, "<port>")).items()]
    return shlex.join(env + argv)
