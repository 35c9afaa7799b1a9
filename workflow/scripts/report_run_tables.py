"""Snakemake glue: metrics files -> epochs.csv (one row per epoch) and provenance.csv."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

from scalesweep.analyse.collect import readable_runs, summarised_metrics  # noqa: E402
from scalesweep.plan.sweep import warmup_blocks  # noqa: E402
from scalesweep.report.run_tables import epochs_table, provenance_table  # noqa: E402

sm = snakemake  # noqa: F821
records = [(path, m) for path, m, _ in readable_runs(
    summarised_metrics(sm.input.runs), sm.config, lambda text: print(text, file=sys.stderr))]
# warmup: the run is in a warm-up block (measurement.warmup_blocks), as in runs.csv
warm = warmup_blocks(sm.config)
epochs_table(records, warm).to_csv(sm.output.epochs, index=False, float_format="%.10g")
provenance_table(records, warm).to_csv(sm.output.provenance, index=False)
print(f"{len(records)} runs", file=sys.stderr)
