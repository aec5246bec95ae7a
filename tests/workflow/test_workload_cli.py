"""Load shape and prompts through the real CLI against the fault server: an open-loop schedule kept
and recorded, a client that cannot keep it, the user's own prompt file, and a server that dies
between requests or fails one. The schedule's arithmetic: tests/unit/measure/test_workload.py."""

from __future__ import annotations

import json
import queue
import re
import sys
import time

import pytest

from conftest import NAME, fault_study, launch_cli
from specsweep.errors import InvalidResponse, ServerDied
from specsweep.measure import workload
from specsweep.records import store
from specsweep.servers import backends
from specsweep.servers.probes import free_port
from specsweep.servers.process import ServerProcess
from specsweep.spec import Section
from specsweep.study.grid import expand_grid


def _with_sections(study: dict, **section) -> dict:
    for s in study["workload"]["sections"]:
        s.update(section)
    return study


@pytest.mark.alone  # each request left within 50 ms of its time: a timing the host must not disturb
def test_open_loop_schedule_is_kept_and_recorded(tmp_path, model):
    study = _with_sections(fault_study(model), request_rate=20.0, concurrency=2)
    rc, err = launch_cli(tmp_path, study)
    assert rc == 0, err
    doc = store.read_result(tmp_path / "launches" / f"{NAME}.json").to_json()
    for section in doc["sections"]:
        records = sorted(section["records"], key=lambda r: r["index"])
        scheduled = [r["t_scheduled"] for r in records]
        # The seeded schedule is the one recorded...
        assert scheduled == workload.schedule(Section(**{k: section[k] for k in (
            "name", "output_tokens", "requests", "concurrency", "request_rate")}), doc["spec"]["seed"])
        assert scheduled[0] == 0 and all(b > a for a, b in zip(scheduled, scheduled[1:]))
        # ...and kept: each request left at its time, neither early nor waiting for the one before.
        lags = [r["t_send"] - r["t_scheduled"] for r in records]
        assert all(0 <= lag < 0.05 for lag in lags), lags
        assert section["schedule_lag_s"]["p99"] == pytest.approx(max(lags), abs=0.01)
        assert all(r["chunk_tokens"] and sum(r["chunk_tokens"]) == r["output_tokens"] for r in section["records"])
        assert section["itl_s"]["p50"] > 0 and section["tpot_s"]["p50"] > 0


def test_a_client_that_cannot_keep_its_schedule_invalidates_the_section(tmp_path, model):
    # One request in flight at a time, each ~0.4 s, due every ~10 ms: the client queues.
    study = _with_sections(fault_study(model, token_delay=0.05), request_rate=100.0, concurrency=1)
    rc, err = launch_cli(tmp_path, study)
    assert rc == 17, err
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert record["class"] == "client-overload" and record["section"] == "short"
    found = re.fullmatch(r"section short: requests left the client ([\d.]+) ms late \(p99\) against their schedule, "
                         r"above workload.max_schedule_lag_s = ([\d.]+) ms; lower the request rate or concurrency, "
                         r"or give the client a core of its own", record["reason"])
    assert found, record["reason"]
    assert float(found[2]) == study["workload"]["max_schedule_lag_s"] * 1000 < float(found[1])
    assert not (tmp_path / "launches" / f"{NAME}.json").exists()


