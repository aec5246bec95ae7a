import dataclasses
import json
import os
import re
import shlex
import sys
from pathlib import Path

from specsweep import study
from specsweep.analysis import ledger
from specsweep.measure import provenance
from specsweep.records import paths, store
from specsweep.study import grid, offline, prompt_sets, targets
from specsweep.errors import ConfigError, ProvisionError

# The schema (workflow/specsweep/schemas/config.schema.yaml, defaults filled in) and every check
# it cannot express, before any job is planned: a study mistake stops `snakemake -n` with one line.
try:
    study.validate_study(config)
except ConfigError as exc:
    sys.exit(f"config error: {exc.reason}")
# Paths on this machine: a real run refuses a missing one before any job; a dry run plans anyway
# (a GPU study is planned on a laptop or a login node) and says what the run would refuse.
try:
    study.check_local_paths(config)
except ConfigError as exc:
    if not workflow.output_settings.dryrun:
        sys.exit(f"config error: {exc.reason}")
    print(
        f"specsweep: warning: {exc.reason} (a real run refuses this)", file=sys.stderr
    )

# Offline by design: a run that would reach for the package index where none answers stops here,
# before any job, naming what to provision where the index is reached (study/offline.py).
if workflow.is_main_process and not workflow.output_settings.dryrun:
    try:
        offline.check(
            config, workflow.configfiles[-1] if workflow.configfiles else "STUDY.yaml"
        )
    except ProvisionError as exc:
        sys.exit(f"specsweep: {exc.reason}")


# Jobs run the package with the interpreter that runs Snakemake, so an unactivated
# .venv/bin/snakemake works too.
# Lint answers (snakemake --lint):
# - "Shell command directly uses variable PYTHON": deliberate. As a param, a moved virtualenv
#   would count as a changed measurement and rerun every finished configuration.
# - "Specify a conda environment or container for each rule": the software environment of every
#   rule is the specsweep package itself (pyproject.toml, pinned ranges), installed in the
#   environment that runs Snakemake; the servers it drives are provisioned by rules or given
#   by the user as commands, so a per-rule conda environment would add nothing.
# - "Shell command directly uses variable QUIET_HOST": deliberate, for the same reason as PYTHON.
#   The quiet-host guard's thresholds judge a measurement but do not define it: as a param,
#   tuning them would rerun every finished configuration.
# - "Param results is a prefix of input or output file but hardcoded", in the compare rule, is deliberate.
#   The comparison's candidate is this study's results folder as a whole (its runs and failures are
#   read too); its summary.csv is the rule's input, and paths.RESULTS owns the folder's name.
# - "Environment variable PYTHONPATH used but not asserted with envvars directive" (Snakefile):
#   deliberate. The Snakefile puts its own package first on its jobs' PYTHONPATH and keeps what
#   was there; an unset PYTHONPATH is the usual case, which envvars: would refuse.
PYTHON = sys.executable

# Every job records the exact command it ran under and the study config's hash (provenance).
# setdefault: a cluster job re-reads this file under its own internal command line.
os.environ.setdefault(
    provenance.INVOCATION_ENV, shlex.join(["snakemake", *sys.argv[1:]])
)
os.environ[provenance.STUDY_SHA_ENV] = provenance.study_sha256(config)
QUIET_HOST = json.dumps(config["quiet_host"], sort_keys=True)


class Unrecorded:
    """A param value Snakemake neither records nor compares (not of a builtin type): the command
    sees its text, a change of it reruns nothing."""

    def __init__(self, text=""):
        self.text = text

    def __str__(self):
        return self.text


UNRECORDED = Unrecorded()


# A configuration's name (axes.run_name): tp1-b4-ctx128, and -<axis><value> per axis of the study's.
wildcard_constraints:
    name=r"tp\d+-b\d+-ctx\d+(-[a-z][A-Za-z0-9_.+]*)*",
    launch=r"[1-9]\d*",
    round=r"[1-9]\d*",
    target="|".join(re.escape(name) for name in targets.names(in_plan=True)),
    digest=r"[0-9a-f]{12}",


# The grid, expanded once: per-job lookups in it keep planning linear in the grid's size.
SPECS = {spec.name: spec for spec in study.expand_grid(config)}

