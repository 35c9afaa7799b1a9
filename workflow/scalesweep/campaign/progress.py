"""How far a campaign has got, and what is left: the progress line of `scalesweep status`,
and whether its report.html is older than its summary.

The plan's computation (scalesweep.campaign.estimate, what `scalesweep plan -d DIR`
prints) with the campaign's own runs as its history: every series' blocks at the
minimum, expected and maximum (the expected from the spread of its pairs so far), each
point's expected wall time (its own runs, else its nodes', else a fit); a series that has finished (its final.json)
at the blocks it measured. Progress is the
runs measured against each scenario's count, and the time left the expected wall time
of each run not measured yet, summed (the machine time still to be spent: also the
elapsed time where one run is measured at a time, as locally and on the local Slurm
cluster). Where no run of a point's kind is measured yet, its time is unknown, and the
line says for how many runs.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.campaign.estimate import (SCENARIOS, POINT_FIELDS, plan_points, plan_series,
                                          scenario_points)
from scalesweep.campaign.history import campaign_history, history_dirs
from scalesweep.campaign.profile import read_profile
from scalesweep.plan.adaptive import Series, final_path
from scalesweep.plan.sweep import SweepPoint
from scalesweep.record.pointdir import SUMMARY_DIR

MEASURED = ("done", "disturbed", "foreign")  # status states of a run with its metrics.json


def progress(config: dict, directory: Path, profile: str | None, table: pd.DataFrame,
             now: dt.datetime | None = None) -> dict:
    """For ``table`` (status's points: path, state) measured with ``profile`` (a profile
    directory, None: profiles/default's alone): runs measured, and per scenario
    (minimum, expected, maximum) the runs in all, the runs left, the seconds they are
    expected to take (None where none of them has a measured kind) and how many of them
    have no estimate; the median wall time of the runs measured; the expected finish."""
    now = now or dt.datetime.now(dt.timezone.utc)
    history = campaign_history(history_dirs(Path(directory), []))
    points = plan_points(config, read_profile(profile), history)
    series = finished_series(plan_series(points, config, history), directory)
    measured = set(table.loc[table["state"].isin(MEASURED), "path"])
    out: dict = {"measured": len(measured),
                 "median_run_s": (float(np.median(history["harness_wall_s"].dropna()))
                                  if "harness_wall_s" in history and
                                  history["harness_wall_s"].notna().any() else None)}
    for name, column in SCENARIOS.items():
        if column == "blocks_expected" and series[column].isna().any():
            out[name] = None  # a series' spread unknown: no expected count yet
            continue
        runs = scenario_points(points, series, column)
        done = np.array([SweepPoint(**{f: r[f] for f in POINT_FIELDS}).path in measured
                         for r in runs.to_dict("records")], dtype=bool)
        left = runs[~done]
        known = left["expected_s"].notna()
        out[name] = {"runs": len(runs), "left": len(left),
                     # nothing left: none; some left, none of a measured kind: unknown
                     "left_s": (float(left.loc[known, "expected_s"].sum())
                                if known.any() or left.empty else None),
                     "unknown": int((~known).sum())}
    expected = out["expected"] or out["maximum"]
    out["finish"] = (None if expected["left_s"] is None or expected["unknown"] else
                     (now + dt.timedelta(seconds=expected["left_s"])).isoformat(timespec="minutes"))
    return out


def finished_series(series: pd.DataFrame, directory: Path) -> pd.DataFrame:
    """``series`` (``plan_series``) with each series that has finished (its final.json,
    written when its last decision stopped it) at the blocks it measured, in every
    scenario: the plan's counts are what a series may still do, a finished one does no
    more."""
    series = series.copy()
    for i, row in series.iterrows():
        s = Series(row["workload"], int(row["nodes"]), int(row["gpus"]), int(row["ranks"]),
                   int(row["threads"]), row["arm"])
        try:
            final = json.loads(final_path(directory, s).read_text())
        except (OSError, ValueError):
            continue
        blocks = final.get("blocks") if isinstance(final, dict) else None
        if isinstance(blocks, int) and not isinstance(blocks, bool) and blocks > 0:
            series.loc[i, ["blocks_min", "blocks_expected", "blocks_max"]] = blocks
    return series


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def progress_line(p: dict) -> str:
    """One line: runs measured of the plan's counts, the runs and run time left, the
    expected finish."""
    low, high, mid = p["minimum"], p["maximum"], p["expected"]
    total = (f"{low['runs']}" if low["runs"] == high["runs"] else
             f"{low['runs']}-{high['runs']}" + (f", expected {mid['runs']}" if mid else ""))
    head = f"progress: {p['measured']} runs measured (the plan: {total})"
    if not high["left"]:
        return f"{head}; nothing left to measure"
    runs = f"{low['left']}" if low["left"] == high["left"] else f"{low['left']}-{high['left']}"
    span = (_minutes(low["left_s"]) if low["left_s"] == high["left_s"] else
            f"{_minutes(low['left_s'])} .. {_minutes(high['left_s'])}")
    same = mid and low["left_s"] == mid["left_s"] == high["left_s"]
    time = (f"~{_minutes(mid['left_s'])} of run time expected ({span})" if mid and not same
            else f"{span} of run time")
    median = (f", a run's median {p['median_run_s']:.0f} s" if p["median_run_s"] is not None
              else "")
    finish = f"; expected to finish ~{p['finish'][11:16]} UTC" if p.get("finish") else ""
    unknown = max(s["unknown"] for s in (low, high, *([mid] if mid else [])))
    tail = (f"; {unknown} run(s) of a kind not measured yet are not in the time"
            if unknown else "")
    plural = "" if runs == "1" else "s"
    return f"{head}; left: {runs} run{plural}, {time}{median}{finish}{tail}"


REPORT_HTML = "report.html"  # where the README's `snakemake --report report.html` writes it


def report_freshness(directory: Path) -> dict | None:
    """report.html against the summary it was made from: {"report": its mtime, "summary":
    the newest file's mtime in results/summary/ (both "YYYY-MM-DD HH:MM:SS UTC"),
    "newest": that file's name, "stale": the report is older than it}; None without a
    report.html or a summary."""
    import datetime

    report = Path(directory) / REPORT_HTML
    try:
        made = report.stat().st_mtime
        files = [(f.stat().st_mtime, f) for f in (Path(directory) / SUMMARY_DIR).iterdir()
                 if f.is_file() and not f.name.startswith(".")]  # not the caches
    except OSError:
        return None
    if not files:
        return None
    newest, path = max(files)

    def utc(t: float) -> str:
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S UTC")

    return {"report": utc(made), "summary": utc(newest), "newest": str(path.name),
            "stale": made < newest}


def stale_report_line(freshness: dict | None, rerun: str) -> str | None:
    """The line `scalesweep status` prints when report.html is older than the summary."""
    if not freshness or not freshness["stale"]:
        return None
    return (f"{REPORT_HTML} is older than the summary (made {freshness['report']}, summary "
            f"{freshness['summary']}, {SUMMARY_DIR}/{freshness['newest']}): run {rerun} "
            f"--report {REPORT_HTML}")
