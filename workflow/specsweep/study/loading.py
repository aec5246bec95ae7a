"""Loading a study: the schema with its defaults, and every check it cannot express.

Each check runs when a study is planned (`snakemake -n`, `specsweep grid`), so a mistake stops
in a second with one line that names the key and the fix, before any server starts.
"""

from __future__ import annotations

import copy
import functools
import sys
from importlib import resources
from pathlib import Path

import yaml

from specsweep import axes
from specsweep.errors import ConfigError
from specsweep.records import migrations, paths
from specsweep.servers import backends, templates
from specsweep.servers.command import server_argv, server_env
from specsweep.spec import EMBEDDED, LaunchSpec
from specsweep.study import targets
from specsweep.study.grid import check_unique_names, expand_grid
from specsweep.study.prompts import not_utf8, read_prompts_file


def schema_path() -> Path:
    """The JSON schema shared by the Snakefile and the CLI."""
    return Path(str(resources.files("specsweep.schemas").joinpath("config.schema.yaml")))




def key_table(chosen: dict) -> str:
    """Every key a study may set, as the Markdown table config/README.md shows (a test keeps them
    equal): key, default and meaning, each from the schema; where ``chosen`` (the default study
    file, as written) sets another value, it is named beside the default."""
    import json

    schema = yaml.safe_load(schema_path().read_text())
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key, prop in _documented_keys(schema):
        shown = prop.get("x-shown-default")
        if shown is None:
            default = prop.get("default", _ABSENT)
            shown = ("absent" if default is _ABSENT else "pinned" if _is_pin(default)
                     else f"`{default if isinstance(default, str) else json.dumps(default)}`")
            ours = _chosen(chosen, key)
            if ours is not _ABSENT and ours != default:
                shown += f" (`{ours if isinstance(ours, str) else json.dumps(ours)}` in the default study)"
        rows.append(f"| `{key}` | {shown} | {' '.join(prop.get('description', '').split())} |")
    return "\n".join(rows) + "\n"


_ABSENT = object()


def _documented_keys(schema: dict):
    """(key, property) per row: each top-level key, or each key of a top-level mapping (and its own axes)."""
    for name, prop in schema["properties"].items():
        if "properties" not in prop:
            yield name, prop
            continue
        for child, sub in prop["properties"].items():
            yield f"{name}.{child}", sub
        if isinstance(prop.get("additionalProperties"), dict):
            yield f"{name}.<axis>", prop["additionalProperties"]


def _is_pin(value) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _chosen(study: dict, key: str):
    node = study
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def default_prompts(name: str = "sharegpt") -> dict:
    """A prompt set at the pins a study gets by default, provisioned if need be (benchmarks, tests)."""
    from specsweep.study import prompt_sets

    return prompt_sets.provision(name, **prompt_sets.pins({"provision": defaults("provision")}, name))


def defaults(section: str) -> dict:
    """The schema's defaults of one top-level mapping (verdict, compare, plot, provision, ...): what
    a command run by hand takes where the study is not given. The schema owns every default."""
    return validate_study({})[section]


def validate_study(config: dict) -> dict:
    """Validate against the schema and fill in defaults (in place); return the config."""
    import jsonschema

    for note in migrations.study_keys(config):  # a study written for an older specsweep
        print(f"specsweep: {note}", file=sys.stderr)
    try:
        _validator().validate(config)
    except jsonschema.ValidationError as exc:
        raise ConfigError(f"invalid study configuration: {_schema_message(exc)}") from exc
    apply_backend_defaults(config)
    check_study(config)
    return config


