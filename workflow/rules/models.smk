# Stage each LLM once: a synthetic model generated here, a local GGUF file, or an Ollama pull.


rule stage_model:
    output:
        directory("resources/models/{model}"),
    log:
        "logs/models/{model}.stage.log",
    localrule: True  # an Ollama pull needs the registry: login node, not compute node
    conda:
        "../../envs/scalesweep.yaml"
    params:
        m=lambda wildcards: {
            **{"path": "", "name": "", "seed": 0, "ollama_bin": "ollama"},
            **config["models"][wildcards.model],
        },
        script=in_repo("scripts/stage_model.py"),
    shell:
        "python {params.script:q} --source {params.m[source]:q}"
        " --path={params.m[path]:q} --name={params.m[name]:q}"
        " --seed {params.m[seed]:q} --ollama-bin {params.m[ollama_bin]:q}"
        " --out {output:q} > {log:q} 2>&1"
