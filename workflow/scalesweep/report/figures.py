"""Figures and tables of the publishable report (pure: tables or parsed JSON in, Figure or
DataFrame out; the glue in workflow/scripts/report_*.py reads and writes the files).

Anomalies are drawn, never dropped: super-linear and high-variance points are marked,
overheads without a confidence interval or a test say so, and every per-workload figure
ends with a line naming the requested points that did not finish (missing or failed).
Error bars are always the tables' own 95% confidence intervals (never seaborn's
bootstrap); disturbed runs are drawn hollow grey and left out of every statistic; rows
measured on shared cores are labelled as not physical.
Colours are fixed per runtime (native is always the first colour) across all figures.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from scalesweep.analyse.frame import truthy
from scalesweep.analyse.stats import describe_repeats
from scalesweep.analyse.verdict import OVERHEAD_DEFINITION
from scalesweep.analyse.collect import SHARED_CORES_NOTE, disturbance, scaling_rows  # noqa: E402
from scalesweep.plan.kinds import kind_of, kinds  # noqa: E402
from scalesweep.plan.sweep import RUNTIMES, SweepPoint, scaling_count  # noqa: E402
from scalesweep.record.geometry import AXES, Geometry  # noqa: E402

NO_DATA = "no data"
OVERHEAD_TEXT = (
    "overhead = " + OVERHEAD_DEFINITION.replace("*", "x") + ", positive = container slower"
)
POINT_COLUMNS = ["workload", "runtime", *AXES, "repeat"]
MISSING_COLUMNS = [*POINT_COLUMNS, "state", "reason", "log", "path"]
EPOCH_COLUMNS = [*POINT_COLUMNS, "count", "epoch", "epoch_s", "warmup", "disturbed",
                 "shared_cores"]
STARTUP_PROBES = ("noop", "python", "import_torch")
STARTUP_COLUMNS = [
    "runtime", "probe", "n", "native_median_s", "container_median_s", "startup_overhead_s",
    "native_min_s", "container_min_s", "image_digest", "start",
]
PROVENANCE_COLUMNS = [
    *POINT_COLUMNS, "hosts", "host_platform", "launcher", "slurm_job_id", "image_digest",
    "image", "image_source", "image_builder", "runtime_version", "python", "torch", "engine", "engine_version", "model", "model_sha256",
    "dataset", "parallel", "mpi_origin", "mpi_library", "mpi_library_version", "git_commit",
    "start", "end", "disturbed", "disturbed_reason", "exclusive",
    "shared_cores", "cpus_bound", "gpus_visible", "order_position", "path",
]
SUPERLINEAR_COLOR = "#d62728"
VARIANCE_COLOR = "#ff7f0e"
NOT_DONE_COLOR = "#b22222"
DISTURBED_COLOR = "0.55"
CI_TEXT = "error bars: the 95% confidence intervals of the tables"
DISTURBED_TEXT = "hollow grey markers: disturbed runs, shown but left out of the statistics"
FOOTER_PT = 9
# Legends beside the axes: inside, they hide error bars and points.
OUTSIDE_LEGEND = dict(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)


# --- helpers ---------------------------------------------------------------------------

def _theme() -> None:
    sns.set_theme(style="whitegrid", context="notebook")


def runtime_palette(runtimes: Iterable[str]) -> dict[str, tuple]:
    """The same colour for a runtime in every figure: by its place in RUNTIMES."""
    colors = sns.color_palette("colorblind", len(RUNTIMES) + 4)
    known = list(RUNTIMES)
    extra = sorted(set(runtimes) - set(known))
    return {rt: colors[(known + extra).index(rt)] for rt in [*known, *extra]}


def runtime_order(runtimes: Iterable[str]) -> list[str]:
    present = set(runtimes)
    return [rt for rt in RUNTIMES if rt in present] + sorted(present - set(RUNTIMES))


def no_data_figure(title: str = "", message: str = NO_DATA) -> plt.Figure:
    """An empty panel saying why there is nothing to plot (the report must still build)."""
    _theme()
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize="large", wrap=True,
            transform=ax.transAxes)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return fig


def _empty(df: pd.DataFrame | None, *columns: str) -> bool:
    return df is None or df.empty or any(c not in df.columns for c in columns)


def point_label(row) -> str:
    """A sweep point's geometry as in its directory name: n<nodes>-g<gpus>-r<ranks>-t<threads>."""
    return Geometry.of(row).segment


