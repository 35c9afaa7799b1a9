"""Snakemake glue: metrics files (in lists, rule runs_list) -> runs.csv, scaling.csv,
llm.csv, overhead.csv, llm_load.csv, llm_load_overhead.csv, points.csv, campaign.json
(scalesweep.analyse.aggregate.write_summary; the runs are read through the cache beside
runs.csv, scalesweep.analyse.runcache).

Disturbed runs (interference above the thresholds during their measurement) stay in
runs.csv, marked, and are left out of every statistic; each table row counts them
(n_disturbed).
"""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

from scalesweep.analyse.aggregate import OUTPUTS, write_summary  # noqa: E402

sm = snakemake  # noqa: F821


def log(text):
    print(text, file=sys.stderr)


# the runs, from the lists (rule runs_list)
metrics = [line for path in sm.input.runs
           for line in Path(path).read_text().splitlines() if line]
write_summary(metrics, sm.config, {name: getattr(sm.output, name) for name in OUTPUTS},
              log, workers=sm.threads)
