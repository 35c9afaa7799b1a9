# scalesweep: what containers cost ML training and LLM inference, and how both scale.
# This file is a table of contents; the logic lives in workflow/rules and workflow/scalesweep.


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/containers.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/aggregate.smk"


onstart:
    print(sweep_banner())


onsuccess:
    print(
        "scalesweep: sweep complete; summary in results/summary/, report: snakemake --report report.html"
    )


onerror:
    print(
        "scalesweep: some points failed; finished points are kept. "
        "See failure.json in each failed point's directory, then re-run the same command."
    )


rule all:
    default_target: True
    input:
        rules.aggregate.output,
        rules.plot_scaling.output,
        rules.plot_llm.output,
        expand(rules.container_startup.output, runtime=container_runtimes()),
