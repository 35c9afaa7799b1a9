"""Snakemake glue: overhead.csv and decomposition.csv -> attribution.csv (why the container
differs: isolation vs software stack, scalesweep.analyse.attribution)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.analyse.attribution import attribution_table  # noqa: E402

sm = snakemake  # noqa: F821


def read(path):
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:  # nothing finished yet
        return pd.DataFrame()


table = attribution_table(read(sm.input.overhead), read(sm.input.decomposition),
                          sm.config["measurement"]["equivalence_margin_pct"])
table.to_csv(sm.output.attribution, index=False, float_format="%.10g")
print(f"{len(table)} attribution rows", file=sys.stderr)
