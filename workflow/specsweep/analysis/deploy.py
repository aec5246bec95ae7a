"""What a person deploys: per cell of the answer (results/best.csv), the server command of the
configuration it names, as a shell script and in one machine-readable document (results/deploy/).

The command is the one the measured launch ran, rendered again from its result's own spec
(servers/command.py deployable): the same binary, model, flags and environment, with the launch's
own address, port and scratch folder as shell variables and every secret left for the user to
set, never written. A cell whose verdict names no budget (undecided) gets no winner: its best
set, each member's script and what it would need to decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from specsweep import axes
from specsweep.analysis import schedule, verdict
from specsweep.analysis.answer import keys_of_best
from specsweep.records import paths, store
from specsweep.servers import command
from specsweep.spec import LaunchSpec

SCHEMA = "specsweep.deploy"
VERSION = 1
DOCUMENT = "deploy.json"


@dataclass
class Deploy:
    """results/deploy/deploy.json: one entry per cell, and the scripts the entries name."""

    study: str
    cells: list[dict] = field(default_factory=list)
    configurations: dict[str, dict] = field(default_factory=dict)  # name: {script, server, measured_in}
    scripts: dict[str, str] = field(default_factory=dict)  # file name: text
    schedule: dict | None = None  # schedule.json (analysis/schedule.py), where the study has load levels

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "schema_version": VERSION, "study": self.study, "cells": self.cells,
                "configurations": self.configurations}

    def named_scripts(self) -> list[tuple[dict, str]]:
        """(where, script file) of every cell that names a budget, in the answer's order."""
        return [(c["where"], c["script"]) for c in self.cells if c["script"]]


def build(study: dict, frame: pd.DataFrame, best: pd.DataFrame, launches_dir: Path) -> Deploy:
    """The deploy document of an answer: ``best`` (answer.best_table) over the summary ``frame``."""
    found = Deploy(study=study["study"])
    keys = keys_of_best(best)
    for row in best.to_dict("records"):
        where = {k: axes.plain(row[k]) for k in keys}
        members = [int(b) for b in str(row.get("best_set") or "").split()] if _has(row.get("verdict")) else []
        named = None if pd.isna(row["best_budget"]) else int(row["best_budget"])
        names = {b: _name_of(frame, where, b) for b in members}
        for name in names.values():
            _add_configuration(found, name, launches_dir)
        found.cells.append({
            "where": where, "verdict": row.get("verdict") if members else None, "best_set": members,
            "budget": named, "configuration": names.get(named), "script": _script_of(names.get(named)),
            "candidates": {str(b): _script_of(n) for b, n in names.items()},
            "output_tok_s": _number(row.get("output_tok_s")), "speedup": _number(row.get("speedup")),
            "confidence": _number(row.get("confidence")), "reason": _reason(row, members),
        })
    per_step = {name: c["drafts_per_step"] for name, c in found.configurations.items()}
    found.schedule = schedule.build(found.study, frame, best, per_step, lambda where, b: _name_of(frame, where, b))
    return found


def write(found: Deploy, folder: Path) -> None:
    """The document and one executable script per configuration it names, in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in found.scripts.items():
        store.write_text_atomic(folder / name, text)
        (folder / name).chmod(0o755)
    store.write_json_atomic(folder / DOCUMENT, found.to_json())
    if found.schedule is not None:
        store.write_json_atomic(folder / schedule.DOCUMENT, found.schedule)


def _add_configuration(found: Deploy, name: str, launches_dir: Path) -> None:
    if name in found.configurations:
        return
    launch, path = next(iter(paths.launch_results(launches_dir, name).items()))
    result = store.read_result(path)
    spec = LaunchSpec.from_dict(result.spec)
    server = command.deployable(spec, result.server.get("env"))
    script = _script_of(name)
    found.scripts[script] = server.script([
        f"specsweep deploy: {name} of study {found.study}, as its launch {launch} ran it ({path}).",
        f"backend {spec.backend}, server {result.server.get('version')}",
        "Override the defaults below from the environment (PORT=9000 sh this-file); the server stays in "
        "the foreground.",
    ])
    found.configurations[name] = {"script": script, "backend": spec.backend, "values": spec.values,
                                  "drafts_per_step": (result.server.get("budget") or {}).get("drafts_per_step"),
                                  "measured_in": str(path), "server": server.to_json()}


def _name_of(frame: pd.DataFrame, where: dict, budget: int) -> str:
    """The configuration of a cell's budget: the summary row with the cell's axis values."""
    rows = frame[frame["budget"] == budget]
    for key in axes.columns(frame.columns):
        if key in where:
            rows = rows[rows[key].astype(str) == str(where[key])]
    return str(rows["name"].iloc[0])


def _reason(row: dict, members: list[int]) -> str | None:
    """Why a cell names no single budget; None where it names one."""
    if not members:
        return "no budget was measured here (see results/failed.csv and the report's failures page)"
    if row["verdict"] != verdict.UNDECIDED:
        return None
    needs = f"; it would need {row['needs']}" if _has(row.get("needs")) else ""
    return (f"undecided: the measurements cannot separate budgets {row['best_set']} at "
            f"{row['confidence']:.0%} confidence{needs}")


def _script_of(name: str | None) -> str | None:
    return None if name is None else f"{name}.sh"


def _has(value) -> bool:
    return bool(pd.notna(value)) and str(value) != ""


def _number(value) -> float | None:
    return float(value) if _has(value) else None