def _scale_labels(df: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """x labels for a count axis: the count, plus nodes/threads where those vary too
    (so 2 nodes x 1 rank and 1 node x 2 ranks never share a box)."""
    extra = [c for c in ("nodes", "threads") if c in df.columns and df[c].nunique() > 1]
    if "model_label" in df.columns and df["model_label"].fillna("").nunique() > 1:
        extra.append("model_label")  # never pool models

    def label(row) -> str:
        text = str(int(row["count"]))
        numbers = [c for c in extra if c != "model_label"]
        if numbers:
            text += "\n(" + " ".join(f"{c[0]}{int(row[c])}" for c in numbers) + ")"
        if "model_label" in extra:
            text += "\n" + str(row["model_label"])
        return text
    labels = df.apply(label, axis=1) if not df.empty else pd.Series(dtype=str)
    keys = df[["count", *extra]].drop_duplicates().sort_values(["count", *extra])
    order = [label(r) for _, r in keys.iterrows()]
    return labels, order


def count_axis_label(df: pd.DataFrame) -> str:
    """What the count is: GPUs where the points use GPUs, ranks otherwise."""
    if "gpus" in df.columns and (pd.to_numeric(df["gpus"], errors="coerce") > 0).any():
        return "GPUs (count)"
    return "ranks (count)"


def not_done_note(points: pd.DataFrame | None, workload: str | None = None,
                  limit: int = 4) -> str:
    """One line naming the requested points that did not finish ('' without points.csv)."""
    if _empty(points, "state"):
        return ""
    pts = points if workload is None else points[points["workload"] == workload]
    if pts.empty:
        return ""
    bad = pts[~pts["state"].isin(["done", "disturbed"])]
    if bad.empty:
        return f"all {len(pts)} requested points finished"
    names = [f"{r['state']}: {r['runtime']} {point_label(r)} rep{int(r['repeat'])}"
             for _, r in bad.head(limit).iterrows()]
    more = f", and {len(bad) - limit} more" if len(bad) > limit else ""
    return (f"NOT IN THIS FIGURE: {len(bad)} of {len(pts)} requested points did not finish "
            f"({'; '.join(names)}{more}); see the missing and failed points table")


def shared_cores_note(*tables: pd.DataFrame | None) -> str:
    """SHARED_CORES_NOTE where any row of the tables ran on shared cores, else ''."""
    for t in tables:
        if not _empty(t, "shared_cores") and t["shared_cores"].map(truthy).any():
            return SHARED_CORES_NOTE
    return ""


def disturbed_mask(df: pd.DataFrame | None) -> pd.Series:
    """Which rows are disturbed runs (False where the table has no such column)."""
    if df is None:
        return pd.Series(dtype=bool)
    if "disturbed" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["disturbed"].map(truthy).astype(bool)


def disturbed_note(df: pd.DataFrame | None, what: str = "runs") -> str:
    """'N disturbed runs: ...' where a table of runs (or epochs) holds disturbed ones."""
    mask = disturbed_mask(df)
    if not mask.any():
        return ""
    n = int(mask.sum())
    return (f"{n} disturbed {what} (interference during the measurement) drawn as hollow grey "
            "markers: shown, but left out of every statistic")


def _finish(fig: plt.Figure, note: str, extra_lines: Iterable[str] = (),
            warnings: Iterable[str] = ()) -> plt.Figure:
    """Footer lines under the axes (warnings such as shared cores first, in red, then
    definitions, then what is not shown), wrapped to the figure's width; the figure grows
    to hold them instead of squeezing the axes."""
    lines = [(line, NOT_DONE_COLOR) for line in warnings if line]
    lines += [(line, "0.25") for line in extra_lines if line]
    if note:
        lines.append((note, NOT_DONE_COLOR if note.startswith("NOT") else "0.4"))
    width_in, height_in = fig.get_size_inches()
    chars = max(40, int(width_in * 72 / (FOOTER_PT * 0.6)))
    wrapped = [(part, color) for text, color in lines for part in textwrap.wrap(text, chars)]
    line_in = FOOTER_PT * 1.4 / 72
    footer_in = line_in * len(wrapped) + (0.12 if wrapped else 0)
    total = height_in + footer_in
    fig.set_size_inches(width_in, total)
    fig.tight_layout(rect=(0, footer_in / total, 1, 1))
    for i, (text, color) in enumerate(wrapped):
        fig.text(0.01, (footer_in - 0.06 - i * line_in) / total, text, ha="left", va="top",
                 fontsize=FOOTER_PT, color=color)
    return fig


def _counts_axis(ax, counts: list[int]) -> None:
    if len(counts) > 2:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    ax.set_xticks(counts, [str(c) for c in counts])
    if len(counts) == 1:
        ax.set_xlim(counts[0] - 1, counts[0] + 1)
    else:
        ax.margins(x=0.2)  # room for the labels right of the last count


def _series(df: pd.DataFrame) -> pd.Series:
    """runtime, plus threads per rank where a workload sweeps several."""
    if "threads" in df.columns and df["threads"].nunique() > 1:
        return df["runtime"] + " (" + df["threads"].astype(int).astype(str) + " thr/rank)"
    return df["runtime"].astype(str)


# --- figures -----------------------------------------------------------------------------

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


def _keep_inside(ax, artists: list, sides=("left", "right", "bottom", "top"),
                 rounds: int = 5) -> None:
    """Widen the axes' limits on ``sides`` until every artist (value labels beside the
    points) lies inside the axes: never over the legend beside them or off the figure."""
    artists = [a for a in artists if a is not None and a.get_visible()]
    if not artists:
        return
    fig = ax.figure
    for _ in range(rounds):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box = ax.get_window_extent(renderer)
        ext = [a.get_window_extent(renderer) for a in artists]
        over = {"left": box.x0 - min(e.x0 for e in ext), "right": max(e.x1 for e in ext) - box.x1,
                "bottom": box.y0 - min(e.y0 for e in ext), "top": max(e.y1 for e in ext) - box.y1}
        over = {side: px + 6 if side in sides and px > -1 else 0.0 for side, px in over.items()}
        if not any(over.values()):
            return
        for low, high, size, get, put, scale in (
                ("left", "right", box.width, ax.get_xlim, ax.set_xlim, ax.get_xscale()),
                ("bottom", "top", box.height, ax.get_ylim, ax.set_ylim, ax.get_yscale())):
            if not (over[low] or over[high]):
                continue
            log = scale == "log"
            a, b = (np.log(v) if log else v for v in get())
            per_px = (b - a) / size
            a, b = a - over[low] * per_px, b + over[high] * per_px
            put(*((np.exp(v) if log else v) for v in (a, b)))


def _place_notes(ax, notes: list[tuple]) -> list:
    """Value labels right of their points, in the series' colour. Where points of one count
    lie close (all series are 100% at the baseline) the labels are pushed apart vertically,
    keeping their order, with a thin line back to the point: never overprinted."""
    fig = ax.figure
    points_per_px = 72 / fig.dpi
    by_count: dict = {}
    placed = []
    for note in notes:
        by_count.setdefault(note[0], []).append(note)
    for group in by_count.values():
        group.sort(key=lambda n: -n[1] if np.isfinite(n[1]) else 0)
        bottom = None  # lower edge of the previous label, in points
        for count, value, text, color in group:
            height = (text.count("\n") + 1) * 11 + 3
            y = ax.transData.transform((count, value))[1] * points_per_px
            centre = y if bottom is None else min(y, bottom - height / 2)
            bottom = centre - height / 2
            shift = centre - y
            placed.append(ax.annotate(
                text, (count, value), textcoords="offset points", xytext=(12, shift),
                fontsize="x-small", va="center", color=color, zorder=6,
                bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none",
                          alpha=0.85),
                arrowprops=dict(arrowstyle="-", color=color, linewidth=0.6,
                                shrinkA=0, shrinkB=4) if abs(shift) > 3 else None))
    return placed


