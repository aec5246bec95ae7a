rule run_configuration:
    input:
        server="results/provision/llama-server.json",
        model="results/provision/model.json",
    output:
        "results/runs/tp{tp}-b{budget}-ctx{context}.json",
    log:
        "logs/runs/tp{tp}-b{budget}-ctx{context}.log",
    retries: config["retries"]
    threads: config["server"]["threads"]
    resources:
        attempt=get_attempt,
        # On a CPU study a constant: one input function less per job in a large grid's plan.
        gpu=get_gpus if config["server"]["gpu"] else 0,
    params:
        spec=get_run_spec,
        server_log="logs/server/tp{tp}-b{budget}-ctx{context}.log",
        failures="results/failures",
    shell:
        "{PYTHON} -m specsweep run --spec {params.spec:q} "
        "--server-manifest {input.server} --model-manifest {input.model} "
        "--out {output} --server-log {params.server_log} "
        "--failures-dir {params.failures} --attempt {resources.attempt} "
        "--guard {GUARD:q} 2> {log}"
