"""The servers specsweep drives, one module each; ``get(name)`` is the only lookup.

Every module of this package that defines ``BACKEND`` is a backend: adding a server is one new
module (and its test), nothing else. A backend kept outside the package (a lab's own server, a
test's) is a module on the Python path named in $SPECSWEEP_BACKENDS (comma-separated), loaded
the same way; Snakemake's jobs inherit the variable, so the whole pipeline sees it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

from specsweep.errors import ConfigError
from specsweep.servers.backends.base import Backend, Facts, Final, Preflight, Provision

__all__ = ["BACKENDS", "BACKENDS_ENV", "Backend", "Facts", "Final", "Preflight", "Provision", "get"]

BACKENDS_ENV = "SPECSWEEP_BACKENDS"


def _modules() -> list[str]:
    extra = [name.strip() for name in os.environ.get(BACKENDS_ENV, "").split(",") if name.strip()]
    return [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__)] + extra


def _discover() -> dict[str, Backend]:
    found = {}
    for module in _modules():
        try:
            backend = getattr(importlib.import_module(module), "BACKEND", None)
        except ImportError as exc:
            raise ConfigError(f"${BACKENDS_ENV} names {module!r}, which cannot be imported ({exc}); put its "
                              "folder on PYTHONPATH or correct the name") from None
        if isinstance(backend, Backend):
            found[backend.name] = backend
        elif not module.startswith(__name__):
            raise ConfigError(f"${BACKENDS_ENV} names {module!r}, which defines no BACKEND (a Backend instance)")
    return found


BACKENDS: dict[str, Backend] = _discover()


def get(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None