def _only(*tables: pd.DataFrame | None) -> str | None:
    """The one workload these tables are about, when there is exactly one."""
    names = set()
    for t in tables:
        if not _empty(t, "workload"):
            names |= set(t["workload"].unique())
    return names.pop() if len(names) == 1 else None


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


def numeric_column(df: pd.DataFrame, col: str) -> np.ndarray:
    """A column as floats, NaN where empty or absent (CSV round trips leave '' or nothing)."""
    if col not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(float)


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


def epoch_time_figure(epochs: pd.DataFrame, points: pd.DataFrame | None = None,
                      title: str = "") -> plt.Figure:
    """Distribution of per-epoch seconds per runtime x count: boxes over steady-state
    epochs of all undisturbed repeats, dots for each of them, 'x' for first (warm-up)
    epochs, which the steady-state time excludes but the figure still shows; every epoch
    of a disturbed run is a hollow grey dot (shown, not in the boxes)."""
    name = title or "per-epoch time"
    if _empty(epochs, "runtime", "count", "epoch_s"):
        return _finish(no_data_figure(name, "no data: no finished CNN runs"),
                       not_done_note(points, _only(epochs, points)))
    _theme()
    df = epochs.copy()
    df["warmup"] = df["warmup"].map(truthy).astype(bool) if "warmup" in df else False
    hollow = disturbed_mask(df)
    df["x"], order = _scale_labels(df)
    hue_order = runtime_order(df["runtime"])
    palette = runtime_palette(hue_order)
    fig, ax = plt.subplots(figsize=(max(9.5, 1.6 * len(order) * len(hue_order) + 5.5), 5.2))
    steady = df[~df["warmup"] & ~hollow]
    warm = df[df["warmup"] & ~hollow]
    common = dict(x="x", y="epoch_s", hue="runtime", order=order, hue_order=hue_order, ax=ax)
    if not steady.empty:
        # width 0.8, as the dots' dodge: each runtime's dots over its own box
        sns.boxplot(data=steady, palette=palette, showfliers=False, width=0.8,
                    boxprops={"alpha": 0.35}, legend=True, **common)
        sns.stripplot(data=steady, palette=palette, dodge=True, jitter=0.12, size=5,
                      edgecolor="black", linewidth=0.5, legend=False, **common)
    if not warm.empty:
        sns.stripplot(data=warm, palette=palette, dodge=True, jitter=0.05, size=8,
                      marker="X", edgecolor="black", linewidth=0.6, legend=steady.empty,
                      **common)
    if hollow.any():
        sns.stripplot(data=df[hollow], palette={rt: "white" for rt in hue_order}, dodge=True,
                      jitter=0.12, size=6, edgecolor=DISTURBED_COLOR, linewidth=1.2,
                      legend=False, **common)
    ax.set_xlabel(count_axis_label(df))
    ax.set_ylabel("seconds per epoch")
    ax.set_ylim(bottom=0)
    ax.set_title(name)
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], marker="X", linestyle="", color="0.4", markeredgecolor="black",
                       markersize=9, label="first epoch (warm-up)")]
    if hollow.any():
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="white",
                              markeredgecolor=DISTURBED_COLOR, markersize=6,
                              label="disturbed run (left out)"))
    ax.legend(handles=handles, **OUTSIDE_LEGEND)
    run_key = [c for c in ("runtime", "arm", "count", "repeat") if c in df]
    n_runs = df.groupby(run_key).ngroups if "repeat" in df else len(df)
    return _finish(fig, not_done_note(points, _only(epochs)),
                   [f"{len(df)} epochs of {n_runs} runs; boxes: steady-state epochs (all but "
                    "the first, when a run has several) pooled over repeats; boxes show the "
                    "spread of epochs, not a confidence interval",
                    disturbed_note(df.drop_duplicates(run_key) if "repeat" in df else df)],
                   warnings=[shared_cores_note(epochs)])


