"""Snakemake glue: results/startup/<runtime>.json -> the start-up figure of one runtime
(rule report_startup) or the table of every runtime (rule report_startup_table)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

from scalesweep.record.metrics import read_metrics  # noqa: E402
from scalesweep.report.run_figures import startup_figure  # noqa: E402
from scalesweep.report.run_tables import startup_samples, startup_table  # noqa: E402

sm = snakemake  # noqa: F821
records = [read_metrics(path) for path in sm.input]
if sm.rule == "report_startup":
    startup_figure(startup_samples(records)).savefig(sm.output[0], dpi=120)
else:
    startup_table(records).to_csv(sm.output[0], index=False, float_format="%.6g")
