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
    # What a person does about it, said once here for the terminal and the failure table.
    advice = "see the message above"

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
    advice = "fix the study file or the command line as the message says, then run the same command again"


class ProvisionError(SpecsweepError):
    """Obtaining or building the embedded server or model failed."""

    failure_class = "provision"
    exit_code = 3
    advice = (
        "read the provisioning log under logs/provision/, fix its cause (network, checksum, compiler), then "
        "run the same command again"
    )


class ServerStartError(SpecsweepError):
    """The server process exited before it became ready (bad flag, missing model, ...)."""

    failure_class = "server-start"
    exit_code = 10
    advice = (
        "read the cause in the server log the record names; fix the command, its flags or the model, then run"
        " the same command again"
    )


class ServerNotReady(SpecsweepError):
    """The server stayed alive but never answered its health check within the timeout."""

    failure_class = "server-timeout"
    exit_code = 11
    advice = (
        "raise server.startup_timeout_s if the model loads slowly, else read the server log; run the same "
        "command again"
    )
    transient = True


class ServerDied(SpecsweepError):
    """The server process died after it became ready (warmup, a section, between sections)."""

    failure_class = "server-died"
    exit_code = 12
    advice = "read the cause in the record and the server log; run the same command again to retry"
    transient = True


class ServerHung(SpecsweepError):
    """The server stopped sending bytes for longer than the stall timeout."""

    failure_class = "server-hung"
    exit_code = 13
    advice = (
        "raise server.stall_timeout_s if the server is only slow, else read the server log; run the same "
        "command again"
    )
    transient = True


class InvalidResponse(SpecsweepError):
    """The server answered, but with something that is not a valid measurement."""

    failure_class = "invalid-response"
    exit_code = 14
    advice = (
        "the server answered with something that is not a measurement (see the record); check the server's "
        "version and flags"
    )


class SettingNotApplied(InvalidResponse):
    """The running server reports a speculative setting other than the one its command asked for."""

    failure_class = "setting-not-applied"
    exit_code = 30
    advice = ("read the server log for why it changed the setting (an adaptive mode that fell back, a value it "
              "rounds); set what the server accepts, or exclude the configuration")


class LoadNotHeld(InvalidResponse):
    """At a closed-loop level the server ran fewer requests at once than the client kept in flight
    (Little's law): it queued the rest, so the level measured a smaller batch than it names."""

    failure_class = "load-not-held"
    exit_code = 31
    advice = ("give the server as many slots as the level's concurrency (llama-server -np, vLLM --max-num-seqs, "
              "SGLang --max-running-requests), or lower the level")


class PromptReused(SpecsweepError):
    """A request re-sent a prompt its server had already seen: the server may have answered it
    from memory (n-gram pools, prefix caches), so the section is not a measurement."""

    failure_class = "prompt-reused"
    exit_code = 26
    advice = (
        "a bug in how prompts were handed out (or a hand-edited spec): report it; set workload.reuse_prompts: "
        "true only to measure caching on purpose"
    )


class ClientOverload(SpecsweepError):
    """The client could not keep its request schedule: it, not the server, was measured."""

    failure_class = "client-overload"
    exit_code = 17
    advice = (
        "lower the section's request rate or concurrency, or give the client a core of its own; run the same "
        "command again"
    )
    transient = True


class HostNotQuiet(SpecsweepError):
    """Something else used the machine (or the job's GPUs) during a section: not a result."""

    failure_class = "host-not-quiet"
    exit_code = 18
    advice = (
        "stop the processes the record names, or wait until the host is quiet, then run the same command "
        "again"
    )
    transient = True


class GpuThrottled(SpecsweepError):
    """A held GPU slowed its clocks for heat or power beyond the quiet-host guard's share of a
    section: its pace was the GPU's state (a previous job's heat, the chassis's power brake), not
    the configuration's."""

    failure_class = "gpu-throttled"
    exit_code = 28
    advice = (
        "let the GPU cool (nvidia-smi -q -d PERFORMANCE names what slowed it) and check its cooling and power, "
        "then run the same command again"
    )
    transient = True


class ResultRefused(SpecsweepError):
    """Aggregation found result files it cannot use (corrupt, another schema version): they were
    moved aside so that the next run measures those configurations again."""

    failure_class = "invalid-result"
    exit_code = 19
    advice = "run the same command again: the refused results are measured anew"
    transient = True


class IncomparableResults(SpecsweepError):
    """Results of different models, server versions, host classes or studies in one folder."""

    failure_class = "incomparable-results"
    exit_code = 23
    advice = (
        "move the results measured under other conditions out of the folder (they are measured again), or "
        "keep them as a study of their own"
    )


