"""Memory over time in the report: the runs' ``memory_timeline`` blocks
(``scalesweep.measure.memtimeline``) as tidy tables and a figure (pure: parsed metrics in,
DataFrame or Figure out; the glue is workflow/scripts/report_memory.py).

- :func:`timeline_table`: every run's timeline resampled onto a normalised time grid
  (0 = the first sample with a rank alive, 1 = the last; ``duration_s`` the span), one
  row per run and grid point: total RSS of the ranks, the largest rank's RSS, GPU memory.
- :func:`peak_table`: per workload x geometry x runtime, the peak total RSS, the peak
  per-rank RSS and the peak GPU memory of a run, mean and standard deviation over the
  undisturbed repeats, n, and the difference to native (MB and %).
- :func:`memory_timeline_figure`: mean +- std bands over the repeats, native vs each
  container runtime, one row of panels per geometry.

Runs without a timeline (measured before it existed, or where no rank was found) are
left out, never an error; disturbed runs are drawn (dashed grey) and left out of every
statistic, as in every other figure. Warm-up runs (measurement.warmup_blocks) are in
neither table (report_memory.py leaves them out), so not drawn: the figure's footer counts
them from points.csv's ``warmup``.
"""

from __future__ import annotations

from collections.abc import Iterable

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalesweep.record.geometry import AXES as GEOMETRY  # noqa: E402
from scalesweep.report.style import (  # noqa: E402
    DISTURBED_COLOR,
    OUTSIDE_LEGEND,
    is_empty_table,
    finish_figure,
    only_workload,
    apply_theme,
    disturbed_mask,
    no_data_figure,
    not_done_note,
    point_label,
    runtime_order,
    runtime_palette,
    shared_cores_note,
    warmup_mask,
)

GRID_POINTS = 101
TIMELINE_COLUMNS = [
    "workload", "model_label", "runtime", *GEOMETRY, "repeat", "count", "disturbed",
    "shared_cores", "interval_s", "nodes_sampled", "duration_s", "t_frac", "total_rss_mb",
    "rank_rss_max_mb", "gpu_mem_mb",
]
PEAKS = {  # table column stem -> per-run value
    "peak_total_rss_mb": "total",
    "peak_rank_rss_mb": "rank",
    "peak_gpu_mem_mb": "gpu",
}
PEAK_COLUMNS = [
    "workload", "model_label", *GEOMETRY, "count", "runtime", "n", "n_disturbed",
    *[f"{stem}_{stat}" for stem in PEAKS for stat in ("mean", "std")],
    "reported_peak_rss_mb_mean", "native_n",
    "peak_total_rss_diff_mb", "peak_total_rss_diff_pct",
    "peak_rank_rss_diff_mb", "peak_rank_rss_diff_pct", "peak_gpu_mem_diff_mb",
    "shared_cores", "note",
]
METRICS = (("total_rss_mb", "RSS, sum over the ranks (MB)"),
           ("rank_rss_max_mb", "RSS of the largest rank (MB)"),
           ("gpu_mem_mb", "GPU memory used (MB)"))
NO_TIMELINE = ("no data: no finished run of this workload recorded a memory timeline "
               "(runs measured before it existed are left out)")


def _floats(values) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def run_memory(m: dict) -> dict | None:
    """A run's timeline as arrays (t, total, largest rank, GPU) and its peaks; None where
    the run has none that can be used (no block, no rank sampled, malformed)."""
    mt = m.get("memory_timeline")
    if not isinstance(mt, dict):
        return None
    try:
        t = _floats(mt.get("t_s") or [])
        ranks = [_floats(v) for v in (mt.get("rss_mb") or {}).values()]
        total = _floats(mt.get("total_rss_mb") or [])
        gpu = _floats(mt["gpu_mem_mb"]) if mt.get("gpu_mem_mb") else np.full(len(t), np.nan)
    except (TypeError, ValueError, AttributeError):
        return None
    if not ranks or len(total) != len(t) or len(gpu) != len(t) or \
            any(len(r) != len(t) for r in ranks):
        return None
    largest = np.full(len(t), np.nan)
    for r in ranks:
        largest = np.fmax(largest, r)  # NaN only where no rank had a value
    alive = np.flatnonzero(~np.isnan(total))
    if len(alive) == 0:
        return None

    def peak(a):
        return float(np.nanmax(a)) if (~np.isnan(a)).any() else np.nan

    return {"t": t, "total": total, "rank_max": largest, "gpu": gpu, "alive": alive,
            "interval_s": mt.get("interval_s"), "nodes_sampled": mt.get("nodes_sampled", 1),
            "peaks": {"total": peak(total), "rank": peak(largest), "gpu": peak(gpu)}}


