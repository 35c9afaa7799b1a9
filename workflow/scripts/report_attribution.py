"""Snakemake glue: overhead.csv and decomposition.csv (and scalesweep ablate's
ablation.csv where it ran) -> attribution.csv (why the container differs: isolation vs
software stack, and the stack's cause; scalesweep.analyse.attribution)."""

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


ablation = read(sm.input.ablation[0]) if sm.input.ablation else None  # scalesweep ablate's
table = attribution_table(read(sm.input.overhead), read(sm.input.decomposition),
                          sm.config["measurement"]["equivalence_margin_pct"],
                          ablation=ablation)
table.to_csv(sm.output.attribution, index=False, float_format="%.10g")
print(f"{len(table)} attribution rows", file=sys.stderr)
