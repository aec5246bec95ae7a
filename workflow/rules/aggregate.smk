rule summary:
    input:
        results=get_launch_results,
        set_aside=get_set_asides,
    output:
        csv=str(paths.SUMMARY_CSV),
        best=str(paths.BEST_CSV),
        study=str(paths.STUDY_CONFIG),
        front=str(paths.FRONT_PAGE),
        table=reported(
            str(paths.REPORT_SUMMARY),
            caption="../report/table.rst",
            category="Summary",
            labels={"item": "summary table"},
        ),
        best_page=reported(
            str(paths.REPORT_BEST),
            caption="../report/best.rst",
            category="Summary",
            labels={"item": "best budget per tp, context, section and load"},
        ),
        failures=reported(
            str(paths.REPORT_FAILURES),
            caption="../report/failures.rst",
            category="Failures and exclusions",
            labels={"item": "configurations without a result"},
        ),
        pages=reported(
            directory(str(paths.REPORT_CONFIGURATIONS)),
            patterns=["{name}.html"],
            caption="../report/configuration.rst",
            category="Configurations",
            labels={"configuration": "{name}"},
        ),
        study_page=reported(
            str(paths.REPORT_STUDY),
            caption="../report/study.rst",
            category="Study",
            labels={"item": "merged study configuration"},
        ),
        answer=str(paths.ANSWER),
        deploy=directory(str(paths.DEPLOY)),
        figure=reported(
            str(paths.SUMMARY_PNG),
            caption="../report/summary.rst",
            category="Summary",
            labels={"item": "throughput and speedup figure"},
        ),
        tradeoff=reported(
            str(paths.TRADEOFF_PNG),
            caption="../report/tradeoff.rst",
            category="Summary",
            labels={"item": "per-user against per-GPU trade-off"},
        ),
    log:
        str(paths.SUMMARY_LOG),
    params:
        study=get_study_json,
        launches=str(paths.LAUNCHES),
        failures=str(paths.FAILURES),
        set_aside=str(paths.SET_ASIDE_RESULTS),
    # One process for the table, the report's data and the figures: pandas, scipy and matplotlib
    # load once per summary (a figure that is a job's output is removed with it when the job fails).
    shell:
        "{PYTHON} -m specsweep aggregate --config-json {params.study:q} "
        "--launches {params.launches} --failures {params.failures} "
        "--set-aside {params.set_aside} --csv {output.csv} "
        "--report-data --best {output.best} --front {output.front} --failures-page {output.failures} "
        "--pages {output.pages} --study-config {output.study} --summary-page {output.table} "
        "--best-page {output.best_page} --study-page {output.study_page} --answer {output.answer} "
        "--deploy {output.deploy} "
        "--figure {output.figure} --tradeoff {output.tradeoff} 2> {log}"


rule archive:
    input:
        str(paths.SUMMARY_CSV),
        str(paths.SUMMARY_PNG),
        str(paths.TRADEOFF_PNG),
    output:
        str(paths.ARCHIVE),
    log:
        str(paths.ARCHIVE_LOG),
    params:
        study=get_study_json,
    shell:
        "{PYTHON} -m specsweep archive --config-json {params.study:q} --out {output} 2> {log}"
