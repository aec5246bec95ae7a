"""Honest under the null (issue 54.5): two budget labels that reach the real llama-server as the very
same speculation are not told apart.

Budgets 2 and 3 are passed as ``--spec-draft-n-max``, which only the draft-model methods read
(llama.cpp common/speculative.cpp, common_speculative_n_max: ngram-mod's longest draft is
``ngram_mod.n_max``, and the server's per-request speculative fields are compiled out in
tools/server/server-schema.cpp), beside ngram-mod at a fixed longest draft of 4. So both labels
launch the same speculation; only the launch (its minute, the machine's state) and the prompts
differ. At 99% confidence an honest verdict separates them in at most 1% of studies; a verdict that
took one launch's prompts for replicates (leaving out the noise between launches) would call the
faster launch's label best whenever the two launches differed by more than the prompts scatter.
"""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import finish, run_workflow, small_study

pytestmark = pytest.mark.e2e


def test_two_budget_labels_of_one_speculation_are_not_told_apart(embedded, tmp_path):
    doc = small_study()
    doc["grid"] = {"budget": [2, 3], "tp": [1], "context": [64]}
    doc["server"] = {**doc["server"], "speculative_args": [
        "--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "1",
        "--spec-ngram-mod-n-max", "4", "--spec-draft-n-max", "{budget}"]}
    doc["workload"] = {**doc["workload"], "repeats": 1, "launches": 3, "sections": [
        {"name": "short", "output_tokens": 24, "requests": 6, "concurrency": 1},
        {"name": "long", "output_tokens": 64, "requests": 4, "concurrency": 1}]}
    doc["verdict"] = {**doc["verdict"], "confidence": 0.99}
    rc, out = finish(run_workflow(tmp_path, doc), timeout=900)
    assert rc == 0, out[-3000:]
    best = pd.read_csv(tmp_path / "results/best.csv")
    # Every cell was decided on the paired requests, and neither label left the other's best set.
    assert list(best["basis"]) == ["prompts", "prompts"] and set(best["prompts"]) == {6, 4}
    assert list(best["best_set"]) == ["2 3", "2 3"], best.to_string()
    # Both labels speculated (a label that drafted nothing would be no measurement of a budget).
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert set(summary["status"]) == {"ok"}
