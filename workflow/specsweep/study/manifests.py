"""The provisioning manifests a job is handed (results/provision/*.json): which is which, what
each must hold, and a configuration's spec with what they provisioned filled in.

A manifest says what it is by the path it holds: ``binary`` (the server), ``model`` or
``prompts`` (a prompt set's documents), so the workflow may pass whichever a study needs, in any
order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specsweep.errors import ConfigError
from specsweep.records import paths
from specsweep.servers import backends
from specsweep.spec import EMBEDDED, LaunchSpec
from specsweep.study import prompt_sets

KINDS = ("binary", "model", "prompts")  # the path each kind of manifest holds; --<kind>-manifest hands one


@dataclass(frozen=True)
class Handed:
    """The manifests given to one job, each None where not given."""

    binary: Path | None = None
    model: Path | None = None
    prompts: Path | None = None

    @classmethod
    def sorted_out(cls, paths: list[Path], **named: Path | None) -> Handed:
        """The manifests named by kind (``binary=...``), plus ``paths`` of any kind, each put where
        its content says it belongs."""
        found = dict(named)
        for path in paths:
            doc = read(path)
            found["binary" if "binary" in doc else "prompts" if "prompts" in doc else "model"] = path
        return cls(**{k: found.get(k) for k in KINDS})


def read(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read manifest {path}: {exc}") from exc
    return doc if isinstance(doc, dict) else {}


def holding(path: Path | None, key: str, target: str) -> dict:
    """The manifest at ``path``, which must hold a ``key`` path; refused with how to make it
    (``target``: what provisions it)."""
    if path is None:
        raise ConfigError(f"the spec uses the embedded {key}; pass --{key}-manifest (made by: snakemake --cores 1 "
                          f"{paths.manifest(target)})")
    doc = read(path)
    if not isinstance(doc.get(key), str):
        raise ConfigError(f"manifest {path} must be a JSON object with a {key!r} path; remake it with: "
                          f"snakemake --cores 1 {path}")
    return doc


def resolve(spec: LaunchSpec, handed: Handed) -> tuple[LaunchSpec, dict | None]:
    """The spec with its embedded server and model replaced by the provisioned paths, and its
    prompt set's manifest (by hand, without one: the cached set, provisioned if need be)."""
    backend = backends.get(spec.backend)
    found = {}
    for kind, value in (("binary", spec.binary), ("model", spec.model_path)):
        if value == EMBEDDED:
            manifest = holding(getattr(handed, kind), kind, backend.embedded.get(kind, kind))
            backend.check_manifest(kind, manifest)  # e.g. a node of another CPU kind: refused, not SIGILL at launch
            found[kind] = manifest[kind]
    prompts = None
    if spec.prompt_set and handed.prompts is None:
        prompts = prompt_sets.provision(spec.prompt_set, **spec.prompt_pins)
    elif spec.prompt_set:
        prompts = holding(handed.prompts, "prompts", prompt_sets.target_name(spec.prompt_set))
    if prompts is not None and prompts.get("set") != spec.prompt_set:
        raise ConfigError(f"manifest {handed.prompts} is of prompt set {prompts.get('set')!r}, the study uses "
                          f"{spec.prompt_set!r}; pass {paths.manifest(prompt_sets.target_name(spec.prompt_set))}")
    return spec.resolved(binary=found.get("binary"), model_path=found.get("model")), prompts
