"""The failure record of one attempt: its one owner, written and read only through ``Failure``.

A record says what a configuration did instead of producing a result: the failure class and its
exit code, whether it is transient (retried) or deterministic (refused on the retry), the reason,
the server's log signature and the lines that show it, where and when. Aggregation, the report,
the retry policy and the exclusion offer all read it through the fields below.

Schema history (``schema_version``):
  1 - as below; ``compute_capability`` (where it failed, for exclusions) was added without a
      version change and is None in records that lack it, and a record without ``transient`` is
      read as transient (never taken for deterministic).
  2 - the class ``noisy-host`` is called ``host-not-quiet`` (the quiet-host guard's one name); a
      version-1 record of that class is read as the new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from specsweep.records import migrations

SCHEMA = "specsweep.failure"
VERSION = 2


@dataclass
class Failure:
    name: str
    spec: dict
    attempt: int
    failure_class: str
    exit_code: int
    reason: str
    started_at: str
    failed_at: str
    transient: bool = True
    section: str | None = None
    signature: str | None = None
    server_exit: str | None = None
    evidence: list[str] = field(default_factory=list)
    server_log: str | None = None
    server_log_tail: str = ""
    compute_capability: str | None = None  # the GPUs' architecture where it failed, if any

    @classmethod
    def of(cls, error, *, name: str, spec: dict, started_at: str, failed_at: str, attempt: int,
           server_log: str | None, log_tail: str, compute_capability: str | None = None) -> Failure:
        """The record of a typed error (errors.SpecsweepError) raised by one attempt."""
        return cls(name=name, spec=spec, attempt=attempt, failure_class=error.failure_class,
                   exit_code=error.exit_code, transient=error.transient, reason=error.reason, section=error.section,
                   signature=error.signature, server_exit=error.exit_text, evidence=list(error.evidence or []),
                   server_log=server_log, server_log_tail=log_tail, started_at=started_at, failed_at=failed_at,
                   compute_capability=compute_capability)

    def to_json(self) -> dict:
        doc = {"schema": SCHEMA, "schema_version": VERSION}
        doc.update({f.name: getattr(self, f.name) for f in fields(self)})
        doc["class"] = doc.pop("failure_class")
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> Failure:
        """A record as written by any specsweep (see the schema history above)."""
        known = {f.name for f in fields(cls)}
        body = {k: v for k, v in doc.items() if k in known}
        body["failure_class"] = migrations.failure_class(doc.get("class"))  # a class renamed since
        body.setdefault("exit_code", 1)
        for key in ("name", "reason", "started_at", "failed_at"):
            body.setdefault(key, "")
        body.setdefault("spec", {})
        body.setdefault("attempt", 0)
        body["evidence"] = list(body.get("evidence") or [])
        body["server_log_tail"] = body.get("server_log_tail") or ""
        return cls(**body)

    @property
    def cause(self) -> str:
        """The line that shows the failure best: the first evidence line, else the reason."""
        return (self.evidence or [self.reason])[0]
