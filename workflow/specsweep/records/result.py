"""The result document of one configuration: its one owner.

Built by the runner, written and read only through ``Result.to_json`` / ``Result.from_json``,
validated on the way in, and asked by aggregation for the summary rows it contributes and the
provenance it must share with the others it is summarised with.

Schema history (``schema_version``):
  1 - spec, server, model, host, timing, isolation, warmup, prompts, sections with raw records.
  2 - adds ``provenance`` (code, invocation, study config, environment, packages) and
      ``hardware``. A version-1 file is migrated on read: both are empty and
      ``provenance.migrated_from`` says so; it is comparable only with others like it.
  3 - every request record carries ``prompt_sha256`` (the warmup's in ``warmup.prompt_sha256``),
      ``prompts`` says where they came from (``set``, ``kind``, ``source``) and whether they were
      ``reused`` on purpose; a result that re-sent a prompt without saying so is refused. Older
      files are read with ``prompts.reused`` unknown (None): measured on prompts sent again and
      again, they are comparable only with others like them.
  4 - every section says the ``load`` it ran at (c<concurrency> or r<rate>), and ``search`` holds
      the goodput search under ``spec.objective`` (its steps, each a section document of its own,
      the sustained rate and the goodput). Older files have no search, and their sections' load
      is read from their concurrency and request_rate.
  5 - the quiet-host guard has one name: each section's figures (``host_load`` before) and the
      study's settings (``isolation.guard`` before) are both ``quiet_host``, and what the lease
      held (devices, ports, the wait; the rest of ``isolation``) is ``lease``. Older files are
      renamed on read, figures unchanged.
  6 - the longest request the running server said it takes is ``server.max_context`` for every
      backend (``slot_context`` before: llama-server's word, also used for vLLM's ``max_model_len``
      and SGLang's ``max_context_length``). Older files are renamed on read, value unchanged.
An older version is read under the current fields by records/migrations.py (``result_body``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from specsweep.records import migrations
from specsweep.spec import SLO, Objective, load_label

SCHEMA = "specsweep.result"
# Of Result.comparability(), what two studies compared with each other (specsweep compare) must
# share; the rest (study, server version, host class) is what a comparison is for. Within one
# study's summary every key must be equal.
ACROSS_STUDIES = ("model",)
VERSION = 6
READS = (1, 2, 3, 4, 5, 6)


class InvalidResult(ValueError):
    """A result file that must not be aggregated; the message says why."""


@dataclass
class Result:
    name: str
    specsweep_version: str
    spec: dict
    server: dict
    model: dict
    host: dict
    started_at: str
    finished_at: str
    timing: dict
    warmup: dict
    prompts: dict
    sections: list[dict]
    lease: dict | None = None  # what the device lease held: devices, ports, how long it waited
    quiet_host: dict | None = None  # the quiet-host settings the sections were judged by
    hardware: dict | None = None
    provenance: dict = field(default_factory=dict)
    search: dict | None = None  # the goodput search (spec.objective), from version 4

    # --- JSON ---------------------------------------------------------------------------------
    def to_json(self) -> dict:
        doc: dict[str, Any] = {"schema": SCHEMA, "schema_version": VERSION}
        doc.update({f.name: getattr(self, f.name) for f in fields(self)})
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Result:
        """Validate (and migrate an older version of) a parsed result file."""
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
            raise InvalidResult(f"not a specsweep result (schema={found!r})")
        version = doc.get("schema_version")
        if version not in READS:
            raise InvalidResult(f"result schema version {version}, this specsweep reads {', '.join(map(str, READS))}; "
                                f"re-run the configuration or use a matching specsweep version")
        body = {k: v for k, v in doc.items() if k not in ("schema", "schema_version")}
        names = {f.name for f in fields(cls)}
        missing = sorted(n for n in names if n not in body and n not in ("lease", "quiet_host", "hardware",
                                                                          "provenance", "search"))
        if missing:
            raise InvalidResult(f"result lacks {', '.join(missing)}")
        try:
            body = migrations.result_body(body, version)
            result = cls(**{k: v for k, v in body.items() if k in names})
            result.validate()
        except (KeyError, TypeError, AttributeError, IndexError) as exc:
            # A damaged file (a field missing or of another type where a migration or a check
            # reads it) is refused like any other invalid one: moved aside and measured again.
            raise InvalidResult(f"malformed result: {type(exc).__name__} {exc}") from exc
        return result

    # --- invariants every aggregated number relies on ---------------------------------------
    def validate(self) -> None:
        expected = [s["name"] for s in self.spec["sections"]]
        got = [s.get("name") for s in self.sections]
        if got != expected:
            raise InvalidResult(f"sections {got} do not match the spec's {expected}")
        for spec_section, section in zip(self.spec["sections"], self.sections):
            _validate_section(spec_section, section, self.spec.get("repeats", 1))
            if section.get("load") != _load_of(spec_section):
                raise InvalidResult(f"section {section['name']}: ran at load {section.get('load')}, the spec says "
                                    f"{_load_of(spec_section)}")
        self._validate_search()
        if self.prompts.get("reused") is False:
            self._validate_distinct_prompts()

    def _validate_distinct_prompts(self) -> None:
        """Every request of the launch (warmup included) sent a prompt no other request sent."""
        sent = list(self.warmup.get("prompt_sha256") or [])
        sent += [r.get("prompt_sha256") for s in self.sections + self.search_sections for r in s["records"]]
        if None in sent:
            raise InvalidResult("a request record carries no prompt_sha256")
        if len(set(sent)) != len(sent):
            twice = next(h for h in sent if sent.count(h) > 1)
            raise InvalidResult(f"prompt {twice[:12]} was sent {sent.count(twice)} times on one server without "
                                f"workload.reuse_prompts: its later answers may come from the server's caches")

    @property
    def search_sections(self) -> list[dict]:
        return (self.search or {}).get("sections") or []

    def best_search_step(self) -> dict | None:
        """The section document of the highest-rate search step that met the objective; None when
        none did (or there was no search). The one reading of "best" that the check and the
        summary share."""
        met = [doc for step, doc in zip((self.search or {}).get("steps") or [], self.search_sections) if step["meets"]]
        return max(met, key=lambda doc: doc["request_rate"]) if met else None

    def _validate_search(self) -> None:
        """The goodput search is what its steps measured: each step a whole section at its rate,
        its verdict that of its p99s against the objective, the sustained rate the highest that met
        it, the goodput that step's throughput. A search the spec did not ask for is refused too."""
        objective = self.spec.get("objective")
        if (self.search is None) != (objective is None):
            raise InvalidResult("the result's goodput search does not match the spec's objective")
        if objective is None:
            return
        bound = Objective(**objective)
        if self.search.get("objective") != objective:
            raise InvalidResult("the search ran under another objective than the spec's")
        shape = next(s for s in self.spec["sections"] if s["name"] == objective["section"])
        steps, docs = self.search.get("steps") or [], self.search_sections
        if not steps or len(steps) != len(docs) or len(steps) > bound.max_steps:
            raise InvalidResult(f"search: {len(steps)} steps, {len(docs)} step sections (at most {bound.max_steps})")
        for step, doc in zip(steps, docs):
            _validate_section({**shape, "concurrency": shape["requests"], "request_rate": step["rate"]}, doc, 1)
            figures = (doc["ttft_s"]["p99"], doc["tpot_s"]["p99"])
            if doc.get("request_rate") != step["rate"] or (step["ttft_p99_s"], step["tpot_p99_s"]) != figures:
                raise InvalidResult(f"search step {step['step']}: its figures are not those of its requests")
            if step["meets"] != bound.met_by(*figures):
                raise InvalidResult(f"search step {step['step']}: marked {'met' if step['meets'] else 'missed'}, "
                                    f"its p99s say otherwise under {bound.text()}")
        best = self.best_search_step()
        if self.search.get("sustained_rate_rps") != (best["request_rate"] if best else None) or \
                self.search.get("goodput_tok_s") != (best["output_tok_s"] if best else None):
            raise InvalidResult("search: its sustained rate or goodput is not that of its highest step that met "
                                "the objective")

    # --- what aggregation reads ----------------------------------------------------------------
    def summary_rows(self) -> list[dict]:
        """One row per section and load, then the goodput search's (load "slo"): the columns of
        results/summary.csv this result fills. The search's row carries the figures of its
        highest step within the objective (its output tok/s is the goodput); when no step met
        it, the row has no figures: not a zero."""
        rows = [{"section": s["name"], "load": s["load"], **_metrics(s)} for s in self.sections]
        if self.search is not None:
            best = self.best_search_step()
            rows.append({"section": self.search["objective"]["section"], "load": SLO,
                         **(_metrics(best) if best else {}), "sustained_rate_rps": self.search["sustained_rate_rps"],
                         "goodput_tok_s": self.search["goodput_tok_s"], "search_steps": len(self.search["steps"]),
                         "search_converged": self.search["converged"]})
        return rows

    def repeat_rates(self) -> dict[tuple[str, str], list[float]]:
        """Each section's repeats' output tok/s, by (section, load), in the order they ran (the
        verdict's units where a configuration had one launch)."""
        return {(s["name"], s["load"]): list(s.get("output_tok_s_repeats") or []) for s in self.sections}

    def prompt_rates(self) -> dict[tuple[str, str], list[tuple[str, float]]]:
        """Each section's requests as (prompt identity, output tokens over the request's time from
        send to last token), by (section, load): the paired verdict's units (analysis/variance.py).
        Records without an identity (schema version 2 and older) give none."""
        return {(s["name"], s["load"]): [(r["prompt_sha256"], r["output_tokens"] / r["e2e_s"]) for r in s["records"]
                                         if r.get("prompt_sha256") and r.get("e2e_s")]
                for s in self.sections}

    def comparability(self) -> dict[str, str]:
        """What must be equal for two results to share one summary (as pyperf refuses to mix)."""
        hw = self.hardware or {}
        gpus = ",".join(sorted({g.get("name", "?") for g in hw.get("gpus", [])}))
        return {
            "study": self.spec.get("study", "?"),
            "prompts": f"{self.prompts.get('source')}" + {None: " (re-sent, unknown)", True: " (re-sent on purpose)",
                                                          False: ""}.get(self.prompts.get("reused"), ""),
            "model": self.model.get("sha256") or self.model.get("hub_id") or self.model.get("path", "?"),
            "server version": str(self.server.get("version")),
            "host class": f"{self.host.get('machine')} / {hw.get('cpu_model', '?')} x{hw.get('logical_cores', '?')}"
                          + (f" / {gpus}" if gpus else ""),
        }


