"""Snakemake glue: the aggregate tables -> one workload's report figure (the rule names it)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report import figures as rf  # noqa: E402
from scalesweep.report import run_figures as rrf  # noqa: E402

sm = snakemake  # noqa: F821
workload = sm.wildcards.workload


def read(name):
    """This workload's rows of an input table (empty while nothing has finished)."""
    try:
        df = pd.read_csv(sm.input[name])
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    return df[df["workload"] == workload] if "workload" in df else df.iloc[0:0]


points = read("points")
if sm.rule == "report_efficiency":
    fig = rf.efficiency_figure(read("scaling"), read("runs"), points,
                               title=f"{workload}: scaling efficiency")
elif sm.rule == "report_overhead":
    fig = rf.overhead_figure(read("overhead"), points, title=f"{workload}: container overhead")
elif sm.rule == "report_epoch_times":
    fig = rrf.epoch_time_figure(read("epochs"), points, title=f"{workload}: per-epoch time")
elif sm.rule == "report_memory":
    fig = rrf.memory_figure(read("runs"), points, title=f"{workload}: peak memory")
else:
    raise ValueError(f"report_workload_figure.py: no figure for rule {sm.rule}")
fig.savefig(sm.output[0], dpi=120)
