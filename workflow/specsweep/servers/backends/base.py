"""What every backend says about its server, and the shape of what it reads from one.

A backend is data plus small functions: its default launch template, its health route, how one
greedy streaming request looks and how its answer counts tokens, how to tokenize, where version
and limits are reported, how acceptance is read, which log lines mean which failure. The runner,
client and metrics know only this interface; a new server is one new module and a test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import requests

from specsweep.errors import ConfigError, InvalidResponse, SettingNotApplied

if TYPE_CHECKING:  # only for annotations: nothing of these is needed when a backend runs
    from specsweep.cache import Artifact
    from specsweep.records.request import RequestRecord
    from specsweep.spec import LaunchSpec

CTX_HEADROOM = 16  # tokens of slack above prompt + output + drafts in flight


@dataclass(frozen=True)
class Final:
    """What the server's own counters say one finished request did."""

    output_tokens: int
    prompt_tokens: int
    draft_tokens: int = 0
    draft_accepted: int = 0
    verify_steps: int | None = None  # forward passes that verified drafts (SGLang's spec_verify_ct)
    server_tok_s: float | None = None


@dataclass(frozen=True)
class Facts:
    """What the running server reports about itself, recorded in every result."""

    version: str = "unknown"
    max_context: int | None = None  # tokens one request may use (a llama-server slot's context)
    build_info: str | None = None
    total_slots: int | None = None
    detail: dict = field(default_factory=dict)
    unread: str = ""  # why the route holding the limits could not be read ("/props answered 404")


@dataclass(frozen=True)
class Provision:
    """One provisioning target's request: the study's pins (``provision:``), the manifests of the
    targets it is made from by name, and the target's own options (llama-server: a local source,
    a CUDA build). ``out`` is where its manifest goes (None: only into the cache); ``log_path``
    takes a build's output."""

    pins: dict
    log_path: Path
    out: Path | None = None
    needs: dict[str, dict] = field(default_factory=dict)
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Preflight:
    """What the checks before the first section could test against the running server, and what
    they could not, each with why: a check whose facts were not read never counts as passed."""

    checked: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()

    def __add__(self, other: Preflight) -> Preflight:
        return Preflight(self.checked + other.checked, self.unchecked + other.unchecked)