# Planning only reads. Results that cannot stand, and launches missing under a standing summary,
# are found here and set aside by the run's first job (rule set_aside), so `snakemake -n` shows
# what the run will measure again and changes nothing. A cluster job parses this file again on
# its node after that job ran: the recorded markers alone tell it its inputs.
SET_ASIDE = ledger.recorded_set_asides()
PLAN = ledger.plan_set_aside(config) if workflow.is_main_process else ledger.SetAside()
if PLAN:
    SET_ASIDE[str(paths.set_aside_marker(PLAN.digest()))] = PLAN
    for line in PLAN.lines():
        print(f"specsweep: {line}", file=sys.stderr)
SET_ASIDE_FOR = ledger.markers_by_launch(SET_ASIDE)
PROVISIONED = study.provisioned(config)
# Launches every configuration gets, and the most racing may give one (verdict.until_decided).
LAUNCHES = ledger.launches_planned(config)
RACING = config["verdict"]["until_decided"]
MOST_LAUNCHES = ledger.most_launches(config)
MEASURED = [
    name
    for name, spec in SPECS.items()
    if ledger.exclusion_reason(config, spec) is None
]
if RACING and workflow.is_main_process:
    print(
        f"specsweep: racing: the first round measures {LAUNCHES * len(MEASURED)} launches "
        f"({LAUNCHES} of each of {len(MEASURED)} configurations); then launches only where a "
        f"cell is undecided, {MOST_LAUNCHES * len(MEASURED)} at most "
        f"({MOST_LAUNCHES} each)",
        file=sys.stderr,
    )
LAUNCH = {name: study.shown_command(spec) for name, spec in SPECS.items()}


def get_spec(wildcards):
    """The grid point behind a result path; a path outside the grid is an error."""
    name = wildcards.name
    if name not in SPECS:
        raise ValueError(
            f"{name} is not in the study's grid; list it with: specsweep grid"
        )
    return SPECS[name]


def get_launch_spec(wildcards):
    """The spec of one launch of a configuration; a launch the study cannot reach is an error."""
    launch = int(wildcards.launch)
    if launch > MOST_LAUNCHES:
        raise ValueError(
            f"launch {launch} of {wildcards.name}: the study gives each configuration "
            f"{MOST_LAUNCHES} at most (workload.launches, verdict.until_decided)"
        )
    return dataclasses.replace(get_spec(wildcards), launch=launch)


def get_run_spec(wildcards):
    """Everything that defines the measurement, as params: changing any of it reruns the job."""
    return get_launch_spec(wildcards).to_json()


def get_launch_priority(wildcards):
    """Launch k of every configuration runs before launch k + 1 of any (study.grid.launch_priority)."""
    return grid.launch_priority(
        list(SPECS), wildcards.name, int(wildcards.launch), MOST_LAUNCHES
    )


def get_provisioned(wildcards):
    """Manifests of what the study asks the pipeline to provision ("embedded"); none otherwise."""
    return list(PROVISIONED.values())


def get_set_aside(wildcards):
    """The set-aside markers of this launch (ledger.SetAside): its old result moved aside first."""
    return SET_ASIDE_FOR.get((wildcards.name, int(wildcards.launch)), [])


def get_set_asides(wildcards):
    """Every set-aside marker: the summary is made anew after each."""
    return list(SET_ASIDE)


def get_set_aside_plan(wildcards):
    """What the set-aside job moves: the plan this parse found (a marker not planned is an error)."""
    marker = str(paths.set_aside_marker(wildcards.digest))
    if marker not in SET_ASIDE:
        raise ValueError(f"{marker}: no set-aside is planned under this name")
    return SET_ASIDE[marker].to_json()


def get_provision_record(key):
    """One param of the provision rule, what a target is made from, as Snakemake recorded it when
    each target had a rule of its own (each pin its own param, a prompt set's two pins one mapping
    named prompt_set). A study provisioned then is neither provisioned nor measured again
    (rerun-triggers include params), and a changed pin remakes only the targets made from it.
    """

    def record(wildcards):
        target = wildcards.target
        if target.startswith(targets.PROMPTS):
            name = target.removeprefix(targets.PROMPTS)
            return prompt_sets.pins(config, name) if key == "prompt_set" else UNRECORDED
        return targets.pins(config, target).get(key, UNRECORDED)

    return record


# The params of the provision rule, one per pin of the schema's provision: and the prompt set's.
PROVISION_RECORD = {
    key: get_provision_record(key) for key in [*config["provision"], "prompt_set"]
}


