""""Run the same command again" reruns exactly what has no valid result, through the real Snakemake
workflow (tests/doubles/fault_server.py as the server, so each run takes seconds): a result refused by
aggregation, a result of another study dropped into the folder, and a result damaged in place,
whose history copy survives it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd

from conftest import FAULT_SERVER, SHARED_GUARD, finish, run_workflow

B0, B2 = "tp1-b0-ctx16", "tp1-b2-ctx16"


def study(tmp_path: Path, name: str = "rerun") -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"stand-in")
    return {
        "study": name,
        "model": {"path": str(model)},
        "server": {"binary": sys.executable, "command": ["{binary}", FAULT_SERVER, "--port", "{port}"],
                   "speculative_args": ["--budget", "{budget}"], "stall_timeout_s": 2},
        "grid": {"budget": [0, 2], "tp": [1], "context": [16]},
        "quiet_host": SHARED_GUARD,  # mechanics, beside other tests (conftest.SHARED_GUARD)
        "workload": {"warmup_requests": 1, "warmup_output_tokens": 4, "repeats": 1, "sections": [
            {"name": "short", "output_tokens": 8, "requests": 2}]},
    }


def measured(workdir: Path, doc: dict) -> tuple[str, dict[str, tuple[bytes, int]]]:
    """Run the main command; return its output and each result's bytes and mtime."""
    rc, out = finish(run_workflow(workdir, doc), timeout=300)
    assert rc == 0, out[-4000:]
    runs = workdir / "results/launches"
    return out, {p.parent.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in runs.glob("*/launch1.json")}


def test_a_result_damaged_by_hand_is_measured_again_by_the_next_main_command(tmp_path):
    doc = study(tmp_path)
    _, first = measured(tmp_path, doc)
    figure = tmp_path / "results/summary.png"
    before = figure.stat().st_mtime_ns
    victim = tmp_path / "results/launches" / B2 / "launch1.json"
    victim.write_text(victim.read_text()[:200])  # cut short, as an interrupted copy or an editor leaves it

    out, second = measured(tmp_path, doc)
    assert second[B0] == first[B0]  # the valid one is untouched
    assert second[B2][0] != first[B2][0] and json.loads(second[B2][0])["name"] == B2  # measured again
    assert f"{B2}/launch1.json: unreadable" in out and "set aside in results/set-aside/results/ and measured again" \
        in out
    kept = tmp_path / "results/set-aside/results"
    assert [p.name.split("-20")[0] for p in kept.iterdir()] == [B2]  # kept, moved aside
    assert figure.stat().st_mtime_ns > before
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert set(summary["status"]) == {"ok"}


