rule summary_table:
    input:
        get_run_results,
    output:
        csv="results/summary.csv",
        best="results/best.csv",
        study="results/study/config.yaml",
        front="results/report/front.rst",
        table=reported(
            "results/report/summary.html",
            caption="../report/table.rst",
            category="Summary",
            labels={"item": "summary table"},
        ),
        best_page=reported(
            "results/report/best.html",
            caption="../report/best.rst",
            category="Summary",
            labels={"item": "best budget per tp, context and section"},
        ),
        failures=reported(
            "results/report/failures.html",
            caption="../report/failures.rst",
            category="Failures and exclusions",
            labels={"item": "configurations without a result"},
        ),
        pages=reported(
            directory("results/report/configurations"),
            patterns=["{name}.html"],
            caption="../report/configuration.rst",
            category="Configurations",
            labels={"configuration": "{name}"},
        ),
        study_page=reported(
            "results/report/study.html",
            caption="../report/study.rst",
            category="Study",
            labels={"item": "merged study configuration"},
        ),
    log:
        "logs/aggregate/summary.log",
    params:
        study=get_study_json,
        runs="results/runs",
        failures="results/failures",
        invalid="results/invalid",
        stale="results/summary.png",
    shell:
        "{PYTHON} -m specsweep aggregate --config-json {params.study:q} "
        "--runs {params.runs} --failures {params.failures} "
        "--quarantine {params.invalid} --stale {params.stale} --csv {output.csv} 2> {log} && "
        "{PYTHON} -m specsweep report-data --config-json {params.study:q} "
        "--summary {output.csv} --runs {params.runs} --failures {params.failures} "
        "--best {output.best} --front {output.front} --failures-page {output.failures} "
        "--pages {output.pages} --study-config {output.study} --summary-page {output.table} "
        "--best-page {output.best_page} --study-page {output.study_page} 2>> {log}"


rule summary_plot:
    input:
        "results/summary.csv",
    output:
        reported(
            "results/summary.png",
            caption="../report/summary.rst",
            category="Summary",
            labels={"item": "throughput and speedup figure"},
        ),
    log:
        "logs/aggregate/plot.log",
    params:
        title=get_plot_title,
        facets=get_plot_facets,
    shell:
        "{PYTHON} -m specsweep plot --csv {input} --out {output} "
        "--title {params.title:q} {params.facets} 2> {log}"


rule archive:
    input:
        "results/summary.csv",
        "results/summary.png",
    output:
        "results/study.tar.gz",
    log:
        "logs/archive/archive.log",
    params:
        study=get_study_json,
    shell:
        "{PYTHON} -m specsweep archive --config-json {params.study:q} --out {output} 2> {log}"
