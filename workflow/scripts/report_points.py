"""Snakemake glue: points.csv -> missing.csv (not finished, with reason and log) and the
sweep completeness figure."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report.run_figures import completeness_figure  # noqa: E402
from scalesweep.report.run_tables import missing_table  # noqa: E402

sm = snakemake  # noqa: F821
points = pd.read_csv(sm.input.points, dtype={"reason": str, "log": str})
missing = missing_table(points)
missing.to_csv(sm.output.missing, index=False)
completeness_figure(points).savefig(sm.output.figure, dpi=120)
print(f"{len(missing)} of {len(points)} requested points not finished", file=sys.stderr)
