# The machine's drift over the campaign (the probe before and after every run) and what it
# does to the run-to-run spread: a table and a figure for the report.


rule report_drift:
    input:
        runs=rules.aggregate.output.runs,
    output:
        table=report_table("drift"),
        figure=report(
            "results/plots/drift.png",
            caption="../report/drift.rst",
            category="Machine drift",
            subcategory="probe over the campaign",
            labels={"figure": "probe over the campaign"},
        ),
    log:
        "logs/report/drift.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_drift.py"
