"""What the Snakefile plans from, computed once per parse: the grid's configurations, the launches
each is owed, the set-asides the run will make, what each job is handed and shown, what the
provisioning rule records, and what Snakemake's handlers do before and after a run.

workflow/rules/common.smk builds one ``Plan`` and holds one-line ``get_<thing>`` lookups into it,
so that the rules read as rules and this logic is tested and read as Python. Nothing here writes
a file at parse time: planning only reads (the set-aside job and the handlers write).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specsweep import study
from specsweep.analysis import ledger
from specsweep.records import inferred, paths
from specsweep.spec import LaunchSpec
from specsweep.study import prompt_sets, targets


class Unrecorded:
    """A param value Snakemake neither records nor compares (not of a builtin type): the command
    sees its text, a change of it reruns nothing."""

    def __init__(self, text: str = ""):
        self.text = text

    def __str__(self) -> str:
        return self.text


UNRECORDED = Unrecorded()


@dataclass
class Plan:
    config: dict
    specs: dict[str, LaunchSpec]  # the grid, expanded once: per-job lookups keep planning linear
    measured: list[str]  # configurations not excluded
    launches: int  # launches every configuration gets
    most_launches: int  # and the most racing may give one (verdict.until_decided)
    provisioned: dict[str, str]  # {"binary"|"model"|"prompts": manifest} the study leaves to the pipeline
    shown: dict[str, str]  # each configuration's server command as a plan shows it
    set_aside: dict[str, ledger.SetAside] = field(default_factory=dict)  # marker path -> what it moves
    found: ledger.SetAside = field(default_factory=ledger.SetAside)  # what this parse found to set aside
    by_launch: dict = field(default_factory=dict)  # (name, launch) -> the markers it waits for
    run_order: list[str] = field(default_factory=list)  # a launch index's order: a cell's budgets side by side
    inferred_to_fail: dict[str, inferred.Inference] = field(default_factory=dict)  # not launched (infer_failures)

    @classmethod
    def of(cls, config: dict, *, main: bool) -> Plan:
        """The plan of a study. ``main``: Snakemake's main process, which finds what to set aside;
        a cluster job parses again on its node after the set-aside ran, and the recorded markers
        alone tell it its inputs."""
        specs = {spec.name: spec for spec in study.expand_grid(config)}
        measured = [name for name, spec in specs.items() if ledger.exclusion_reason(config, spec) is None]
        # Read only where the study opts in: the records of what ran out of memory at a shorter context.
        inferred_here = {name: why for name in measured
                 if (why := inferred.inferred(inferred.sources(config, specs[name].values))) is not None
                 and not paths.launch_results(paths.LAUNCHES, name)}
        measured = [name for name in measured if name not in inferred_here]
        plan = cls(config, specs, measured, launches=ledger.launches_planned(config),
                   most_launches=ledger.most_launches(config), provisioned=study.provisioned(config),
                   shown={name: study.shown_command(spec) for name, spec in specs.items()},
                   set_aside=ledger.recorded_set_asides(),
                   found=ledger.plan_set_aside(config) if main else ledger.SetAside(), inferred_to_fail=inferred_here)
        if plan.found:
            plan.set_aside[str(paths.set_aside_marker(plan.found.digest()))] = plan.found
        plan.by_launch = ledger.markers_by_launch(plan.set_aside)
        plan.run_order = study.cell_major(list(specs.values()))
        return plan

    def notes(self) -> list[str]:
        """What the main process says before the plan: what it sets aside, and racing's bounds."""
        lines = self.found.lines()
        lines += [f"inferred to fail, not launched (infer_failures): {name}: {why.reason}"
                  for name, why in self.inferred_to_fail.items()]
        if self.config["verdict"]["until_decided"]:
            n = len(self.measured)
            lines.append(f"racing: the first round measures {self.launches * n} launches ({self.launches} of each "
                         f"of {n} configurations); then launches only where a cell is undecided, "
                         f"{self.most_launches * n} at most ({self.most_launches} each)")
        return lines

    # --- one job ---------------------------------------------------------------------------
    def spec(self, name: str) -> LaunchSpec:
        """The grid point behind a result path; a path outside the grid is an error."""
        if name not in self.specs:
            raise ValueError(f"{name} is not in the study's grid; list it with: specsweep grid")
        return self.specs[name]

    def launch_spec(self, name: str, launch: int) -> LaunchSpec:
        """The spec of one launch of a configuration; a launch the study cannot reach is an error."""
        if launch > self.most_launches:
            raise ValueError(f"launch {launch} of {name}: the study gives each configuration {self.most_launches} "
                             f"at most (workload.launches, verdict.until_decided)")
        return dataclasses.replace(self.spec(name), launch=launch)

    def infer_from(self, name: str) -> Unrecorded:
        """What a launch job's failure is inferred from (infer_failures): the shorter contexts that
        may run out of memory earlier in the same run. Unrecorded: opting in reruns nothing."""
        return Unrecorded(",".join(inferred.sources(self.config, self.spec(name).values)))

    def set_aside_before(self, name: str, launch: int) -> list[str]:
        """The set-aside markers of one launch: its old result moved aside first."""
        return self.by_launch.get((name, launch), [])

    def set_aside_plan(self, digest: str) -> str:
        """What one set-aside job moves: the plan this parse found (a marker not planned is an error)."""
        marker = str(paths.set_aside_marker(digest))
        if marker not in self.set_aside:
            raise ValueError(f"{marker}: no set-aside is planned under this name")
        return self.set_aside[marker].to_json()

    def gpus(self, name: str) -> int:
        """GPUs a configuration asks the scheduler for: its tp on a GPU study, none on a CPU one."""
        return self.spec(name).tp if self.config["server"]["gpu"] else 0

    def launch_results(self, last: int, raced: list[list[str]]) -> list[str]:
        """The launch results up to launch ``last``: the fixed ones, then each racing round's
        contenders' next launch (``raced[i]``: who round launches + i sent on)."""
        files = [str(paths.launch_result(name, k)) for k in range(1, self.launches + 1) for name in self.measured]
        for offset, contenders in enumerate(raced):
            files += [str(paths.launch_result(name, self.launches + offset + 1)) for name in contenders]
        return files

    # --- provisioning ------------------------------------------------------------------------
    def provision_record(self, key: str, target: str):
        """One param of the provision rule, what a target is made from, as Snakemake recorded it
        when each target had a rule of its own (each pin its own param, a prompt set's two pins
        one mapping named prompt_set). A study provisioned then is neither provisioned nor
        measured again (rerun-triggers include params), and a changed pin remakes only the
        targets made from it."""
        if target.startswith(prompt_sets.TARGET_PREFIX):
            name = target.removeprefix(prompt_sets.TARGET_PREFIX)
            return prompt_sets.pins(self.config, name) if key == "prompt_set" else UNRECORDED
        return targets.pins(self.config, target).get(key, UNRECORDED)

    def record_keys(self) -> list[str]:
        """The provision rule's recorded params: one per pin of the schema's provision:, and prompt_set."""
        return [*self.config["provision"], "prompt_set"]

    def provision_pins(self, target: str) -> Unrecorded:
        """The pins a target is made from, as JSON for its command (recorded by provision_record)."""
        return Unrecorded(json.dumps(targets.pins(self.config, target), sort_keys=True))

    # --- Snakemake's handlers ----------------------------------------------------------------
    def before_run(self) -> None:
        """Keep every measured result before any job may delete it for a rerun (onstart); those the
        plan refused (damaged, or another study's) are no measurement of this study's."""
        from specsweep.records.store import copy_to_history

        skip = {Path(r.path) for r in self.found.refused}
        copy_to_history(paths.LAUNCHES, paths.HISTORY, skip=skip)

    def after_success(self) -> None:
        """Once nothing is missing, the partial reports go; the answer on the terminal, where a
        person looks first, after a run that made the summary. Both are cheap where there is
        nothing to do: this runs in Snakemake's own process after every successful run, and the
        answer was written by the summary's job (analysis/report.py terminal_answer)."""
        if any(path.exists() for path in paths.PARTIAL_REPORTS):
            from specsweep.analysis import partial_reports

            partial_reports.clean(self.config)
        if paths.ANSWER.is_file():  # the summary job writes it with the table and figures, or none of them
            print(paths.ANSWER.read_text(), file=sys.stderr, end="")

    def after_failure(self) -> None:
        """After a failed run: the partial summary and the failure table (analysis/partial_reports.py)."""
        from specsweep.analysis import partial_reports

        print(partial_reports.report_failed_run(self.config), file=sys.stderr)
