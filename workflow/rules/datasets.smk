# Stage each dataset once, with a checksum manifest, then verify it before any run reads it.


rule stage_dataset:
    output:
        directory("resources/datasets/{dataset}"),
    log:
        "logs/datasets/{dataset}.stage.log",
    conda:
        "../../envs/scalesweep.yaml"
    params:
        ds=lambda wildcards: config["datasets"][wildcards.dataset],
        script=in_repo("scripts/stage_dataset.py"),
    shell:
        "python {params.script:q} stage"
        " --source {params.ds[source]:q}"
        " --path {params.ds[path]:q}"
        " --classes {params.ds[classes]:q}"
        " --images-per-class {params.ds[images_per_class]:q}"
        " --image-size {params.ds[image_size]:q}"
        " --sha256={params.ds[sha256]:q}"
        " --out {output:q} > {log:q} 2>&1"


# Every file's digest, once; a dataset an older version staged gets its
# MANIFEST.state.json here, so that each run's own check is cheap (sizes and times:
# scalesweep.record.dataset.check_staged). Touching the staged directory re-runs nothing:
# rerun-triggers [input] (profiles/default).
rule verify_dataset:
    input:
        rules.stage_dataset.output,
    output:
        "resources/datasets/{dataset}.verified.json",
    log:
        "logs/datasets/{dataset}.verify.log",
    conda:
        "../../envs/scalesweep.yaml"
    params:
        script=in_repo("scripts/stage_dataset.py"),
    shell:
        "python {params.script:q} verify {input:q} --report {output:q} > {log:q} 2>&1"
