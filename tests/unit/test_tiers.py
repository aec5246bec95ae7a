"""The shared phase's queue (tests/tiers.py): builds first, one per worker, then the longest first."""

from tiers import shared_order


def test_builds_lead_each_beside_one_other_then_the_longest_first_and_unknown_ones_as_longest():
    ids = ["unit::a", "build::llama", "workflow::race", "unit::new", "build::vllm", "workflow::rerun"]
    seconds = {"unit::a": 0.1, "build::llama": 200, "workflow::race": 83, "build::vllm": 150,
               "workflow::rerun": 58}
    order = shared_order(ids, {"build::llama", "build::vllm"}, seconds)
    assert order == ["build::llama", "unit::new", "build::vllm", "workflow::race", "workflow::rerun", "unit::a"]


def test_without_durations_pytests_order_is_kept_after_the_builds():
    order = shared_order(["a", "b", "build", "c"], {"build"}, {})
    assert order == ["build", "a", "b", "c"]
