"""Snakemake glue: metrics files -> memory_timeline.csv and memory.csv (rule
report_memory_tables), or memory_timeline.csv -> one workload's figure of memory over
time (rule report_memory_timeline)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report import memory as mr  # noqa: E402

sm = snakemake  # noqa: F821


def read(path, workload):
    """This workload's rows of a table (empty while nothing has finished)."""
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    return df[df["workload"] == workload] if "workload" in df else df.iloc[0:0]


if sm.rule == "report_memory_tables":
    from scalesweep.analyse.collect import readable_runs, summarised_metrics

    from scalesweep.plan.sweep import is_warmup

    records = readable_runs(summarised_metrics(sm.input.runs), sm.config,
                            lambda text: print(text, file=sys.stderr))
    # the warm-up blocks' runs (measurement.warmup_blocks) are in no statistic
    records = [r for r in records if not is_warmup(sm.config, r[2]["repeat"])]
    timeline = mr.timeline_table(records)
    timeline.to_csv(sm.output.timeline, index=False, float_format="%.6g")
    mr.peak_table(records).to_csv(sm.output.peaks, index=False, float_format="%.6g")
    with_timeline = timeline.drop_duplicates(
        ["workload", "runtime", *mr.GEOMETRY, "repeat"]).shape[0]
    print(f"{len(records)} runs, {with_timeline} with a memory timeline", file=sys.stderr)
elif sm.rule == "report_memory_timeline":
    workload = sm.wildcards.workload
    fig = mr.memory_timeline_figure(read(sm.input.timeline, workload),
                                    read(sm.input.points, workload),
                                    title=f"{workload}: memory over time")
    fig.savefig(sm.output[0], dpi=120)
else:
    raise ValueError(f"report_memory.py: nothing for rule {sm.rule}")
