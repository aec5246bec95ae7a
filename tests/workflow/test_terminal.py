"""What a person sees on the terminal, read from a real one (tmux, capture-pane): a line per
configuration with what it measured, a failure's class and cause in one line, and at the end the
answer (the best budgets) and the report command, or the failure table with what to do."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import FAULT_SERVER, PYTHON_BIN, REPO, SHARED_GUARD

DONE = "specsweep-test-done"


def study(tmp_path: Path, fault: str = "none") -> dict:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"stand-in")
    return {
        "study": "terminal",
        "model": {"path": str(model)},
        "server": {"binary": sys.executable, "command": ["{binary}", FAULT_SERVER, "--port", "{port}"],
                   "speculative_args": ["--fault", fault, "--budget", "{budget}"], "stall_timeout_s": 2},
        "grid": {"budget": [0, 2], "tp": [1], "context": [16]},
        "quiet_host": SHARED_GUARD,  # mechanics, beside other tests (conftest.SHARED_GUARD)
        "retries": 0,
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 1, "sections": [
            {"name": "short", "output_tokens": 8, "requests": 2},
            {"name": "medium", "output_tokens": 8, "requests": 1}]},
    }


def screen(tmp_path: Path, doc: dict, timeout: float = 240) -> str:
    """Run the main command in a 150-column tmux window; return everything it showed."""
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(doc))
    sock = f"specsweep-test-{os.getpid()}"
    line = (f"cd {shlex.quote(str(tmp_path))} && PATH={shlex.quote(PYTHON_BIN)}:$PATH snakemake -s "
            f"{shlex.quote(str(REPO / 'Snakefile'))} --cores 1 results/summary.png --configfile study.yaml; "
            f"echo {DONE}-$?")
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new-session", "-d", "-x", "150", "-y", "50", "bash", "--norc"], check=True)
    try:
        subprocess.run([*tmux, "set-option", "-g", "history-limit", "20000"], check=True)
        subprocess.run([*tmux, "send-keys", line, "Enter"], check=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-"], capture_output=True, text=True,
                                   check=True).stdout
            if re.search(rf"^{DONE}-\d+", shown, re.M):
                return shown
            time.sleep(0.5)
        pytest.fail(f"the main command did not finish in {timeout} s; the screen:\n{shown}")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_a_successful_run_shows_each_measurement_then_the_answer_and_the_report_command(tmp_path):
    shown = screen(tmp_path, study(tmp_path))
    assert f"{DONE}-0" in shown, shown
    lines = {name: re.search(rf"^\[{name}\] measured: short [\d.]+ tok/s.*; medium [\d.]+ tok/s.*$", shown, re.M)
             for name in ("tp1-b0-ctx16", "tp1-b2-ctx16")}
    assert all(lines.values()), shown
    if lines["tp1-b0-ctx16"].start() < lines["tp1-b2-ctx16"].start():  # the baseline ran first: a speedup
        assert re.search(r"short [\d.]+ tok/s \([\d.]+x budget 0", lines["tp1-b2-ctx16"].group()), shown
    answer = shown[shown.index("Best draft budget per tp, context, section and load"):]
    # One launch each: the verdict names a budget (decided, or the smaller of a tie) or says it
    # cannot tell, and says that it rests on one launch's repeats.
    verdict = r"(decided|tied: 0 2|undecided: 0 2)$"
    assert re.search(r"^\s+1\s+16\s+short\s+c1\s+([02]|-)\s+[\d.]+\s+[\d.]+x\s+" + verdict, answer, re.M), answer
    assert re.search(r"^\s+1\s+16\s+medium\s+c1\s+([02]|-)\s.*" + verdict, answer, re.M), answer
    assert "rests on one launch's repeats" in answer
    assert "Without a result: none." in answer
    # Where the answer's server commands are: the named configurations' scripts, or (none named) why not.
    named = re.findall(r"^\s+1\s+16\s+\S+\s+c1\s+([02])\s", answer, re.M)
    deploy = re.search(r"^Deploy: (.*)$", answer, re.M)
    assert deploy, answer
    assert all(f"results/deploy/tp1-b{b}-ctx16.sh" in deploy[1] for b in named), answer
    assert named or deploy[1].startswith("no cell names one budget"), answer
    assert "Report: snakemake --report results/report.html" in answer


def test_a_failed_run_shows_the_failure_in_one_line_and_what_to_do(tmp_path):
    shown = screen(tmp_path, study(tmp_path, "die-at-request:3"))
    assert re.search(rf"^{DONE}-[1-9]", shown, re.M), shown
    assert re.search(r"^\[tp1-b2-ctx16\] FAILED \[server-died\] server died in section short: .*SIGKILL", shown,
                     re.M), shown
    assert "1 of 2 configurations have no valid result:" in shown
    assert "Next, for server-died (tp1-b2-ctx16): read the cause in the record" in shown
    assert "Best draft budget" not in shown  # no answer from an incomplete study
    assert "paste into the study's exclude" not in shown  # a SIGKILL is no reproducing signature
