"""Snakemake glue: runs.csv -> accuracy_parity.csv, achieved_rate.csv, mpi.csv,
data_path.csv, llm_concurrency.csv.

The tables are made by scalesweep.report.tables; the percent of peak uses the site's
node.peak_gflops_per_device (the rule's params, so that a changed peak re-makes them).
"""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report.tables import (  # noqa: E402
    accuracy_parity_table,
    achieved_rate_table,
    concurrency_table,
    data_path_table,
    mpi_table,
    node_peak,
)

sm = snakemake  # noqa: F821
runs = pd.read_csv(sm.input.runs)
peak = node_peak(sm.params.node)
tables = {
    sm.output.parity: accuracy_parity_table(runs),
    sm.output.rate: achieved_rate_table(runs, **peak),
    sm.output.mpi: mpi_table(runs),
    sm.output.data_path: data_path_table(runs),
    sm.output.concurrency: concurrency_table(runs),
}
for path, table in tables.items():
    table.to_csv(path, index=False, float_format="%.10g")
    print(f"{path}: {len(table)} rows", file=sys.stderr)
print(f"{len(runs)} runs; peak {peak}", file=sys.stderr)
