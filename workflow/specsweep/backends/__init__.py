"""The servers specsweep drives, one module each; ``get(name)`` is the only lookup."""

from __future__ import annotations

from ..errors import ConfigError
from . import llama_server, sglang, vllm
from .base import Backend, Facts, Final

BACKENDS: dict[str, Backend] = {b.name: b for b in (llama_server.BACKEND, sglang.BACKEND, vllm.BACKEND)}

__all__ = ["BACKENDS", "Backend", "Facts", "Final", "get"]


def get(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None