def _identity(m: dict, row: dict) -> dict:
    point = m.get("point") or {}
    return {
        "workload": point.get("workload"),
        "model_label": row.get("model_label") if isinstance(row.get("model_label"), str) else "",
        "runtime": point.get("runtime"),
        **{c: point.get(c) for c in GEOMETRY},
        "repeat": point.get("repeat"),
        "count": row.get("count"),
        "disturbed": bool(row.get("disturbed", False)),
        "shared_cores": bool(row.get("shared_cores", False)),
    }


def timeline_table(records: Iterable[tuple[str, dict, dict]],
                   grid_points: int = GRID_POINTS) -> pd.DataFrame:
    """One row per run and normalised time point (``records``: (path, metrics, run row)
    of ``scalesweep.analyse.collect.readable_runs``). A run's time runs from its first to its last
    sample with a rank alive (``duration_s``); values between samples are interpolated."""
    grid = np.linspace(0.0, 1.0, grid_points)
    frames = []
    for _path, m, row in records:
        mem = run_memory(m)
        if mem is None or len(mem["alive"]) < 2:
            continue
        t = mem["t"]
        t0, t1 = t[mem["alive"][0]], t[mem["alive"][-1]]
        if not t1 > t0:
            continue
        at = t0 + grid * (t1 - t0)
        cols = {}
        for name, key in (("total_rss_mb", "total"), ("rank_rss_max_mb", "rank_max"),
                          ("gpu_mem_mb", "gpu")):
            values = mem[key]
            ok = ~np.isnan(values)
            cols[name] = np.interp(at, t[ok], values[ok]) if ok.any() else np.full(len(grid), np.nan)
        frames.append(pd.DataFrame({
            **_identity(m, row), "interval_s": mem["interval_s"],
            "nodes_sampled": mem["nodes_sampled"], "duration_s": round(float(t1 - t0), 3),
            "t_frac": grid, **cols}))
    if not frames:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[TIMELINE_COLUMNS].sort_values(
        ["workload", "model_label", *GEOMETRY, "runtime", "repeat", "t_frac"], ignore_index=True)