class Backend:
    """Defaults and wire format of one server. Subclasses set the data and override the functions."""

    name: str = ""
    source: str = ""  # where these facts were checked, for the reader of a module
    binary: str = ""  # what {binary} is when the study does not say
    command: tuple[str, ...] = ()
    speculative_args: tuple[str, ...] = ()
    # Provisioning (study/targets.py dispatches by target name; each makes results/provision/<target>.json):
    embedded: dict[str, str] = {}  # {"binary"|"model": target} when "embedded" is offered
    tools: tuple[str, ...] = ()  # further targets made only by hand (specsweep provision TARGET --out FILE)
    provision_pins: dict[str, tuple[str, ...]] = {}  # target -> the provision: pins it is made from
    provision_needs: dict[str, tuple[str, ...]] = {}  # target -> targets whose manifests it is made from
    provision_options: dict[str, tuple[str, ...]] = {}  # target -> the options it takes (Provision.options)
    no_embedded: str = ""  # why a backend offers no embedded server or model, for the refusal
    version_argv: tuple[str, ...] = ("--version",)  # after {binary}: prints the server's version (doctor)
    model_is_file: bool = False  # llama-server serves one GGUF file; the others load folders or hub ids
    context_field: str = "its context length"  # where facts() reads it, for "context not checked"
    preflight_reads: str = "nothing"  # what the checks before the first section read from the server (doctor)
    health_route: str = "/health"
    health_timeout_s: float = 2.0
    generate_route: str = ""
    token_counter: str | None = None  # Prometheus sample of generated tokens, checked per section
    signatures: tuple[tuple[str, str], ...] = ()  # (label, regex) of this server's own failure lines
    # What a budget B passed to one of this server's flags (or JSON keys) means: (flag, offset,
    # words): B + offset draft tokens a verification step, each checked against the cited source.
    budget_flags: tuple[tuple[str, int, str], ...] = ()
    # (flag, field of Facts.detail): a speculative setting the running server reports back. A
    # setting is only known to have taken effect when the server says so (SGLang's adaptive mode
    # once fell back to static steps in silence, sgl-project/sglang #23289); llama-server's /props
    # says "speculative.types": "none" even under --spec-type ngram-mod, so it reports none.
    applied_fields: tuple[tuple[str, str], ...] = ()
    # How this server's own counts give acceptance length (one definition for every backend:
    # mean tokens produced per verification step, the bonus token counted, the token each
    # request's prefill made left out), with the source that says what they count.
    acceptance_from: str = ""
    # How many requests the server ran at once (client concurrency is not the batch the server ran:
    # past its slots it queues). ``batch_gauge``: its running-request gauge, sampled through a section
    # (measure/in_flight.py); ``batch_totals``: cumulative counts read around it instead, exact over
    # the window. ``batch_from`` cites what the figure is and where the source says so.
    batch_gauge: str | None = None
    batch_from: str = ""

    def artifact(self, target: str, pins: dict) -> Artifact | None:
        """What one of this backend's targets takes from the package index, from the pins it is
        made from (``provision_pins``, the only ones it is handed); None where it takes nothing."""
        return None

    def provision(self, target: str, request: Provision) -> dict | None:
        """Obtain (or find cached) one of this backend's targets; its manifest, or None where the
        target wrote its own output at ``request.out`` (an archive)."""
        raise ConfigError(f"{self.name} has no embedded server or model: {self.no_embedded}")

    def check_manifest(self, kind: str, manifest: dict) -> None:
        """Refuse a provisioned ``kind`` ("binary"|"model") this machine cannot use (raise ConfigError),
        before the server starts; nothing to check by default."""

    # --- launch -------------------------------------------------------------------------------
    def ctx_size(self, spec: LaunchSpec) -> int:
        """{ctx_size}: room for the longest request plus the drafts in flight."""
        return spec.context + spec.max_output_tokens + spec.budget + CTX_HEADROOM

    def check_launch(self, argv: list[str]) -> None:
        """Refuse a launch command this server would run in a way one job cannot measure (raise ConfigError)."""

    def derived_ports(self, argv: list[str], port: int) -> tuple[int, ...]:
        """Ports the server opens at fixed places derived from its own port or flags, which the
        job's lease reserves beside {port} and {side_port} so that no concurrent job is handed
        them; () where it opens none (ports it picks free at run time cannot be reserved)."""
        return ()

    # --- one request --------------------------------------------------------------------------
    def request_body(self, prompt: list[int], n_predict: int) -> dict:
        raise NotImplementedError

    def tokens_so_far(self, event: dict) -> int | None:
        """The server's running count of generated tokens in a stream event, if it carries one."""
        raise NotImplementedError

    def is_final(self, event: dict) -> bool:
        raise NotImplementedError

    def final(self, event: dict, *, n_predict: int, prompt_len: int) -> Final:
        """Validate the final event against the request; raise InvalidResponse if it disagrees."""
        raise NotImplementedError

    # --- prompts, facts -----------------------------------------------------------------------
    def tokenize(self, base_url: str, text: str, *, headers: dict[str, str] | None = None) -> list[int]:
        """Token ids of a text as the server counts them (OpenAI-style /tokenize by default)."""
        doc = post_json(f"{base_url}/tokenize", {"prompt": text, "add_special_tokens": False}, headers=headers)
        return token_list(doc.get("tokens"), "/tokenize")

    def facts(self, base_url: str, spec: LaunchSpec, *, headers: dict[str, str] | None = None) -> Facts:
        return Facts()

    def check_context(self, spec: LaunchSpec, facts: Facts) -> Preflight:
        """The running server must give one request room for the longest prompt + output: refused
        (ConfigError) where it does not, recorded as unchecked where it did not say."""
        return context_check(facts.max_context, spec.context + spec.max_output_tokens, facts.unread,
                             f"{self.name} reports a context of {{limit}} tokens per request, the longest request "
                             f"needs {{need}}; raise {{{{ctx_size}}}}'s flag in server.command or lower grid.context",
                             field=self.context_field)

    def logged_settings(self, log: str) -> dict:
        """Settings the server states in its own log as it starts (``log``: this launch's lines),
        for Facts.detail beside what its routes report; none by default."""
        return {}

    def check_applied(self, argv: list[str], facts: Facts) -> Preflight:
        """Each setting of ``argv`` the server reports (applied_fields) must be the one asked for:
        SettingNotApplied where it is not; unchecked where the server did not say."""
        checked, unchecked = [], []
        for flag, key in self.applied_fields:
            if flag not in argv[:-1]:
                continue
            asked, told = argv[argv.index(flag) + 1], facts.detail.get(key)
            if told is None:
                unchecked.append(f"{key}: not reported, so {flag} {asked} is not known to have taken effect")
            elif str(told) != asked:
                raise SettingNotApplied(f"{flag} {asked} was asked for, the server reports {key} = {told}")
            else:
                checked.append(f"{key}: {told}, as {flag} asked")
        return Preflight(tuple(checked), tuple(unchecked))

    def budget_meaning(self, spec: LaunchSpec) -> dict:
        """What this configuration's budget meant on this server: the flag (or JSON key) it went
        to, the draft tokens a verification step that makes, and in words. The same number is a
        chain length on llama-server and vLLM, one more than the drafts on SGLang's NGRAM/EAGLE
        (the root counts), and tree nodes on DDTree: two backends' budgets are compared by this."""
        if spec.budget == 0:
            return {"flag": None, "drafts_per_step": 0, "means": "no speculation"}
        return {**self._budget_flag_meaning(spec), "acceptance": self.acceptance_from}

    def _budget_flag_meaning(self, spec: LaunchSpec) -> dict:
        flag = budget_flag(spec.speculative_args)
        known = next(((offset, words) for name, offset, words in self.budget_flags if name == flag), None)
        if known is None:
            return {"flag": flag, "drafts_per_step": None,
                    "means": f"not known to specsweep for {flag!r} on {self.name}: see the server's documentation"}
        offset, words = known
        return {"flag": flag, "drafts_per_step": spec.budget + offset, "means": words}

    # --- a section's speculation -------------------------------------------------------------
    def drafts(self, records: list[RequestRecord], delta: dict[str, float]) -> tuple[int, int]:
        """(draft tokens proposed, accepted) over a section; per request by default."""
        return sum(r.draft_tokens for r in records), sum(r.draft_accepted for r in records)

    def acceptance_length(self, records: list[RequestRecord], delta: dict[str, float]) -> float | None:
        """Mean tokens produced per verification step over this section alone, the bonus token
        counted and the token each request's prefill made excluded (one definition for every
        backend, derived as ``acceptance_from`` says); None where no step verified a draft,
        never a near relative (a lifetime average, tokens over all steps)."""
        raise NotImplementedError

    # --- the batch it ran ----------------------------------------------------------------------
    def batch_totals(self, reading: dict[str, float]) -> dict[str, float]:
        """Cumulative counts that give the mean batch over a window by their deltas (batch()), as
        ``*_total`` samples beside the server's own in a /metrics reading; none by default."""
        return {}

    def batch(self, delta: dict[str, float], samples: list[float]) -> float | None:
        """The mean number of requests the server ran at once over a section: from the deltas of
        ``batch_totals`` where the server keeps such counts, else the mean of the gauge's samples."""
        return sum(samples) / len(samples) if samples else None


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value given to a flag as ``--flag value`` or ``--flag=value`` (the last one wins, as
    argparse has it); None where the command does not give it."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def budget_flag(args) -> str | None:
    """The flag right before the {budget} placeholder, or the JSON key it is the value of."""
    for i, arg in enumerate(args):
        if "{budget}" not in arg:
            continue
        if arg.strip() == "{budget}":
            return args[i - 1] if i > 0 else None
        key = re.search(r'"(\w+)"\s*:\s*\{budget\}', arg)
        return key.group(1) if key else arg.split("=", 1)[0]
    return None


