# Scaling-law fits (Amdahl, USL) of each training series, with predictions past the sweep.


rule fits:
    input:
        runs=rules.aggregate.output.runs,
    output:
        fits=report(
            "results/summary/fits.csv",
            caption="../report/fits_table.rst",
            category="Scaling",
            subcategory="fits",
            labels={"workload": "all", "runtime": "all", "item": "table: fitted laws"},
        ),
        predictions=report(
            "results/summary/fit_predictions.csv",
            caption="../report/fits_predictions.rst",
            category="Scaling",
            subcategory="fits",
            labels={"workload": "all", "runtime": "all", "item": "table: predictions"},
        ),
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
