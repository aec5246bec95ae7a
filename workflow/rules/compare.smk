rule compare:
    input:
        str(paths.SUMMARY_CSV),
    output:
        csv=str(paths.COMPARE_CSV),
        regressions=str(paths.COMPARE_REGRESSIONS),
        png=reported(
            str(paths.COMPARE_PNG),
            caption="../report/compare.rst",
            category="Comparison",
        ),
    log:
        str(paths.COMPARE_LOG),
    params:
        baseline=get_compare_baseline,
        results=str(paths.RESULTS),
        alpha=config["compare"]["alpha"],
        threshold=config["compare"]["threshold"],
    shell:
        "{PYTHON} -m specsweep compare {params.baseline:q} {params.results} --alpha {params.alpha} "
        "--threshold {params.threshold} --csv {output.csv} --regressions {output.regressions} "
        "--plot {output.png} --no-fail > {log} 2>&1"