def memory_figure(runs: pd.DataFrame, points: pd.DataFrame | None = None,
                  title: str = "") -> plt.Figure:
    """Peak resident memory per runtime x count, each run's own peak (runs.csv's
    ``peak_rss_mb``; memory.csv's ``reported_peak_rss_mb_mean`` is the bar): bars are the
    mean over the undisturbed repeats with its 95% CI (Student t, ``describe_repeats`` as
    in every table), dots each repeat. CNN: the largest rank's ``ru_maxrss`` (the kernel's
    high-water mark); LLM: the inference server's peak as the payload sampled it."""
    name = title or "peak memory"
    if _empty(runs, "runtime", "count", "peak_rss_mb") or runs["peak_rss_mb"].isna().all():
        return _finish(no_data_figure(name, "no data: no finished run recorded peak memory"),
                       not_done_note(points, _only(runs, points)))
    _theme()
    df = runs.dropna(subset=["peak_rss_mb"]).copy()
    df["x"], order = _scale_labels(df)
    hue_order = runtime_order(df["runtime"])
    palette = runtime_palette(hue_order)
    fig, ax = plt.subplots(figsize=(max(9.5, 1.6 * len(order) * len(hue_order) + 5.5), 5.2))
    common = dict(x="x", y="peak_rss_mb", hue="runtime", order=order, hue_order=hue_order, ax=ax)
    hollow = disturbed_mask(df)
    valid = df[~hollow]
    width = 0.8 / len(hue_order)  # seaborn's dodge: the dots sit on their bars
    if not valid.empty:
        stats = describe_repeats(valid, ["x", "runtime"], "peak_rss_mb")
        for i, runtime in enumerate(hue_order):
            s = stats[stats["runtime"] == runtime]
            if s.empty:
                continue
            x = np.array([order.index(v) for v in s["x"]]) + (i - (len(hue_order) - 1) / 2) * width
            y = s["mean"].to_numpy(float)
            bars = ax.bar(x, y, width=width * 0.95, color=palette[runtime], alpha=0.6,
                          label=runtime)
            ax.bar_label(bars, labels=[f"{v:.0f} MB" for v in y], fontsize="small",
                         label_type="center")
            low, high = s["ci95_low"].to_numpy(float), s["ci95_high"].to_numpy(float)
            ok = ~(np.isnan(low) | np.isnan(high))
            if ok.any():
                ax.errorbar(x[ok], y[ok], yerr=np.vstack([y[ok] - low[ok], high[ok] - y[ok]])
                            .clip(min=0), fmt="none", ecolor="black", elinewidth=1.2,
                            capsize=5, zorder=4)
        sns.stripplot(data=valid, palette=palette, dodge=True, jitter=0.1, size=5,
                      edgecolor="black", linewidth=0.5, legend=False, **common)
    if hollow.any():
        sns.stripplot(data=df[hollow], palette={rt: "white" for rt in hue_order}, dodge=True,
                      jitter=0.1, size=6, edgecolor=DISTURBED_COLOR, linewidth=1.2,
                      legend=False, **common)
    ax.set_xticks(range(len(order)), order)
    ax.set_xlim(-0.5, len(order) - 0.5)
    # a server's memory (one server per node, by GPUs), not the largest rank's
    llm = "payload" in df and all(kind_of(str(p)).server_per_node for p in df["payload"].unique())
    ax.set_ylabel("inference server peak RSS (MB)" if llm
                  else "peak RSS of the largest rank (MB)")
    ax.set_xlabel("GPUs (0 = CPU only)" if llm else count_axis_label(df))
    ax.set_ylim(0, df["peak_rss_mb"].max() * 1.18)
    ax.set_title(name)
    handles, _ = ax.get_legend_handles_labels()
    if not valid.empty:
        handles.append(Line2D([], [], color="black", linewidth=1.2, marker="_", markersize=10,
                              label="95% CI of the mean"))
    if hollow.any():
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="white",
                              markeredgecolor=DISTURBED_COLOR, markersize=6,
                              label="disturbed run (left out)"))
    ax.legend(handles=handles, **OUTSIDE_LEGEND)
    what = ("the inference server's peak RSS as the LLM payload sampled it" if llm else
            "the largest rank's ru_maxrss (the kernel's high-water mark of the rank process)")
    return _finish(fig, not_done_note(points, _only(runs)),
                   [f"bars: mean over the undisturbed repeats of each run's own peak: {what} "
                    "(runs.csv peak_rss_mb; memory.csv reported_peak_rss_mb_mean); "
                    "error bars: its 95% CI (Student t over the repeats); dots: each repeat",
                    "memory.csv's peak_rank_rss_mb and peak_total_rss_mb measure something "
                    "else: the largest of the harness's periodic samples of each rank process "
                    "with its descendants (memory over time), which miss peaks shorter than "
                    "the interval" + ("" if not llm else " and also count the payload's "
                                      "client process, not only the server"),
                    disturbed_note(df)],
                   warnings=[shared_cores_note(runs)])


