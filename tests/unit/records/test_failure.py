"""The failure record (records/failure.py): an older record read under today's class names."""

import pytest

from specsweep import study
from specsweep.records import migrations, store


@pytest.fixture
def spec():
    return study.expand_grid(study.validate_study({}))[0]


def test_a_failure_record_of_the_old_class_name_is_read_under_the_new_one(tmp_path, spec):
    from specsweep import errors

    old = {"schema": "specsweep.failure", "schema_version": 1, "name": spec.name, "class": "noisy-host",
           "exit_code": 18, "transient": True, "reason": "other processes took 0.9 cores"}
    record = store.Failure.from_json(old)
    assert record.failure_class == errors.HostNotQuiet.failure_class == "host-not-quiet"
    assert record.to_json()["schema_version"] == 2 and record.to_json()["class"] == "host-not-quiet"
    # Every rename leads to a class errors.py raises today, under the exit code it had.
    classes = {c.failure_class: c.exit_code for c in errors.classes()}
    assert set(migrations.RENAMED_CLASSES.values()) <= set(classes) and classes["host-not-quiet"] == 18
