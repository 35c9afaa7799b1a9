# Aggregate whatever runs exist into tidy tables, then plot them for the report.


# Reading a few JSON/CSV files and drawing two figures: on the submit host, never a queued
# Slurm job (on Frontier a job can wait hours, and only 4 may be eligible to run at once).
localrules:
    runs_list,
    aggregate,
    plot_scaling,
    plot_llm,


# The runs, listed (scalesweep.plan.walk.RUNS_LIST: whole series of one workload's arm,
# at most about LIST_RUNS runs a list): the aggregate rule reads them through these lists
# rather than taking every run as an input. A run measured again makes its list, and so
# the summary, again. A shell builtin, not a run: block (Snakemake starts a run: job as a
# snakemake process of its own, which parses the whole workflow: about 10 s a job at
# 100,000 points).
rule runs_list:
    input:
        runs_list_inputs,
    output:
        RUNS_LIST,
    log:
        "logs/lists/{workload}/{arm}/part{part}.log",
    conda:
        "../../envs/scalesweep.yaml"
    shell:
        "printf '%s\\n' {input:q} > {output:q} 2> {log:q}"


rule aggregate:
    input:
        # the runs, in a few lists (rule runs_list)
        runs=runs_lists,
        series=SERIES_FINAL,
    output:
        runs=report_table("runs"),
        # the same rows, typed and columnar (pyarrow): what pandas, polars or DuckDB read fast
        runs_parquet="results/summary/runs.parquet",
        scaling=report_table("scaling"),
        llm=report_table("llm"),
        overhead=report_table("overhead"),
        # LLM serving under load (scalesweep.analyse.load): empty without load levels
        load=report_table("llm_load"),
        load_overhead=report_table("llm_load_overhead"),
        points="results/summary/points.csv",
        # the settings the verdicts rest on (scalesweep.analyse.summary.campaign_record)
        campaign="results/summary/campaign.json",
    log:
        "logs/aggregate.log",
    conda:
        "../../envs/scalesweep.yaml"
    # metrics files read in parallel (scalesweep.analyse.collect: at most MAX_WORKERS
    # processes), after every point: nothing is measured beside it
    threads: all_cores
    script:
        "../scripts/aggregate.py"


# a report (or a run) on a campaign some of whose points are not measured: how to get
# the summary and report of those that are (scalesweep.campaign.parse_time)
_note = summary_note(rules.aggregate.output.runs, config, WALK.metrics_files)
if _note:
    print(_note, file=sys.stderr)


rule plot_scaling:
    input:
        scaling=rules.aggregate.output.scaling,
        runs=rules.aggregate.output.runs,
    output:
        report(
            "results/plots/scaling.png",
            caption="../report/scaling.rst",
            category="Scaling",
            subcategory="measured vs ideal time",
            labels={"figure": "measured vs ideal time"},
        ),
    log:
        "logs/plot_scaling.log",
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/plot_scaling.py"


rule plot_llm:
    input:
        runs=rules.aggregate.output.runs,
    output:
        report(
            "results/plots/llm.png",
            caption="../report/llm.rst",
            category="LLM inference",
            subcategory="time and tokens per second vs GPUs",
            labels={"figure": "runtime vs GPU count"},
        ),
    log:
        "logs/plot_llm.log",
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/plot_llm.py"
