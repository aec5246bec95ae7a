"""A server added without touching specsweep: one module in tests/doubles/ (toy_backend.py) named
in $SPECSWEEP_BACKENDS is planned, provisioned through the one provisioning rule and measured by
the real workflow, as a built-in backend is."""

from __future__ import annotations

import json
import os
import re

from conftest import DOUBLES, SHARED_GUARD, finish, run_workflow

PLUGIN_ENV = {**os.environ, "SPECSWEEP_BACKENDS": "toy_backend",
              "PYTHONPATH": os.pathsep.join(filter(None, [str(DOUBLES), os.environ.get("PYTHONPATH")]))}


def toy_study() -> dict:
    return {
        "backend": "toy-server",
        "server": {"binary": "embedded", "startup_timeout_s": 10, "stall_timeout_s": 2},
        "model": {"path": "embedded"},
        "grid": {"budget": [0, 2], "tp": [1], "context": [16]},
        "quiet_host": SHARED_GUARD,  # mechanics, beside other tests (conftest.SHARED_GUARD)
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 1, "launches": 1,
                     "sections": [{"name": "short", "output_tokens": 8, "requests": 2}]},
    }


def test_a_backend_outside_the_package_is_planned_provisioned_and_measured(tmp_path):
    rc, plan = finish(run_workflow(tmp_path, toy_study(), "results/summary.csv", extra=("-n", "-p"),
                                   env=PLUGIN_ENV), timeout=300)
    assert rc == 0, plan[-3000:]
    assert sorted(re.findall(r"wildcards: target=(\S+)", plan)) == ["prompts-sharegpt", "toy-python", "toy-weights"]
    assert "provision toy-weights --pins '{}' --needs results/provision/toy-python.json" in plan
    assert re.search(r"launch_configuration\s+2\b", plan)
    assert not (tmp_path / "results").exists()  # planning wrote nothing

    rc, out = finish(run_workflow(tmp_path, toy_study(), "results/summary.csv", env=PLUGIN_ENV), timeout=600)
    assert rc == 0, out[-3000:]
    weights = json.loads((tmp_path / "results/provision/toy-weights.json").read_text())
    assert weights["made_with"] == json.loads((tmp_path / "results/provision/toy-python.json").read_text())["binary"]
    for name in ("tp1-b0-ctx16", "tp1-b2-ctx16"):
        result = json.loads((tmp_path / f"results/launches/{name}/launch1.json").read_text())
        assert result["spec"]["backend"] == "toy-server"
        assert result["spec"]["model_path"] == weights["model"]  # the provisioned model, resolved


def test_without_its_registration_the_study_is_refused_naming_the_known_backends(tmp_path):
    env = {k: v for k, v in PLUGIN_ENV.items() if k != "SPECSWEEP_BACKENDS"}
    rc, out = finish(run_workflow(tmp_path, toy_study(), "results/summary.csv", extra=("-n",), env=env), timeout=300)
    assert rc != 0
    assert "unknown backend 'toy-server'; known: llama-server, sglang, vllm" in out
