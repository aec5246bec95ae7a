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
