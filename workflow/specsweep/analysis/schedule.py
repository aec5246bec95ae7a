"""A draft schedule per load and context (results/deploy/schedule.json): where a study measured
closed-loop load levels, each cell's per-level answer becomes the draft length to run at the batch
size the server actually ran there, in the forms the servers take or propose:

- vLLM's per-batch-size draft length, ``num_speculative_tokens_per_batch_size`` {batch: K} (the
  closed tune_speculative_k, vllm-project/vllm PR #49163);
- vLLM's proposed rows ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`` (RFC #48627, PR #48944, open);
- SGLang's per-batch-size steps {batch: steps} (sgl-project/sglang PR #24055).

These formats are still moving upstream, so the document carries its own version. A level enters
only where its verdict names a budget (decided, or tied and the smallest named); every other level
is listed as unfilled with why. The batch is the mean the server reported for the named
configuration at that level (measure/in_flight.py), never the client's concurrency; a level the
server reported no batch for cannot be placed and is unfilled too. No row reaches past the largest
batch (or context) measured: the schedule does not extrapolate. K is the drafted tokens a
verification step the named budget meant on its server (the result's own budget meaning).
"""

from __future__ import annotations

import math

import pandas as pd

from specsweep import axes
from specsweep.analysis import verdict
from specsweep.analysis.answer import keys_of_best

SCHEMA = "specsweep.schedule"
VERSION = 1
DOCUMENT = "schedule.json"
FORMATS = {
    "vllm_per_batch_size": "num_speculative_tokens_per_batch_size {batch: K} (vllm-project/vllm PR #49163, closed)",
    "vllm_rows": "[bs_lo, bs_hi, ctx_lo, ctx_hi, K] (vllm-project/vllm RFC #48627, PR #48944, open)",
    "sglang_steps": "speculative steps per batch size {batch: steps} (sgl-project/sglang PR #24055)",
}
NAMED = (verdict.DECIDED, verdict.TIED)


def closed_loop(load) -> int | None:
    """The concurrency of a closed-loop level (c<n>), None for any other load."""
    text = str(load)
    return int(text[1:]) if text.startswith("c") and text[1:].isdigit() else None


def build(study: str, frame: pd.DataFrame, best: pd.DataFrame, drafts_per_step: dict[str, int | None],
          name_of) -> dict | None:
    """The schedule of an answer, or None where no cell measured two closed-loop levels.

    ``drafts_per_step``: per configuration name, K at its budget; ``name_of(where, budget)``: the
    configuration of a cell's budget (deploy's lookup)."""
    levels = best[best[axes.LOAD].map(closed_loop).notna()]
    keys = [k for k in keys_of_best(best) if k not in ("context", axes.LOAD)]
    groups = [(dict(zip(keys, key if isinstance(key, tuple) else (key,))), rows)
              for key, rows in levels.groupby(keys, sort=False, dropna=False)]
    if not any(rows[axes.LOAD].nunique() > 1 for _, rows in groups):
        return None
    schedules = []
    for where, rows in groups:
        entries = [_entry(row, frame, drafts_per_step, name_of) for row in rows.to_dict("records")]
        schedules.append(_schedule({k: axes.plain(v) for k, v in where.items()}, entries))
    return {"schema": SCHEMA, "schema_version": VERSION, "study": study, "formats": FORMATS, "schedules": schedules}


def _entry(row: dict, frame: pd.DataFrame, drafts_per_step: dict, name_of) -> dict:
    said = _text(row.get("verdict"))  # no verdict: nothing measured
    out = {"context": axes.plain(row["context"]), "load": row[axes.LOAD], "verdict": said}
    if said not in NAMED or pd.isna(row.get("best_budget")):
        return {**out, "why": f"{said or 'no verdict'}: best set {_text(row.get('best_set')) or 'none'}"}
    budget = int(row["best_budget"])
    name = name_of({k: row[k] for k in axes.columns(frame.columns) if k in row}, budget)  # best.csv has no budget
    batch = _batch(frame, name, row)
    if batch is None:
        return {**out, "budget": budget, "why": "the server reported no batch for this level"}
    k = 0 if budget == 0 else drafts_per_step.get(name)
    return {**out, "budget": budget, "configuration": name, "batch": batch, "k": k}


def _text(value) -> str | None:
    """A best table's text cell: None where the cell has none (empty, or missing)."""
    return value if isinstance(value, str) and value else None


def _batch(frame: pd.DataFrame, name: str, row: dict) -> float | None:
    mine = frame[(frame["name"] == name) & (frame[axes.SECTION] == row[axes.SECTION])
                 & (frame[axes.LOAD] == row[axes.LOAD])]
    value = mine["server_batch"].iloc[0] if len(mine) and "server_batch" in mine else None
    return None if value is None or pd.isna(value) else round(float(value), 2)


def _schedule(where: dict, entries: list[dict]) -> dict:
    filled = [e for e in entries if "batch" in e]
    contexts = sorted({e["context"] for e in filled})
    by_context = [_per_batch(c, sorted((e for e in filled if e["context"] == c), key=lambda e: e["batch"]))
                  for c in contexts]
    return {"where": where, "levels": entries, "by_context": by_context,
            "vllm_rows": [row for c, lo in zip(by_context, _bounds(contexts)) for row in _rows(c, lo)],
            "unfilled": [{k: e[k] for k in ("context", "load", "why")} for e in entries if "batch" not in e],
            "largest_batch": max((e["batch"] for e in filled), default=None),
            "largest_context": max(contexts, default=None)}


def _per_batch(context, entries: list[dict]) -> dict:
    """Each integer batch size from 1 to the largest measured, with the K of the measured level
    nearest to it (the lower one on a tie), never a batch size past the largest measured."""
    sizes = range(1, math.floor(entries[-1]["batch"] + 0.5) + 1)
    k = {str(n): min(entries, key=lambda e: (abs(e["batch"] - n), e["batch"]))["k"] for n in sizes}
    return {"context": context, "vllm_per_batch_size": k, "sglang_steps": dict(k)}


def _bounds(values: list) -> list:
    """The lowest value each measured context covers: 1, then one past the previous one."""
    return [1, *[v + 1 for v in values[:-1]]]


def _rows(per_context: dict, ctx_lo) -> list[list]:
    """[bs_lo, bs_hi, ctx_lo, ctx_hi, K] rows: runs of batch sizes with one K."""
    rows: list[list] = []
    for size, k in per_context["vllm_per_batch_size"].items():
        n = int(size)
        if rows and rows[-1][4] == k and rows[-1][1] == n - 1:
            rows[-1][1] = n
        else:
            rows.append([n, n, ctx_lo, per_context["context"], k])
    return rows
