"""Snakemake glue: the summary tables -> front.html (the first screen of report.html:
verdicts, caveats, scaling, the campaign) and one HTML page per table (<name>.html beside
<name>.csv), made by scalesweep.report.pages (front_page, table_page)."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

import pandas as pd  # noqa: E402

from scalesweep.report.pages import front_page  # noqa: E402
from scalesweep.report.table_page import table_page  # noqa: E402

sm = snakemake  # noqa: F821


def read(path):
    try:
        return pd.read_csv(path, dtype={"reason": str, "log": str, "note": str})
    except pd.errors.EmptyDataError:  # aggregate may write an empty llm.csv
        return pd.DataFrame()


tables = {name: read(path) for name, path in sm.input.items()}
for name, table in tables.items():
    path = Path(getattr(sm.output, name))
    path.write_text(table_page(table, Path(getattr(sm.input, name)).name, sm.params.titles[name]))
    print(f"{path}: {len(table)} rows, {len(table.columns)} columns", file=sys.stderr)
Path(sm.output.front).write_text(front_page(tables))
print(f"{sm.output.front}: the first screen", file=sys.stderr)
