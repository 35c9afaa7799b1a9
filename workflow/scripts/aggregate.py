"""Snakemake glue: metrics files -> runs.csv, scaling.csv, points.csv."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.analysis import describe_repeats, overhead_table, scaling_table  # noqa: E402
from scalesweep.collect import collect_runs, point_states  # noqa: E402
from scalesweep.sweep import sweep_points, workload_axes  # noqa: E402

sm = snakemake  # noqa: F821
cfg = sm.config
runs = collect_runs(sm.input.metrics, cfg)
runs.to_csv(sm.output.runs, index=False)

# With a partial sweep a series may lack its baseline, or a point its native twin: such
# series are left out of the derived tables (and named in the log); points.csv and the
# report's missing-points table say what is missing.
tables = []
trained = runs[runs["payload"] == "cnn"] if not runs.empty else runs
series_keys = ["workload", "runtime", "threads"]
for key, df in trained.groupby(series_keys, sort=True):
    baseline = workload_axes(cfg, key[0]).get("baseline")
    if baseline is not None and baseline not in set(df["count"]):
        print(f"scaling: {dict(zip(series_keys, key))} has no finished baseline "
              f"count {baseline}; left out", file=sys.stderr)
        continue
    tables.append(
        scaling_table(
            df,
            count_col="count",
            time_col="time_s",
            group_cols=series_keys,
            baseline=baseline,
            cv_threshold=cfg.get("analysis", {}).get("cv_threshold", 0.05),
        )
    )
scaling = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
scaling.to_csv(sm.output.scaling, index=False, float_format="%.10g")

llm = runs[runs["payload"] == "llm"] if not runs.empty else runs
llm_table = (
    describe_repeats(llm, ["workload", "runtime", "nodes", "gpus", "threads"], "time_s")
    if not llm.empty
    else pd.DataFrame()
)
if not llm.empty:
    extra = llm.groupby(["workload", "runtime", "nodes", "gpus", "threads"], as_index=False)[
        ["tokens_per_s", "ttft_p50_s", "latency_p50_s", "peak_rss_mb"]
    ].mean()
    llm_table = llm_table.merge(extra, on=["workload", "runtime", "nodes", "gpus", "threads"])
llm_table.to_csv(sm.output.llm, index=False, float_format="%.10g")

# Container overhead: every container runtime against native at the same point.
keys = ["workload", "nodes", "gpus", "ranks", "threads"]
paired = runs
if not runs.empty:
    has_native = runs.groupby(keys)["runtime"].transform(lambda r: (r == "native").any())
    for key in runs.loc[~has_native, keys].drop_duplicates().itertuples(index=False):
        print(f"overhead: {dict(zip(keys, key))} has no finished native run; left out", file=sys.stderr)
    paired = runs[has_native]
if not paired.empty and paired["runtime"].nunique() > 1:
    overhead = overhead_table(paired, "runtime", "time_s", keys, baseline_runtime="native")
else:
    overhead = pd.DataFrame(columns=[*keys, "runtime", "native_s", "time_s", "overhead_pct"])
overhead.to_csv(sm.output.overhead, index=False, float_format="%.10g")

states = point_states(sweep_points(cfg), done=runs["path"])  # read once, by collect_runs
states.to_csv(sm.output.points, index=False)
print(states["state"].value_counts().to_string(), file=sys.stderr)
