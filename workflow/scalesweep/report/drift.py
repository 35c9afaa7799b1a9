"""The drift figure: the machine-speed probe over the campaign's wall-clock time (the
numbers are ``scalesweep.analyse.drift``'s: its table, the CV, the notes)."""

from __future__ import annotations

import pandas as pd

from scalesweep.analyse.drift import NO_PROBE, SERIES_LINES, numeric_series
from scalesweep.analyse.stats import cv_pct
from scalesweep.record.geometry import Geometry
from scalesweep.report.style import (
    DISTURBED_COLOR,
    OUTSIDE_LEGEND,
    WARMUP_COLOR,
    finish_figure,
    apply_theme,
    disturbed_mask,
    disturbed_note,
    no_data_figure,
    runtime_order,
    runtime_palette,
    warmup_mask,
    warmup_note,
)


def drift_figure(runs: pd.DataFrame, table: pd.DataFrame | None = None, title: str = ""):
    """The probe's GFLOP/s and GB/s against the wall-clock time each run started: every
    run a point, coloured by runtime, marker by workload, disturbed runs hollow grey,
    warm-up runs (runs.csv's ``warmup``; drift_table leaves them out) hollow dark. The
    footer gives each figure's range over the campaign and, per series, whether the probe
    explains the run-to-run spread (``table``: ``drift_table``'s)."""
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    name = title or "machine speed over the campaign (probe before and after every run)"
    have = runs is not None and not runs.empty and "start" in runs.columns and any(
        numeric_series(runs, k).notna().any() for k in ("probe_gflops", "probe_gbps"))
    if not have:
        return finish_figure(no_data_figure(name, NO_PROBE), "")
    apply_theme()
    df = runs.copy()
    df["_t"] = pd.to_datetime(df["start"], utc=True, errors="coerce")
    df = df[df["_t"].notna()]
    hollow, warm = disturbed_mask(df), warmup_mask(df)
    palette = runtime_palette(df["runtime"].astype(str))
    order = runtime_order(df["runtime"].astype(str))
    workloads = sorted(df["workload"].astype(str).unique())
    markers = dict(zip(workloads, "osD^vP*X"))
    fig, axes = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    ranges = []
    for ax, col, label in ((axes[0], "probe_gflops", "probe GFLOP/s\n(1 core, sgemm)"),
                           (axes[1], "probe_gbps", "probe GB/s\n(1 core, sgemv)")):
        y = numeric_series(df, col)
        for wl in workloads:
            for rt in order:
                sel = (df["workload"].astype(str) == wl) & (df["runtime"].astype(str) == rt) \
                    & y.notna()
                solid, empty = sel & ~hollow & ~warm, sel & hollow
                if solid.any():
                    ax.scatter(df.loc[solid, "_t"], y[solid], color=palette[rt],
                               marker=markers[wl], s=30, edgecolor="black", linewidth=0.4,
                               label=f"{wl}: {rt}", zorder=3)
                if empty.any():
                    ax.scatter(df.loc[empty, "_t"], y[empty], facecolor="white",
                               edgecolor=DISTURBED_COLOR, marker=markers[wl], s=36,
                               linewidth=1.2, label=f"{wl}: {rt} (disturbed)", zorder=2)
                if (sel & warm).any():
                    ax.scatter(df.loc[sel & warm, "_t"], y[sel & warm], facecolor="white",
                               edgecolor=WARMUP_COLOR, marker=markers[wl], s=36,
                               linewidth=1.2, label=f"{wl}: {rt} (warm-up)", zorder=2)
        ax.set_ylabel(label)
        if y.notna().any():
            ax.set_ylim(0, float(y.max()) * 1.15)
            ok = y[~hollow & ~warm].dropna()
            if len(ok):
                ranges.append(f"{col.split('_')[1].replace('gflops', 'GFLOP/s').replace('gbps', 'GB/s')}"
                              f" {ok.min():.3g}-{ok.max():.3g} (CV {cv_pct(ok):.1f}%)")
    axes[0].set_title(name)
    first, last = df["_t"].min(), df["_t"].max()
    if last - first < pd.Timedelta(days=1):  # one day: hours and minutes, the date once
        axes[1].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz="UTC"))
        axes[1].set_xlabel(f"wall-clock time the run started (UTC, {first:%Y-%m-%d})")
    else:
        axes[1].set_xlabel("wall-clock time the run started (UTC)")
    fig.autofmt_xdate()
    handles, labels = axes[0].get_legend_handles_labels()
    h1, l1 = axes[1].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    seen.update({lab: h for lab, h in zip(l1, h1) if lab not in seen})
    axes[0].legend(seen.values(), seen.keys(), **OUTSIDE_LEGEND)
    lines = ["every point a run: the probe's mean of before and after, the slowest node; "
             "undisturbed runs over the campaign (warm-up runs left out): "
             + "; ".join(ranges)]
    if table is not None and not table.empty and "probe_explains" in table:
        rows = table.dropna(subset=["probe_explains", "workload"])
        for i, (_, r) in enumerate(rows.iterrows()):
            if i == SERIES_LINES:
                lines.append(f"and {len(rows) - i} more series: see drift.csv")
                break
            text = f"{r['workload']} {r['runtime']} {Geometry.of(r).segment}: {r['probe_explains']}"
            if isinstance(r.get("spread"), str) and r["spread"]:
                text += f"; {r['spread']}"
            lines.append(text)
    lines.append(disturbed_note(df))
    lines.append(warmup_note(df, drawn="drawn hollow with a dark edge: shown"))
    return finish_figure(fig, "", lines)
