# scalesweep: what containers cost ML training and LLM inference, and how both scale.
# This file is a table of contents; the logic lives in workflow/rules and workflow/scalesweep.


include: "workflow/rules/config.smk"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/containers.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/fits.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/drift.smk"


onstart:
    # a campaign directory that cannot be written, refused before any job
    _unwritable = check_writable()
    if _unwritable:
        raise WorkflowError(_unwritable)
    record_owner()
    print(sweep_banner(POINTS, SELECTED, SELECTION))


onsuccess:
    print(completion_message())


onerror:
    # what failed, named: points (with their records' reasons) or other jobs (with their
    # logs), from Snakemake's log of this run (`log`)
    from scalesweep.campaign.failed_run import failure_message

    print(failure_message(log, PARTIAL_HINT))


rule summary:
    # `snakemake summary`: every requested measurement and the summary tables
    # (results/summary/), without the figures and report tables `all` adds to them
    # (`scalesweep rerun --tables-only`)
    input:
        # the summary tables; every requested measurement through the lists of runs
        # (named too: a list deleted is made again), and by name a run missing from a
        # list made already, so that it is measured again (scalesweep.plan.walk)
        rules.aggregate.output,
        runs_lists,
        missing_listed,
        expand(rules.container_startup.output, runtime=IMAGE_RULES.container_runtimes()),
        IMAGE_RULES.manifests(),


rule all:
    default_target: True
    input:
        rules.summary.input,
        rules.plot_scaling.output,
        # the LLM figure where the sweep has an LLM workload (it would be empty elsewhere)
        rules.plot_llm.output if report_workloads("llm") else [],
        # LLM serving under load: where an LLM workload measures load levels
        rules.report_load.output if load_targets(POINTS, config) is not None else [],
        rules.fits.output,
        expand(rules.plot_fit.output, zip, **figure_keywords(POINTS, config)),
        rules.report_run_tables.output,
        rules.report_tables.output,
        rules.report_decomposition.output,
        rules.report_attribution.output,
        rules.report_points.output,
        rules.report_startup_table.output,
        rules.report_startup_scale.output,
        rules.report_startup_scale_figure.output if IMAGE_RULES.scale_runtimes() else [],
        expand(rules.report_startup.output, runtime=IMAGE_RULES.container_runtimes()),
        expand(rules.report_efficiency.output, workload=report_workloads("cnn")),
        expand(rules.report_overhead.output, workload=report_workloads()),
        expand(rules.report_epoch_times.output, workload=report_workloads("cnn")),
        expand(rules.report_memory.output, workload=report_workloads()),
        rules.report_memory_tables.output,
        rules.report_summary.output,
        rules.report_pages.output,
        rules.report_drift.output,
        expand(rules.report_memory_timeline.output, workload=report_workloads()),
