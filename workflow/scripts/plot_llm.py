"""Snakemake glue: runs.csv -> llm.png. The bars and 95% CIs are llm.csv's: the same
scalesweep.analyse.summary.llm_summary of the same runs (disturbed runs left out, one row of panels
per model)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report.plots import llm_figure  # noqa: E402

try:
    runs = pd.read_csv(snakemake.input.runs)  # noqa: F821
except pd.errors.EmptyDataError:
    runs = pd.DataFrame()
llm_figure(runs).savefig(snakemake.output[0], dpi=120)  # noqa: F821