def startup_figure(samples: pd.DataFrame, title: str = "") -> plt.Figure:
    """Container start-up cost, apart from any workload: per probe (no-op, python start,
    import torch) the native and in-container start times, median bars and each sample,
    log scale, with the difference of medians written above each probe."""
    name = title or "container start-up"
    if _empty(samples, "runtime", "probe", "side", "seconds"):
        return no_data_figure(name, "no data: no container runtime in this sweep")
    _theme()
    runtimes = runtime_order(samples["runtime"])
    fig, axes = plt.subplots(1, len(runtimes), figsize=(7.5 * len(runtimes), 5), squeeze=False)
    palette = runtime_palette(runtimes)
    for ax, runtime in zip(axes[0], runtimes):
        df = samples[samples["runtime"] == runtime]
        probes = [p for p in STARTUP_PROBES if p in set(df["probe"])] + sorted(
            set(df["probe"]) - set(STARTUP_PROBES))
        side_palette = {"native": palette["native"], "container": palette[runtime]}
        common = dict(x="probe", y="seconds", hue="side", order=probes,
                      hue_order=["native", "container"], palette=side_palette, ax=ax)
        sns.barplot(data=df, estimator="median", errorbar=None, alpha=0.55, **common)
        sns.stripplot(data=df, dodge=True, jitter=0.12, size=4, edgecolor="black",
                      linewidth=0.4, legend=False, **common)
        ax.set_yscale("log")
        medians = df.groupby(["probe", "side"])["seconds"].median()
        for i, probe in enumerate(probes):
            if (probe, "native") in medians and (probe, "container") in medians:
                diff = medians[(probe, "container")] - medians[(probe, "native")]
                top = df[df["probe"] == probe]["seconds"].max()
                ax.annotate(f"{diff * 1000:+.0f} ms", (i, top), textcoords="offset points",
                            xytext=(0, 8), ha="center", fontsize="small")
        ax.set_ylim(top=df["seconds"].max() * 3)
        ax.set_xlabel("probe")
        ax.set_ylabel("start-up time (s, log scale)")
        ax.set_title(f"{runtime}: start-up vs native" if not title else title)
        ax.legend(**OUTSIDE_LEGEND)
    return _finish(fig, "", ["bars: median, dots: each sample; the number above a probe is "
                             "container median - native median",
                             "measured apart from the workloads: not part of the container "
                             "overhead of any sweep point"])


