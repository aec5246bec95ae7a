"""The server launch command: placeholders, rendering, and what must never be written or exposed.

One owner for three pieces of knowledge the study loader, the runner and every writer share:
which placeholders a template may use, which arguments carry secrets (redacted wherever
specsweep writes a command), and which arguments bind the server to an address.
"""

from __future__ import annotations

import ipaddress
import re
import string

from specsweep.errors import ConfigError

PLACEHOLDERS = ("binary", "model", "host", "port", "ctx_size", "slots", "threads", "tp", "budget", "api_key",
                "scratch", "side_port")
REDACTED = "<redacted>"
# A flag or variable whose last word names a credential: --api-key, --hf-token, HF_TOKEN=...
# Whole words only: --tokenizer, --num-speculative-tokens and --token-delay are not secrets.
SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"})
BIND_FLAGS = ("--host", "--bind", "--listen", "--address")


def placeholders(arg: str) -> list[str]:
    """The placeholder names in one template argument; a malformed brace is a ConfigError."""
    try:
        return [field for _, field, _, _ in string.Formatter().parse(arg) if field is not None]
    except ValueError as exc:
        raise ConfigError(f"template argument {arg!r}: {exc}; write a literal brace as {{{{ or }}}}") from exc


def check_template(key: str, template: list[str], axes: tuple[str, ...] = ()) -> None:
    """Every placeholder must be one specsweep fills in, or an axis of the study's grid; the
    message lists those it knows."""
    for arg in template:
        for name in placeholders(arg):
            if name not in PLACEHOLDERS and name not in axes:
                raise ConfigError(
                    f"{key}: unknown placeholder {{{name}}} in {arg!r}; known: "
                    + " ".join(f"{{{p}}}" for p in (*PLACEHOLDERS, *axes))
                    + f"; to sweep it, add it to the grid (grid: {{{name}: [...]}})"
                )


def uses(template: list[str], name: str) -> bool:
    return any(name in placeholders(arg) for arg in template)


def render(template: list[str], values: dict) -> list[str]:
    """The argv list (never a shell string) with every placeholder filled."""
    try:
        return [arg.format(**values) for arg in template]
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"server command template has an unknown placeholder: {exc}") from exc


def is_secret_name(name: str) -> bool:
    """True for --api-key, --hf-token, HF_TOKEN, DB_PASSWORD; False for --tokenizer, --token-delay.

    The last word decides: a name that ends in a credential word holds one.
    """
    words = re.split(r"[-_.]+", name.strip("-").lower())
    return words[-1] in SECRET_WORDS


def _flag_value_pairs(argv: list[str]):
    """(index of the value, flag name, value) for '--flag value', '--flag=value' and 'NAME=value'."""
    for i, arg in enumerate(argv):
        if arg.startswith("-") and "=" in arg:
            flag, _, value = arg.partition("=")
            yield i, flag, value
        elif arg.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            yield i + 1, arg, argv[i + 1]
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", arg):  # an `env NAME=value` wrapper
            name, _, value = arg.partition("=")
            yield i, name, value


def redact(argv: list[str], secrets: tuple[str, ...] = ()) -> list[str]:
    """argv with the value of every secret-looking flag or variable, and every known secret, hidden."""
    out = list(argv)
    for i, flag, _ in _flag_value_pairs(argv):
        if is_secret_name(flag):
            out[i] = f"{flag}={REDACTED}" if out[i].startswith(flag + "=") else REDACTED
    return [redact_text(arg, secrets) for arg in out]


def redact_env(env: dict[str, str], secrets: tuple[str, ...] = ()) -> dict[str, str]:
    """An environment as written anywhere: secret-named variables and known secrets hidden."""
    return {name: REDACTED if is_secret_name(name) else redact_text(value, secrets) for name, value in env.items()}


def redact_text(text: str, secrets: tuple[str, ...]) -> str:
    """A text with every known secret value replaced (for logs and error messages)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def check_no_literal_secret(key: str, template: list[str]) -> None:
    """A secret written into the study would land in Snakemake's params and logs: refuse it."""
    for _, flag, value in _flag_value_pairs(template):
        if is_secret_name(flag) and value and not placeholders(value):
            raise ConfigError(
                f"{key}: {flag} is given a literal value; keep secrets out of the study: set "
                f"server.api_key_env to the name of an environment variable holding it and pass "
                f"{flag} {{api_key}}"
            )


def check_bind(key: str, template: list[str], *, allowed: bool) -> None:
    """A server reachable from the network must be meant: only loopback unless the study says so."""
    if allowed:
        return
    for _, flag, value in _flag_value_pairs(template):
        if flag in BIND_FLAGS and not placeholders(value) and not _is_loopback(value):
            raise ConfigError(
                f"{key}: {flag} {value} exposes the server beyond this machine; use {flag} {{host}} "
                f"(loopback), or set server.allow_remote_bind: true if that is meant"
            )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: it may resolve anywhere
