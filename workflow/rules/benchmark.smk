rule run_configuration:
    input:
        unpack(get_provisioned),
    output:
        paths.RUN_RESULT,
    log:
        paths.RUN_LOG,
    retries: config["retries"]
    threads: config["server"]["threads"]
    resources:
        attempt=get_attempt,
        # On a CPU study a constant: one input function less per job in a large grid's plan.
        gpu=get_gpus if config["server"]["gpu"] else 0,
    params:
        spec=get_run_spec,
        launch=get_launch_command,
        server_log=paths.SERVER_LOG,
        failures=str(paths.FAILURES),
    # The first line is a comment for `snakemake -n -p`: the server command this job launches.
    shell:
        "# server: {params.launch}\n"
        "{PYTHON} -m specsweep run --spec {params.spec:q} --manifests {input} "
        "--out {output} --server-log {params.server_log} "
        "--failures-dir {params.failures} --attempt {resources.attempt} "
        "--guard {GUARD:q} 2> {log}"
