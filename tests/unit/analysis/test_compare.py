"""`specsweep compare` on studies built through the package's own code: verdicts, marks for what is
not a number, refusal of incomparable provenance, and the exit code for automation."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pandas as pd

from factories import result_doc
from specsweep import cli, study
from specsweep.analysis import aggregate, compare
from specsweep.errors import ServerDied
from specsweep.records.store import failure_record, write_failure, write_json_atomic

NAMES = ["tp1-b0-ctx64", "tp1-b4-ctx64"]


def make_study(folder: Path, repeats: dict[str, list[float]], *, failed=(), excluded=(), model_sha="m1",
               prompts_sha="p1") -> Path:
    """A results folder whose configurations ran at exactly the given per-repeat tok/s."""
    n = len(next(iter(repeats.values()))) if repeats else 2
    cfg = study.validate_study({
        "grid": {"budget": [0, 4], "tp": [1], "context": [64]}, "workload": {"repeats": n},
        "exclude": [{"budget": int(name.split("-b")[1].split("-")[0]), "reason": "known crash"} for name in excluded],
    })
    for spec in study.expand_grid(cfg):
        if spec.name in failed:
            write_failure(folder / "failures", failure_record(
                name=spec.name, spec={}, error=ServerDied("server died in section short: killed by SIGKILL"),
                started_at="t", attempt=1, server_log=None, log_tail=""))
        elif spec.name in repeats:
            doc = result_doc(spec)
            doc["model"], doc["prompts"] = {"sha256": model_sha}, {"sha256": prompts_sha}
            for section in doc["sections"]:
                section["output_tok_s_repeats"] = list(repeats[spec.name])
            write_json_atomic(folder / "launches" / spec.name / "launch1.json", doc)
    frame = aggregate.summarize(cfg, folder / "launches", folder / "failures")
    aggregate.write_summary(frame, folder / "summary.csv")
    return folder


def run(a: Path, b: Path, *extra: str) -> tuple[int, pd.DataFrame]:
    out = a.parent / "compare.csv"
    rc = cli.main(["compare", str(a), str(b), "--csv", str(out), *extra])
    return rc, pd.read_csv(out).fillna({"why": ""})


STEADY = [100.0, 101.0, 99.5, 100.5, 100.2]


def test_a_study_compared_with_itself_shows_no_difference_anywhere(tmp_path):
    a = make_study(tmp_path / "a", {n: STEADY for n in NAMES})
    rc, frame = run(a, a)
    assert rc == 0
    assert set(frame["verdict"]) == {"~"} and (frame["ratio"] == 1.0).all() and (frame["p"] == 1.0).all()


def test_a_slower_study_is_found_with_the_right_sign_and_fails_the_threshold(tmp_path, capsys):
    a = make_study(tmp_path / "a", {n: STEADY for n in NAMES})
    b = make_study(tmp_path / "b", {NAMES[0]: STEADY, NAMES[1]: [x * 0.9 for x in STEADY]})
    rc, frame = run(a, b, "--threshold", "0.05")
    assert rc == 20
    by = frame.set_index(["name", "section"])
    slow = by.loc[NAMES[1]]
    assert set(slow["verdict"]) == {"slower"} and slow["ratio"].round(3).eq(0.9).all()
    assert (slow["ci_low"] <= 0.9).all() and (slow["ci_high"] >= 0.9).all() and (slow["ci_high"] < 1).all()
    assert set(by.loc[NAMES[0]]["verdict"]) == {"~"}
    assert "3 regression(s) beyond 5%" in capsys.readouterr().err
    rc, _ = run(a, b, "--threshold", "0.2")  # a 10% slowdown is within a 20% threshold
    assert rc == 0
    rc, frame = run(b, a)
    assert rc == 0 and set(frame.set_index("name").loc[NAMES[1]]["verdict"]) == {"faster"}


def test_two_repeats_cannot_tell_and_say_so(tmp_path):
    a = make_study(tmp_path / "a", {n: [100.0, 100.5] for n in NAMES})
    b = make_study(tmp_path / "b", {n: [50.0, 50.5] for n in NAMES})
    rc, frame = run(a, b)
    assert rc == 0 and set(frame["verdict"]) == {"~"}
    assert frame["why"].str.contains("too few samples: 2 and 2 repeats; the exact test needs 4").all()


def test_failures_exclusions_and_fixes_are_marked_not_compared(tmp_path):
    a = make_study(tmp_path / "a", {NAMES[0]: STEADY}, failed=[NAMES[1]])
    b = make_study(tmp_path / "b", {NAMES[1]: STEADY}, failed=[NAMES[0]])
    rc, frame = run(a, b)
    verdicts = dict(zip(frame["name"], frame["verdict"]))
    assert verdicts == {NAMES[0]: "newly failing", NAMES[1]: "fixed"}
    assert frame["ratio"].isna().all() and rc == 20  # newly failing counts as a regression
    c = make_study(tmp_path / "c", {NAMES[0]: STEADY}, excluded=[NAMES[1]])
    rc, frame = run(c, c)
    assert dict(zip(frame["name"], frame["verdict"]))[NAMES[1]] == "excluded in A"
    assert "known crash" in frame.set_index("name").loc[NAMES[1], "why"].iloc[0]


def test_incomparable_provenance_is_refused(tmp_path, capsys):
    a = make_study(tmp_path / "a", {n: STEADY for n in NAMES})
    other_model = make_study(tmp_path / "b", {n: STEADY for n in NAMES}, model_sha="m2")
    assert cli.main(["compare", str(a), str(other_model)]) == 2
    assert "different models" in capsys.readouterr().err
    other_prompts = make_study(tmp_path / "c", {n: STEADY for n in NAMES}, prompts_sha="p2")
    rc, frame = run(a, other_prompts)
    assert set(frame["verdict"]) == {"incomparable"} and frame["ratio"].isna().all()
    assert frame["why"].str.contains("different prompt sets").all()


def test_an_archive_of_a_results_folder_compares_like_the_folder(tmp_path):
    a = make_study(tmp_path / "a", {n: STEADY for n in NAMES})
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(a, arcname="study/results")
    _, from_folder = run(a, a)
    _, from_archive = run(archive, a)
    pd.testing.assert_frame_equal(from_folder, from_archive)


def test_the_figure_is_written(tmp_path):
    a = make_study(tmp_path / "a", {n: STEADY for n in NAMES})
    b = make_study(tmp_path / "b", {NAMES[0]: [x * 1.2 for x in STEADY]}, failed=[NAMES[1]])
    png = tmp_path / "ratio.png"
    assert cli.main(["compare", str(a), str(b), "--plot", str(png), "--no-fail"]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_repeats_needed_follows_the_noise():
    assert compare.min_repeats(0.05) == 4 and compare.min_repeats(0.01) == 5
    assert compare.repeats_needed(0.005) == 4  # quiet: the exact test's floor decides
    assert compare.repeats_needed(0.05) > compare.repeats_needed(0.03) > 4
    assert compare.repeats_needed(0.05, change=0.10) < compare.repeats_needed(0.05, change=0.05)


def test_a_folder_without_a_summary_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["compare", str(tmp_path / "empty"), str(tmp_path / "empty")]) == 2
    assert "no summary.csv" in capsys.readouterr().err
