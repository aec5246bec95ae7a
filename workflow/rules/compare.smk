rule compare:
    input:
        str(paths.SUMMARY_CSV),
    output:
        csv=str(paths.COMPARE / "summary.csv"),
        regressions=str(paths.COMPARE / "regressions.csv"),
        png=reported(
            str(paths.COMPARE / "ratio.png"),
            caption="../report/compare.rst",
            category="Comparison",
        ),
    log:
        "logs/compare/compare.log",
    params:
        baseline=get_compare_baseline,
        alpha=config["compare"]["alpha"],
        threshold=config["compare"]["threshold"],
    shell:
        "{PYTHON} -m specsweep compare {params.baseline:q} results --alpha {params.alpha} "
        "--threshold {params.threshold} --csv {output.csv} --regressions {output.regressions} "
        "--plot {output.png} --no-fail > {log} 2>&1"
