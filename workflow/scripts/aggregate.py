"""Snakemake glue: metrics files -> runs.csv, scaling.csv, llm.csv, overhead.csv,
llm_load.csv, llm_load_overhead.csv, points.csv.

Disturbed runs (interference above the thresholds during their measurement) stay in
runs.csv, marked, and are left out of every statistic; each table row counts them
(n_disturbed). The tables are made by scalesweep.analyse.collect's *_summary functions.
"""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

from scalesweep.analyse.collect import collect_runs, point_states, runs_points  # noqa: E402
from scalesweep.analyse.load import load_runs, load_summary, load_verdicts  # noqa: E402
from scalesweep.analyse.summary import (  # noqa: E402
    campaign_record,
    campaign_settings,
    llm_summary,
    overhead_summary,
    scaling_summary,
)
from scalesweep.plan.sweep import HISTORY_DIR, sweep_points  # noqa: E402
from scalesweep.record.metrics import write_json_atomic  # noqa: E402
from scalesweep.record.pointdir import METRICS_JSON, RUNS_DIR  # noqa: E402
from scalesweep.report.significance import add_q_values  # noqa: E402

sm = snakemake  # noqa: F821
cfg = sm.config


def log(text):
    print(text, file=sys.stderr)


paths = list(sm.input.metrics)
if cfg["analysis"]["partial"]:
    # a point measured again whose new run failed: its earlier run (kept in history/ by
    # scalesweep rerun) stands in, said so in the log (readable_runs)
    named = set(paths)
    for p in sweep_points(cfg):
        f = Path(RUNS_DIR, p.path, METRICS_JSON)
        if str(f) not in named and not f.is_file() and (f.parent / HISTORY_DIR).is_dir():
            paths.append(str(f))
runs = collect_runs(paths, cfg, log)
runs.to_csv(sm.output.runs, index=False)
if not runs.empty and runs["disturbed"].any():
    log(f"{int(runs['disturbed'].sum())} disturbed runs kept in runs.csv, left out of the "
        "statistics")

# With a partial sweep a series may lack its baseline, or a point its native twin: such
# series are left out of the derived tables (and named in the log); points.csv and the
# report's missing-points table say what is missing.
scaling_summary(runs, cfg, log).to_csv(sm.output.scaling, index=False, float_format="%.10g")
llm_summary(runs).to_csv(sm.output.llm, index=False, float_format="%.10g")
# q values (Benjamini-Hochberg) beside the p values: many comparisons in one campaign
add_q_values(overhead_summary(runs, cfg, log)).to_csv(
    sm.output.overhead, index=False, float_format="%.10g")
# LLM serving under load: each load level over the runs, and the container's effect at each
levels = load_runs(runs)
load_summary(levels).to_csv(sm.output.load, index=False, float_format="%.10g")
# (q values over its own comparisons: many levels x metrics in one table)
add_q_values(load_verdicts(levels, campaign_settings(cfg))).to_csv(
    sm.output.load_overhead, index=False, float_format="%.10g")
# what the verdicts above rest on, beside runs.csv: `scalesweep overhead|scaling|fit` on
# this runs.csv read it and give the same answers
write_json_atomic(sm.output.campaign, campaign_record(cfg, runs))

# Every requested point, and every repeat whose metrics came in (adaptive repeats add
# repeats beyond the config's); metrics already read by collect_runs are not read again.
points = sorted(set(sweep_points(cfg)) | set(runs_points(runs)))
disturbed = (dict(zip(runs.loc[runs["disturbed"], "path"],
                      runs.loc[runs["disturbed"], "disturbed_reason"]))
             if not runs.empty else {})
states = point_states(points, done=runs["path"], disturbed=disturbed, config=cfg)
# a point whose own run could not be read, summarised by its earlier run (history/)
earlier = {str(Path(p).parents[2].relative_to(RUNS_DIR)): p
           for p in (runs["path"] if not runs.empty else []) if f"/{HISTORY_DIR}/" in p}
for i in states.index[states["path"].isin(earlier)]:
    used = earlier[states.at[i, "path"]]
    states.at[i, "reason"] = "; ".join(r for r in (states.at[i, "reason"] or "",
                                                   f"the summary uses the earlier run {used}") if r)
states.to_csv(sm.output.points, index=False)
log(states["state"].value_counts().to_string())
