"""What a launch says while it runs: progress lines on the job's log (and on the terminal where
a person waits), and the line that ends it: each section's tok/s, its speedup over budget 0 where
that launch is already measured in the study's folder, and the acceptance length."""

from __future__ import annotations

import sys
from pathlib import Path

from specsweep.records import paths
from specsweep.spec import LaunchSpec, loads_named


def say(spec: LaunchSpec, message: str, *, terminal: bool = False) -> None:
    """Progress on stderr (the job's log), one line each, prefixed with the configuration's name.

    ``terminal``: also on stdout, which Snakemake shows on the terminal (waiting for devices).
    """
    print(f"[{spec.label}] {message}", file=sys.stderr, flush=True)
    if terminal:
        print(f"[{spec.label}] {message}", flush=True)


def measured_line(spec: LaunchSpec, doc: dict, launches_dir: Path) -> str:
    """One line for the terminal: per section tok/s, speedup over budget 0 (when it is measured
    already, in this study's folder) and acceptance length."""
    base = _baseline_rates(spec, launches_dir) if spec.budget > 0 else {}
    levels = loads_named((s["name"], s["load"]) for s in doc["sections"])
    parts = []
    for section in doc["sections"]:
        extra, key = [], (section["name"], section["load"])
        if key in base:
            extra.append(f"{section['output_tok_s'] / base[key]:.2f}x budget 0")
        if section.get("acceptance_length") is not None:
            extra.append(f"acceptance {section['acceptance_length']:.2f}")
        shown = f" ({', '.join(extra)})" if extra else ""
        parts.append(f"{section['name']}{' ' + section['load'] if levels else ''} "
                     f"{section['output_tok_s']:.1f} tok/s{shown}")
    if doc.get("search") and doc["search"]["goodput_tok_s"] is not None:
        parts.append(f"goodput {doc['search']['goodput_tok_s']:.1f} tok/s at {doc['search']['sustained_rate_rps']:.3g} "
                     f"req/s")
    return "measured: " + "; ".join(parts)


def _baseline_rates(spec: LaunchSpec, launches_dir: Path) -> dict[tuple[str, str], float]:
    """Output tok/s per section and load of the same other axes at budget 0 and the same launch, if
    its result is here."""
    from specsweep.axes import config_name
    from specsweep.records.store import InvalidResult, read_result

    try:
        base = read_result(paths.launch_result(config_name({**spec.values, 'budget': 0}), launch=spec.launch,
                                            launches=Path(launches_dir)))
    except (InvalidResult, FileNotFoundError):
        return {}
    if base.spec.get("study") != spec.study:
        return {}
    return {(s["name"], s["load"]): s["output_tok_s"] for s in base.sections}


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"
