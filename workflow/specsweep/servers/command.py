"""The launch command of one configuration: the study's template with every placeholder filled.

Shared by the runner (the real launch), the plan (`snakemake -n -p` shows it) and the tests'
golden commands, so all three render it the same way.
"""

from __future__ import annotations

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
        **spec.axes,  # the study's own axes (their names never clash with the built-in ones: config.check_axes)
        "api_key": key or "", "scratch": scratch,
        "binary": spec.binary, "model": spec.model_path, "host": probes.HOST, "port": port, "side_port": side_port,
        "ctx_size": backends.get(spec.backend).ctx_size(spec),
        "slots": spec.slots, "threads": spec.threads, "tp": spec.tp, "budget": spec.budget,
    }


def server_argv(spec: LaunchSpec, port: int | str, key: str | None = None, scratch: str = "<scratch>",
                side_port: int | str = "<side_port>") -> list[str]:
    """The launch command: the template with placeholders filled, plus speculation flags."""
    template = list(spec.command) + (list(spec.speculative_args) if spec.budget > 0 else [])
    return templates.render(template, render_values(spec, port, key, scratch, side_port))


def server_env(spec: LaunchSpec, port: int | str, scratch: str = "<scratch>",
               side_port: int | str = "<side_port>") -> dict[str, str]:
    """The study's extra environment for the server (server.env), placeholders filled."""
    values = render_values(spec, port, scratch=scratch, side_port=side_port)
    return dict(zip(spec.env, templates.render(list(spec.env.values()), values)))