def test_user_prompt_file_is_used_cut_and_hashed(tmp_path, model):
    """Each line is one request's prompt, once: warmup 1 + sections 2 + 2 + 1 = 6 lines used."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": " ".join(f"w{i}-{k}" for k in range(40))}) for i in range(7)))
    study = fault_study(model)
    study["workload"]["prompts_file"] = str(prompts)
    rc, err = launch_cli(tmp_path, study)
    assert rc == 0, err
    doc = store.read_result(tmp_path / "launches" / f"{NAME}.json").to_json()
    assert doc["prompts"]["source"] == str(prompts) and len(doc["prompts"]["sha256"]) == 64
    assert doc["prompts"]["count"] == 6 and doc["prompts"]["reused"] is False
    assert {r["prompt_tokens"] for s in doc["sections"] for r in s["records"]} == {16}
    sent = doc["warmup"]["prompt_sha256"] + [r["prompt_sha256"] for s in doc["sections"] for r in s["records"]]
    assert len(sent) == len(set(sent)) == 6


@pytest.mark.parametrize("content, words", [
    ('{"text": "x"}\n', ["line 1", '{"prompt": "..."}']),
    ('{"prompt": "too short"}\n', ["line 1", "2 tokens", "asks for 16"]),
])
def test_bad_prompt_files_are_named_by_line(tmp_path, model, content, words):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(content)
    study = fault_study(model)
    study["workload"]["prompts_file"] = str(prompts)
    rc, err = launch_cli(tmp_path, study)
    assert rc == 2, err
    reason = store.latest_failure(tmp_path / "failures", NAME).to_json()["reason"]
    for word in words:
        assert word in reason


def test_a_server_that_dies_between_two_scheduled_requests_is_named_dead_at_once(tmp_path, model):
    # The server dies right after the short section's first request (warmup is request 1); the
    # second is due long after (about 53 s at this rate and seed). Only the watcher can name the
    # death before then: a failed second request would name it too, but not until it was due.
    rate = 1 / 30
    study = _with_sections(fault_study(model, "die-after-request:2"), request_rate=rate)
    spec = expand_grid(study)[0]
    short = next(s for s in spec.sections if s.name == "short")
    due = workload.schedule(short, spec.seed)[1]
    started = time.monotonic()
    rc, err = launch_cli(tmp_path, study)
    took = time.monotonic() - started
    assert rc == 12, err
    record = store.latest_failure(tmp_path / "failures", NAME).to_json()
    assert record["class"] == "server-died" and record["section"] == "short"
    assert record["reason"] == "server died in section short: killed by SIGKILL"
    assert due > 45 and took < due - 15, (due, took)


def _collector_with_one_failure(tmp_path, code: str) -> tuple[ServerProcess, queue.Queue]:
    """A server running `code` and a queue holding one failed request, as _collect receives them."""
    server = ServerProcess([sys.executable, "-c", code], port=free_port(), log_path=tmp_path / "server.log",
                           startup_timeout_s=5, backend=backends.get("llama-server"))
    done: queue.Queue = queue.Queue()
    done.put(InvalidResponse("stream ended without a final event"))
    return server, done


def test_a_request_failure_from_a_server_already_dead_is_the_death_not_the_request(tmp_path):
    # The failed request reaches the collector before the watcher reports the exit (a race the
    # end-to-end faults cannot pin): the record must still say the server died, and why.
    # (split so that the command, which heads the log, does not itself match the signature)
    crash = "import sys; print('CUDA error: an illegal ' + 'instruction was encountered', flush=True); sys.exit(1)"
    server, done = _collector_with_one_failure(tmp_path, crash)
    with server:
        server.proc.wait(timeout=30)
        server._watcher.join(timeout=5)
        server.died.clear()  # the watcher has not told anyone yet
        with pytest.raises(ServerDied) as caught:
            workload._collect(server, Section(name="short", output_tokens=8, requests=2), done, expected=2)
    assert caught.value.reason == "server died in section short: CUDA error: an illegal instruction was encountered"
    assert caught.value.signature == "cuda-illegal-instruction"


def test_a_request_failure_from_a_live_server_is_raised_as_it_is_with_its_section(tmp_path):
    server, done = _collector_with_one_failure(tmp_path, "import time; time.sleep(60)")
    with server, pytest.raises(InvalidResponse) as caught:
        workload._collect(server, Section(name="medium", output_tokens=8, requests=2), done, expected=2)
    assert caught.value.reason == "stream ended without a final event" and caught.value.section == "medium"

