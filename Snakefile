# specsweep: one Snakemake target per grid point of a server-configuration sweep.
# Main command: snakemake --cores 1 results/summary.png   (profile: profiles/default/)
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.27")

# The package beside this Snakefile, installed or not: a checkout carried to a machine without a
# package index runs as it is (docs/gpus.md), and so do its jobs, whose `python -m specsweep`
# inherit PYTHONPATH. The Snakefile and the package it calls come from one checkout.
PACKAGE_DIR = str(Path(workflow.basedir) / "workflow")
sys.path.insert(0, PACKAGE_DIR)
if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != PACKAGE_DIR:
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [PACKAGE_DIR, os.environ.get("PYTHONPATH")])
    )


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/provision.smk"
include: "workflow/rules/launch.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/compare.smk"


# The report's first page: the answer (best budgets) once the main command has run, else a page
# that says how to get one. `snakemake --report report.html` works either way.
report: get_front_page()


rule all:
    default_target: True
    input:
        str(paths.SUMMARY_PNG),


# Provisioning and aggregation run where Snakemake runs (a cluster's login node): provisioning
# once for all jobs, not once per compute job; aggregation is cheap and reads shared results.
localrules:
    provision,
    set_aside,
    summary,
    compare,
    archive,


# Snakemake's handlers (specsweep/plan.py): the results kept in history before any job may
# delete one for a rerun; the answer on the terminal after a run; the partial reports after a failure.
onstart:
    PLAN.before_run()


onsuccess:
    PLAN.after_success()


onerror:
    PLAN.after_failure()
