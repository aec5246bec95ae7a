"""Failures inferred instead of paid for (the study's infer_failures): a configuration whose
shorter context, every other axis equal, ran out of memory is not launched. On a GPU each launch
bound to fail costs minutes of model loading, and a driver pushed near out of memory may stay
degraded for the launches after it (lablup/mlxcel #807).

One owner for which failures imply which: the plan leaves such configurations out, a job already
planned refuses at once (errors.InferredToFail), and the summary shows each as "inferred", with
the record it rests on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specsweep import axes
from specsweep.records import paths
from specsweep.records.store import latest_failure_at

# The server-log signatures (servers/signatures.py) that say a launch ran out of memory: on the
# GPU (CUDA, a KV cache that does not fit) or on the host (std::bad_alloc, MemoryError).
OUT_OF_MEMORY = ("gpu-oom", "host-oom")


@dataclass(frozen=True)
class Inference:
    """Why one configuration is inferred to fail: the shorter-context one that ran out of memory."""

    source: str  # the configuration whose launch ran out of memory
    context: int  # at this context
    record: str  # its failure record

    @property
    def reason(self) -> str:
        """The summary's reason beside its status "inferred": "out of memory at context 512 (...)"."""
        return f"out of memory at context {self.context} ({self.source}, failure record {self.record})"


def shorter(values: dict, contexts) -> list[str]:
    """The configurations a failure would be inferred from: every shorter context, all else equal."""
    return [axes.config_name({**values, "context": c}) for c in sorted(contexts) if c < values["context"]]


def sources(config: dict, values: dict) -> list[str]:
    """What the study infers this configuration's failure from: nothing unless it opts in
    (infer_failures.out_of_memory) or names the configuration in measure_anyway."""
    chosen = config.get("infer_failures") or {}
    if not chosen.get("out_of_memory") or axes.config_name(values) in chosen.get("measure_anyway", ()):
        return []
    return shorter(values, config["grid"]["context"])


def inferred(names: list[str], failures_dir: Path = paths.FAILURES,
             launches_dir: Path = paths.LAUNCHES) -> Inference | None:
    """The first of ``names`` (shorter contexts, all else equal) whose newest failure record says
    it ran out of memory and that has no result since: what this configuration's failure is
    inferred from, or None."""
    for name in names:
        found = latest_failure_at(failures_dir, name)
        if found is None or paths.launch_results(launches_dir, name):
            continue
        path, record = found
        if record.signature in OUT_OF_MEMORY:
            return Inference(source=name, context=record.spec.get("context"), record=str(path))
    return None
