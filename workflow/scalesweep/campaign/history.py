"""What earlier campaigns measured, as ``scalesweep plan`` expects from it
(scalesweep.campaign.estimate says the order of preference): their runs
(``campaign_history``), each point's expected wall time (``expected_seconds``: ``point``,
``nodes``, ``fit``, ``requested``), and the spread of the same-block container/native
pairs of each series (``observed_spreads``: ``series``, ``workload``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from scalesweep.analyse import fits
from scalesweep.plan.sweep import REFERENCE
from scalesweep.record.geometry import AXES
from scalesweep.record.pointdir import RUNS_DIR


SOURCES = ("point", "nodes", "fit", "requested")
# a series of the plan: one arm of one geometry of a workload (adaptive.Series)
SERIES_KEY = ["workload", "arm", *AXES]
SPREAD_SOURCES = ("series", "workload", "assumed")
MIN_SPREAD_PAIRS = 3  # a series' own spread: from at least this many same-block pairs



def campaign_history(directories) -> pd.DataFrame:
    """Every finished run of the given campaigns (runs.csv-like rows)."""
    from scalesweep.campaign.compare import campaign_runs

    tables = [campaign_runs(Path(d))[0].assign(campaign=str(d)) for d in directories]
    tables = [t for t in tables if not t.empty]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()



def history_dirs(directory: Path, earlier) -> list[Path]:
    """The campaigns whose runs say what to expect: ``directory`` itself where it has
    measured runs, then each of ``earlier`` (each once). An earlier campaign that measured
    only concurrent starts (results/startup_scale/, config/startup_scale.yaml) has no runs
    to expect from: it serves the plan's start-up prediction alone (campaign.startplan)."""
    out: list[Path] = []
    for d in ([directory] if (Path(directory) / RUNS_DIR).is_dir() else []) + list(earlier):
        if not (Path(d) / RUNS_DIR).is_dir() and (Path(d) / "results/startup_scale").is_dir():
            continue
        if Path(d).resolve() not in [o.resolve() for o in out]:
            out.append(Path(d))
    return out



def expected_seconds(points: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """``points`` with expected_s and expected_source (see the module docstring);
    expected_s is NaN where nothing measured says anything (source 'requested')."""
    out = points.copy()
    out["expected_s"], out["expected_source"] = np.nan, "requested"
    if history.empty or "harness_wall_s" not in history:
        return out
    walls = history.dropna(subset=["harness_wall_s"])
    walls = walls[walls["harness_wall_s"] > 0]
    if walls.empty:
        return out
    geometry = ["workload", "runtime", *AXES]
    by_point = walls.groupby(geometry)["harness_wall_s"].mean()
    by_nodes = walls.groupby(["workload", "runtime", "nodes"])["harness_wall_s"].mean()
    series_fits: dict[tuple, fits.Fit | None] = {}
    for i, p in out.iterrows():
        key = tuple(p[c] for c in geometry)
        if key in by_point.index:
            out.loc[i, ["expected_s", "expected_source"]] = [by_point[key], "point"]
            continue
        if key[:3] in by_nodes.index:
            out.loc[i, ["expected_s", "expected_source"]] = [by_nodes[key[:3]], "nodes"]
            continue
        series = key[:2]
        if series not in series_fits:
            mine = walls[(walls["workload"] == series[0]) & (walls["runtime"] == series[1])]
            fit = None
            if mine["nodes"].nunique() >= fits.min_counts("amdahl"):
                fit = fits.fit_series(mine, "amdahl", "nodes", "harness_wall_s", n_boot=0)
            series_fits[series] = fit
        fit = series_fits[series]
        if fit is not None and fit.can_predict:
            predicted = fits.model_time("amdahl", fit.params, [p["nodes"]])[0]
            out.loc[i, ["expected_s", "expected_source"]] = [predicted, "fit"]
    return out



def observed_spreads(history: pd.DataFrame, config: dict) -> tuple[dict, dict]:
    """The spread of d = ln(t_runtime / t_native) over the same-block pairs of earlier
    runs, paired as the workflow's decisions pair them (``pairing.block_pairs`` with the
    config's pair checks), each campaign's blocks apart: ({(series key..., runtime):
    (mean d, sd of d, pairs)} for the series with MIN_SPREAD_PAIRS pairs or more,
    {(workload, runtime): (mean d, pooled sd, pairs)} over a workload's series, each
    series' deviations from its own mean)."""
    from scalesweep.analyse.pairing import block_pairs
    from scalesweep.analyse.summary import campaign_settings

    if history.empty or not {"time_s", "runtime", "repeat", *SERIES_KEY} <= set(history):
        return {}, {}
    settings = campaign_settings(config)
    runs = history.assign(time_s=pd.to_numeric(history["time_s"], errors="coerce"))
    runs = runs[runs["time_s"] > 0]
    if "campaign" not in runs:
        runs = runs.assign(campaign="")
    groups: dict[tuple, list[np.ndarray]] = {}  # (series key..., runtime) -> d per campaign
    for (*key, _campaign), g in runs.groupby(SERIES_KEY + ["campaign"], sort=True):
        by_runtime = {rt: {int(r["repeat"]): r.to_dict() for _, r in rows.iterrows()}
                      for rt, rows in g.groupby("runtime")}
        if REFERENCE not in by_runtime:
            continue
        for rt, rows in by_runtime.items():
            if rt == REFERENCE:
                continue
            pairs = block_pairs(by_runtime[REFERENCE], rows, "time_s",
                                max_gap_s=settings["max_pair_gap_s"],
                                probe_tolerance_pct=settings["probe_tolerance_pct"])
            native, other = (pairs.native, pairs.container) if pairs.native is not None \
                else pairs.surviving
            if len(native) >= 2:
                groups.setdefault((*key, rt), []).append(np.log(other / native))
    by_series: dict[tuple, tuple[float, float, int]] = {}
    pooled: dict[tuple, list[np.ndarray]] = {}
    for key, ds in groups.items():
        pooled.setdefault((key[0], key[-1]), []).extend(ds)
        spread = _pooled(ds)
        if spread[2] >= MIN_SPREAD_PAIRS:
            by_series[key] = spread
    return by_series, {key: _pooled(ds) for key, ds in pooled.items()}



def _pooled(groups: list[np.ndarray]) -> tuple[float, float, int]:
    """(mean, pooled sd, n) of several groups of values, each about its own mean."""
    n = sum(len(g) for g in groups)
    dof = sum(len(g) - 1 for g in groups)
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    mean = float(np.concatenate(groups).mean())
    return mean, (float(np.sqrt(ss / dof)) if dof > 0 else float("nan")), n