def test_a_result_of_another_study_is_measured_again_and_a_hand_run_of_it_is_refused(tmp_path):
    doc = study(tmp_path / "mine", "mine")
    _, first = measured(tmp_path / "mine", doc)

    # A hand run of another study, into this study's folder: refused before any server starts.
    other = study(tmp_path / "other", "other")
    (tmp_path / "other.yaml").write_text(json.dumps(other))
    by_hand = [sys.executable, "-m", "specsweep", "launch", "--config", str(tmp_path / "other.yaml"), "--name", B2]
    proc = subprocess.run(by_hand, cwd=tmp_path / "mine", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "results/launches holds results of study 'mine'" in proc.stderr and "of study 'other'" in proc.stderr
    assert (tmp_path / "mine/results/launches" / B2 / "launch1.json").read_bytes() == first[B2][0]

    # Made elsewhere and copied in (what a hand run did before it was refused): the next main
    # command refuses it and measures this study's configuration again.
    proc = subprocess.run(by_hand, cwd=tmp_path / "other", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    foreign = (tmp_path / "other/results/launches" / B2 / "launch1.json").read_bytes()
    (tmp_path / "mine/results/launches" / B2 / "launch1.json").write_bytes(foreign)
    out, second = measured(tmp_path / "mine", doc)
    assert "measured for study 'other', not this study 'mine'" in out
    assert second[B0] == first[B0]
    assert json.loads(second[B2][0])["spec"]["study"] == "mine"


def test_damage_in_place_cannot_reach_the_history_copy(tmp_path):
    doc = study(tmp_path)
    _, first = measured(tmp_path, doc)
    kept = list((tmp_path / "results/history" / B2).glob("*.json"))
    assert len(kept) == 1 and kept[0].read_bytes() == first[B2][0]
    assert not kept[0].stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)  # read-only
    victim = tmp_path / "results/launches" / B2 / "launch1.json"
    assert kept[0].stat().st_ino != victim.stat().st_ino  # a copy, no link
    os.truncate(victim, 100)  # in place, as a tool that rewrites a file does

    _, second = measured(tmp_path, doc)
    assert kept[0].read_bytes() == first[B2][0]
    assert hashlib.sha256(kept[0].read_bytes()).hexdigest()[:16] == kept[0].stem  # still what its name says
    assert second[B0] == first[B0] and json.loads(second[B2][0])["name"] == B2
    assert len(list((tmp_path / "results/history" / B2).glob("*.json"))) == 2  # the new measurement is kept too


def test_planning_reads_only_results_newer_than_the_summary_and_leaves_exclusions_alone(tmp_path, monkeypatch):
    """A finished study plans without reading its results (fast at 10,000 configurations); an
    excluded configuration without a result does not make the summary stale; a missing and a
    damaged result both do, both are named, and planning them writes nothing: the set-aside
    (the run's job) moves the damaged one aside and records what it did."""
    from factories import result_doc
    from specsweep import study
    from specsweep.analysis import ledger
    from specsweep.records import store

    cfg = study.validate_study({"grid": {"budget": [0, 2, 4], "tp": [1], "context": [128]},
                                "exclude": [{"budget": 0, "reason": "left out"}]})
    _, b2, b4 = study.expand_grid(cfg)  # the excluded one first, without a result
    runs = tmp_path / "results/launches"
    for spec in (b2, b4):
        store.write_json_atomic(runs / spec.name / "launch1.json", result_doc(spec))
    for name in ("summary.csv", "summary.png"):
        (tmp_path / "results" / name).write_text("made after the results")
    future = os.stat(runs / b4.name / "launch1.json").st_mtime + 10
    os.utime(tmp_path / "results/summary.csv", (future, future))

    def unread(path):
        raise AssertionError(f"{path} was read although the summary is newer")

    monkeypatch.setattr(ledger, "read_result", unread)
    assert not ledger.plan_set_aside(cfg, tmp_path)

    monkeypatch.undo()
    (runs / b2.name / "launch1.json").unlink()  # removed by hand
    (runs / b4.name / "launch1.json").write_text("{")  # damaged after the summary
    os.utime(runs / b4.name / "launch1.json", (future + 5, future + 5))
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    plan = ledger.plan_set_aside(cfg, tmp_path)
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before  # planning only read
    assert [(r.name, r.launch) for r in plan.refused] == [(b4.name, 1)] and plan.missing == (b2.name,)
    lines = plan.lines()
    assert len(lines) == 2 and f"{b4.name}/launch1.json: " in lines[0] and "unreadable" in lines[0], lines
    assert f"({b2.name}): measured again, then the summary is made anew" in lines[1], lines
    assert ledger.plan_set_aside(cfg, tmp_path).digest() == plan.digest()  # the same state, the same marker

    marker = tmp_path / "results/set-aside" / f"{plan.digest()}.json"
    done = ledger.set_aside(cfg, plan, marker, tmp_path)
    assert len(done) == 2 and "moved to" in done[0], done
    assert [p.name.split("-20")[0] for p in (tmp_path / "results/set-aside/results").iterdir()] == [b4.name]
    assert ledger.recorded_set_asides(tmp_path) == {"results/set-aside/" + marker.name: plan}
    assert (tmp_path / "results/summary.png").exists()  # nothing deleted: Snakemake makes it anew


def folder_state(workdir: Path) -> dict[str, tuple[str, int]]:
    """Every file of a study folder with its hash and mtime; not Snakemake's own .snakemake/ (a dry
    run keeps its file-listing cache there) nor the study file this test writes before each call."""
    return {str(p.relative_to(workdir)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(workdir.rglob("*")) if p.is_file()
            and p.parts[len(workdir.parts)] != ".snakemake" and p.name != "study.yaml"}


def test_planning_writes_nothing_and_the_run_measures_exactly_what_it_showed(tmp_path):
    """Issue 39.1: -n, --report, --lint, --dag and --summary of a study holding a damaged result,
    another study's result and a grid with a new budget leave every file as it was; the dry run
    names what the run will set aside and plans it; the run then measures exactly those again,
    and the run after it finds nothing to do."""
    B4, B6 = "tp1-b4-ctx16", "tp1-b6-ctx16"
    doc = study(tmp_path / "study")
    doc["grid"]["budget"] = [0, 2, 4]
    workdir = tmp_path / "study"
    _, first = measured(workdir, doc)
    (workdir / "results/launches" / B2 / "launch1.json").write_text("{")  # damaged
    foreign = json.loads(first[B4][0])
    foreign["spec"]["study"] = "other"
    (workdir / "results/launches" / B4 / "launch1.json").write_text(json.dumps(foreign))  # another study's
    doc["grid"]["budget"] = [0, 2, 4, 6]  # a new budget

    before = folder_state(workdir)
    outputs = {}
    modes = (["-n"], ["--report", str(tmp_path / "report.html")], ["--lint", "text"], ["--dag", "dot"], ["--summary"])
    for mode in modes:
        rc, outputs[mode[0]] = finish(run_workflow(workdir, doc, extra=tuple(mode)), timeout=300)
        # --lint exits 1 while it lists findings, the answered ones included (workflow/rules/common.smk)
        assert rc == 0 or (mode[0] == "--lint" and "Lints for rule" in outputs[mode[0]]), outputs[mode[0]][-3000:]
        assert folder_state(workdir) == before, f"snakemake {mode[0]} changed the study folder"
    plan = outputs["-n"]
    assert f"results/launches/{B2}/launch1.json: unreadable" in plan
    assert f"results/launches/{B4}/launch1.json: measured for study 'other'" in plan
    jobs = dict(re.findall(r"^(set_aside|launch_configuration|summary)\s+(\d+)$", plan, re.M))
    assert jobs == {"set_aside": "1", "launch_configuration": "3", "summary": "1"}, plan[-3000:]

    _, second = measured(workdir, doc)
    assert second[B0] == first[B0]  # untouched
    assert {name for name in second if second[name] != first.get(name)} == {B2, B4, B6}
    assert all(json.loads(second[name][0])["spec"]["study"] == "rerun" for name in second)
    assert sorted(p.name.split("-20")[0] for p in (workdir / "results/set-aside/results").iterdir()) == [B2, B4]
    assert len(list((workdir / "results/set-aside").glob("*.json"))) == 1

    rc, again = finish(run_workflow(workdir, doc, extra=("-n",)), timeout=300)
    assert rc == 0 and "Nothing to be done" in again, again[-3000:]


def test_a_results_folder_in_the_older_runs_layout_is_carried_over_not_measured_again(tmp_path):
    """Issue 39.6 (a launch is not a run) and 56.1 (older layouts in one module): a results folder
    written before launches/ was named keeps each launch in runs/<name>/launch<k>.json, or
    runs/<name>.json in the oldest layout. Planning refuses it by name, writing nothing, and names
    `specsweep migrate`, which carries every file over byte for byte; the run after it measures only
    the damaged one (set aside as any refused result), and the run after that has nothing to do."""
    B4 = "tp1-b4-ctx16"
    workdir = tmp_path / "study"
    doc = study(workdir)
    doc["grid"]["budget"] = [0, 2, 4]
    _, first = measured(workdir, doc)
    launches, runs = workdir / "results/launches", workdir / "results/runs"
    (runs / B0).mkdir(parents=True)
    (launches / B0 / "launch1.json").rename(runs / B0 / "launch1.json")
    (launches / B2 / "launch1.json").rename(runs / f"{B2}.json")  # the oldest layout: one file per configuration
    (runs / B4).mkdir()
    (runs / B4 / "launch1.json").write_text("{")  # damaged
    shutil.rmtree(launches)

    before = folder_state(workdir)
    rc, plan = finish(run_workflow(workdir, doc, extra=("-n",)), timeout=300)
    assert rc != 0 and "results/runs/ (3 file(s), today's results/launches/)" in plan, plan[-3000:]
    assert "python -m specsweep migrate" in plan and folder_state(workdir) == before

    moved = subprocess.run([sys.executable, "-m", "specsweep", "migrate"], cwd=workdir, capture_output=True,
                           text=True, timeout=60)
    assert moved.returncode == 0 and "3 file(s) carried over" in moved.stdout, moved.stdout + moved.stderr
    rc, plan = finish(run_workflow(workdir, doc, extra=("-n",)), timeout=300)
    assert rc == 0 and f"results/launches/{B4}/launch1.json: unreadable" in plan, plan[-3000:]
    jobs = dict(re.findall(r"^(set_aside|launch_configuration|summary)\s+(\d+)$", plan, re.M))
    assert jobs == {"set_aside": "1", "launch_configuration": "1", "summary": "1"}, plan[-3000:]

    _, second = measured(workdir, doc)
    assert second[B0][0] == first[B0][0] and second[B2][0] == first[B2][0]  # carried, not measured
    assert second[B4][0] != first[B4][0] and json.loads(second[B4][0])["spec"]["study"] == "rerun"
    assert not runs.exists()  # emptied and removed: nothing left in the older layout
    assert [p.name.split("-20")[0] for p in (workdir / "results/set-aside/results").iterdir()] == [B4]

    rc, again = finish(run_workflow(workdir, doc, extra=("-n",)), timeout=300)
    assert rc == 0 and "Nothing to be done" in again, again[-3000:]
