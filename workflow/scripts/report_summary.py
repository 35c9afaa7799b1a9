"""Snakemake glue: the summary tables -> made.csv (what report.html was made from),
significance.csv (how many "significant" results chance alone would give) and rules.csv
(the benchmarking rules, passed or not for this campaign).

The tables are made by scalesweep.report.made, .significance and .rules (made_table, significance_table,
rules_table) from the campaign's own results/summary/*.csv; "summarised" is when the
newest of them was written.
"""

import datetime
import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report.made import made_table, with_significance, workflow_commit  # noqa: E402
from scalesweep.report.rules import rules_table  # noqa: E402
from scalesweep.report.significance import significance_table  # noqa: E402

sm = snakemake  # noqa: F821


def read(path):
    try:
        return pd.read_csv(path, dtype={"reason": str, "log": str})
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


tables = {name: read(getattr(sm.input, name))
          for name in ("runs", "scaling", "llm", "overhead", "points")}
try:  # the level the campaign's verdicts used (scalesweep.analyse.summary.campaign_settings)
    from scalesweep.analyse.summary import campaign_settings

    confidence = float(campaign_settings(sm.config)["confidence"])
except (ImportError, KeyError):
    from scalesweep.analyse.stats import CONFIDENCE as confidence
alpha = 1 - confidence
newest = max(Path(p).stat().st_mtime for p in sm.input)
summarised = datetime.datetime.fromtimestamp(newest, datetime.timezone.utc)
made = made_table(tables["runs"], tables["points"], summarised,
                  workflow_commit(sm.config["_code_root"]),
                  [Path(p).name for p in sm.input], site=getattr(sm.params, "site", None))
significance = significance_table(tables["overhead"], alpha)
made = with_significance(made, significance)  # the front page shows made.csv
outputs = {
    sm.output.made: made,
    sm.output.significance: significance,
    sm.output.rules: rules_table(alpha=alpha, **tables),
}
for path, table in outputs.items():
    table.to_csv(path, index=False, float_format="%.10g")
    print(f"{path}: {len(table)} rows", file=sys.stderr)
print(outputs[sm.output.rules].to_string(index=False), file=sys.stderr)
