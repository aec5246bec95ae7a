"""The answer as a person deploys it (analysis/deploy.py): the suite's shared real study
(conftest.shared_study, a keyed llama-server) wrote results/deploy/, and a script written there
starts the real llama-server exactly as the measured launch ran: the same argv, the same context
and slots as the server reported to the launch, at a port of the user's, with the key they set."""

from __future__ import annotations

import os
import subprocess
import time

import pandas as pd
import psutil
import pytest
import requests

from conftest import load
from specsweep.servers import probes, templates


def _ready(url: str, headers: dict, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        try:
            if requests.get(f"{url}/health", headers=headers, timeout=2).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    raise AssertionError("the deployed server never became ready")


@pytest.mark.e2e
def test_every_cell_is_in_the_deploy_document_and_its_scripts_are_there(shared_study):
    folder = shared_study.folder / "results"
    doc = load(folder / "deploy/deploy.json")
    best = pd.read_csv(folder / "best.csv", dtype={"best_set": str})
    assert doc["schema"] == "specsweep.deploy" and len(doc["cells"]) == len(best)
    for cell, row in zip(doc["cells"], best.to_dict("records")):
        assert cell["where"] == {k: row[k] for k in cell["where"]}
        assert cell["best_set"] == [int(b) for b in row["best_set"].split()]
        if row["verdict"] == "undecided":
            assert cell["budget"] is None and cell["script"] is None and cell["reason"].startswith("undecided")
        else:
            assert cell["budget"] == row["best_budget"] and cell["script"] == f"tp1-b{cell['budget']}-ctx64.sh"
        for script in cell["candidates"].values():
            assert os.access(folder / "deploy" / script, os.X_OK)
    answer = (folder / "report/answer.txt").read_text()
    assert "Deploy: " in answer and "results/deploy/deploy.json" in answer
    assert "results/deploy/deploy.json" in (folder / "report/front.rst").read_text()


@pytest.mark.e2e
def test_a_written_script_starts_the_real_server_as_the_launch_ran_it(shared_study):
    folder = shared_study.folder / "results"
    doc = load(folder / "deploy/deploy.json")
    name = "tp1-b2-ctx64"  # a budget > 0: the speculative flags must come along
    entry = doc["configurations"][name]
    recorded = load(shared_study.folder / entry["measured_in"])["server"]
    key, port = shared_study.secrets[0], probes.free_port()
    proc = subprocess.Popen(["sh", str(folder / "deploy" / entry["script"])], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PORT": str(port), "SPECSWEEP_TEST_API_KEY": key})
    try:
        headers = {"Authorization": f"Bearer {key}"}
        url = f"http://{probes.HOST}:{port}"
        _ready(url, headers, proc)
        # The script execs the server: the process started is the server, with the launch's argv
        # but for the port (the lease's then, the user's now) and the key (redacted in the record).
        argv = psutil.Process(proc.pid).cmdline()
        ran = templates.redact(argv)
        at = recorded["command"].index("--port") + 1
        assert ran[:at] + ran[at + 1:] == recorded["command"][:at] + recorded["command"][at + 1:]
        assert ran[at] == str(port) and "--spec-ngram-mod-n-max" in ran
        props = requests.get(f"{url}/props", headers=headers, timeout=10).json()
        assert props["default_generation_settings"]["n_ctx"] == recorded["max_context"]
        assert props["total_slots"] == recorded["total_slots"] and props["build_info"] == recorded["build_info"]
        assert requests.get(f"{url}/props", timeout=10).status_code == 401  # the key the user set is the one
    finally:
        proc.terminate()
        proc.wait(timeout=30)
