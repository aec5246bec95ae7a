"""A study folder an older specsweep wrote (records/migrations.py): found, refused by name, and
carried over file by file with nothing lost; the older names the command line refuses. An older
result document read under today's fields: tests/unit/records/test_result.py (the version 1-5
files of data/)."""

import os

import pytest

from factories import result_doc
from specsweep import cli, study
from specsweep.errors import ConfigError
from specsweep.records import migrations, paths, store


@pytest.fixture
def spec():
    return study.expand_grid(study.validate_study({}))[0]


def older_folder(root, spec) -> dict[str, bytes]:
    """Both older layouts of runs/, a launch that today's launches/ holds already, and invalid/."""
    files = {"results/runs/a/launch1.json": 100, "results/runs/a/launch2.json": 90, "results/runs/b.json": 50,
             "results/runs/c/launch1.json": 70, "results/launches/c/launch1.json": 71,
             "results/invalid/d-20261201T000000Z.json": 10}
    for name, tok_s in files.items():
        store.write_json_atomic(root / name, result_doc(spec, tok_s=tok_s))
    (root / "results/runs/notes.txt").write_text("a person's own file")
    return {name: (root / name).read_bytes() for name in files}


def test_an_older_folder_is_found_and_refused_naming_the_command_that_carries_it(tmp_path, spec):
    assert migrations.older_layouts(tmp_path) == []
    (tmp_path / "results/runs").mkdir(parents=True)  # a folder of that name holding nothing of ours
    assert migrations.older_layouts(tmp_path) == []
    older_folder(tmp_path, spec)
    found = migrations.older_layouts(tmp_path)
    assert found == ["results/runs/ (4 file(s), today's results/launches/)",
                     "results/invalid/ (1 file(s), today's results/set-aside/results/)"]
    words = migrations.refusal(found)
    assert "python -m specsweep migrate" in words and "measures nothing again" in words and found[0] in words


def test_migrate_carries_every_file_where_it_belongs_and_deletes_nothing(tmp_path, spec):
    before = older_folder(tmp_path, spec)
    old = os.stat(tmp_path / "results/runs/b.json").st_mtime_ns
    lines = migrations.migrate(tmp_path)
    launches = tmp_path / paths.LAUNCHES
    assert (launches / "a/launch1.json").read_bytes() == before["results/runs/a/launch1.json"]
    assert (launches / "a/launch2.json").read_bytes() == before["results/runs/a/launch2.json"]
    assert (launches / "b/launch1.json").read_bytes() == before["results/runs/b.json"]  # the oldest: launch 1
    assert os.stat(launches / "b/launch1.json").st_mtime_ns >= old  # newer than the job's inputs, for Snakemake
    # The launch today's specsweep read stays; the older one of that launch is set aside, not lost.
    assert (launches / "c/launch1.json").read_bytes() == before["results/launches/c/launch1.json"]
    aside = {p.name: p.read_bytes() for p in (tmp_path / paths.SET_ASIDE_RESULTS).iterdir()}
    assert aside == {"c-launch1-superseded-launch1.json": before["results/runs/c/launch1.json"],
                     "d-20261201T000000Z.json": before["results/invalid/d-20261201T000000Z.json"]}
    assert not (tmp_path / "results/invalid").exists()
    assert sorted(p.name for p in (tmp_path / "results/runs").iterdir()) == ["notes.txt"]  # not ours: kept
    assert len(lines) == 5 and any("superseded" in line for line in lines)
    assert migrations.older_layouts(tmp_path) == [] and migrations.migrate(tmp_path) == []  # once is enough
    assert paths.launch_results(launches, "a") == {1: launches / "a/launch1.json", 2: launches / "a/launch2.json"}


def test_an_emptied_older_folder_goes(tmp_path, spec):
    store.write_json_atomic(tmp_path / "results/runs/a/launch1.json", result_doc(spec))
    migrations.migrate(tmp_path)
    assert not (tmp_path / "results/runs").exists() and (tmp_path / "results/launches/a/launch1.json").is_file()


