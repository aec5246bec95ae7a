"""A backend kept outside the package, as a lab's own server would be: this module, registered by
$SPECSWEEP_BACKENDS alone (servers/backends/__init__.py), and no other file of specsweep's
(tests/workflow/test_backend_plugin.py plans, provisions and measures a study with it).

It speaks llama-server's dialect (it is a subclass), and its embedded server is the fault server
(tests/doubles/fault_server.py, llama-server's API). Its two targets show what provisioning takes
of a backend: a server, and a model made from the server's manifest (as vLLM's tiny model is).
"""

from __future__ import annotations

import sys
from pathlib import Path

from specsweep.cache import cache_dir
from specsweep.errors import ConfigError
from specsweep.servers.backends import Provision
from specsweep.servers.backends.llama_server import LlamaServer

FAULT_SERVER = Path(__file__).resolve().with_name("fault_server.py")


class ToyServer(LlamaServer):
    name = "toy-server"
    source = "tests/doubles/fault_server.py (llama-server's API)"
    command = ("{binary}", str(FAULT_SERVER), "--port", "{port}", "--token-delay", "0.002")
    speculative_args = ("--budget", "{budget}")
    embedded = {"binary": "toy-python", "model": "toy-weights"}
    tools = ()
    provision_pins = {}
    provision_needs = {"toy-weights": ("toy-python",)}
    provision_options = {}

    def provision(self, target: str, request: Provision) -> dict:
        if target == "toy-python":
            return {"binary": sys.executable, "made_by": self.name}
        # Beside its manifest where the rule makes it; in the cache for `specsweep provision study`.
        weights = (request.out.parent if request.out else cache_dir() / "toy") / "toy-weights.gguf"
        weights.parent.mkdir(parents=True, exist_ok=True)
        weights.write_bytes(b"toy weights: the fault server never reads them")
        return {"model": str(weights), "made_with": request.needs["toy-python"]["binary"]}

    def check_manifest(self, kind: str, manifest: dict) -> None:
        if kind == "binary" and manifest.get("made_by") != self.name:
            raise ConfigError(f"{manifest.get('binary')} was not provisioned by {self.name}")


BACKEND = ToyServer()
