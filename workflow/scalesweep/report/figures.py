"""The scaling figures of the publishable report (pure: tables in, Figure out; the glue in
workflow/scripts/report_*.py reads and writes the files): parallel efficiency against the
scaling count (``efficiency_figure``) and the container overhead of each point
(``overhead_figure``); and the first screen's forest plot of every comparison
(``forest_figure``, an inline SVG by ``figure_svg``: report/pages.py). The style they share is report/style.py; the per-run figures are
report/run_figures.py, the per-run tables report/run_tables.py.

Anomalies are drawn, never dropped: super-linear and high-variance points are marked,
overheads without a confidence interval or a test say so, and every per-workload figure
ends with a line naming the requested points that did not finish (missing or failed).
Error bars are always the tables' own 95% confidence intervals (never seaborn's
bootstrap); disturbed runs are drawn hollow grey, warm-up runs hollow dark diamonds, both
left out of every statistic; rows
measured on shared cores are labelled as not physical.
Colours are fixed per runtime (native is always the first colour) across all figures.
"""

from __future__ import annotations

import io
import re

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
    OUTSIDE_LEGEND,
    SUPERLINEAR_COLOR,
    VARIANCE_COLOR,
    counts_axis,
    is_empty_table,
    finish_figure,
    keep_inside,
    only_workload,
    place_notes,
    series_labels,
    apply_theme,
    count_axis_label,
    counted_mask,
    disturbed_mask,
    disturbed_note,
    left_out_handles,
    no_data_figure,
    not_done_note,
    numeric_column,
    point_label,
    runtime_order,
    runtime_palette,
    scatter_left_out,
    shared_cores_note,
    warmup_mask,
    warmup_note,
)

OVERHEAD_TEXT = (
    "overhead = " + OVERHEAD_DEFINITION.replace("*", "x") + ", positive = container slower"
)



def efficiency_figure(scaling: pd.DataFrame, runs: pd.DataFrame | None = None,
                      points: pd.DataFrame | None = None, title: str = "") -> plt.Figure:
    """Scaling efficiency (%) vs count per runtime, one panel per workload.

    Lines are efficiency of the mean over the undisturbed repeats with scaling.csv's 95%
    CI (efficiency_ci95_low/high_pct) as error bars; small dots are each repeat's
    efficiency against the same linear time (disturbed runs hollow grey, warm-up runs hollow
    diamonds, neither in the statistics); the dashed line is 100% (ideal). Flags from scaling.csv are drawn:
    super-linear (red star), high variance (orange ring), single repeat (named in the
    point's label). Rows on shared cores get a red line saying the figure is not physical.
    """
    rows = scaling_rows(scaling)
    if is_empty_table(rows, "workload", "runtime", "count", "efficiency_pct"):
        # a series whose baseline runs were all disturbed: its row's note says so
        notes = (sorted(set(scaling["note"].drop(rows.index).dropna()))
                 if not is_empty_table(scaling, "note") else [])
        return finish_figure(no_data_figure(title or "scaling efficiency",
                                      "; ".join(notes) or
                                      "no data: no finished CNN runs to compute efficiency"),
                       not_done_note(points, only_workload(scaling, points)))
    scaling = rows
    apply_theme()
    workloads = sorted(scaling["workload"].unique())
    fig, axes = plt.subplots(1, len(workloads), figsize=(10 * len(workloads), 5.2),
                             squeeze=False)
    palette = runtime_palette(scaling["runtime"])
    notes_of = {}  # axes -> value labels, placed once the layout is final
    for ax, workload in zip(axes[0], workloads):
        table = scaling[scaling["workload"] == workload].copy()
        table["series"] = series_labels(table)
        table["flag"] = table.get("flag", pd.Series("", index=table.index)).fillna("")
        counts = sorted(int(c) for c in table["count"].unique())
        ax.axhline(100, color="0.3", linestyle="--", linewidth=1.2, label="ideal (100%)")
        notes = notes_of[ax] = []  # (count, efficiency, text, colour)
        left_out = set()  # the kinds of left-out runs drawn: their legend entries
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
                counted = counted_mask(dots)
                ax.scatter(dots.loc[counted, "count"], dots.loc[counted, "efficiency_pct"],
                           color=color, s=14, alpha=0.45, zorder=3)
                left_out |= scatter_left_out(ax, dots["count"], dots["efficiency_pct"], dots)
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
        counts_axis(ax, counts)
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
        ax.legend(handles=handles + left_out_handles(left_out), **OUTSIDE_LEGEND)
    trained = None if is_empty_table(runs, "workload") else runs[runs["workload"].isin(workloads)]
    finish_figure(fig, not_done_note(points, workloads[0] if len(workloads) == 1 else None),
                  ["efficiency = linear time / measured time x 100, linear time = baseline "
                   "time x baseline count / count in strong scaling (the ranks share the data), the "
                   "baseline time in weak scaling (per-rank data fixed) (means over the undisturbed "
                   "repeats); "
                   + CI_TEXT + " (Fieller's interval for the ratio of mean times)",
                   disturbed_note(trained), warmup_note(trained)],
                  warnings=[shared_cores_note(scaling, trained)])
    for ax, notes in notes_of.items():
        keep_inside(ax, place_notes(ax, notes), sides=("right",))
    return fig



