"""Snakemake glue: scaling.csv + runs.csv -> scaling.png."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report.plots import scaling_figure  # noqa: E402


def read(path):
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


fig = scaling_figure(read(snakemake.input.scaling), read(snakemake.input.runs))  # noqa: F821
fig.savefig(snakemake.output[0], dpi=120)  # noqa: F821
