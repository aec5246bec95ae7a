"""The launch command of one configuration: the study's template with every placeholder filled.

Shared by the runner (the real launch), the plan (`snakemake -n -p` shows it), the deploy
scripts (analysis/deploy.py) and the tests' golden commands, so all of them render it the same way.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specsweep.servers import backends, probes, templates

if TYPE_CHECKING:
    from specsweep.spec import LaunchSpec


def render_values(spec: LaunchSpec, port: int | str, key: str | None = None, scratch: str = "<scratch>",
                  side_port: int | str = "<side_port>") -> dict:
    """What each placeholder of the launch template becomes for this configuration.

    ``scratch``: a folder of this job's own, removed after teardown (TMPDIR, caches).
    ``side_port``: a second port the job's lease reserves, for a server that opens one beside
    its HTTP port (SGLang's --nccl-port: a free port of its own choosing otherwise, which a
    concurrent job's server may take between SGLang's check and its bind).
    """
    return {
        **spec.axes,  # the study's own axes (their names never clash with the built-in ones: loading.check_axes)
        "api_key": key or "", "scratch": scratch,
        "binary": spec.binary, "model": spec.model_path, "host": probes.HOST, "port": port, "side_port": side_port,
        "ctx_size": backends.get(spec.backend).ctx_size(spec),
        "slots": spec.slots, "threads": spec.threads, "tp": spec.tp, "budget": spec.budget,
    }


def server_argv(spec: LaunchSpec, port: int | str, key: str | None = None, scratch: str = "<scratch>",
                side_port: int | str = "<side_port>") -> list[str]:
    """The launch command: the template with placeholders filled, plus speculation flags."""
    return templates.render(_template(spec), render_values(spec, port, key, scratch, side_port))


def _template(spec: LaunchSpec) -> list[str]:
    return list(spec.command) + (list(spec.speculative_args) if spec.budget > 0 else [])


def server_env(spec: LaunchSpec, port: int | str, scratch: str = "<scratch>",
               side_port: int | str = "<side_port>") -> dict[str, str]:
    """The study's extra environment for the server (server.env), placeholders filled."""
    values = render_values(spec, port, scratch=scratch, side_port=side_port)
    return dict(zip(spec.env, templates.render(list(spec.env.values()), values)))


# The placeholders a deployed server gets at its own start rather than from the study: the shell
# variable each becomes in a deploy script, and its default there (None: a fresh folder).
RUN_TIME = {"host": ("HOST", probes.HOST), "port": ("PORT", "8080"), "side_port": ("SIDE_PORT", "8081"),
            "scratch": ("SCRATCH", None)}
_MARK = "\x00"  # brackets a variable's name inside a rendered argument: no template can hold it


@dataclass(frozen=True)
class Deployable:
    """One configuration's launch command as a person runs it outside specsweep: argv and the
    study's environment exactly as measured, with a shell variable where the study's value was the
    launch's own (address, port, scratch folder) or a secret (never written). Arguments are held
    with each variable's name between two _MARK characters, so that no literal text is mistaken
    for one."""

    marked_argv: tuple[str, ...]
    marked_env: tuple[tuple[str, str], ...]
    variables: dict[str, str | None]  # VAR: default (None: a fresh temporary folder)
    required: dict[str, str]  # VAR: why it must be set (the API key, a secret variable)

    @property
    def argv(self) -> list[str]:
        """The command with each variable written ``${VAR}``."""
        return [_as_variables(arg) for arg in self.marked_argv]

    @property
    def env(self) -> dict[str, str]:
        return {name: _as_variables(value) for name, value in self.marked_env}

    def to_json(self) -> dict:
        return {"argv": self.argv, "env": self.env, "variables": self.variables, "required": self.required}

    def script(self, comments: list[str]) -> str:
        """A POSIX sh script that starts the server in the foreground (exec), its defaults overridable."""
        lines = ["#!/bin/sh", *(f"# {c}" for c in comments), "set -eu"]
        lines += [f': "${{{var}:?{why}}}"' for var, why in self.required.items()]
        for var, default in self.variables.items():
            fallback = "$(mktemp -d)" if default is None else shlex.quote(default)
            lines.append(f'{var}="${{{var}:-{fallback}}}"')
        lines += [f"export {name}={_shell_word(value)}" for name, value in self.marked_env]
        lines.append("exec " + " ".join(_shell_word(arg) for arg in self.marked_argv))
        return "\n".join(lines) + "\n"


def deployable(spec: LaunchSpec, recorded_env: dict[str, str] | None = None) -> Deployable:
    """The launch command of ``spec`` with its run-time parts as shell variables. ``recorded_env``:
    the environment the launch ran with (its result's server.env); what the lease added there (the
    devices it held) becomes a variable defaulting to the value measured."""
    marks = {name: _marked(var) for name, (var, _) in RUN_TIME.items()}
    required = {}
    key = None
    if spec.api_key_env:
        key = _marked(spec.api_key_env)
        required[spec.api_key_env] = f"set {spec.api_key_env} to the server's API key"
    values = {**render_values(spec, marks["port"], key, marks["scratch"], marks["side_port"]), "host": marks["host"]}
    argv = templates.render(_template(spec), values)
    env = dict(zip(spec.env, templates.render(list(spec.env.values()), values)))
    for name in env:
        if templates.is_secret_name(name):
            required[name] = f"set {name}: its value is a secret and is not written here"
            env[name] = _marked(name)
    used = "".join([*argv, *env.values()])
    variables = {var: default for var, default in RUN_TIME.values() if _marked(var) in used}
    for name, value in (recorded_env or {}).items():
        if name not in spec.env and value != templates.REDACTED:
            variables[name] = value
            env[name] = _marked(name)
    return Deployable(marked_argv=tuple(argv), marked_env=tuple(env.items()), variables=variables, required=required)


def _marked(var: str) -> str:
    return f"{_MARK}{var}{_MARK}"


def _as_variables(text: str) -> str:
    """A marked argument with each variable as ``${VAR}``."""
    return "".join(f"${{{p}}}" if i % 2 else p for i, p in enumerate(text.split(_MARK)))


def _shell_word(text: str) -> str:
    """One marked argument as one sh word: literal text single-quoted, each variable expanded in
    double quotes (so that a value with spaces stays one argument)."""
    word = "".join(f'"${{{p}}}"' if i % 2 else (shlex.quote(p) if p else "")
                   for i, p in enumerate(text.split(_MARK)))
    return word or "''"
