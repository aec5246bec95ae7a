"""What the pipeline provisions, one target each, found by name: a backend's embedded server and
model and its tools (each backend's module says how), or a prompt set (``prompts-<set>``).

One rule (workflow/rules/provision.smk) and one command (``specsweep provision TARGET``) make
every target through ``provision`` here: the target's manifest is results/provision/<target>.json,
made from the study's pins that target names and the manifests of the targets it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specsweep.cache import Artifact
from specsweep.errors import ConfigError
from specsweep.records import paths
from specsweep.servers import backends
from specsweep.servers.backends import Provision
from specsweep.spec import EMBEDDED
from specsweep.study import prompt_sets


@dataclass(frozen=True)
class Target:
    name: str
    pin_keys: tuple[str, ...]  # the study's provision: pins it is made from
    needs: tuple[str, ...]  # targets whose manifests it is made from
    options: tuple[str, ...]  # what Provision.options it takes
    make: Callable[[Provision], dict | None]
    artifact: Callable[[dict], Artifact | None]  # what it takes from the package index, from its pins
    in_plan: bool = True  # False: a tool made only by hand, never a study's input


@cache
def all_targets() -> dict[str, Target]:
    """Every target by name: each backend's and each prompt set's. Two owners of a name are refused."""
    found: dict[str, Target] = {}
    for backend in backends.BACKENDS.values():
        for name in (*backend.embedded.values(), *backend.tools):
            _add(found, Target(name, backend.provision_pins.get(name, ()), backend.provision_needs.get(name, ()),
                               backend.provision_options.get(name, ()),
                               lambda request, b=backend, n=name: b.provision(n, request),
                               lambda pins, b=backend, n=name: b.artifact(n, pins),
                               in_plan=name in backend.embedded.values()), backend.name)
    for set_name, prompt_set in prompt_sets.SETS.items():
        keys = (f"{prompt_set.pin}_version", f"{prompt_set.pin}_sha256")
        _add(found, Target(prompt_sets.target_name(set_name), keys, (), (),
                           lambda request, s=set_name, k=keys: prompt_sets.provision(s, *(request.pins[x] for x in k)),
                           lambda pins, s=set_name, k=keys: prompt_sets.artifact(s, *(pins[x] for x in k))),
             "prompt sets")
    return found


def _add(found: dict[str, Target], target: Target, owner: str) -> None:
    if target.name in found:
        raise ConfigError(f"provisioning target {target.name!r} of {owner} is already another's; rename one")
    found[target.name] = target


def names(*, in_plan: bool = False) -> list[str]:
    return sorted(name for name, target in all_targets().items() if target.in_plan or not in_plan)


def find(name: str) -> Target:
    try:
        return all_targets()[name]
    except KeyError:
        raise ConfigError(f"nothing provisions {name!r}; the targets: {', '.join(names())}") from None


def pins(config: dict, name: str) -> dict:
    """The study's pins one target is made from (as params: changing one remakes it, and only it)."""
    return {key: config["provision"][key] for key in find(name).pin_keys}


def artifact(config: dict, name: str) -> Artifact | None:
    """What one target takes from the package index at the study's pins; None where it takes nothing."""
    return find(name).artifact(pins(config, name))


def provision(name: str, request: Provision) -> dict | None:
    """Make (or find cached) one target; its manifest, or None where it wrote ``request.out`` itself."""
    target = find(name)
    if unknown := sorted(set(request.options) - set(target.options)):
        raise ConfigError(f"provision {name} takes no {', '.join('--' + o.replace('_', '-') for o in unknown)}"
                          + (f" (it takes: {', '.join(target.options)})" if target.options else ""))
    if missing := [need for need in target.needs if need not in request.needs]:
        raise ConfigError(f"provision {name} is made from {', '.join(missing)}: pass --needs "
                          + " ".join(str(paths.manifest(need)) for need in target.needs))
    return target.make(request)


def of_study(config: dict) -> dict[str, str]:
    """{"prompts"|"binary"|"model": target} of what the study leaves to the pipeline: its prompt set
    (unless it brings a prompts file), and its backend's embedded server and model where it says so."""
    out = {}
    if not config["workload"]["prompts_file"]:
        out["prompts"] = prompt_sets.target_name(config["workload"]["prompt_set"])
    embedded = backends.get(config["backend"]).embedded
    for kind, value in (("binary", config["server"]["binary"]), ("model", config["model"]["path"])):
        if value == EMBEDDED and kind in embedded:
            out[kind] = embedded[kind]
    return out


def in_order(config: dict) -> list[str]:
    """The study's targets and what they need, each after its needs."""
    ordered: list[str] = []
    for name in of_study(config).values():
        ordered += [need for need in (*find(name).needs, name) if need not in ordered]
    return ordered


def provision_study(config: dict, log_path: Path) -> dict[str, dict]:
    """Every target the study's plan provisions, into the cache (``specsweep provision study``):
    each one's manifest by name."""
    made: dict[str, dict] = {}
    for name in in_order(config):
        needs = {need: made[need] for need in find(name).needs}
        made[name] = provision(name, Provision(pins=pins(config, name), log_path=log_path, needs=needs))
    return made


def provision_embedded(config: dict, log_path: Path) -> dict[str, str]:
    """{"binary"|"model": path} of the study's embedded server and model, provisioned (or found in
    the cache) as its plan provisions them: for the tests, the benchmarks and a hand run."""
    made = provision_study(config, log_path)
    return {kind: made[target][kind] for kind, target in of_study(config).items() if kind in ("binary", "model")}
