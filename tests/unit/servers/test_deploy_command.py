"""The deploy script of a configuration (servers/command.py deployable): run by sh, it starts the
very argv and environment the launch rendered, with the launch's own address, port and scratch
folder taken from the environment, and no secret written into it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from specsweep import study
from specsweep.servers import command

# Stands in for the server binary: writes the argv and environment it was started with.
RECORDER = """#!{python}
import json, os, sys
json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, open(os.environ["RECORD_TO"], "w"))
"""


def _spec(tmp_path: Path, **changes):
    base = study.expand_grid(study.validate_study({"grid": {"budget": [4], "tp": [1], "context": [128]}}))[0]
    binary = tmp_path / "bin dir" / "server"  # a space: the script must keep it one argument
    binary.parent.mkdir()
    binary.write_text(RECORDER.format(python=sys.executable))
    binary.chmod(0o755)
    return dataclasses.replace(base, binary=str(binary), model_path=str(tmp_path / "model.gguf"), **changes)


def _run(script: str, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    path = tmp_path / "deploy.sh"
    path.write_text(script)
    clean = {k: v for k, v in os.environ.items() if k not in ("PORT", "HOST", "SCRATCH", "SIDE_PORT")}
    return subprocess.run(["sh", str(path)], env={**clean, "RECORD_TO": str(tmp_path / "seen.json"), **env},
                          capture_output=True, text=True, timeout=30)


def test_the_script_starts_the_measured_argv_with_its_port_from_the_environment(tmp_path):
    spec = _spec(tmp_path, env={"OMP_NUM_THREADS": "{threads}", "MY_PORT_NOTE": "at {port}"})
    deploy = command.deployable(spec)
    done = _run(deploy.script(["a comment"]), tmp_path, PORT="9123")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == command.server_argv(spec, 9123)[1:]  # the very launch command, at the given port
    assert "--spec-ngram-mod-n-max" in seen["argv"] and "4" in seen["argv"]
    assert seen["env"]["OMP_NUM_THREADS"] == str(spec.threads) and seen["env"]["MY_PORT_NOTE"] == "at 9123"
    assert deploy.variables == {"HOST": "127.0.0.1", "PORT": "8080"}
    assert "${PORT}" in deploy.argv and deploy.to_json()["env"]["MY_PORT_NOTE"] == "at ${PORT}"

    done = _run(deploy.script([]), tmp_path)  # nothing set: the defaults
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "seen.json").read_text())["argv"] == command.server_argv(spec, 8080)[1:]


def test_budget_0_starts_without_the_speculative_flags(tmp_path):
    spec = _spec(tmp_path, budget=0)
    assert _run(command.deployable(spec).script([]), tmp_path, PORT="9000").returncode == 0
    seen = json.loads((tmp_path / "seen.json").read_text())["argv"]
    assert seen == command.server_argv(spec, 9000)[1:] and not any(a.startswith("--spec") for a in seen)


def test_no_secret_is_written_and_the_script_asks_for_each(tmp_path):
    spec = _spec(tmp_path, budget=0, api_key_env="MY_SERVER_KEY", env={"HF_TOKEN": "hf-literal-value"})
    spec = dataclasses.replace(spec, command=(*spec.command, "--api-key", "{api_key}"))
    deploy = command.deployable(spec)
    script = deploy.script([])
    assert "hf-literal-value" not in script and "hf-literal-value" not in json.dumps(deploy.to_json())
    done = _run(script, tmp_path)
    assert done.returncode != 0 and "MY_SERVER_KEY" in done.stderr and not (tmp_path / "seen.json").exists()
    done = _run(script, tmp_path, MY_SERVER_KEY="sk-live", HF_TOKEN="hf-live")
    assert done.returncode == 0, done.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"][-2:] == ["--api-key", "sk-live"] and seen["env"]["HF_TOKEN"] == "hf-live"


def test_the_devices_a_launch_held_are_the_default_and_a_redacted_value_is_never_one(tmp_path):
    spec = _spec(tmp_path)
    deploy = command.deployable(spec, {"CUDA_VISIBLE_DEVICES": "2,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                       "SOME_TOKEN": "<redacted>"})
    assert deploy.variables["CUDA_VISIBLE_DEVICES"] == "2,3" and "SOME_TOKEN" not in deploy.env
    assert _run(deploy.script([]), tmp_path, CUDA_VISIBLE_DEVICES="5").returncode == 0
    env = json.loads((tmp_path / "seen.json").read_text())["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_literal_dollar_or_quote_in_the_study_reaches_the_server_unchanged(tmp_path):
    spec = _spec(tmp_path, budget=0)
    spec = dataclasses.replace(spec, command=(*spec.command, "--chat-template", "$HOME ${{x}} 'q' \"d\" `x`"))
    assert _run(command.deployable(spec).script([]), tmp_path).returncode == 0
    assert json.loads((tmp_path / "seen.json").read_text())["argv"][-1] == "$HOME ${x} 'q' \"d\" `x`"
