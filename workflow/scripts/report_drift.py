"""Snakemake glue: runs.csv -> drift.csv (machine drift and run-to-run spread per series)
and the drift figure (the machine-speed probe over the campaign's time).

Made by scalesweep.analyse.drift (the table) and scalesweep.report.drift (the figure) from runs.csv's probe columns (scalesweep.measure.probe)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.analyse.drift import drift_table  # noqa: E402
from scalesweep.report.drift import drift_figure  # noqa: E402

sm = snakemake  # noqa: F821
runs = pd.read_csv(sm.input.runs)
table = drift_table(runs)
table.to_csv(sm.output.table, index=False, float_format="%.10g")
drift_figure(runs, table).savefig(sm.output.figure, dpi=120)
print(f"{len(runs)} runs, {len(table)} series", file=sys.stderr)
