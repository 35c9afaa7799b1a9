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
        # `python -m scalesweep build-image` (scalesweep.images) from this repository,
        # also in a conda environment that has not installed the package
        lib=f"{workflow.basedir}/workflow",
        fmt=image_format_args,
        # the site's build args (sites/<name>.yaml build_args), each shell-quoted
        site_args=shlex.join(
            arg
            for key, value in site_of(config)["build_args"].items()
            for arg in ("--build-arg", f"{key}={value}")
        ),
    shell:
        "PYTHONPATH={params.lib:q} python -m scalesweep build-image"
        " --builder {params.c[builder]:q}"
        " --recipe {input.recipe:q} --requirements {input.requirements:q}"
        " --out {output.image:q} --manifest {output.manifest:q} {params.fmt} {params.site_args}"
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
        profile_check=profile_check,
    script:
        "../scripts/measure_startup.py"
