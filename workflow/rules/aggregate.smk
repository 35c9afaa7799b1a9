# Aggregate whatever runs exist into tidy tables, then plot them for the report.


def aggregate_inputs(wildcards):
    """All requested points; with analysis.partial only those already measured."""
    files = metrics_files()
    if config.get("analysis", {}).get("partial", False):
        files = [f for f in files if Path(f).is_file()]
    return {"metrics": files}


rule aggregate:
    input:
        unpack(aggregate_inputs),
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
        points="results/summary/points.csv",
    log:
        "logs/aggregate.log",
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/aggregate.py"


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