def test_the_command_line_migrates_and_refuses_the_older_names_with_the_new(tmp_path, spec, capsys):
    older_folder(tmp_path, spec)
    assert cli.main(["migrate", "--folder", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "5 file(s) carried over, nothing measured again" in out and "results/runs/b.json ->" in out
    assert cli.main(["migrate", "--folder", str(tmp_path)]) == 0
    assert "nothing of an older layout" in capsys.readouterr().out
    assert cli.main(["adopt", "--out", "x.json"]) == 2
    assert "`specsweep adopt` is now `specsweep migrate`" in capsys.readouterr().err
    assert cli.main(["aggregate", "--config", "s.yaml", "--quarantine=results/invalid"]) == 2
    assert "--quarantine is now --set-aside" in capsys.readouterr().err


def test_a_study_key_spelled_both_ways_is_refused_and_one_way_is_read_as_the_new():
    config = {"guard": {"max_foreign_cores": 0.5}}
    assert migrations.study_keys(config) == ["the study's guard: is now called quiet_host: (read as such; rename "
                                             "it to silence this)"]
    assert config == {"quiet_host": {"max_foreign_cores": 0.5}}
    with pytest.raises(ConfigError, match="sets both guard: and quiet_host:"):
        migrations.study_keys({"guard": {}, "quiet_host": {}})
    assert migrations.failure_class("noisy-host") == "host-not-quiet" and migrations.failure_class(None) == "unknown"


def test_a_results_folder_is_read_through_a_carried_over_copy_and_left_as_it_is(tmp_path, spec):
    older_folder(tmp_path / "study", spec)
    results = tmp_path / "study/results"
    before = sorted(str(p.relative_to(results)) for p in results.rglob("*"))
    copy = migrations.readable(results, tmp_path / "scratch")
    assert copy == tmp_path / "scratch/migrated/results" and copy.is_dir()
    assert sorted(str(p.relative_to(results)) for p in results.rglob("*")) == before  # untouched
    assert paths.launch_results(copy / "launches", "a") == {1: copy / "launches/a/launch1.json",
                                                            2: copy / "launches/a/launch2.json"}
    assert migrations.readable(copy, tmp_path / "again") == copy  # today's layout: the folder itself


def test_the_refusal_lists_every_older_folder():
    assert migrations.refusal(["results/runs/ (1 file(s), ...)", "results/invalid/ (2 file(s), ...)"]).startswith(
        "this study folder was written by an older specsweep: results/runs/ (1 file(s), ...); results/invalid/ "
        "(2 file(s), ...). Run `python -m specsweep migrate` here once")


# The older result versions, one field each (records/result.py's schema history): what each
# version lacked is read under today's name, nothing else changed.
BODY = {"server": {"slot_context": 4096, "version": "b1"}, "prompts": {"set": "sharegpt"},
        "sections": [{"name": "short", "concurrency": 2, "request_rate": None, "host_load": {"cores": 0.1}},
                     {"name": "open", "concurrency": 1, "request_rate": 4.0, "host_load": {"cores": 0.2}},
                     {"name": "plain", "host_load": {"cores": 0.2}}],  # before concurrency: one in flight
        "isolation": {"devices": ["host"], "port": 8000, "guard": {"max_foreign_cores": 0.25}},
        "search": {"steps": [], "sections": [{"name": "s", "host_load": {"cores": 0.3}}]}}


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_each_older_result_version_is_read_under_todays_fields(version):
    body = migrations.result_body(BODY if version < 5 else {k: v for k, v in BODY.items() if k != "isolation"},
                                  version)
    assert ("hardware" in body and body["provenance"] == {"migrated_from": 1}) == (version == 1)
    assert ("reused" in body["prompts"] and body["prompts"]["reused"] is None) == (version <= 2)
    loads = [sec.get("load") for sec in body["sections"]]
    assert loads == (["c2", "r4", "c1"] if version <= 3 else [None, None, None])
    renamed = version <= 4
    assert [("quiet_host" in sec, "host_load" in sec) for sec in body["sections"]] == [(renamed, not renamed)] * 3
    assert ("quiet_host" in body["search"]["sections"][0]) == renamed
    if renamed:
        assert body["lease"] == {"devices": ["host"], "port": 8000}
        assert body["quiet_host"] == {"max_foreign_cores": 0.25} and "isolation" not in body
    assert ("max_context" in body["server"], "slot_context" in body["server"]) == ((True, False) if version <= 5
                                                                                   else (False, True))
    assert body["server"].get("max_context", body["server"].get("slot_context")) == 4096
