"""Every column of runs.csv is declared once (scalesweep.record.columns: its role and, for a
measurement, its unit), and the analysis commands group only by declared axes (issue
#28): no unit or role is guessed from a column's name."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from scalesweep.analyse.collect import RUN_COLUMNS
from scalesweep.campaign import analysis_cli
from scalesweep.record import columns
from scalesweep.record.metrics import FIELDS


def test_every_runs_csv_column_is_declared():
    assert [c for c in RUN_COLUMNS if columns.role(c) is None] == []


@pytest.mark.parametrize("table", [columns.COLUMNS, columns.SUMMARY_COLUMNS])
def test_every_measurement_has_its_unit(table):
    assert [c.name for c in table.values() if c.role == columns.MEASUREMENT and not c.unit] == []
    assert [c.name for c in table.values() if c.rate and "/s" not in c.unit] == []


def test_a_metrics_field_and_its_runs_csv_column_agree_on_the_unit():
    differ = [(f.path, f.unit, columns.unit(f.path)) for fields in FIELDS.values()
              for f in fields if f.unit and f.kind in ("number", "finite")
              and columns.role(f.path) == columns.MEASUREMENT and f.unit != columns.unit(f.path)]
    assert differ == []


def test_the_cli_groups_by_no_measurement():
    """A runs table with every declared column, two runs of one point that differ in every
    measurement: grouped by the axes alone, never by a measurement, and not refused."""
    row = {c: "x" for c in columns.COLUMNS}
    row.update({c: 1 for c in ("nodes", "gpus", "ranks", "threads", "count", "world_size")})
    runs = pd.DataFrame([row, row])
    for i, c in enumerate(columns.measurements() + ["repeat", "block_id", "path", "start"]):
        runs[c] = [float(i + 1), float(i + 2)]
    runs = runs.drop(columns=["runtime"])
    args = argparse.Namespace(file="runs.csv", group_by=None)
    groups, ignored = analysis_cli.group_columns(args, runs, key="runtime", time_col="time_s")
    assert [g for g in groups if columns.role(g) != columns.AXIS] == []
    assert "achieved_gflops_per_rank" in ignored and "images_per_s" in ignored
    assert not any(analysis_cli.is_measurement(g) for g in groups)


def test_no_role_is_guessed_from_a_name():
    # named like a time, a share or a size, yet not declared: a measurement by no rule
    for name in ("wall_s", "load_pct", "rss_mb", "peak_memory", "final_thing"):
        assert columns.role(name) is None and not analysis_cli.is_measurement(name)
    # an undeclared number column that differs within a row is refused, never pooled
    runs = pd.DataFrame({"nodes": [1, 1, 2], "time_s": [10.0, 11.0, 6.0],
                         "batch": [32, 64, 32]})
    args = argparse.Namespace(file="t.csv", group_by=None)
    with pytest.raises(analysis_cli.UsageError, match="batch: not declared"):
        analysis_cli.group_columns(args, runs, key="nodes", time_col="time_s")