def completeness_figure(points: pd.DataFrame) -> plt.Figure:
    """Finished repeats per requested point: one row per workload x runtime, one column per
    geometry; cells say done/requested and name failures, coloured by the fraction done."""
    if _empty(points, "workload", "runtime", "state"):
        return no_data_figure("sweep completeness", "no data: no requested points")
    _theme()
    df = points.copy()
    df["row"] = df["workload"] + " / " + df["runtime"]
    df["point"] = df.apply(point_label, axis=1)
    grouped = df.groupby(["row", "point"])
    # disturbed runs are replaced by further repeats: they do not count against a point
    frac = grouped["state"].apply(
        lambda s: (s == "done").sum() / max(1, (s != "disturbed").sum())).unstack()
    text = grouped["state"].apply(_cell_text).unstack().fillna("")
    rows = sorted(frac.index, key=lambda r: (r.split(" / ")[0],
                                             runtime_order([r.split(" / ")[1], *RUNTIMES])
                                             .index(r.split(" / ")[1])))
    frac, text = frac.loc[rows], text.loc[rows]
    fig, ax = plt.subplots(figsize=(max(6.5, 1.9 * frac.shape[1] + 3.5),
                                    max(2.8, 0.7 * frac.shape[0] + 2)))
    sns.heatmap(frac, annot=text, fmt="", cmap="RdYlGn", vmin=0, vmax=1, cbar=True,
                cbar_kws={"label": "fraction of repeats done"}, linewidths=1, linecolor="white",
                ax=ax, annot_kws={"fontsize": "small"})
    ax.set_xlabel("sweep point (nodes-GPUs-ranks-threads per rank)")
    ax.set_ylabel("workload / runtime")
    ax.tick_params(axis="y", rotation=0)
    ax.grid(False)
    done, total = int((df["state"] == "done").sum()), len(df)
    disturbed = int((df["state"] == "disturbed").sum())
    title = f"sweep completeness: {done} of {total} requested runs finished"
    if disturbed:
        title += f"\n(and {disturbed} disturbed: kept, left out of the statistics)"
    ax.set_title(title)
    return _finish(fig, "", ["empty cell: that point was not requested; failed and missing "
                             "points are listed with reason and log in the table; disturbed "
                             "runs (interference during the measurement) are re-measured by "
                             "further repeats and do not count against a cell's colour"])


