import json
import os
import re
import shlex
import sys
from pathlib import Path

from specsweep import study
from specsweep.errors import ConfigError, ProvisionError
from specsweep.measure import provenance
from specsweep.plan import Plan
from specsweep.records import migrations, paths, store
from specsweep.study import grid, offline, targets

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

# A study folder an older specsweep wrote is carried over by `specsweep migrate`, which moves files
# and measures nothing (records/migrations.py); planned as it is, its launches would look missing.
if older := migrations.older_layouts():
    sys.exit(f"specsweep: {migrations.refusal(older)}")


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
#   The comparison's candidate is this study's results folder as a whole (its launches and failures are
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


# A configuration's name (axes.config_name): tp1-b4-ctx128, and -<axis><value> per axis of the study's.
wildcard_constraints:
    name=r"tp\d+-b\d+-ctx\d+(-[a-z][A-Za-z0-9_.+]*)*",
    launch=r"[1-9]\d*",
    round=r"[1-9]\d*",
    target="|".join(re.escape(name) for name in targets.names(in_plan=True)),
    digest=r"[0-9a-f]{12}",


# Planning only reads (specsweep/plan.py). Results that cannot stand, and launches missing under a
# standing summary, are found here and set aside by the run's first job (rule set_aside), so
# `snakemake -n` shows what the run will measure again and changes nothing.
PLAN = Plan.of(config, main=workflow.is_main_process)
if workflow.is_main_process:
    for line in PLAN.notes():
        print(f"specsweep: {line}", file=sys.stderr)
RACING = config["verdict"]["until_decided"]
# The params of the provision rule, one per pin of provision: and prompt_set (Plan.provision_record).
PROVISION_RECORD = {
    key: lambda wildcards, key=key: PLAN.provision_record(key, wildcards.target)
    for key in PLAN.record_keys()
}


def get_launch_spec(wildcards):
    """Everything that defines the measurement, as params: changing any of it reruns the job."""
    return PLAN.launch_spec(wildcards.name, int(wildcards.launch)).to_json()


def get_infer_from(wildcards):
    """The configurations whose running out of memory this launch's failure is inferred from."""
    return PLAN.infer_from(wildcards.name)


def get_launch_priority(wildcards):
    """Launch k of every configuration runs before launch k + 1 of any (study.grid.launch_priority)."""
    return grid.launch_priority(
        PLAN.run_order, wildcards.name, int(wildcards.launch), PLAN.most_launches
    )


def get_set_aside(wildcards):
    """The set-aside markers of this launch (ledger.SetAside): its old result moved aside first."""
    return PLAN.set_aside_before(wildcards.name, int(wildcards.launch))


def get_set_asides(wildcards):
    """Every set-aside marker: the summary is made anew after each."""
    return list(PLAN.set_aside)


def get_set_aside_plan(wildcards):
    """What the set-aside job moves (a marker not planned is an error)."""
    return PLAN.set_aside_plan(wildcards.digest)


def get_provision_pins(wildcards):
    """The pins a target is made from, as JSON for its command (recorded by PROVISION_RECORD)."""
    return PLAN.provision_pins(wildcards.target)


def get_provision_needs(wildcards):
    """The manifests of the targets one target is made from (vLLM's tiny model: vLLM's)."""
    return [str(paths.manifest(need)) for need in targets.find(wildcards.target).needs]


def get_launch_command(wildcards):
    """The server's argv as it will run (port picked at run time), for snakemake -n -p."""
    return PLAN.shown[PLAN.spec(wildcards.name).name]


def get_gpus(wildcards):
    """GPUs a configuration asks the scheduler for: its tp on a GPU study, none on a CPU one."""
    return PLAN.gpus(wildcards.name)


def get_attempt(wildcards, attempt):
    """Snakemake's attempt number, so that a retry can refuse a deterministic failure."""
    return attempt


def get_launch_results(wildcards):
    """Every launch of the grid minus excluded configurations (those appear in the summary
    only): workload.launches each, then what racing's rounds added."""
    return get_launches_through(PLAN.most_launches)


def get_race_inputs(wildcards):
    """What round r is decided from: every launch up to r of the configurations it races."""
    return get_launches_through(int(wildcards.round))


def get_launches_through(last):
    """The launch results up to launch ``last``, as far as the finished racing rounds say (a
    checkpoint each)."""
    raced = []
    for round_ in range(PLAN.launches, last if RACING else PLAN.launches):
        decided = checkpoints.race_round.get(round=round_).output[0]
        contenders = store.read_race_round(decided)
        if not contenders:
            break
        raced.append(contenders)
    return PLAN.launch_results(last, raced)


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
