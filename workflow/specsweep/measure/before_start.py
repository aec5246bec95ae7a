"""What is refused before a server starts (the runner's first step): the spec and its command,
the API key the study names, the model path, the prompts file and the prompt set's manifest, an
exclusion by the architecture of the GPUs the job was handed, a failure inferred from a shorter
context's (infer_failures); and the secrets to hide wherever a command, log line or record is
written."""

from __future__ import annotations

import os
from pathlib import Path

from specsweep.errors import ConfigError, Excluded, InferredToFail
from specsweep.records import inferred, paths
from specsweep.servers import backends
from specsweep.spec import EMBEDDED, LaunchSpec
from specsweep.study import prompt_sets
from specsweep.study.grid import excluded_here
from specsweep.study.loading import check_spec_command, model_path_problem
from specsweep.study.prompts import read_prompts_file


def api_key(spec: LaunchSpec) -> str | None:
    """The server's API key from the environment variable the study names; never written."""
    if not spec.api_key_env:
        return None
    value = os.environ.get(spec.api_key_env)
    if not value:
        raise ConfigError(f"server.api_key_env names {spec.api_key_env}, which is not set in this "
                          f"environment; export it before running the study")
    return value


def secrets(spec: LaunchSpec) -> tuple[str, ...]:
    """Values to hide wherever a command, log line or record is written."""
    try:
        key = api_key(spec)
    except ConfigError:
        return ()
    return (key,) if key else ()


def preflight(spec: LaunchSpec, prompt_source: dict | None = None) -> None:
    """Everything that can be refused before a server starts."""
    spec.check_fits()  # again here: a spec can also come by hand, as JSON
    check_spec_command(spec)
    api_key(spec)
    backends.get(spec.backend).check_launch(list(spec.command) + list(spec.speculative_args))
    if EMBEDDED in (spec.binary, spec.model_path):
        raise ConfigError("the launch spec still says 'embedded': pass the provisioned server and model paths")
    check_model_path(spec)
    if spec.prompts_file:
        read_prompts_file(spec.prompts_file)  # a malformed file fails before any launch
    if spec.prompt_set and prompt_source is None:
        raise ConfigError(f"the spec uses prompt set {spec.prompt_set}; pass its manifest "
                          f"({paths.manifest(prompt_sets.target_name(spec.prompt_set))})")


def check_model_path(spec: LaunchSpec) -> None:
    """llama-server needs a model file; the others load a folder, or a hub id they resolve themselves."""
    if problem := model_path_problem(backends.get(spec.backend), spec.model_path):
        raise ConfigError(problem)


def check_exclusions(excluded_on: tuple, hw: dict) -> None:
    """Refuse to measure where the study excludes this configuration by architecture."""
    held = {g.get("compute_capability") for g in hw.get("gpus", [])} - {None}
    for capabilities, reason in excluded_on:
        if hit := excluded_here(capabilities, held):
            raise Excluded(f"excluded on compute capability {', '.join(hit)}: {reason}; the plan did not "
                           f"leave it out because it was made on a host of another kind: plan on this kind of "
                           f"host, or set hardware.compute_capability in the study")


def refuse_inferred(sources: list[str], failures_dir: Path, launches_dir: Path) -> None:
    """Refuse, with no server started, a launch whose failure the study infers from a shorter
    context's running out of memory earlier (``sources``: the plan's candidates, in order)."""
    if (why := inferred.inferred(sources, failures_dir, launches_dir)) is not None:
        raise InferredToFail(f"inferred: {why.reason}; not launched (infer_failures.out_of_memory)",
                             evidence=[why.record])