def _cell_text(states: pd.Series) -> str:
    done = int((states == "done").sum())
    text = f"{done}/{len(states)} done"
    for state in ("disturbed", "failed", "missing"):
        n = int((states == state).sum())
        if n:
            text += f"\n{n} {state}"
    return text


# --- tables --------------------------------------------------------------------------------

def missing_table(points: pd.DataFrame) -> pd.DataFrame:
    """The requested points that did not finish: state (failed/missing), reason, log."""
    if _empty(points, "state"):
        return pd.DataFrame(columns=MISSING_COLUMNS)
    bad = points[~points["state"].isin(["done", "disturbed"])].copy()
    for col in MISSING_COLUMNS:
        if col not in bad:
            bad[col] = ""
    bad[["reason", "log"]] = bad[["reason", "log"]].fillna("")
    return bad[MISSING_COLUMNS].reset_index(drop=True)


def epochs_table(records: Iterable[tuple[str, dict]]) -> pd.DataFrame:
    """One row per epoch of every run that has epoch_s (tidy: point, count, epoch, seconds,
    warmup = first epoch of a run that has several, excluded from the steady-state time,
    disturbed and shared_cores of the run). count is the run's scaling count, as in
    runs.csv."""
    rows = []
    for _path, m in records:
        epochs = m.get("epoch_s") or []
        point = m["point"]
        # a record without its payload (an old one): the kind whose records have epochs
        payload = m.get("payload") or next(k.name for k in kinds()
                                           if any(f.path == "epoch_s" for f in k.fields))
        count = scaling_count(SweepPoint(**point), payload)
        disturbed = disturbance(m)[0]
        shared = bool((m.get("allocation") or {}).get("shared_cores", False))
        for i, seconds in enumerate(epochs, start=1):
            rows.append({**{c: point.get(c) for c in POINT_COLUMNS}, "count": count,
                         "epoch": i, "epoch_s": float(seconds),
                         "warmup": i == 1 and len(epochs) > 1, "disturbed": disturbed,
                         "shared_cores": shared})
    if not rows:
        return pd.DataFrame(columns=EPOCH_COLUMNS)
    return pd.DataFrame(rows, columns=EPOCH_COLUMNS).sort_values(
        ["workload", "runtime", "count", "threads", "repeat", "epoch"], ignore_index=True)


