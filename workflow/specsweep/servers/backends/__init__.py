"""The servers specsweep drives, one module each; ``get(name)`` is the only lookup.

Every module of this package that defines ``BACKEND`` is a backend: adding a server is one new
module (and its test), nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil

from specsweep.errors import ConfigError
from specsweep.servers.backends.base import Backend, Facts, Final, Preflight

__all__ = ["BACKENDS", "Backend", "Facts", "Final", "Preflight", "get"]


def _discover() -> dict[str, Backend]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        backend = getattr(importlib.import_module(f"{__name__}.{info.name}"), "BACKEND", None)
        if isinstance(backend, Backend):
            found[backend.name] = backend
    return found


BACKENDS: dict[str, Backend] = _discover()


def get(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None
