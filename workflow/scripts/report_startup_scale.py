"""Snakemake glue: results/startup_scale/<runtime>.json -> startup_scale.csv (the measured
curves) and startup_model.csv (the fitted model, its held-out error and its prediction at
a site's scale: scalesweep.analyse.startmodel), or the figure of both
(rule report_startup_scale_figure)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.analyse.startmodel import curve_table, model_table  # noqa: E402
from scalesweep.platform.site import load_site  # noqa: E402
from scalesweep.record.metrics import read_metrics  # noqa: E402

sm = snakemake  # noqa: F821
opts = sm.config["startup_scale"]
if sm.rule == "report_startup_scale_figure":
    from scalesweep.report.startscale import startup_scale_figure  # noqa: E402

    fig = startup_scale_figure(pd.read_csv(sm.input.curves), pd.read_csv(sm.input.model))
    fig.savefig(sm.output[0], dpi=110)
else:
    records = [read_metrics(path) for path in sm.input]
    site = load_site(opts["predict_site"])
    shared_fs = (site.get("storage") or {}).get("shared_fs") or {}
    curve_table(records).to_csv(sm.output.curves, index=False, float_format="%.6g")
    model_table(records, site["name"], shared_fs, list(opts["predict_nodes"])).to_csv(
        sm.output.model, index=False, float_format="%.6g")
    print(f"{len(records)} runtimes", file=sys.stderr)
