# specsweep: one Snakemake target per grid point of a server-configuration sweep.
# Main command: snakemake --cores 1 results/summary.png   (profile: profiles/default/)
from snakemake.utils import min_version

min_version("9.27")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/provision.smk"
include: "workflow/rules/benchmark.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/compare.smk"


rule all:
    default_target: True
    input:
        "results/summary.png",


onstart:
    archive_results()


onsuccess:
    clean_partial_reports()


onerror:
    report_failed_run()
