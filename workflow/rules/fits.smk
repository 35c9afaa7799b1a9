# Scaling-law fits (Amdahl, USL) of each training series, with predictions past the sweep.


rule fits:
    input:
        runs=rules.aggregate.output.runs,
    output:
        fits=report_table("fits"),
        predictions=report_table("fit_predictions"),
    log:
        "logs/fits.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/fits.py"


rule plot_fit:
    input:
        runs=rules.aggregate.output.runs,
        fits=rules.fits.output.fits,
    output:
        report(
            "results/plots/fits/{workload}/{runtime}.png",
            caption="../report/fits.rst",
            category="Scaling",
            subcategory="fits",
            labels={
                "workload": "{workload}",
                "runtime": "{runtime}",
                "item": "figure: fits and predictions",
            },
        ),
    log:
        "logs/fits/{workload}/{runtime}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/fits.py"