def _repeat_efficiency(series: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    if is_empty_table(runs, "workload", "runtime", "count", "threads", "time_s"):
        return pd.DataFrame(columns=["count", "efficiency_pct", "disturbed", "warmup"])
    first = series.iloc[0]
    mine = runs[(runs["workload"] == first["workload"]) & (runs["runtime"] == first["runtime"])
                & (runs["threads"] == first["threads"])]
    merged = mine.merge(series[["count", "linear_time_s"]], on="count")
    merged["efficiency_pct"] = merged["linear_time_s"] / merged["time_s"] * 100
    merged["disturbed"], merged["warmup"] = disturbed_mask(merged), warmup_mask(merged)
    return merged[["count", "efficiency_pct", "disturbed", "warmup"]]



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
    if is_empty_table(overhead, "runtime", "overhead_pct", *AXES):
        return finish_figure(no_data_figure(name, "no data: no point was measured both natively "
                                            "and in a container"),
                       not_done_note(points, only_workload(overhead, points)), [OVERHEAD_TEXT])
    apply_theme()
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
    finish_figure(fig, not_done_note(points, only_workload(overhead)), lines,
                  warnings=[shared_cores_note(overhead)])
    keep_inside(ax, labels, sides=("top", "left", "right"))
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



# --- the first screen's forest plot (issue #39) ------------------------------------------------

# A verdict's colour: the forest plot's points and the verdict table's words
# (scalesweep.report.pages draws its CSS from this)
VERDICT_COLORS = {"slower": "#b91c1c", "faster": "#1d4ed8", "equivalent": "#15803d",
                  "inconclusive": "#b45309", "not tested": "#64748b"}
AA_COLOR = "#3730a3"  # the A/A check's label (pages.py: .ss-aa)
BAND_COLOR = "#dcfce7"  # the equivalence band, +-margin_pct
FOREST_ID = "scalesweep-forest"  # the root <svg>'s id; every id inside it starts with it
NO_CI = "no CI"
NO_ESTIMATE = "no estimate"
FOREST_COLUMNS = ["label", "overhead_pct", "ci_low_pct", "ci_high_pct", "margin_pct",
                  "verdict", "color", "aa", "has_ci", "note", "ci90_low_pct", "ci90_high_pct"]


def forest_rows(overhead: pd.DataFrame | None, labels: list[str] | None = None,
                aa_runtime: str = "native-aa") -> pd.DataFrame:
    """What the forest plot draws, one row per overhead.csv row in its order (top to
    bottom): its label (``labels``, one per row; default "workload | runtime"), overhead
    and 95% CI bounds as the table has them (NaN where it has none), the equivalence
    margin, the verdict ("not tested" where empty) and its colour, whether it is the A/A
    check, whether it has a finite CI, and the note drawn beside a point without one."""
    if overhead is None or overhead.empty:
        return pd.DataFrame(columns=FOREST_COLUMNS)
    if labels is None:
        labels = [f"{r.get('workload', '')} | {r.get('runtime', '')}"
                  for _, r in overhead.iterrows()]
    if len(labels) != len(overhead):
        raise ValueError(f"{len(labels)} labels for {len(overhead)} rows of overhead.csv")
    estimate = numeric_column(overhead, "overhead_pct")
    low = numeric_column(overhead, "overhead_ci95_low_pct")
    high = numeric_column(overhead, "overhead_ci95_high_pct")
    has_ci = np.isfinite(low) & np.isfinite(high) & np.isfinite(estimate)
    verdicts = [v if isinstance(v, str) and v else "not tested"
                for v in overhead.get("verdict", pd.Series([None] * len(overhead)))]
    aa = [str(r) == aa_runtime for r in overhead.get("runtime", [""] * len(overhead))]
    notes = ["" if ci else NO_CI if np.isfinite(x) else NO_ESTIMATE
             for ci, x in zip(has_ci, estimate)]
    return pd.DataFrame({
        "label": list(labels), "overhead_pct": estimate, "ci_low_pct": low,
        "ci_high_pct": high, "margin_pct": numeric_column(overhead, "margin_pct"),
        "verdict": verdicts, "color": [VERDICT_COLORS.get(v, "#334155") for v in verdicts],
        "aa": aa, "has_ci": has_ci, "note": notes,
        # an equivalence is decided on the 90% interval (two one-sided tests): drawn
        # thick inside the 95% one, so a 95% bar past the band is no contradiction
        "ci90_low_pct": [lo if v == "equivalent" else np.nan for lo, v in zip(
            numeric_column(overhead, "equivalence_ci90_low_pct"), verdicts)],
        "ci90_high_pct": [hi if v == "equivalent" else np.nan for hi, v in zip(
            numeric_column(overhead, "equivalence_ci90_high_pct"), verdicts)]},
        columns=FOREST_COLUMNS)


def forest_figure(overhead: pd.DataFrame | None, labels: list[str] | None = None,
                  aa_runtime: str = "native-aa") -> tuple[plt.Figure, pd.DataFrame]:
    """Every comparison of overhead.csv in one picture, its rows top to bottom in the
    table's order: the overhead (%) as a point and its 95% CI as a horizontal bar, coloured
    by the verdict (VERDICT_COLORS, as the verdict table words and colours it), the
    equivalence band +-margin_pct of each row shaded, a vertical line at 0 (positive: the
    container is slower). The A/A check (``aa_runtime``) is a square and its label says
    "A/A"; a row without a finite CI is its point alone with "no CI" beside it (without an
    estimate: a hollow marker at 0, "no estimate"). Returns the figure and what it drew
    (``forest_rows``), so a test can hold one against the other."""
    rows = forest_rows(overhead, labels, aa_runtime)
    if rows.empty:
        return no_data_figure("", "no container comparison in overhead.csv"), rows
    apply_theme()
    n = len(rows)
    # the axes about 6 in wide whatever the labels' length (left) and the legend's (right)
    label_in = 0.068 * max(len(str(t)) + 7 for t in rows["label"])
    fig, ax = plt.subplots(figsize=(6 + 2.4 + label_in, 0.9 + 0.3 * n))
    y = np.arange(n, dtype=float)
    for yi, m in zip(y, rows["margin_pct"]):
        if np.isfinite(m) and m > 0:
            ax.fill_betweenx([yi - 0.5, yi + 0.5], -m, m, color=BAND_COLOR, linewidth=0,
                             zorder=0)
    ax.axvline(0, color="0.2", linewidth=1, zorder=1)
    notes = []
    for yi, r in zip(y, rows.itertuples(index=False)):
        marker = "s" if r.aa else "o"
        if r.has_ci:
            ax.errorbar([r.overhead_pct], [yi],
                        xerr=[[max(0.0, r.overhead_pct - r.ci_low_pct)],
                              [max(0.0, r.ci_high_pct - r.overhead_pct)]],
                        fmt="none", ecolor=r.color, elinewidth=2, capsize=3, zorder=2)
        if np.isfinite(r.ci90_low_pct) and np.isfinite(r.ci90_high_pct):
            ax.plot([r.ci90_low_pct, r.ci90_high_pct], [yi, yi], color=r.color,
                    linewidth=6, alpha=0.55, solid_capstyle="butt", zorder=2)
        x = r.overhead_pct if np.isfinite(r.overhead_pct) else 0.0
        hollow = not np.isfinite(r.overhead_pct)
        ax.plot([x], [yi], marker=marker, markersize=7, linestyle="",
                markerfacecolor="white" if hollow else r.color, markeredgecolor=r.color,
                markeredgewidth=1.5, zorder=3)
        if r.note:
            notes.append(ax.annotate(r.note, (x, yi), textcoords="offset points",
                                     xytext=(8, 0), ha="left", va="center",
                                     fontsize="x-small", color=r.color,
                                     bbox=dict(boxstyle="square,pad=0.1", facecolor="white",
                                               edgecolor="none", alpha=0.85), zorder=4))
    ax.set_yticks(y, [f"{label}  [A/A]" if aa else label
                      for label, aa in zip(rows["label"], rows["aa"])])
    for tick, aa in zip(ax.get_yticklabels(), rows["aa"]):
        if aa:
            tick.set_color(AA_COLOR)
            tick.set_fontstyle("italic")
    ax.tick_params(axis="y", labelsize="small")
    ax.set_ylim(n - 0.5, -0.5)  # overhead.csv's first row on top
    values = np.concatenate([rows[c].to_numpy(float) for c in
                             ("overhead_pct", "ci_low_pct", "ci_high_pct")]
                            + [rows["margin_pct"].to_numpy(float),
                               -rows["margin_pct"].to_numpy(float)])
    lo, hi = np.nanmin([0.0, *values]), np.nanmax([0.0, *values])
    pad = max(1.0, (hi - lo) * 0.08)
    ax.set_xlim(lo - pad, hi + pad * (3 if notes else 1))  # room for "no CI"
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("container overhead (%), 95% CI; thick: the 90% CI an equivalence is "
                  "decided on  (positive: the container is slower)",
                  fontsize="small")
    handles = [Line2D([], [], marker="o", linestyle="", color=VERDICT_COLORS[v], label=v)
               for v in VERDICT_COLORS if v in set(rows["verdict"])]
    margins = sorted({m for m in rows["margin_pct"] if np.isfinite(m)})
    band = f"+-{margins[0]:g}%" if len(margins) == 1 else "+-margin_pct of each row"
    handles += [plt.Rectangle((0, 0), 1, 1, color=BAND_COLOR, label=f"equivalence band ({band})")]
    if rows["aa"].any():
        handles.append(Line2D([], [], marker="s", linestyle="", color="0.4",
                              label="A/A check (native vs native)"))
    ax.legend(handles=handles, fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1),
              borderaxespad=0, frameon=False)
    fig.tight_layout()
    if notes:
        keep_inside(ax, notes, sides=("right",))
    return fig, rows


def figure_svg(fig: plt.Figure, svg_id: str = FOREST_ID) -> str:
    """A figure as an inline ``<svg>`` element for an HTML page: no XML prolog, text kept
    as text, ASCII only, no date, ids the same on every run and each prefixed with
    ``svg_id`` (the root's id), and its stylesheet scoped to it (an inline SVG's <style>
    applies to the whole page)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": svg_id,
                                "axes.unicode_minus": False}):
        fig.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.05,
                    metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    for name in sorted(ids, key=len, reverse=True):
        new = f"{svg_id}-{name}"
        text = text.replace(f'id="{name}"', f'id="{new}"').replace(f"#{name})", f"#{new})") \
            .replace(f'#{name}"', f'#{new}"')
    text = text.replace("*{", f"#{svg_id} *{{")
    text = text.replace("<svg ", f'<svg id="{svg_id}" ', 1)
    return text.encode("ascii", "xmlcharrefreplace").decode("ascii")