@functools.cache
def _validator():
    """The schema's validator that fills in its defaults, as snakemake.utils.validate(set_default=True)
    does (jsonschema's FAQ recipe), built once per process: the Snakefile and every CLI command
    validate through this one, without importing Snakemake (and the pandas its validate loads) into
    a launch. Defaults are copied, so a study that changes a default list leaves the schema's alone."""
    from jsonschema import Draft202012Validator, validators

    check_properties = Draft202012Validator.VALIDATORS["properties"]

    def fill_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from check_properties(validator, properties, instance, schema)

    schema = yaml.load(schema_path().read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return validators.extend(Draft202012Validator, {"properties": fill_defaults})(schema)


def apply_backend_defaults(config: dict) -> None:
    """Fill server.binary, command and speculative_args left null with the backend's own (in place)."""
    backend, server = backends.get(config["backend"]), config["server"]
    for key in ("binary", "command", "speculative_args"):
        if server.get(key) is None:
            default = getattr(backend, key)
            server[key] = list(default) if isinstance(default, tuple) else default
    wanted = {"binary": server["binary"], "model": config["model"]["path"]}
    missing = [what for what, value in wanted.items() if value == EMBEDDED and what not in backend.embedded]
    if missing:
        raise ConfigError(f"backend {backend.name} has no embedded {' or '.join(missing)}"
                          f"{f' ({backend.no_embedded})' if backend.no_embedded else ''}: set server.binary to the "
                          f"server's executable or the Python of its install, and model.path to a model file, folder "
                          f"or hub id")


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


def check_objective(objective: dict | None, sections: list[str]) -> None:
    """The goodput search needs a bound to meet and a section to take its shape from."""
    if not objective:
        return
    if objective["section"] not in sections:
        raise ConfigError(f"workload.objective.section is {objective['section']!r}, not a section of "
                          f"workload.sections ({', '.join(sections)}); name the section each search step runs")
    if objective.get("ttft_p99_s") is None and objective.get("tpot_p99_s") is None:
        raise ConfigError("workload.objective sets neither ttft_p99_s nor tpot_p99_s, so every rate would meet it; "
                          "give at least one latency bound, e.g. ttft_p99_s: 1.0")


def check_racing(launches: int, until_decided: dict | None) -> None:
    """Racing starts from a verdict, and a verdict needs the noise between launches: two at least."""
    if not until_decided:
        return
    if launches < 2:
        raise ConfigError(f"verdict.until_decided needs workload.launches of 2 or more (got {launches}): the first "
                          f"round must measure the noise between launches before it can tell what is undecided")
    if until_decided["max_launches"] < launches:
        raise ConfigError(f"verdict.until_decided.max_launches {until_decided['max_launches']} is below "
                          f"workload.launches {launches}; raise it, or lower workload.launches")


def check_study(config: dict) -> None:
    """Checks JSON schema cannot express; each message names the numbers and the fix."""
    names = [s["name"] for s in config["workload"]["sections"]]
    if len(set(names)) != len(names):
        raise ConfigError(f"workload.sections: section names must be unique, got {names}")
    check_objective(config["workload"].get("objective"), names)
    check_racing(config["workload"]["launches"], config["verdict"]["until_decided"])
    server, own = config["server"], tuple(axes.own(config["grid"]))
    check_command(server["command"], server["speculative_args"], api_key_env=server["api_key_env"],
                  allow_remote_bind=server["allow_remote_bind"], axes=own)
    backends.get(config["backend"]).check_launch(server["command"] + server["speculative_args"])
    check_env(server["env"], own)
    check_axes(config)
    specs = expand_grid(config)
    check_unique_names(specs)
    for spec in specs:
        spec.check_fits()
    if unknown := sorted(set(config["infer_failures"]["measure_anyway"]) - {spec.name for spec in specs}):
        raise ConfigError(f"infer_failures.measure_anyway: {', '.join(unknown)} is not a configuration of this "
                          f"study; `specsweep grid` lists their names")
    if not templates.uses(server["speculative_args"], "budget") and any(b > 0 for b in config["grid"]["budget"]):
        raise ConfigError(
            "server.speculative_args has no {budget} placeholder, so every budget above 0 "
            "would launch the same server; add the draft-length flag with {budget}"
        )
    if len(config["grid"]["tp"]) > 1 and not templates.uses(server["command"] + server["speculative_args"], "tp"):
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
    for axis in axes.own(grid):
        if axis in templates.PLACEHOLDERS:
            raise ConfigError(f"grid.{axis}: {axis} is a placeholder specsweep fills itself; name the axis otherwise "
                              f"(reserved: {', '.join(templates.PLACEHOLDERS)})")
        if not templates.uses(used, axis):
            raise ConfigError(f"grid.{axis} reaches no server: no {{{axis}}} in server.command, "
                              f"server.speculative_args or server.env, so every value would launch the same "
                              f"server; pass it with {{{axis}}} (a flag's value, or an environment variable)")
    known = axes.names(grid)
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


def check_spec_command(spec: LaunchSpec) -> None:
    """Template mistakes that would otherwise surface only after a launch (a spec given by hand)."""
    check_command(list(spec.command), list(spec.speculative_args), api_key_env=spec.api_key_env,
                  allow_remote_bind=spec.allow_remote_bind, axes=tuple(spec.axes))


def check_command(template: list[str], speculative_args: list[str], *, api_key_env: str | None,
                  allow_remote_bind: bool, axes: tuple[str, ...] = ()) -> None:
    """Placeholders, {port}, secrets and the bind address of a launch template."""
    for key, args in (("server.command", template), ("server.speculative_args", speculative_args)):
        templates.check_template(key, args, axes)
        templates.check_no_literal_secret(key, args)
        templates.check_bind(key, args, allowed=allow_remote_bind)
    if not templates.uses(template, "port"):
        raise ConfigError(
            "server.command has no {port} placeholder: specsweep picks a free port per run and "
            "would wait for a server that listens elsewhere; add the port flag, e.g. --port {port}"
        )
    if templates.uses(template + speculative_args, "api_key") and not api_key_env:
        raise ConfigError(
            "server.command uses {api_key} but server.api_key_env is not set; name the environment "
            "variable that holds the key, e.g. api_key_env: SERVER_API_KEY"
        )


def check_env(env: dict[str, str], axes: tuple[str, ...] = ()) -> None:
    """server.env: known placeholders only, and no secret written into the study."""
    templates.check_template("server.env", list(env.values()), axes)
    for name, value in env.items():
        if templates.is_secret_name(name) and value and not templates.placeholders(value):
            raise ConfigError(f"server.env: {name} is given a literal value; keep secrets out of the study: export "
                              f"{name} in the environment that runs specsweep instead (the server inherits it)")


def check_prompts_file(path: str, specs: list[LaunchSpec]) -> None:
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


def _schema_message(exc) -> str:
    """'grid.budget[0]: -1 is less than the minimum of 0 (...)' from a validation error."""
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path).lstrip(".")
    return f"{where or 'top level'}: {exc.message} (see config/README.md for every key)"


def provisioned(config: dict) -> dict[str, str]:
    """{"binary"|"model"|"prompts": manifest path} of what the study leaves to the pipeline
    (study/targets.py of_study)."""
    return {kind: str(paths.manifest(target)) for kind, target in targets.of_study(config).items()}


def shown_command(spec: LaunchSpec) -> str:
    """The launch command as a plan shows it: rendered, with what is known only at run time named."""
    import shlex

    shown = spec.resolved(binary=f"<embedded {spec.backend}>", model_path="<embedded model>")
    argv = server_argv(shown, "<port>", f"<key from ${spec.api_key_env}>")
    env = [f"{k}={v}" for k, v in templates.redact_env(server_env(shown, "<port>")).items()]
    return shlex.join(env + argv)