def _validate_section(spec_section: dict, section: dict, repeats: int) -> None:
    name = section["name"]
    records = section.get("records") or []
    expected = spec_section["requests"] * repeats
    if len(records) != expected or section.get("requests") != expected:
        raise InvalidResult(f"section {name}: {len(records)} records, {expected} requested")
    for rec in records:
        if rec["output_tokens"] != spec_section["output_tokens"]:
            raise InvalidResult(f"section {name}: a request produced {rec['output_tokens']} tokens")
    total = sum(r["output_tokens"] for r in records)
    if section.get("output_tokens") != total or total <= 0:
        raise InvalidResult(f"section {name}: output_tokens {section.get('output_tokens')} != records' {total}")
    rate = section.get("output_tok_s")
    if not (isinstance(rate, (int, float)) and rate > 0 and section.get("wall_s", 0) > 0):
        raise InvalidResult(f"section {name}: throughput {rate!r} is not a positive number")


# The summary's metric columns, declared once: column -> where in a result's section it is read.
# aggregate.summarize lays the table out in this order, after the key columns.
METRICS: dict[str, tuple[str, ...]] = {
    "requests": ("requests",), "repeats": ("repeats",), "output_tokens": ("output_tokens",), "wall_s": ("wall_s",),
    "output_tok_s": ("output_tok_s",), "output_tok_s_min": ("output_tok_s_min",),
    "output_tok_s_max": ("output_tok_s_max",), "request_s": ("request_s",),
    "ttft_p50_s": ("ttft_s", "p50"), "ttft_p90_s": ("ttft_s", "p90"), "ttft_p99_s": ("ttft_s", "p99"),
    "tpot_p50_s": ("tpot_s", "p50"), "tpot_p99_s": ("tpot_s", "p99"),
    "itl_p50_s": ("itl_s", "p50"), "itl_p99_s": ("itl_s", "p99"),
    "e2e_p50_s": ("e2e_s", "p50"), "e2e_p99_s": ("e2e_s", "p99"), "schedule_lag_p99_s": ("schedule_lag_s", "p99"),
    "decode_tok_s_mean": ("decode_tok_s", "mean"), "decode_tok_s_p50": ("decode_tok_s", "p50"),
    "decode_tok_s_min": ("decode_tok_s", "min"), "decode_tok_s_max": ("decode_tok_s", "max"),
    "draft_acceptance_rate": ("draft_acceptance_rate",), "acceptance_length": ("acceptance_length",),
}


