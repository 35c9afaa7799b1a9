# Aggregate whatever runs exist into tidy tables, then plot them for the report.


rule aggregate:
    input:
        metrics=aggregate_metrics,
        series=series_final_files(),
    output:
        runs=report(
            "results/summary/runs.csv",
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "runs"},
        ),
        scaling=report(
            "results/summary/scaling.csv",
            caption="../report/scaling_table.rst",
            category="Tables",
            labels={"table": "scaling"},
        ),
        llm=report(
            "results/summary/llm.csv",
            caption="../report/llm_table.rst",
            category="Tables",
            labels={"table": "LLM inference"},
        ),
        overhead=report(
            "results/summary/overhead.csv",
            caption="../report/overhead_table.rst",
            category="Tables",
            labels={"table": "container overhead"},
        ),
        points="results/summary/points.csv",
        # the settings the verdicts rest on (scalesweep.collect.campaign_record)
        campaign="results/summary/campaign.json",
    log:
        "logs/aggregate.log",
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/aggregate.py"


# a report (or a run) on a campaign some of whose points are not measured: how to get
# the summary and report of those that are (common.smk: summary_note)
_note = summary_note(rules.aggregate.output.runs)
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
            labels={"figure": "runtime vs GPU count"},
        ),
    log:
        "logs/plot_llm.log",
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/plot_llm.py"
