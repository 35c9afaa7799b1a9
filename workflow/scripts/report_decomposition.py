"""Snakemake glue: runs.csv and the metrics files -> decomposition.csv (where the
container's cost goes: scalesweep.analyse.decomposition), its figure
(scalesweep.report.decomposition) and differences.csv (what differs between the two
stacks: scalesweep.analyse.differences)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from scalesweep.analyse.collect import readable_runs, summarised_metrics  # noqa: E402
from scalesweep.analyse.decomposition import decomposition_table  # noqa: E402
from scalesweep.analyse.differences import differences_table  # noqa: E402
from scalesweep.report.decomposition import decomposition_figure  # noqa: E402
from scalesweep.report.style import no_data_figure  # noqa: E402

sm = snakemake  # noqa: F821


def log(text):
    print(text, file=sys.stderr)


try:
    runs = pd.read_csv(sm.input.runs)
except pd.errors.EmptyDataError:  # nothing finished yet
    runs = pd.DataFrame()
table = decomposition_table(runs, sm.config, log)
table.to_csv(sm.output.decomposition, index=False, float_format="%.10g")
try:
    fig = decomposition_figure(table)
except ValueError as exc:  # a value it cannot draw: the table stands, the figure says why
    log(f"decomposition figure not drawn: {exc}")
    fig = no_data_figure("where the container's cost goes",
                         f"not drawn: {exc} (decomposition.csv holds every number)")
fig.savefig(sm.output.figure, dpi=110)
plt.close(fig)
records = [(m, row) for _, m, row in readable_runs(summarised_metrics(runs), sm.config, log)]
differences = differences_table(records)
differences.to_csv(sm.output.differences, index=False)
log(f"{len(runs)} runs: {len(table)} decomposition rows, {len(differences)} difference rows")
