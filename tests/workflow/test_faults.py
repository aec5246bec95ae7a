"""Every way a server can die, hang or lie, injected with tests/doubles/fault_server.py and run through
the real CLI: exit code per class, no result file, a failure record, no surviving process."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import FAULT_SERVER, NAME, fault_study, launch_cli, start_cli
from specsweep.errors import Interrupted, InvalidResponse
from specsweep.records import store
from specsweep.servers.probes import free_port
from specsweep.study.grid import expand_grid


def server_pid(stderr: str) -> int | None:
    found = re.search(r"server pid (\d+)", stderr)
    return int(found.group(1)) if found else None


def assert_clean_failure(tmp_path: Path, rc: int, err: str, *, code: int, cls: str, section=None, words=()):
    assert rc == code, err
    runs = tmp_path / "launches"
    assert not runs.exists() or not list(runs.iterdir())  # no result, no temp file
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert record is not None, err
    assert record["class"] == cls and record["exit_code"] == code
    assert record["section"] == section
    for word in words:
        assert word in record["reason"] + " ".join(record["evidence"]), record
    for key in ("spec", "attempt", "started_at", "failed_at", "server_log_tail"):
        assert key in record
    pid = server_pid(err)
    if pid is not None:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return record


CASES = [
    # fault, extra server settings, exit code, class, section, words in reason/evidence
    ("exit-at-startup", {}, 10, "server-start", "startup",
     ["server exited during startup: error: the argument has been removed"]),
    ("signature-at-startup", {}, 10, "server-start", "startup", ["illegal instruction was encountered"]),
    # Out of host memory at load: the cause from the log, not a bare "exited" (and no exclusion offered).
    ("oom-at-startup", {}, 10, "server-start", "startup",
     ["server exited during startup: terminate called after throwing an instance of 'std::bad_alloc'"]),
    ("never-ready", {"startup_timeout_s": 1.5}, 11, "server-timeout", "startup",
     ["server not ready after 1.5 s (health check answered HTTP 503", "Loading model", "listening on"]),
    # Health probes connect but get no answer: each must give up (health_timeout_s), or startup
    # would wait forever instead of its startup_timeout_s.
    ("stop-at-startup", {"startup_timeout_s": 1.5}, 11, "server-timeout", "startup",
     ["server not ready after 1.5 s (health check failed: ReadTimeout)"]),
    ("port-in-use-at-startup", {}, 15, "port-conflict", "startup",
     ["server exited during startup: main: couldn't bind HTTP server socket"]),
    ("die-at-request:1", {}, 12, "server-died", "warmup", ["killed by SIGKILL"]),
    ("die-at-request:4", {}, 12, "server-died", "medium", ["in section medium", "killed by SIGKILL"]),
    ("crash-at-request:4", {}, 12, "server-died", "medium",
     ["server died in section medium: RuntimeError: CUDA error: an illegal instruction was encountered"]),
    ("die-after-request:3", {}, 12, "server-died", "short", ["after section short"]),
    ("hang-at-request:4", {}, 13, "server-hung", "medium", ["stall timeout"]),
    ("short-at-request:2", {}, 14, "invalid-response", "short", ["generated 7 tokens, 8 were requested"]),
    ("error-at-request:2", {}, 14, "invalid-response", "short", ["error event", "injected failure"]),
    ("http500-at-request:2", {}, 14, "invalid-response", "short", ["HTTP 500"]),
    ("badjson-at-request:5", {}, 14, "invalid-response", "medium", ["malformed JSON"]),
    ("miscount-at-request:3", {}, 14, "invalid-response", "short",
     ["section short: server counted 17 generated tokens, responses say 16"]),
    ("metrics-gone-after-request:3", {}, 14, "invalid-response", "short",
     ["after section short: /metrics no longer reports llamacpp:tokens_predicted_total"]),
    ("uncounted-at-request:2", {}, 14, "invalid-response", "short",
     ["final event has no integer count of generated tokens"]),
    ("misevaluated-at-request:2", {}, 14, "invalid-response", "short",
     ["server evaluated 15 prompt tokens, 16 were sent"]),
    ("mispredicted-at-request:2", {}, 14, "invalid-response", "short",
     ["timings.predicted_n 9 != tokens_predicted 8"]),
    ("dying-health-after-request:3", {}, 12, "server-died", "short",
     ["server died after section short: exited with code 3"]),
    ("unhealthy-after-request:3", {}, 12, "server-died", "short",
     ["server unhealthy after section short: health check answered HTTP 503"]),
    ("drop-at-request:4", {}, 14, "invalid-response", "medium",
     # The chunked body ends before its last chunk, as a real server's dropped stream does.
     ["connection lost in section medium while the server stayed up", "Response ended prematurely"]),
    ("small-context", {}, 2, "config", None, ["slot context of 8 tokens, a request needs 25"]),
]


@pytest.mark.parametrize("fault, server, code, cls, section, words", CASES, ids=[c[0] for c in CASES])
def test_fault_is_caught_classified_and_leaves_nothing(tmp_path, model, fault, server, code, cls, section, words):
    rc, err = launch_cli(tmp_path, fault_study(model, fault, **server))
    record = assert_clean_failure(tmp_path, rc, err, code=code, cls=cls, section=section, words=words)
    assert f"FAILED [{cls}]" in err
    signature = {"signature-at-startup": "cuda-illegal-instruction", "crash-at-request": "cuda-illegal-instruction",
                 "port-in-use-at-startup": "port-in-use", "exit-at-startup": "bad-arguments",
                 "oom-at-startup": "host-oom"}
    assert record["signature"] == signature.get(fault.split(":")[0]), record
    if fault in signature and fault.endswith("-at-startup"):  # it exited: how, and the lines that say why
        how = "killed by SIGABRT" if fault == "oom-at-startup" else "exited with code 1"
        assert record["server_exit"] == how and record["evidence"], record
    log = (tmp_path / "server.log").read_text() if (tmp_path / "server.log").exists() else ""
    # A server still running at teardown is asked to stop (SIGTERM) before SIGKILL; a hung one is not.
    graceful = fault.split(":")[0] in GRACEFUL
    assert ("fault-server: SIGTERM, shutting down" in log) == graceful, log


# Faults after which the server still runs and answers signals when it is torn down.
GRACEFUL = {"never-ready", "stop-at-startup", "metrics-gone-after-request", "short-at-request", "uncounted-at-request",
            "misevaluated-at-request", "mispredicted-at-request",
            "error-at-request", "http500-at-request", "badjson-at-request", "small-context",
            "miscount-at-request", "unhealthy-after-request", "drop-at-request"}


def test_healthy_fault_server_gives_a_valid_result(tmp_path, model):
    rc, err = launch_cli(tmp_path, fault_study(model))
    assert rc == 0, err
    doc = store.read_result(tmp_path / "launches" / f"{NAME}.json").to_json()
    assert [s["output_tokens"] for s in doc["sections"]] == [16, 16, 8]
    assert not (tmp_path / "failures").exists()


def test_child_that_leaves_the_process_group_is_killed_too(tmp_path, model):
    rc, err = launch_cli(tmp_path, fault_study(model, "escaping-child"))
    assert rc == 0, err
    child = int(re.search(r"escaping child pid (\d+)", (tmp_path / "server.log").read_text()).group(1))
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def stubborn(study: dict) -> dict:
    """The study with a server that ignores SIGTERM, as one stuck in a GPU call does."""
    study["server"]["command"] = [*study["server"]["command"], "--ignore-sigterm"]
    return study


def test_a_server_and_child_that_ignore_sigterm_are_killed(tmp_path, model):
    rc, err = launch_cli(tmp_path, stubborn(fault_study(model, "escaping-child")))
    assert rc == 0, err
    log = (tmp_path / "server.log").read_text()
    child = int(re.search(r"escaping child pid (\d+)", log).group(1))
    for pid in (child, server_pid(err)):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert "SIGTERM, shutting down" not in log


def test_a_second_signal_during_teardown_changes_nothing(tmp_path, model):
    # The server ignores SIGTERM: teardown waits out its grace period, and a second signal lands in it.
    study = stubborn(fault_study(model, token_delay=0.05))
    proc = start_cli(tmp_path, study)
    log = tmp_path / "server.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and "listening on" in log.read_text()):
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert record["class"] == "interrupted" and "SIGINT" in record["reason"] and "SIGTERM" not in record["reason"]
    pid = server_pid(err)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_server_with_an_api_key_is_asked_with_it_on_every_route(tmp_path, model, monkeypatch):
    # The fault server answers 401 without the key, as llama-server does: counters included.
    monkeypatch.setenv("SPECSWEEP_TEST_KEY", "sk-test-123")
    study = fault_study(model, api_key_env="SPECSWEEP_TEST_KEY")
    study["server"]["command"] += ["--api-key", "{api_key}"]
    rc, err = launch_cli(tmp_path, study)
    assert rc == 0, err
    doc = store.read_result(tmp_path / "launches" / f"{NAME}.json").to_json()
    assert [s["counters"]["llamacpp:tokens_predicted_total"] for s in doc["sections"]] == [16, 16, 8]


def test_without_a_metrics_route_the_run_is_measured_without_counters(tmp_path, model):
    rc, err = launch_cli(tmp_path, fault_study(model, "no-metrics"))
    assert rc == 0, err
    doc = store.read_result(tmp_path / "launches" / f"{NAME}.json").to_json()
    assert all(s["counters"] == {} for s in doc["sections"])


# Alone: /dev/shm is the host's, and a teardown beside this one removes the unmapped file the fault
# server leaves before this test's own teardown can (two jobs side by side share that folder).
@pytest.mark.alone
def test_shared_memory_a_server_leaves_is_removed_and_named(tmp_path, model):
    rc, err = launch_cli(tmp_path, fault_study(model, "leave-shm"))
    assert rc == 0, err
    log = (tmp_path / "server.log").read_text()
    left = re.search(r"fault-server: left (\S+)", log).group(1)
    assert not os.path.exists(left)
    assert f"removed 1 shared-memory file(s) the server left in /dev/shm: {os.path.basename(left)}" in log


def test_a_server_that_stops_itself_is_resumed_to_shut_down(tmp_path, model):
    # SIGSTOP after the short section: the health probe times out while the process exists.
    rc, err = launch_cli(tmp_path, fault_study(model, "stop-after-request:3"))
    assert_clean_failure(tmp_path, rc, err, code=12, cls="server-died", section="short",
                                  words=["server unhealthy after section short: health check failed"])
    # Stopped, it could not act on SIGTERM: teardown resumed it (SIGCONT), so it shut down itself.
    assert "fault-server: SIGTERM, shutting down" in (tmp_path / "server.log").read_text()


def test_a_stranger_answering_on_our_port_after_launch_is_never_benchmarked(tmp_path, model):
    port = free_port()
    proc = start_cli(tmp_path, fault_study(model, "no-listen"), "--port", str(port))
    log = tmp_path / "server.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (log.exists() and "running without listening" in log.read_text()):
        time.sleep(0.05)
    # Our server runs but never listens; a process outside its tree takes the port meanwhile.
    stranger = subprocess.Popen([sys.executable, FAULT_SERVER, "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        stranger.kill()
        stranger.wait()
    assert_clean_failure(tmp_path, proc.returncode, err, code=15, cls="port-conflict", section="startup",
                         words=[f"port {port} answers, but from pid(s) [{stranger.pid}], not ours"])
    assert "tok/s" not in err  # nothing was measured against the stranger


def test_a_server_that_listens_from_a_child_of_the_launched_process_is_ours(tmp_path, model):
    # Launchers and wrappers (a shell, conda run, SGLang's and vLLM's API processes) serve from a
    # child of the process specsweep starts: that listener is ours, not a stranger.
    study = fault_study(model)
    wrapper = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    study["server"]["command"] = ["{binary}", "-c", wrapper, *study["server"]["command"]]
    rc, err = launch_cli(tmp_path, study)
    assert rc == 0, err
    assert store.read_result(tmp_path / "launches" / f"{NAME}.json").to_json()["sections"]


def test_port_already_served_is_never_benchmarked(tmp_path, model):
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        rc, err = launch_cli(tmp_path, fault_study(model), "--port", str(port))
    assert_clean_failure(tmp_path, rc, err, code=15, cls="port-conflict", words=[str(port)])
    assert server_pid(err) is None  # refused before any launch


def test_context_that_cannot_fit_fails_before_any_server_starts(tmp_path, model):
    study = fault_study(model)
    spec = json.loads(expand_grid(study)[0].to_json())
    spec["context"] = 8190
    proc = subprocess.run([sys.executable, "-m", "specsweep", "launch", "--spec", json.dumps(spec),
                           "--failures-dir", str(tmp_path / "failures")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "8190" in proc.stderr and "8192" in proc.stderr
    assert server_pid(proc.stderr) is None and not (tmp_path / "logs").exists()


def test_unwritable_result_leaves_no_partial_file(tmp_path, model):
    (tmp_path / "launches").write_text("a file where the results folder should be")
    rc, err = launch_cli(tmp_path, fault_study(model))
    assert rc == 16, err
    assert (tmp_path / "launches").read_text() == "a file where the results folder should be"
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert record["class"] == "result-write"
    pid = server_pid(err)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_mid_section_tears_the_server_down(tmp_path, model, sig, code):
    spec = expand_grid(fault_study(model, token_delay=0.05))[0]
    log = tmp_path / "cli.log"
    with open(log, "w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specsweep", "launch", "--spec", spec.to_json(), "--server-log",
             str(tmp_path / "server.log"), "--failures-dir", str(tmp_path / "failures"),
             "--out", str(tmp_path / "launches" / f"{NAME}.json")],
            cwd=tmp_path, stderr=err_file, start_new_session=True)
        deadline = time.monotonic() + 60
        while "section short: start" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, sig)  # the whole process group, as a terminal or scheduler does
        proc.wait(timeout=60)
    assert_clean_failure(tmp_path, proc.returncode, log.read_text(), code=code, cls="interrupted",
                         section="short", words=[signal.Signals(sig).name])


def test_a_retry_of_a_deterministic_failure_does_not_relaunch(tmp_path, model):
    study = fault_study(model, "short-at-request:2")
    rc, _ = launch_cli(tmp_path, study)
    assert rc == 14
    log_size = (tmp_path / "server.log").stat().st_size
    rc, err = launch_cli(tmp_path, study, "--attempt", "2")
    assert rc == 14 and "not retried" in err
    assert (tmp_path / "server.log").stat().st_size == log_size  # no new launch
    assert len(list((tmp_path / "failures" / NAME).glob("*.json"))) == 1


def test_a_retry_after_a_record_that_does_not_say_transient_runs(tmp_path, model):
    # A record as an older specsweep wrote it, without "transient": never taken for deterministic.
    study = fault_study(model)
    spec = json.loads(expand_grid(study)[0].to_json())
    record = store.failure_record(name=NAME, spec=spec, error=InvalidResponse("server generated 7 tokens"),
                                    started_at="t", attempt=1, server_log=None, log_tail="")
    doc = record.to_json()
    del doc["transient"]
    store.write_json_atomic(tmp_path / "failures" / NAME / "2026-01-01T000000.000Z-attempt1.json", doc)
    rc, err = launch_cli(tmp_path, study, "--attempt", "2")
    assert rc == 0 and "not retried" not in err, err


def test_a_retry_after_the_spec_changed_runs(tmp_path, model):
    assert launch_cli(tmp_path, fault_study(model, "short-at-request:2"))[0] == 14
    # The user fixed the configuration (here: the server's command): the retry must measure it.
    rc, err = launch_cli(tmp_path, fault_study(model), "--attempt", "2")
    assert rc == 0, err
    assert "not retried" not in err and (tmp_path / "launches" / f"{NAME}.json").exists()


def test_a_retry_of_a_transient_failure_runs_again(tmp_path, model):
    study = fault_study(model, "die-at-request:2")
    assert launch_cli(tmp_path, study)[0] == 12
    rc, err = launch_cli(tmp_path, study, "--attempt", "2")
    assert rc == 12 and "not retried" not in err
    records = sorted((tmp_path / "failures" / NAME).glob("*.json"))
    assert [json.loads(p.read_text())["attempt"] for p in records] == [1, 2]


def test_a_bug_still_leaves_a_record_and_a_nonzero_exit(tmp_path, model, monkeypatch, capsys):
    from specsweep import cli
    from specsweep.measure import runner

    def broken(*args, **kwargs):
        raise KeyError("some_field")

    monkeypatch.setattr(runner, "launch_configuration", broken)
    spec = expand_grid(fault_study(model))[0]
    rc = cli.main(["launch", "--spec", spec.to_json(), "--failures-dir", str(tmp_path / "failures"),
                   "--out", str(tmp_path / "launches" / f"{NAME}.json")])
    assert rc == 1
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert record["class"] == "internal" and "KeyError" in record["reason"]


def test_the_cli_edge_turns_each_error_into_one_line_and_its_exit_code(monkeypatch, capsys):
    from specsweep import cli
    from specsweep.errors import ConfigError

    def refused(_args):
        raise ConfigError("the study is wrong; fix it")

    def bug(_args):
        raise KeyError("x")

    argv = ["grid", "--config-json", "{}"]
    text, arguments, _ = cli.COMMANDS["grid"]  # the subcommand's handler, replaced in the table
    monkeypatch.setitem(cli.COMMANDS, "grid", (text, arguments, refused))
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == "specsweep: config: the study is wrong; fix it\n"
    monkeypatch.setitem(cli.COMMANDS, "grid", (text, arguments, bug))
    monkeypatch.delenv("SPECSWEEP_DEBUG", raising=False)
    assert cli.main(argv) == 1
    assert capsys.readouterr().err == ("specsweep: internal error (a bug in specsweep): KeyError: 'x'; "
                                       "SPECSWEEP_DEBUG=1 shows the traceback\n")
    monkeypatch.setenv("SPECSWEEP_DEBUG", "1")
    assert cli.main(argv) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_a_signal_whose_exception_a_finalizer_swallowed_still_ends_the_launch_without_a_result(tmp_path, model,
                                                                                                 monkeypatch):
    """Seen in a full run: SIGTERM landed while a garbage-collected urllib3 pool closed its sockets;
    Python printed "Exception ignored" and the launch wrote its result with exit 0. Here the signal
    lands inside a finalizer on purpose, during section short's checks (measure/interrupts.py)."""
    from specsweep import cli
    from specsweep.measure import interrupts, runner

    class Closing:
        def __del__(self):  # the signal arrives while a finalizer runs: its exception is ignored
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))  # a few bytecodes: the handler runs here

    def check_schedule(spec, where, stats):
        if where == "section short":
            Closing()
        return real(spec, where, stats)

    real = runner.check_schedule
    monkeypatch.setattr(runner, "check_schedule", check_schedule)
    ignored = []  # what Python ignored in the finalizer: the signal's exception, as in that run
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: ignored.append(unraisable.exc_type))
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    study = fault_study(model)
    out = tmp_path / "launches" / f"{NAME}.json"
    try:
        rc = cli.main(["launch", "--spec", expand_grid(study)[0].to_json(),
                       "--failures-dir", str(tmp_path / "failures"),
                       "--server-log", str(tmp_path / "server.log"), "--out", str(out),
                       "--quiet-host", json.dumps(study["quiet_host"])])
    finally:  # this worker goes on: its handlers and the kept signal as they were
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
        interrupts.received = None
    assert ignored == [Interrupted]  # the signal did land inside the finalizer
    assert rc == 143 and not out.exists()
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert record["class"] == "interrupted" and record["section"] == "short" and "SIGTERM" in record["reason"]
