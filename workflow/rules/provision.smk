# Every provisioned target (study/targets.py): a backend's embedded server and model, or a prompt
# set (prompts-<set>), made by the module that owns it from the pins its params record.
rule provision:
    input:
        get_provision_needs,
    output:
        paths.PROVISION_MANIFEST,
    log:
        paths.PROVISION_LOG,
    params:
        **PROVISION_RECORD,
        pins=get_provision_pins,
    shell:
        "{PYTHON} -m specsweep provision {wildcards.target} --pins {params.pins:q} "
        "--needs {input} --out {output} --log {log}"
