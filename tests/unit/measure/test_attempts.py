"""A hand run's same-study check (measure/attempts.py check_same_study): a result of one study may
not be dropped into another study's results folder, whichever layout that folder's results are in."""

import pytest

from factories import result_doc
from specsweep import study
from specsweep.errors import ConfigError
from specsweep.measure import attempts
from specsweep.records import store


def spec_of(name: str) -> study.LaunchSpec:
    return study.expand_grid(study.validate_study({"study": name}))[0]


def write(path, spec) -> None:
    store.write_json_atomic(path, result_doc(spec))


def test_a_result_of_another_study_in_launches_is_named_with_its_folder_and_configuration(tmp_path):
    launches = tmp_path / "results/launches"
    other = spec_of("other")
    write(launches / other.name / "launch2.json", other)
    (launches / "a-cut.json").write_text("{")  # unreadable, read first: skipped, not the end of the check
    with pytest.raises(ConfigError, match=rf"results/launches holds results of study 'other' "
                                          rf"\({other.name}/launch2.json\), and this run is of study 'mine'"):
        attempts.check_same_study(spec_of("mine"), launches)


def test_the_same_study_and_an_unreadable_file_pass(tmp_path):
    mine = spec_of("mine")
    write(tmp_path / "results/launches" / mine.name / "launch1.json", mine)
    (tmp_path / "results/launches/cut.json").write_text("{")  # aggregation's to refuse, not this check's
    attempts.check_same_study(mine, tmp_path / "results/launches")


def test_a_hand_runs_own_folder_is_checked_as_it_is(tmp_path):
    # A hand run's --out elsewhere: the folder it writes into, whatever its name.
    other = spec_of("other")
    write(tmp_path / "mine" / other.name / "launch1.json", other)
    with pytest.raises(ConfigError, match="mine holds results of study 'other'"):
        attempts.check_same_study(spec_of("mine"), tmp_path / "mine")
    attempts.check_same_study(spec_of("mine"), tmp_path / "elsewhere")
