# Container images (containers.images, by name: scalesweep.plan.imageset) - each built from its
# recipe, pulled from a registry, or described where it lies, once, on the login node -
# then the container runtimes' own start-up timed in them.


# One image from its recipe (scalesweep.images.build: cached by content), into what the builder
# writes: a directory (charliecloud dir, podman oci-dir, apptainer sandbox); build_image_sif and
# build_image_squashfs below write one file.
rule build_image:
    input:
        unpack(IMAGE_RULES.recipe_inputs),
    output:
        image=directory("resources/images/{image}"),
        manifest="resources/images/{image}.manifest.json",
    log:
        "logs/images/{image}.build.log",
    wildcard_constraints:
        image=IMAGE_RULES.made_by("build", "dir", "oci-dir", "sandbox"),
    localrule: True  # sites build on login nodes (Frontier: apptainer build --fakeroot)
    conda:
        "../../envs/scalesweep.yaml"
    params:
        # `python -m scalesweep build-image` (scalesweep.images.cli) from this repository,
        # also in a conda environment that has not installed the package
        lib=str(REPO / "workflow"),
        how=IMAGE_RULES.build_args,
        # the site's build args (sites/<name>.yaml build_args), each shell-quoted
        site_args=shlex.join(
            arg
            for key, value in site_of(config)["build_args"].items()
            for arg in ("--build-arg", f"{key}={value}")
        ),
    shell:
        "PYTHONPATH={params.lib:q} python -m scalesweep build-image {params.how}"
        " --recipe {input.recipe:q} --requirements {input.requirements:q}"
        " --out {output.image:q} --manifest {output.manifest:q} {params.site_args}"
        " > {log:q} 2>&1"


# `use rule` does not carry `localrule:` over: the file-writing builds are named here.
localrules:
    build_image_sif,
    build_image_squashfs,


# An Apptainer/SingularityCE build: one SIF file.
use rule build_image as build_image_sif with:
    output:
        image="resources/images/{image}.sif",
        manifest="resources/images/{image}.manifest.json",
    wildcard_constraints:
        image=IMAGE_RULES.made_by("build", "sif"),


# A Charliecloud SquashFS image: one file.
use rule build_image as build_image_squashfs with:
    output:
        image="resources/images/{image}.sqfs",
        manifest="resources/images/{image}.manifest.json",
    wildcard_constraints:
        image=IMAGE_RULES.made_by("build", "squashfs"),


# A prebuilt image from a registry (`prebuilt: oras://...`, docker://, library://,
# https://): `apptainer pull` once, on the login node (compute nodes may have no route to
# the registry), with the same manifest as a build (the reference, the SIF's sha256 and
# labels, its base image and size).
rule pull_image:
    output:
        image="resources/images/{image}.sif",
        manifest="resources/images/{image}.manifest.json",
    log:
        "logs/images/{image}.pull.log",
    wildcard_constraints:
        image=IMAGE_RULES.made_by("pull", "sif"),
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        lib=str(REPO / "workflow"),
        how=IMAGE_RULES.source_args,
    shell:
        "PYTHONPATH={params.lib:q} python -m scalesweep describe-image {params.how}"
        " --pull --out {output.image:q} --manifest {output.manifest:q} > {log:q} 2>&1"


# A prebuilt image used where it lies (`prebuilt: /path/image.sif`): described once, so
# every run records its digest, labels and size like a built one's.
rule describe_image:
    output:
        manifest="resources/images/{image}.manifest.json",
    log:
        "logs/images/{image}.describe.log",
    wildcard_constraints:
        image=IMAGE_RULES.made_by("local"),
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        lib=str(REPO / "workflow"),
        how=IMAGE_RULES.source_args,
    shell:
        "PYTHONPATH={params.lib:q} python -m scalesweep describe-image {params.how}"
        " --manifest {output.manifest:q} > {log:q} 2>&1"


# A copy of a directory image with the host's MPI libraries injected (ch-fromhost, the
# Charliecloud way): what charliecloud-hostmpi runs when the site lists host_mpi.libs.
# The image itself keeps its own MPI for the charliecloud (container MPI) points.
rule inject_host_mpi:
    input:
        unpack(IMAGE_RULES.inject_inputs),
    output:
        image=directory("resources/images/{image}"),
        manifest="resources/images/{image}.manifest.json",
    log:
        "logs/images/{image}.inject.log",
    wildcard_constraints:
        image=IMAGE_RULES.made_by("inject"),
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        lib=str(REPO / "workflow"),
        libs=IMAGE_RULES.inject_args,
    shell:
        "PYTHONPATH={params.lib:q} python -m scalesweep inject-host-mpi {params.libs}"
        " --image {input.image:q} --base-manifest {input.manifest:q}"
        " --out {output.image:q} --manifest {output.manifest:q} > {log:q} 2>&1"


# A placed image copied into the own storage of a runtime that runs images from there
# (Podman), in the storage of the runtime token's mode (podman: overlay, podman+vfs: vfs),
# with the site's options (runtimes.podman: global_options, storage_root): a directory
# image's tar imported offline (`tar -C IMAGE -c . | podman import - REF`), a saved one
# pulled from dir:. Keyed by the image's content digest (a label of the stored image):
# nothing is copied when the storage holds it already.
rule load_image:
    input:
        unpack(IMAGE_RULES.load_inputs),
    output:
        "resources/images/{image}.{runtime}.load.json",
    log:
        "logs/images/{image}.{runtime}.load.log",
    wildcard_constraints:
        image=IMAGE_RULES.loads_made("image"),
        runtime=IMAGE_RULES.loads_made("runtime"),
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        lib=str(REPO / "workflow"),
        site=config["site"],
    shell:
        "PYTHONPATH={params.lib:q} python -m scalesweep load-image"
        " --runtime {wildcards.runtime:q} --image {input.image:q}"
        " --manifest {input.manifest:q} --site {params.site:q} --out {output:q}"
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
    threads: MEASUREMENT_THREADS
    resources:
        measure=1,
    params:
        repeats=config["containers"]["startup_repeats"],
        # a string (params are pickled into the script's preamble)
        image=IMAGE_RULES.startup_path,
    script:
        "../scripts/measure_startup.py"


# Start-up at scale (issue #44): K ranks at once, on the node's disk and on a file system
# serving metadata at a bounded rate (scalesweep.run.startscale); startup_scale.enabled
rule startup_scale:
    input:
        unpack(IMAGE_RULES.scale_inputs),
    output:
        "results/startup_scale/{runtime}.json",
    log:
        "logs/startup_scale/{runtime}.log",
    conda:
        "../../envs/scalesweep.yaml"
    # a measurement: every local core, so nothing else of ours runs beside it
    threads: MEASUREMENT_THREADS
    resources:
        # whole nodes under Slurm, each (nodes, ranks) an srun step: scalesweep.run.slurm
        **(
            scale_resources(config, IMAGE_RULES.scale_nodes())
            if SLURM_SITE and IMAGE_RULES.scale_runtimes()
            else {}
        ),
        measure=1,
    params:
        image=IMAGE_RULES.scale_image,
        nodes=IMAGE_RULES.scale_nodes(),
    script:
        "../scripts/measure_startup_scale.py"
