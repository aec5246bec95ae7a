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
    provision_llama_server,
    provision_model,
    provision_vllm,
    provision_tiny_model,
    provision_prompts,
    summary_table,
    summary_plot,
    compare,
    archive,


onstart:
    copy_results_to_history()


onsuccess:
    clean_partial_reports()
    print_answer()


onerror:
    report_failed_run()
