"""What the planner reads of a results folder (analysis/ledger.py) without writing to it."""

from specsweep.analysis import ledger


def test_the_launches_to_carry_over_are_the_older_layouts_that_stand_and_have_no_current_file(tmp_path):
    """adoptable: a launch in runs/ with none in launches/ is carried over, up to the most launches the
    study may give; one the plan refused is set aside instead, one already in launches/ is left to it."""
    results = tmp_path / "results"
    assert ledger.adoptable(["a"], 2, ledger.SetAside(), tmp_path) == {}  # no runs/: nothing read
    for path in ("runs/a/launch1.json", "runs/a/launch2.json", "runs/a/launch3.json", "runs/b.json",
                 "runs/c/launch1.json", "runs/d/launch1.json", "launches/d/launch1.json", "runs/e.json",
                 "runs/f/launch0.json", "runs/f/launch3.json"):
        (results / path).parent.mkdir(parents=True, exist_ok=True)
        (results / path).write_text("{}")
    refused = ledger.SetAside((ledger.Refused("c", 1, "results/runs/c/launch1.json", "unreadable"),))
    found = ledger.adoptable(["a", "b", "c", "d", "f"], 2, refused, tmp_path)
    assert found == {"a": [1, 2], "b": [1]}  # e is not measured by this study (excluded, or off the grid);
    # f's files are no launch the study owes (launches count from 1, up to the most it may give)