def counters_acceptance(delta: dict[str, float], drafts: str, accepted: str) -> float | None:
    """1 + accepted / drafts from counter deltas around one section (never a lifetime average)."""
    n = delta.get(drafts, 0.0)
    return 1.0 + delta.get(accepted, 0.0) / n if n > 0 else None


def post_json(url: str, body: dict, *, headers: dict[str, str] | None, timeout: float = 30.0) -> dict:
    resp = requests.post(url, json=body, timeout=timeout, headers=headers)
    if resp.status_code != 200:
        raise InvalidResponse(f"HTTP {resp.status_code} from {url.split('/', 3)[-1]}: {resp.text[:200]}")
    try:
        doc = resp.json()
    except ValueError as exc:
        raise InvalidResponse(f"{url}: answer is not JSON: {resp.text[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise InvalidResponse(f"{url}: answer is not a JSON object")
    return doc


def read_json(url: str, *, headers: dict[str, str] | None, timeout: float = 5.0) -> tuple[dict, str]:
    """(a JSON object from a GET, "") or ({}, why not: "/props answered 404"), for a check that
    must say what it could not read."""
    route = "/" + url.split("/", 3)[-1]
    try:
        resp = requests.get(url, timeout=timeout, headers=headers)
    except requests.RequestException as exc:
        return {}, f"{route} did not answer ({type(exc).__name__})"
    if resp.status_code != 200:
        return {}, f"{route} answered {resp.status_code}"
    try:
        doc = resp.json()
    except ValueError:
        return {}, f"{route} answered no JSON"
    return (doc, "") if isinstance(doc, dict) else ({}, f"{route} answered no JSON object")


def get_json(url: str, *, headers: dict[str, str] | None, timeout: float = 5.0) -> dict:
    """A JSON object from a GET, or {} when the route is missing or says something else."""
    return read_json(url, headers=headers, timeout=timeout)[0]


def context_check(limit, need: int, unread: str, refusal: str, *, what: str = "context",
                  field: str = "its context length") -> Preflight:
    """One limit the server reported, against what one request needs: ConfigError (``refusal``
    with {limit} and {need}) below it, checked at or above it, unchecked with why when unread."""
    if not isinstance(limit, int):
        return Preflight(unchecked=(f"{what} not checked: {unread or f'the server reports no {field}'}",))
    if limit < need:
        raise ConfigError(refusal.format(limit=limit, need=need))
    return Preflight(checked=(f"{what}: {limit} tokens, {need} needed",))


def token_list(tokens, where: str) -> list[int]:
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
        raise InvalidResponse(f"{where} returned no list of token ids")
    return tokens


def check_counts(server: str, *, produced, n_predict: int, evaluated, prompt_len: int, why: str = "") -> None:
    """The server must report exactly the requested work: every output token, every prompt token."""
    if not isinstance(produced, int):
        raise InvalidResponse(f"{server}: final event has no integer count of generated tokens")
    if produced != n_predict:
        raise InvalidResponse(f"server generated {produced} tokens, {n_predict} were requested with ignore_eos"
                              + (f" ({why})" if why else ""))
    if evaluated is not None and evaluated != prompt_len:
        raise InvalidResponse(f"server evaluated {evaluated} prompt tokens, {prompt_len} were sent")