def peak_table(records: Iterable[tuple[str, dict, dict]]) -> pd.DataFrame:
    """Per workload x geometry x runtime: peak total RSS, peak per-rank RSS and peak GPU
    memory of a run, mean and std (n - 1) over the undisturbed repeats with a timeline, n,
    the disturbed ones counted apart, the payload's own reported peak (``peak_rss_mb``:
    every node) and the difference of the means to native (container - native, MB and %
    of native)."""
    rows = []
    for _path, m, row in records:
        mem = run_memory(m)
        if mem is None:
            continue
        rows.append({**_identity(m, row), **{stem: mem["peaks"][key] for stem, key in PEAKS.items()},
                     "reported_peak_rss_mb": pd.to_numeric(row.get("peak_rss_mb"), errors="coerce")})
    if not rows:
        return pd.DataFrame(columns=PEAK_COLUMNS)
    runs = pd.DataFrame(rows)
    keys = ["workload", "model_label", *GEOMETRY, "runtime"]
    out = []
    for key, g in runs.groupby(keys, sort=False, dropna=False):
        valid = g[~g["disturbed"]]
        rec = dict(zip(keys, key))
        rec.update(count=g["count"].iloc[0], n=len(valid), n_disturbed=int(g["disturbed"].sum()),
                   shared_cores=bool(g["shared_cores"].any()))
        for stem in PEAKS:
            values = valid[stem].dropna()
            rec[f"{stem}_mean"] = values.mean() if len(values) else np.nan
            rec[f"{stem}_std"] = values.std(ddof=1) if len(values) > 1 else np.nan
        reported = valid["reported_peak_rss_mb"].dropna()
        rec["reported_peak_rss_mb_mean"] = reported.mean() if len(reported) else np.nan
        nodes = int(rec["nodes"]) if pd.notna(rec["nodes"]) else 1
        rec["note"] = (f"sampled on the harness's node only (1 of {nodes}); "
                       "reported_peak_rss_mb covers every node") if nodes > 1 else ""
        out.append(rec)
    table = pd.DataFrame(out)
    geometry = ["workload", "model_label", *GEOMETRY]
    native = table[table["runtime"] == "native"].set_index(geometry)
    for i, r in table.iterrows():
        k = tuple(r[c] for c in geometry)
        if r["runtime"] == "native" or k not in native.index:
            continue
        base = native.loc[k]
        base = base.iloc[0] if isinstance(base, pd.DataFrame) else base
        table.loc[i, "native_n"] = base["n"]
        for stem, diff in (("peak_total_rss_mb", "peak_total_rss_diff"),
                           ("peak_rank_rss_mb", "peak_rank_rss_diff"),
                           ("peak_gpu_mem_mb", "peak_gpu_mem_diff")):
            d = r[f"{stem}_mean"] - base[f"{stem}_mean"]
            table.loc[i, f"{diff}_mb"] = d
            if f"{diff}_pct" in PEAK_COLUMNS:
                table.loc[i, f"{diff}_pct"] = d / base[f"{stem}_mean"] * 100 \
                    if base[f"{stem}_mean"] else np.nan
    for col in PEAK_COLUMNS:
        if col not in table:
            table[col] = np.nan
    table["_rt"] = table["runtime"].map(runtime_order(table["runtime"]).index)
    table = table.sort_values(["workload", "model_label", "count", *GEOMETRY, "_rt", "runtime"])
    return table[PEAK_COLUMNS].reset_index(drop=True)


def _same_as_total(df: pd.DataFrame) -> pd.Series:
    """Per row: whether the largest rank's RSS is the total (a run of one rank, or no
    per-rank value): then the largest rank's panel would repeat the total's."""
    total = pd.to_numeric(df["total_rss_mb"], errors="coerce")
    if "rank_rss_max_mb" not in df:
        return pd.Series(True, index=df.index)
    rank = pd.to_numeric(df["rank_rss_max_mb"], errors="coerce")
    return rank.isna() | np.isclose(rank, total, rtol=1e-6, atol=1e-3)


def _geometry_label(row, models: bool) -> str:
    text = point_label(row)
    return f"{text}, {row['model_label']}" if models and row["model_label"] else text


