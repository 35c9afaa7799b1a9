# Build the payload image once (cached by content), then time the runtime's own start-up.


rule build_image:
    input:
        unpack(image_recipe_inputs),
    output:
        image=directory("resources/images/{image}"),
        manifest="resources/images/{image}.manifest.json",
    log:
        "logs/images/{image}.build.log",
    localrule: True  # sites build on login nodes (Frontier: apptainer build --fakeroot)
    conda:
        "../../envs/scalesweep.yaml"
    params:
        c=config["containers"],
        script=f"{workflow.basedir}/scripts/build_image.py",
        fmt=image_format_args,
    shell:
        "python {params.script:q} --builder {params.c[builder]:q}"
        " --recipe {input.recipe:q} --requirements {input.requirements:q}"
        " --out {output.image:q} --manifest {output.manifest:q} {params.fmt}"
        " > {log:q} 2>&1"


rule container_startup:
    input:
        unpack(startup_inputs),
    output:
        "results/startup/{runtime}.json",
    log:
        "logs/startup/{runtime}.log",
    conda:
        "../../envs/scalesweep.yaml"
    # a measurement: every local core, so nothing else of ours runs beside it
    threads: measurement_threads
    resources:
        measure=1,
    params:
        repeats=config["containers"]["startup_repeats"],
    script:
        "../scripts/measure_startup.py"
