"""Snakemake glue: runs.csv -> fits.csv + fit_predictions.csv (rule fits), or one training
series' fit figure (rule plot_fit, wildcards workload and runtime)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.analyse import fits  # noqa: E402
from scalesweep.report import fit_figure  # noqa: E402

sm = snakemake  # noqa: F821
SERIES = fits.CAMPAIGN_SERIES  # as scaling.csv groups them


def training_runs():
    """The runs scaling.csv is made of (CNN training), empty while none has finished."""
    try:
        runs = pd.read_csv(sm.input.runs)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=[*SERIES, "count", "time_s"])
    return fits.campaign_training_runs(runs)


def series_fits(runs):
    """[(series values, its runs, [amdahl fit, usl fit])], with the sweep's baseline."""
    return fits.campaign_fits(runs, sm.config)


runs = training_runs()
if sm.rule == "fits":
    rows, predictions = [], []
    for values, group, found in series_fits(runs):
        targets = fits.prediction_counts(group["count"])
        for fit in found:
            rows.append({**values, **fits.fit_row(fit)})
            predictions.append(fits.predict(fit, targets).assign(**values))
            print(f"{values}: {fit.model} {fit.status} {fit.reason}", file=sys.stderr)
    pd.DataFrame(rows, columns=[*SERIES, *fits.FIT_COLUMNS]).to_csv(
        sm.output.fits, index=False, float_format="%.6g")
    table = pd.concat(predictions, ignore_index=True) if predictions else pd.DataFrame()
    table.reindex(columns=[*SERIES, *fits.PREDICTION_COLUMNS]).to_csv(
        sm.output.predictions, index=False, float_format="%.6g")
elif sm.rule == "plot_fit":
    workload, runtime = sm.wildcards.workload, sm.wildcards.runtime
    mine = runs[(runs["workload"] == workload) & (runs["runtime"] == runtime)]
    series = [(f"{values['threads']} thread(s)/rank", group, found)
              for values, group, found in series_fits(mine)]
    unit = "GPUs" if "gpus" in mine and (mine["gpus"] > 0).any() else "ranks"
    fig = fit_figure.fit_figure(series, "count", "time_s", title=f"{workload}, {runtime}: "
                          "Amdahl and USL fits", count_label=unit,
                          time_label="seconds per epoch (steady state)")
    fig.savefig(sm.output[0], dpi=120)
else:
    raise ValueError(f"fits.py: nothing to do for rule {sm.rule}")
