rule summary_table:
    input:
        get_run_results,
    output:
        "results/summary.csv",
    log:
        "logs/aggregate/summary.log",
    params:
        study=get_study_json,
        runs="results/runs",
        failures="results/failures",
        invalid="results/invalid",
    shell:
        "{PYTHON} -m specsweep aggregate --config-json {params.study:q} "
        "--runs {params.runs} --failures {params.failures} "
        "--quarantine {params.invalid} --csv {output} 2> {log}"


rule summary_plot:
    input:
        "results/summary.csv",
    output:
        report(
            "results/summary.png",
            caption="../report/summary.rst",
            category="Summary",
        ),
    log:
        "logs/aggregate/plot.log",
    params:
        title=get_plot_title,
    shell:
        "{PYTHON} -m specsweep plot --csv {input} --out {output} "
        "--title {params.title:q} 2> {log}"
