"""The scaling figures of the publishable report (pure: tables in, Figure out; the glue in
workflow/scripts/report_*.py reads and writes the files): parallel efficiency against the
scaling count (``efficiency_figure``) and the container overhead of each point
(``overhead_figure``). The style they share is report/style.py; the per-run figures are
report/run_figures.py, the per-run tables report/run_tables.py.

Anomalies are drawn, never dropped: super-linear and high-variance points are marked,
overheads without a confidence interval or a test say so, and every per-workload figure
ends with a line naming the requested points that did not finish (missing or failed).
Error bars are always the tables' own 95% confidence intervals (never seaborn's
bootstrap); disturbed runs are drawn hollow grey and left out of every statistic; rows
measured on shared cores are labelled as not physical.
Colours are fixed per runtime (native is always the first colour) across all figures.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D

from scalesweep.analyse.frame import truthy
from scalesweep.analyse.verdict import OVERHEAD_DEFINITION
from scalesweep.analyse.summary import scaling_rows
from scalesweep.record.geometry import AXES
from scalesweep.report.style import (
    CI_TEXT,
    DISTURBED_COLOR,
    OUTSIDE_LEGEND,
    SUPERLINEAR_COLOR,
    VARIANCE_COLOR,
    _counts_axis,
    _empty,
    _finish,
    _keep_inside,
    _only,
    _place_notes,
    _series,
    _theme,
    count_axis_label,
    disturbed_mask,
    disturbed_note,
    no_data_figure,
    not_done_note,
    numeric_column,
    point_label,
    runtime_order,
    runtime_palette,
    shared_cores_note,
)

OVERHEAD_TEXT = (
    "overhead = " + OVERHEAD_DEFINITION.replace("*", "x") + ", positive = container slower"
)



def efficiency_figure(scaling: pd.DataFrame, runs: pd.DataFrame | None = None,
                      points: pd.DataFrame | None = None, title: str = "") -> plt.Figure:
    """Scaling efficiency (%) vs count per runtime, one panel per workload.

    Lines are efficiency of the mean over the undisturbed repeats with scaling.csv's 95%
    CI (efficiency_ci95_low/high_pct) as error bars; small dots are each repeat's
    efficiency against the same linear time (disturbed runs hollow grey, not in the
    statistics); the dashed line is 100% (ideal). Flags from scaling.csv are drawn:
    super-linear (red star), high variance (orange ring), single repeat (named in the
    point's label). Rows on shared cores get a red line saying the figure is not physical.
    """
    rows = scaling_rows(scaling)
    if _empty(rows, "workload", "runtime", "count", "efficiency_pct"):
        # a series whose baseline runs were all disturbed: its row's note says so
        notes = (sorted(set(scaling["note"].drop(rows.index).dropna()))
                 if not _empty(scaling, "note") else [])
        return _finish(no_data_figure(title or "scaling efficiency",
                                      "; ".join(notes) or
                                      "no data: no finished CNN runs to compute efficiency"),
                       not_done_note(points, _only(scaling, points)))
    scaling = rows
    _theme()
    workloads = sorted(scaling["workload"].unique())
    fig, axes = plt.subplots(1, len(workloads), figsize=(10 * len(workloads), 5.2),
                             squeeze=False)
    palette = runtime_palette(scaling["runtime"])
    notes_of = {}  # axes -> value labels, placed once the layout is final
    for ax, workload in zip(axes[0], workloads):
        table = scaling[scaling["workload"] == workload].copy()
        table["series"] = _series(table)
        table["flag"] = table.get("flag", pd.Series("", index=table.index)).fillna("")
        counts = sorted(int(c) for c in table["count"].unique())
        ax.axhline(100, color="0.3", linestyle="--", linewidth=1.2, label="ideal (100%)")
        notes = notes_of[ax] = []  # (count, efficiency, text, colour)
        for series, s in table.sort_values("count").groupby("series", sort=False):
            color = palette[s["runtime"].iloc[0]]
            ax.plot(s["count"], s["efficiency_pct"], marker="o", color=color, label=series,
                    linewidth=2)
            low = numeric_column(s, "efficiency_ci95_low_pct")
            high = numeric_column(s, "efficiency_ci95_high_pct")
            y = s["efficiency_pct"].to_numpy(float)
            has_ci = ~(np.isnan(low) | np.isnan(high))
            if has_ci.any():
                yerr = np.vstack([y[has_ci] - low[has_ci], high[has_ci] - y[has_ci]]).clip(min=0)
                ax.errorbar(s["count"].to_numpy(float)[has_ci], y[has_ci], yerr=yerr,
                            fmt="none", ecolor=color, elinewidth=1.5, capsize=5, zorder=2)
            dots = _repeat_efficiency(s, runs)
            if not dots.empty:
                hollow = disturbed_mask(dots)
                ax.scatter(dots.loc[~hollow, "count"], dots.loc[~hollow, "efficiency_pct"],
                           color=color, s=14, alpha=0.45, zorder=3)
                if hollow.any():
                    ax.scatter(dots.loc[hollow, "count"], dots.loc[hollow, "efficiency_pct"],
                               facecolor="none", edgecolor=DISTURBED_COLOR, s=30,
                               linewidth=1.2, zorder=3)
            for _, r in s.iterrows():
                flags = [f for f in str(r["flag"]).split(";") if f]
                named = ", ".join(f.replace("_", " ") for f in flags)
                if r["count"] == r.get("baseline_count"):  # 100% by definition
                    if named:
                        notes.append((r["count"], r["efficiency_pct"], f"{series}: {named}", color))
                else:
                    text = f"{r['efficiency_pct']:.0f}%"
                    lo = pd.to_numeric(r.get("efficiency_ci95_low_pct"), errors="coerce")
                    hi = pd.to_numeric(r.get("efficiency_ci95_high_pct"), errors="coerce")
                    if pd.notna(lo) and pd.notna(hi):
                        text += f" (CI {lo:.0f}-{hi:.0f}%)"
                    text += f"\n{named}" if named else ""
                    notes.append((r["count"], r["efficiency_pct"], text, color))
                if "superlinear" in flags:
                    ax.scatter([r["count"]], [r["efficiency_pct"]], marker="*", s=260,
                               color=SUPERLINEAR_COLOR, edgecolor="black", zorder=5)
                if "high_variance" in flags:
                    ax.scatter([r["count"]], [r["efficiency_pct"]], marker="o", s=220,
                               facecolor="none", edgecolor=VARIANCE_COLOR, linewidth=2,
                               zorder=4)
        _counts_axis(ax, counts)
        top = np.nanmax([110.0, *table["efficiency_pct"].tolist(),
                         *numeric_column(table, "efficiency_ci95_high_pct").tolist()])
        ax.set_ylim(0, top * 1.15)
        ax.set_xlabel(count_axis_label(table))
        ax.set_ylabel("scaling efficiency (%)")
        modes = sorted(set(table["scaling"].dropna())) if "scaling" in table else []
        ax.set_title(f"{title or workload}" + (f" ({'/'.join(modes)} scaling)" if modes else ""))
        handles, labels = ax.get_legend_handles_labels()
        handles += [
            Line2D([], [], marker="*", linestyle="", color=SUPERLINEAR_COLOR,
                   markeredgecolor="black", markersize=13, label="super-linear (> 100%)"),
            Line2D([], [], marker="o", linestyle="", markerfacecolor="none",
                   markeredgecolor=VARIANCE_COLOR, markeredgewidth=2, markersize=12,
                   label="high variance over repeats"),
            Line2D([], [], marker="o", linestyle="", color="0.5", alpha=0.45, markersize=4,
                   label="single repeats"),
            Line2D([], [], color="0.4", linewidth=1.5, marker="_", markersize=10,
                   label="95% CI (scaling.csv)"),
        ]
        if disturbed_mask(runs).any():
            handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none",
                                  markeredgecolor=DISTURBED_COLOR, markersize=6,
                                  label="disturbed run (left out)"))
        ax.legend(handles=handles, **OUTSIDE_LEGEND)
    trained = None if _empty(runs, "workload") else runs[runs["workload"].isin(workloads)]
    _finish(fig, not_done_note(points, workloads[0] if len(workloads) == 1 else None),
            ["efficiency = linear time / measured time x 100, linear time = baseline "
             "time x baseline count / count in strong scaling (the ranks share the data), the "
             "baseline time in weak scaling (per-rank data fixed) (means over the undisturbed "
             "repeats); "
             + CI_TEXT + " (Fieller's interval for the ratio of mean times)",
             disturbed_note(trained)],
            warnings=[shared_cores_note(scaling, trained)])
    for ax, notes in notes_of.items():
        _keep_inside(ax, _place_notes(ax, notes), sides=("right",))
    return fig



def _repeat_efficiency(series: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    if _empty(runs, "workload", "runtime", "count", "threads", "time_s"):
        return pd.DataFrame(columns=["count", "efficiency_pct", "disturbed"])
    first = series.iloc[0]
    mine = runs[(runs["workload"] == first["workload"]) & (runs["runtime"] == first["runtime"])
                & (runs["threads"] == first["threads"])]
    merged = mine.merge(series[["count", "linear_time_s"]], on="count")
    merged["efficiency_pct"] = merged["linear_time_s"] / merged["time_s"] * 100
    merged["disturbed"] = disturbed_mask(merged)
    return merged[["count", "efficiency_pct", "disturbed"]]



def overhead_figure(overhead: pd.DataFrame, points: pd.DataFrame | None = None,
                    title: str = "", alpha: float = 0.05) -> plt.Figure:
    """Container overhead (%) per sweep point and container runtime, with the 95% CI of
    overhead.csv as error bars and its verdict (slower / faster / equivalent within the
    margin / inconclusive with the repeats still needed) beside each point and in full
    under the figure.

    Filled marker with '*' = significant (p < alpha); open marker = not significant;
    open grey-edged marker 'not tested' = fewer than two repeats on a side. A missing
    CI (NaN: too few repeats, or unbounded) is written next to the point, never drawn
    as zero width. The A/A runtime (native-aa) is drawn like a container.
    """
    name = title or "container overhead"
    if _empty(overhead, "runtime", "overhead_pct", *AXES):
        return _finish(no_data_figure(name, "no data: no point was measured both natively "
                                            "and in a container"),
                       not_done_note(points, _only(overhead, points)), [OVERHEAD_TEXT])
    _theme()
    df = overhead.copy().sort_values(list(AXES), kind="stable")
    df["point"] = df.apply(point_label, axis=1)
    if "model_label" in df.columns and df["model_label"].fillna("").astype(str).str.len().gt(0).any():
        df["point"] = df["point"] + "\n" + df["model_label"].fillna("").astype(str)
    if "shared_cores" in df.columns:
        shared = df.groupby("point")["shared_cores"].transform(lambda v: v.map(truthy).any())
        df.loc[shared, "point"] = df.loc[shared, "point"] + "\n(shared cores)"
    order = list(dict.fromkeys(df["point"]))
    runtimes = runtime_order(df["runtime"])
    palette = runtime_palette(runtimes)
    width = 0.7 / max(1, len(runtimes))
    # room for each value label over its own point (about 1.6 in), never over a neighbour's
    fig, ax = plt.subplots(figsize=(max(9.5, 2.2 * len(order) * len(runtimes) + 5), 5.2))
    ax.axhline(0, color="black", linewidth=1.2)
    labels = []
    for i, runtime in enumerate(runtimes):
        rows = df[df["runtime"] == runtime]
        x = np.array([order.index(p) for p in rows["point"]]) + (i - (len(runtimes) - 1) / 2) * width
        y = rows["overhead_pct"].to_numpy(float)
        low = numeric_column(rows, "overhead_ci95_low_pct")
        high = numeric_column(rows, "overhead_ci95_high_pct")
        has_ci = ~(np.isnan(low) | np.isnan(high))
        if has_ci.any():
            yerr = np.vstack([y[has_ci] - low[has_ci], high[has_ci] - y[has_ci]]).clip(min=0)
            ax.errorbar(x[has_ci], y[has_ci], yerr=yerr, fmt="none", ecolor=palette[runtime],
                        elinewidth=2, capsize=6, zorder=2)
        significant = _significance(rows)
        verdicts = _short_verdicts(rows)
        for xi, yi, ci, sig, p, verdict, top in zip(x, y, has_ci, significant,
                                                    numeric_column(rows, "p_value"), verdicts,
                                                    high):
            face = palette[runtime] if sig is True else "white" if sig is False else "0.85"
            edge = palette[runtime]
            ax.scatter([xi], [yi], s=110, marker="D", facecolor=face, edgecolor=edge,
                       linewidth=2, zorder=3)
            text = f"{yi:+.1f}%".replace("-0.0%", "+0.0%")
            text += "*" if sig is True else ""
            if sig is None:
                text += "\nnot tested"
            elif not np.isnan(p):
                text += f"\np={p:.2g}"
            if not ci:
                text += "\nno 95% CI"
            if verdict:
                text += "\n" + verdict
            if np.isnan(yi):  # no usable run on a side: written at 0, never dropped
                yi = 0.0
            # over the point's CI (or the point): beside it, it would cover the neighbour's
            labels.append(ax.annotate(text, (xi, top if ci else yi), textcoords="offset points",
                                      xytext=(0, 7), ha="center", va="bottom",
                                      fontsize="x-small"))
        ax.scatter([], [], marker="D", s=80, color=palette[runtime], label=runtime)
    ax.set_xticks(range(len(order)), order)
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.set_xlabel("sweep point (nodes-GPUs-ranks-threads per rank)")
    ax.set_ylabel("container overhead (%)")
    ax.set_title(name)
    values = np.concatenate([numeric_column(df, c) for c in
                             ("overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct")])
    lo, hi = np.nanmin([0.0, *values]), np.nanmax([0.0, *values])
    pad = max(2.0, (hi - lo) * 0.12)
    ax.set_ylim(lo - pad, hi + pad)
    handles, _ = ax.get_legend_handles_labels()
    handles += [
        Line2D([], [], marker="D", linestyle="", color="0.4", markersize=8,
               label=f"significant (p < {alpha:g}), marked *"),
        Line2D([], [], marker="D", linestyle="", markerfacecolor="white",
               markeredgecolor="0.4", markeredgewidth=2, markersize=8, label="not significant"),
        Line2D([], [], marker="D", linestyle="", markerfacecolor="0.85",
               markeredgecolor="0.4", markeredgewidth=2, markersize=8,
               label="not tested (< 2 repeats on a side)"),
        Line2D([], [], color="0.4", linewidth=2, label="95% CI (overhead.csv)"),
    ]
    ax.legend(handles=handles, **OUTSIDE_LEGEND)
    lines = [OVERHEAD_TEXT + "; same point natively and in the container, from the pairs "
             "of runs measured together in one block (geometric mean of the ratios; pairs "
             "measured apart or on a machine whose speed differed left out); " + CI_TEXT]
    if "verdict_text" in df.columns:
        lines += [f"{r['runtime']} {r['point'].replace(chr(10), ' ')}: {r['verdict_text']}"
                  for _, r in df.iterrows() if isinstance(r["verdict_text"], str)]
    left_out = numeric_column(df, "n_disturbed")
    if np.nansum(left_out) > 0:
        lines.append(f"disturbed runs were left out of {int((left_out > 0).sum())} of these "
                     "comparisons (n_disturbed in overhead.csv counts both sides)")
    _finish(fig, not_done_note(points, _only(overhead)), lines,
            warnings=[shared_cores_note(overhead)])
    _keep_inside(ax, labels, sides=("top", "left", "right"))
    return fig



def _short_verdicts(rows: pd.DataFrame) -> list[str]:
    """The verdict in a few words for the label beside a point ('' without verdicts)."""
    if "verdict" not in rows:
        return [""] * len(rows)
    out = []
    for _, r in rows.iterrows():
        verdict = r["verdict"] if isinstance(r["verdict"], str) else ""
        if verdict == "equivalent":
            margin = r.get("margin_pct")
            out.append(f"equivalent (+-{float(margin):g}%)" if pd.notna(margin) else verdict)
        elif verdict == "inconclusive":
            more = pd.to_numeric(r.get("repeats_needed"), errors="coerce")
            out.append(f"inconclusive: ~{int(more)} more repeats" if pd.notna(more) and more > 0
                       else "inconclusive")
        else:
            out.append(verdict)
    return out



def _significance(rows: pd.DataFrame) -> list[bool | None]:
    if "significant" not in rows:
        return [None] * len(rows)
    out = []
    for v in rows["significant"]:
        if pd.isna(v):
            out.append(None)
        elif isinstance(v, str):
            out.append({"true": True, "false": False}.get(v.strip().lower()))
        else:
            out.append(bool(v))
    return out