class InconsistentStudy(SpecsweepError):
    """The study folder cannot be archived as one study (missing, stale or mixed results)."""

    failure_class = "inconsistent-study"
    exit_code = 24
    advice = "run the main command until every configuration is measured or excluded, then archive"


class VerifyFailed(SpecsweepError):
    """An unpacked archive does not match its checksums (SHA256SUMS)."""

    failure_class = "verify-failed"
    exit_code = 25
    advice = "the study was changed or damaged after packing: get an intact copy of the archive"


class HostNotReady(SpecsweepError):
    """`specsweep doctor`: this host cannot run the study as it stands."""

    failure_class = "host-not-ready"
    exit_code = 27
    advice = "fix each line marked FAIL as it says, then run specsweep doctor again"


class RegressionFound(SpecsweepError):
    """`specsweep compare`: B is significantly slower than A beyond the threshold, or newly fails."""

    failure_class = "regression"
    exit_code = 20
    advice = "look at the regressions listed; rerun both studies with more repeats if the change is small"


class DeviceBusy(SpecsweepError):
    """Too few GPUs without another process's memory after `$SPECSWEEP_GPU_QUEUE_TIMEOUT_S` (1800 s)
    in the queue, or the GPUs it took still hold memory after `$SPECSWEEP_GPU_RELEASE_TIMEOUT_S`
    (120 s); the message names the processes (pid, name, user, MiB)."""

    failure_class = "device-busy"
    exit_code = 21
    advice = "free the GPUs the record names (another process holds their memory), then run the same command again"
    transient = True


class Excluded(SpecsweepError):
    """The configuration is excluded on the hardware it landed on (an exclusion by architecture)."""

    failure_class = "excluded-here"
    exit_code = 22
    advice = "nothing to do: the study excludes this configuration on this hardware"


class InferredToFail(SpecsweepError):
    """Not launched: a shorter context, every other axis equal, ran out of memory (infer_failures)."""

    failure_class = "inferred-oom"
    exit_code = 29
    advice = ("nothing was measured or started; to measure it anyway, name it in infer_failures.measure_anyway, "
              "or exclude the configuration that ran out of memory")


class PortConflict(SpecsweepError):
    """Another process already serves the port: benchmarking it would measure a stranger."""

    failure_class = "port-conflict"
    exit_code = 15
    advice = "run the same command again: another port is picked"
    transient = True


class InternalError(SpecsweepError):
    """A bug in specsweep itself; the record carries the traceback's last line."""

    failure_class = "internal"
    exit_code = 1
    advice = "a bug in specsweep: report it with the failure record (SPECSWEEP_DEBUG=1 shows the traceback)"


class ResultWriteError(SpecsweepError):
    """The result could not be written; no partial file is left behind."""

    failure_class = "result-write"
    exit_code = 16
    advice = "free disk space or fix the permissions of results/, then run the same command again"


class Interrupted(SpecsweepError):
    """SIGINT or SIGTERM arrived; the server tree was torn down. Exit code 128 + signal."""

    failure_class = "interrupted"
    exit_code = 130
    advice = "run the same command again to finish the study: only configurations without a result run"
    transient = True

    def __init__(self, signum: int, *, section: str | None = None):
        import signal

        super().__init__(f"interrupted by {signal.Signals(signum).name}", section=section)
        self.signum = signum
        self.exit_code = 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


def advice_for(failure_class: str) -> str:
    """The advice of a failure class by its name in records (e.g. 'server-died')."""
    pending = list(SpecsweepError.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.failure_class == failure_class:
            return cls.advice
        pending.extend(cls.__subclasses__())
    return SpecsweepError.advice


def classes() -> list[type[SpecsweepError]]:
    """Every failure class, by exit code."""
    found, todo = [], [SpecsweepError]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls is not SpecsweepError:
            found.append(cls)
    return sorted(found, key=lambda c: (c.exit_code, c.failure_class))


def failure_table() -> str:
    """The failure classes as the Markdown table docs/failures.md shows (a test keeps them equal):
    exit code, class, what happened (the class's docstring), retried, what to do (its advice)."""
    rows = ["| exit | class | what happened | retried | what to do |", "|---|---|---|---|---|"]
    for cls in classes():
        code = "130 / 143" if cls is Interrupted else str(cls.exit_code)
        what = " ".join((cls.__doc__ or "").split())
        rows.append(f"| {code} | `{cls.failure_class}` | {what} | {'yes' if cls.transient else 'no'} | {cls.advice} |")
    return "\n".join(rows) + "\n"