def memory_timeline_figure(timeline: pd.DataFrame, points: pd.DataFrame | None = None,
                           title: str = "") -> plt.Figure:
    """Memory over (normalised) time: one row of panels per geometry (nodes-GPUs-ranks-
    threads, and model where models differ), one column per quantity (total RSS of the
    ranks, largest rank's RSS, GPU memory where sampled); per runtime the mean over the
    undisturbed repeats with a +- 1 std band; disturbed runs dashed grey."""
    name = title or "memory over time"
    if is_empty_table(timeline, "runtime", "t_frac", "total_rss_mb") or timeline["total_rss_mb"].isna().all():
        return finish_figure(no_data_figure(name, NO_TIMELINE), not_done_note(points, only_workload(timeline, points)))
    apply_theme()
    df = timeline.copy()
    df["model_label"] = df["model_label"].fillna("") if "model_label" in df else ""
    models = df["model_label"].nunique() > 1
    keys = df[["count", *GEOMETRY, "model_label"]].drop_duplicates().sort_values(
        ["count", *GEOMETRY, "model_label"])
    geometries = [_geometry_label(r, models) for _, r in keys.iterrows()]
    df["geometry"] = [_geometry_label(r, models) for _, r in df.iterrows()]
    metrics = [(c, label) for c, label in METRICS
               if c in df and pd.to_numeric(df[c], errors="coerce").notna().any()]
    # one rank per run: the largest rank is the sum; its panel would repeat the first
    same = _same_as_total(df)
    if same.all():
        metrics = [(c, label) for c, label in metrics if c != "rank_rss_max_mb"]
    order = runtime_order(df["runtime"])
    palette = runtime_palette(order)
    hollow = disturbed_mask(df)
    fig, axes = plt.subplots(len(geometries), len(metrics),
                             figsize=(4.6 * len(metrics) + 3.2, 3.0 * len(geometries) + 0.7),
                             squeeze=False)
    for row_axes, geometry in zip(axes, geometries):
        mine = df["geometry"] == geometry
        for j, (ax, (col, label)) in enumerate(zip(row_axes, metrics)):
            if col == "rank_rss_max_mb" and same[mine].all():
                ax.text(0.5, 0.5, f"{geometry}: one rank per run,\nthe largest rank is the "
                        "sum (left)", ha="center", va="center", transform=ax.transAxes,
                        color="0.35")
                ax.set_axis_off()
                continue
            for rt in order:
                runs = df[mine & ~hollow & (df["runtime"] == rt)]
                values = pd.to_numeric(runs[col], errors="coerce")
                if values.isna().all():
                    continue
                stats = values.groupby(runs["t_frac"]).agg(["mean", "std"])
                n = runs["repeat"].nunique()
                span = runs.groupby("repeat")["duration_s"].first().mean()
                ax.plot(stats.index, stats["mean"], color=palette[rt], linewidth=2,
                        label=f"{rt}: n={n}, run ~{span:.0f} s")
                if n > 1:
                    ax.fill_between(stats.index, stats["mean"] - stats["std"],
                                    stats["mean"] + stats["std"], color=palette[rt],
                                    alpha=0.2, linewidth=0)
            for i, (_rep, run) in enumerate(df[mine & hollow].groupby(["runtime", "repeat"])):
                ax.plot(run["t_frac"], pd.to_numeric(run[col], errors="coerce"),
                        color=DISTURBED_COLOR, linewidth=0.9, linestyle="--",
                        label="disturbed run (left out)" if i == 0 else None)
            ax.set_xlim(0, 1)
            ax.set_ylim(bottom=0)
            ax.set_xlabel("time (fraction of the run)")
            ax.set_ylabel(label)
            if j == 0:  # the row's geometry, once
                ax.set_title(geometry, fontsize="medium", loc="left")
        handles, labels = row_axes[0].get_legend_handles_labels()
        if handles:
            row_axes[-1].legend(handles, labels, **OUTSIDE_LEGEND)
    fig.suptitle(name)
    intervals = sorted({float(v) for v in pd.to_numeric(df["interval_s"], errors="coerce").dropna()})
    multinode = "nodes" in df and (pd.to_numeric(df["nodes"], errors="coerce") > 1).any()
    runs = df.drop_duplicates(["runtime", "geometry", "repeat"])
    lines = [
        "time: each run from its first to its last sample with a rank alive (the legend's "
        "run ~s: mean span); lines: mean over the undisturbed repeats, bands: +- 1 standard "
        "deviation (none with one repeat)",
        "RSS: VmRSS of each rank process (a Python process running the payload script) plus "
        "its descendants, launchers left out, sampled every "
        f"{'/'.join(f'{v:g}' for v in intervals) or '?'} s by the harness"
        + ("; multi-node points: the harness's node only" if multinode else ""),
        "GPU memory: used memory summed over the node's GPUs" if any(c == "gpu_mem_mb"
                                                                      for c, _ in metrics) else "",
        (f"{int(disturbed_mask(runs).sum())} disturbed runs (interference during the "
         "measurement) drawn as dashed grey lines: shown, but left out of the means and bands"
         if disturbed_mask(runs).any() else ""),
        _warmup_left_out(points),
    ]
    return finish_figure(fig, not_done_note(points, only_workload(timeline)), lines,
                         warnings=[shared_cores_note(timeline)])



def _warmup_left_out(points: pd.DataFrame | None) -> str:
    """The footer line of the warm-up runs (points.csv's ``warmup``, finished) that the
    timeline leaves out; '' where there are none."""
    if is_empty_table(points, "warmup", "state"):
        return ""
    n = int((warmup_mask(points) & points["state"].isin(["done", "disturbed"])).sum())
    return (f"{n} warm-up runs (the first measurement.warmup_blocks block(s) of each series) "
            "not drawn: left out of every statistic" if n else "")