# Energy per token (measure/energy.py), from each section's ``energy``: empty where no GPU's energy
# was read (a CPU host, a result from before energy was), never 0. ``energy_source`` says whether the
# GPUs' energy counter or their power readings gave it.
ENERGY_COLUMNS = ("j_per_output_token", "j_per_output_token_above_idle", "j_per_token", "output_tokens_per_j")

# How many requests were in flight (measure/in_flight.py): the client's count, throughput x mean
# latency, and the batch the server says it ran; empty where a result predates them or the server
# reports no such count. A draft schedule per load reads the server's (analysis/schedule.py).
IN_FLIGHT_COLUMNS = ("in_flight_client", "server_batch")

# The goodput search's columns, filled in its row (load "slo") alone.
SEARCH_COLUMNS = ("sustained_rate_rps", "goodput_tok_s", "search_steps", "search_converged")


def _metrics(section: dict) -> dict:
    out = {}
    for column, path in METRICS.items():
        value = section
        for key in path:
            value = value[key]
        out[column] = value
    spent = section.get("energy") or {}
    out.update({column: spent.get(column) for column in ENERGY_COLUMNS}, energy_source=spent.get("source"))
    held = section.get("in_flight") or {}
    out.update(in_flight_client=held.get("client"), server_batch=held.get("server"))
    return out


def _load_of(section: dict) -> str:
    return load_label(section.get("concurrency", 1), section.get("request_rate"))