def get_provision_pins(wildcards):
    """The pins a target is made from, as JSON for its command (recorded by PROVISION_RECORD)."""
    return Unrecorded(
        json.dumps(targets.pins(config, wildcards.target), sort_keys=True)
    )


def get_provision_needs(wildcards):
    """The manifests of the targets one target is made from (vLLM's tiny model: vLLM's)."""
    return [str(paths.manifest(need)) for need in targets.find(wildcards.target).needs]


def get_launch_command(wildcards):
    """The server's argv as it will run (port picked at run time), for snakemake -n -p."""
    return LAUNCH[get_spec(wildcards).name]


def get_gpus(wildcards):
    """GPUs a configuration asks the scheduler for: its tp on a GPU study, none on a CPU one."""
    return get_spec(wildcards).tp if config["server"]["gpu"] else 0


def get_attempt(wildcards, attempt):
    """Snakemake's attempt number, so that a retry can refuse a deterministic failure."""
    return attempt


def get_run_results(wildcards):
    """Every launch of the grid minus excluded configurations (those appear in the summary
    only): workload.launches each, then what racing's rounds added."""
    return get_launches_through(MOST_LAUNCHES)


def get_race_inputs(wildcards):
    """What round r is decided from: every launch up to r of the configurations it races."""
    return get_launches_through(int(wildcards.round))


def get_launches_through(last):
    """The launch results up to launch ``last``: the fixed ones, then each racing round's
    contenders' next launch, as far as the finished rounds say (a checkpoint each)."""
    files = [
        str(paths.run_result(name, k))
        for k in range(1, LAUNCHES + 1)
        for name in MEASURED
    ]
    for round_ in range(LAUNCHES, last if RACING else LAUNCHES):
        decided = checkpoints.race_round.get(round=round_).output[0]
        contenders = store.read_race_round(decided)
        if not contenders:
            break
        files += [str(paths.run_result(name, round_ + 1)) for name in contenders]
    return files


def get_study_json(wildcards):
    return json.dumps(config, sort_keys=True)


def get_compare_baseline(wildcards):
    """The study to compare against; the target makes no sense without one."""
    baseline = config["compare"]["baseline"]
    if not baseline:
        raise ValueError(
            f"{paths.COMPARE}/ needs compare.baseline: the results folder (or .tar.gz of one) of "
            'the study to compare against, e.g. --config \'compare={"baseline": "../old/results"}\''
        )
    return baseline


def reported(path, **flags):
    """``report(path, ...)`` once the file exists, the plain path before.

    Snakemake refuses to build a report while a flagged file is missing, so a report asked for
    right after a dry run (nothing measured) would fail; unflagged, it shows the first page
    saying what to run.
    """
    return report(path, **flags) if Path(str(path)).exists() else path


def get_front_page():
    """The generated first page of the report if the main command has run, else the static one."""
    front = paths.FRONT_PAGE
    return str(front.resolve()) if front.is_file() else "workflow/report/workflow.rst"


def get_plot_title(wildcards):
    return f"specsweep: {config['study']} ({config['model']['name']} on {config['backend']})"


def get_plot_facets(wildcards):
    """The study's choice of where each axis goes in the summary figure (config plot:)."""
    return shlex.join(
        f"--{role}={axis}" for role, axis in config["plot"].items() if axis is not None
    )


def copy_results_to_history():
    """Keep every measured result before any job may delete it for a rerun (onstart); those the
    plan refused (damaged, or another study's) are no measurement of this study's."""
    from specsweep.records.store import copy_to_history

    copy_to_history(
        paths.RUNS, paths.HISTORY, skip={Path(r.path) for r in PLAN.refused}
    )


def report_failed_run():
    """After a failed run: the partial summary and the failure table (analysis/partial_reports.py)."""
    from specsweep.analysis import partial_reports

    print(
        partial_reports.report_failed_run(config, get_plot_title(None)), file=sys.stderr
    )


def clean_partial_reports():
    """Once nothing is missing, the partial reports go (analysis/partial_reports.py)."""
    from specsweep.analysis import partial_reports

    partial_reports.clean(config)


def print_answer():
    """After a run that made the summary: the answer on the terminal, where a person looks first."""
    from specsweep.analysis.report import terminal_answer

    made = (paths.SUMMARY_PNG, paths.BEST_CSV, paths.SUMMARY_CSV)
    if all(path.is_file() for path in made):
        print(terminal_answer(paths.SUMMARY_CSV, paths.BEST_CSV), file=sys.stderr)
