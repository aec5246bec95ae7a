# Planning found results that cannot stand (analysis/ledger.py SetAside): moved aside here, in
# the run, before Snakemake removes the old output of the launch that measures them again.
rule set_aside:
    output:
        paths.SET_ASIDE_MARKER,
    log:
        paths.SET_ASIDE_LOG,
    params:
        study=get_study_json,
        plan=get_set_aside_plan,
    shell:
        "{PYTHON} -m specsweep set-aside --config-json {params.study:q} "
        "--plan {params.plan:q} --out {output} 2> {log}"


rule launch_configuration:
    input:
        # What the study leaves to the pipeline (the same for every job: a list, not a function).
        manifests=list(PLAN.provisioned.values()),
        set_aside=get_set_aside,
    output:
        paths.LAUNCH_RESULT,
    log:
        paths.LAUNCH_LOG,
    # Launch k of every configuration before launch k + 1 of any, each round in its own order.
    priority: get_launch_priority
    retries: config["retries"]
    threads: config["server"]["threads"]
    resources:
        attempt=get_attempt,
        # On a CPU study a constant: one input function less per job in a large grid's plan.
        gpu=get_gpus if config["server"]["gpu"] else 0,
    params:
        spec=get_launch_spec,
        launch=get_launch_command,
        server_log=paths.SERVER_LOG,
        failures=str(paths.FAILURES),
        infer_from=get_infer_from,
    # The first line is a comment for `snakemake -n -p`: the server command this job launches.
    shell:
        "# server: {params.launch}\n"
        "{PYTHON} -m specsweep launch --spec {params.spec:q} --manifests {input.manifests} "
        "--out {output} --server-log {params.server_log} "
        "--failures-dir {params.failures} --attempt {resources.attempt} "
        "--infer-from={params.infer_from:q} --quiet-host {QUIET_HOST:q} 2> {log}"


# Racing (verdict.until_decided): after round r, which configurations are still in some undecided
# cell's best set and get launch r + 1. Decided from finished results alone, so the same results
# always plan the same next round.
checkpoint race_round:
    input:
        get_race_inputs,
    output:
        paths.RACE_ROUND,
    log:
        paths.RACE_LOG,
    params:
        study=get_study_json,
        launches=str(paths.LAUNCHES),
        failures=str(paths.FAILURES),
    shell:
        "{PYTHON} -m specsweep race --config-json {params.study:q} --round {wildcards.round} "
        "--launches {params.launches} --failures {params.failures} --out {output} 2> {log}"