def provenance_table(records: Iterable[tuple[str, dict]]) -> pd.DataFrame:
    """Where and with what each run was measured: hosts, launcher, Slurm job, image digest,
    container runtime version, library and engine versions, model and dataset, the CNN's
    parallel mode and the MPI library its ranks loaded (mpi_origin: host, container or
    mixed; empty without MPI), git commit,
    times, whether it was disturbed, what the allocation gave it (exclusive, shared cores,
    CPUs and GPUs bound), its place in its block's order, metrics file."""
    rows = []
    for path, m in records:
        image = m.get("image") or {}
        engine = m.get("engine") or {}
        model = m.get("model") or {}
        versions = m.get("versions") or {}
        host = m.get("host") or {}
        dataset = m.get("dataset") or {}
        slurm = m.get("slurm") or {}
        allocation = m.get("allocation") or {}
        rows.append({
            **{c: m["point"].get(c) for c in POINT_COLUMNS},
            "hosts": ";".join(m.get("hosts") or []),
            "host_platform": host.get("platform"),
            "launcher": m.get("launcher"),
            "slurm_job_id": slurm.get("job_id") or m.get("slurm_job_id"),
            "image_digest": image.get("content_digest"),
            "image": image.get("name"),
            "image_source": image.get("source"),
            "image_builder": _builder(image.get("builder"), image.get("builder_version")),
            "runtime_version": (m.get("runtime_provenance") or {}).get("version"),
            "python": versions.get("python") or host.get("python"),
            "torch": versions.get("torch"),
            "engine": engine.get("name"),
            "engine_version": engine.get("version"),
            "model": model.get("name"),
            "model_sha256": model.get("sha256"),
            "dataset": dataset.get("name"),
            # the MPI library the ranks loaded (host, container or mixed): CNN mpi mode
            "parallel": m.get("parallel"),
            "mpi_origin": (m.get("mpi") or {}).get("origin"),
            "mpi_library": (m.get("mpi") or {}).get("library"),
            "mpi_library_version": (m.get("mpi") or {}).get("library_version"),
            "git_commit": m.get("git_commit"),
            "start": m.get("harness_start") or m.get("start"),
            "end": m.get("harness_end") or m.get("end"),
            "disturbed": disturbance(m)[0],
            "disturbed_reason": disturbance(m)[1],
            "exclusive": allocation.get("exclusive"),
            "shared_cores": allocation.get("shared_cores"),
            "cpus_bound": allocation.get("cpus_bound"),
            "gpus_visible": allocation.get("gpus_visible"),
            "order_position": (m.get("order") or {}).get("position"),
            "path": str(path),
        })
    if not rows:
        return pd.DataFrame(columns=PROVENANCE_COLUMNS)
    return pd.DataFrame(rows, columns=PROVENANCE_COLUMNS).sort_values(
        POINT_COLUMNS, ignore_index=True)


def _builder(builder, version=None) -> str | None:
    """``charliecloud 0.31``: the builder's name and version, from a run's image record
    (``{"name", "version"}`` in older records, name and ``builder_version`` now)."""
    if isinstance(builder, dict):
        builder, version = builder.get("name"), builder.get("version")
    return " ".join(str(v) for v in (builder, version) if v) or None


def startup_samples(records: Iterable[dict]) -> pd.DataFrame:
    """Tidy start-up samples: runtime, probe, side (native/container), seconds."""
    rows = [
        {"runtime": r["runtime"], "probe": probe, "side": side, "seconds": float(s)}
        for r in records
        for probe, sides in (r.get("probes") or {}).items()
        for side in ("native", "container")
        for s in (sides.get(side) or {}).get("samples_s", [])
    ]
    return pd.DataFrame(rows, columns=["runtime", "probe", "side", "seconds"])


def startup_table(records: Iterable[dict]) -> pd.DataFrame:
    """Per container runtime and probe: native and container medians and their difference."""
    rows = []
    for r in records:
        for probe, sides in (r.get("probes") or {}).items():
            native, container = sides.get("native") or {}, sides.get("container") or {}
            rows.append({
                "runtime": r["runtime"], "probe": probe,
                "n": container.get("n"),
                "native_median_s": native.get("median_s"),
                "container_median_s": container.get("median_s"),
                "startup_overhead_s": sides.get("startup_overhead_s"),
                "native_min_s": native.get("min_s"),
                "container_min_s": container.get("min_s"),
                "image_digest": r.get("image_digest"),
                "start": r.get("start"),
            })
    if not rows:
        return pd.DataFrame(columns=STARTUP_COLUMNS)
    df = pd.DataFrame(rows, columns=STARTUP_COLUMNS)
    df["_probe"] = [STARTUP_PROBES.index(p) if p in STARTUP_PROBES else 99 for p in df["probe"]]
    return df.sort_values(["runtime", "_probe", "probe"]).drop(columns="_probe").reset_index(drop=True)
