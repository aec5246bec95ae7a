"""Typed failures: one exception class per failure class, one exit code each.

Inside the package every failure is raised as a subclass of ``SpecsweepError``; only the CLI
edge turns it into an exit code and a failure record. Snakemake sees a nonzero exit, removes
the (never written) output, and the next run retries exactly that configuration.
"""

from __future__ import annotations


class SpecsweepError(Exception):
    """Base class: ``failure_class`` names the class in records, ``exit_code`` at the CLI."""

    failure_class = "error"
    exit_code = 1
    # A deterministic failure happens again on retry (bad flag, preflight); a transient one
    # (a crash under load, a hang) may not. Retry policy reads this.
    transient = False

    def __init__(
        self,
        reason: str,
        *,
        section: str | None = None,
        evidence: list[str] | None = None,
        signature: str | None = None,
        exit_text: str | None = None,
    ):
        super().__init__(reason)
        self.reason = reason
        self.section = section  # the workload section reached, filled in by the runner
        self.evidence = list(evidence or [])  # matching server log lines
        self.signature = signature  # known failure signature label, see signatures.py
        self.exit_text = exit_text  # how the server process ended, if it did


class ConfigError(SpecsweepError):
    """The study configuration or a command-line argument is wrong; nothing was started."""

    failure_class = "config"
    exit_code = 2


class ProvisionError(SpecsweepError):
    """Obtaining or building the embedded server or model failed."""

    failure_class = "provision"
    exit_code = 3


class ServerStartError(SpecsweepError):
    """The server process exited before it became ready (bad flag, missing model, ...)."""

    failure_class = "server-start"
    exit_code = 10


class ServerNotReady(SpecsweepError):
    """The server stayed alive but never answered its health check within the timeout."""

    failure_class = "server-timeout"
    exit_code = 11
    transient = True


class ServerDied(SpecsweepError):
    """The server process died after it became ready (warmup, a section, between sections)."""

    failure_class = "server-died"
    exit_code = 12
    transient = True


class ServerHung(SpecsweepError):
    """The server stopped sending bytes for longer than the stall timeout."""

    failure_class = "server-hung"
    exit_code = 13
    transient = True


class InvalidResponse(SpecsweepError):
    """The server answered, but with something that is not a valid measurement."""

    failure_class = "invalid-response"
    exit_code = 14


class ClientOverload(SpecsweepError):
    """The client could not keep its request schedule: it, not the server, was measured."""

    failure_class = "client-overload"
    exit_code = 17
    transient = True


class NoisyHost(SpecsweepError):
    """Something else used the machine (or the job's GPUs) during a section: not a result."""

    failure_class = "noisy-host"
    exit_code = 18
    transient = True


class ResultRefused(SpecsweepError):
    """Aggregation found result files it cannot use (corrupt, another schema version): they were
    moved aside so that the next run measures those configurations again."""

    failure_class = "invalid-result"
    exit_code = 19
    transient = True


class IncomparableResults(SpecsweepError):
    """Results of different models, server versions, host classes or studies in one folder."""

    failure_class = "incomparable-results"
    exit_code = 23


class InconsistentStudy(SpecsweepError):
    """The study folder cannot be archived as one study (missing, stale or mixed results)."""

    failure_class = "inconsistent-study"
    exit_code = 24


class VerifyFailed(SpecsweepError):
    """An unpacked archive does not match its checksum manifest."""

    failure_class = "verify-failed"
    exit_code = 25


class RegressionFound(SpecsweepError):
    """`specsweep compare`: B is significantly slower than A beyond the threshold, or newly fails."""

    failure_class = "regression"
    exit_code = 20


class DeviceBusy(SpecsweepError):
    """The GPUs this job was given still hold another process's memory after the wait."""

    failure_class = "device-busy"
    exit_code = 21
    transient = True


class Excluded(SpecsweepError):
    """The configuration is excluded on the hardware it landed on (an exclusion by architecture)."""

    failure_class = "excluded-here"
    exit_code = 22


class PortConflict(SpecsweepError):
    """Another process already serves the port: benchmarking it would measure a stranger."""

    failure_class = "port-conflict"
    exit_code = 15
    transient = True


class InternalError(SpecsweepError):
    """A bug in specsweep itself; the record carries the traceback's last line."""

    failure_class = "internal"
    exit_code = 1


class ResultWriteError(SpecsweepError):
    """The result could not be written; no partial file is left behind."""

    failure_class = "result-write"
    exit_code = 16


class Interrupted(SpecsweepError):
    """SIGINT or SIGTERM arrived; the server tree was torn down. Exit code 128 + signal."""

    failure_class = "interrupted"
    exit_code = 130
    transient = True

    def __init__(self, signum: int, *, section: str | None = None):
        import signal

        super().__init__(f"interrupted by {signal.Signals(signum).name}", section=section)
        self.signum = signum
        self.exit_code = 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
