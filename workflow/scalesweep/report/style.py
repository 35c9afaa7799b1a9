"""The report's figure style, shared by every figure (report/figures.py, run_figures.py,
plots.py, memory.py, drift.py): the theme, the fixed colour of each runtime (native is always
the first colour), the notes under a figure (requested points not done, shared cores,
disturbed and warm-up runs), the footer that holds them, and the small helpers the figures
share (point labels, count axes, an empty figure saying "no data").

Disturbed runs are drawn as hollow grey circles and warm-up runs (the first
measurement.warmup_blocks blocks of every series: runs.csv's ``warmup``) as hollow dark
diamonds; both are left out of every statistic (a warm-up run that was also disturbed is
drawn and counted as warm-up only). Rows measured on shared cores are labelled as not
physical.
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

from scalesweep.analyse.frame import truthy
from scalesweep.analyse.collect import SHARED_CORES_NOTE
from scalesweep.plan.sweep import RUNTIMES
from scalesweep.record.geometry import Geometry

NO_DATA = "no data"
SUPERLINEAR_COLOR = "#d62728"
VARIANCE_COLOR = "#ff7f0e"
NOT_DONE_COLOR = "#b22222"
DISTURBED_COLOR = "0.55"
CI_TEXT = "error bars: the 95% confidence intervals of the tables"
DISTURBED_TEXT = "hollow grey markers: disturbed runs, shown but left out of the statistics"
WARMUP_COLOR = "0.1"
WARMUP_MARKER = "D"
WARMUP_LABEL = "warm-up run (left out)"
DISTURBED_LABEL = "disturbed run (left out)"
FOOTER_PT = 9
# Legends beside the axes: inside, they hide error bars and points.
OUTSIDE_LEGEND = dict(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)



def apply_theme() -> None:
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
    apply_theme()
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize="large", wrap=True,
            transform=ax.transAxes)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return fig



def is_empty_table(df: pd.DataFrame | None, *columns: str) -> bool:
    return df is None or df.empty or any(c not in df.columns for c in columns)



def point_label(row) -> str:
    """A sweep point's geometry as in its directory name: n<nodes>-g<gpus>-r<ranks>-t<threads>."""
    return Geometry.of(row).segment



def scale_labels(df: pd.DataFrame) -> tuple[pd.Series, list[str]]:
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
    if is_empty_table(points, "state"):
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
        if not is_empty_table(t, "shared_cores") and t["shared_cores"].map(truthy).any():
            return SHARED_CORES_NOTE
    return ""



def flag_mask(df: pd.DataFrame | None, col: str) -> pd.Series:
    """A flag column of ``df`` read back (False where the table has no such column)."""
    if df is None:
        return pd.Series(dtype=bool)
    if col not in df.columns:
        return pd.Series(False, index=df.index)
    return df[col].map(truthy).astype(bool)



def warmup_mask(df: pd.DataFrame | None) -> pd.Series:
    """Which rows are warm-up runs (runs.csv's ``warmup``: a warm-up block of its series)."""
    return flag_mask(df, "warmup")



def disturbed_mask(df: pd.DataFrame | None) -> pd.Series:
    """Which rows are disturbed runs that are not warm-up runs (a warm-up run is drawn and
    counted as warm-up only); False where the table has no such column."""
    return flag_mask(df, "disturbed") & ~warmup_mask(df)



def counted_mask(df: pd.DataFrame | None) -> pd.Series:
    """Which rows are runs the statistics use: neither disturbed nor warm-up."""
    return ~(flag_mask(df, "disturbed") | warmup_mask(df))



def scatter_left_out(ax, x, y, rows: pd.DataFrame, s: float = 30) -> set[str]:
    """The runs of ``rows`` no statistic uses, at (``x``, ``y``) (aligned with ``rows``):
    disturbed ones hollow grey circles, warm-up ones hollow dark diamonds. The kinds drawn
    ("disturbed", "warmup"), for ``left_out_handles``."""
    x, y = np.asarray(x), np.asarray(y, dtype=float)
    drawn = set()
    for kind, mask, edge, marker in (
            ("disturbed", disturbed_mask(rows), DISTURBED_COLOR, "o"),
            ("warmup", warmup_mask(rows), WARMUP_COLOR, WARMUP_MARKER)):
        m = mask.to_numpy(bool)
        if m.any():
            ax.scatter(x[m], y[m], facecolor="none", edgecolor=edge, marker=marker, s=s,
                       linewidth=1.2, zorder=3)
            drawn.add(kind)
    return drawn



def strip_left_out(df: pd.DataFrame, common: dict, size: float = 6,
                   jitter: float = 0.1) -> set[str]:
    """``scatter_left_out`` for a seaborn strip plot (``common``: its x, y, hue, order,
    hue_order and ax), each run dodged over its runtime's place."""
    drawn = set()
    for kind, mask, edge, marker in (
            ("disturbed", disturbed_mask(df), DISTURBED_COLOR, "o"),
            ("warmup", warmup_mask(df), WARMUP_COLOR, WARMUP_MARKER)):
        if mask.any():
            sns.stripplot(data=df[mask], palette={rt: "white" for rt in common["hue_order"]},
                          dodge=True, jitter=jitter, size=size, marker=marker, edgecolor=edge,
                          linewidth=1.2, legend=False, **common)
            drawn.add(kind)
    return drawn



def left_out_handles(kinds, size: float = 6) -> list:
    """Legend entries for the left-out runs drawn (``scatter_left_out``'s kinds)."""
    from matplotlib.lines import Line2D

    styles = (("disturbed", DISTURBED_COLOR, "o", DISTURBED_LABEL),
              ("warmup", WARMUP_COLOR, WARMUP_MARKER, WARMUP_LABEL))
    return [Line2D([], [], marker=marker, linestyle="", markerfacecolor="none",
                   markeredgecolor=edge, markeredgewidth=1.2, markersize=size, label=label)
            for kind, edge, marker, label in styles if kind in kinds]



def disturbed_note(df: pd.DataFrame | None, what: str = "runs") -> str:
    """'N disturbed runs: ...' where a table of runs (or epochs) holds disturbed ones."""
    mask = disturbed_mask(df)
    if not mask.any():
        return ""
    n = int(mask.sum())
    return (f"{n} disturbed {what} (interference during the measurement) drawn as hollow grey "
            "markers: shown, but left out of every statistic")



def warmup_note(df: pd.DataFrame | None, what: str = "runs", drawn: str = "drawn as hollow "
                "dark diamonds: shown") -> str:
    """'N warm-up runs: ...' where a table of runs (or epochs) holds warm-up ones."""
    mask = warmup_mask(df)
    if not mask.any():
        return ""
    return (f"{int(mask.sum())} warm-up {what} (the first measurement.warmup_blocks block(s) "
            f"of each series) {drawn}, but left out of every statistic")



def finish_figure(fig: plt.Figure, note: str, extra_lines: Iterable[str] = (),
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



def counts_axis(ax, counts: list[int]) -> None:
    if len(counts) > 2:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    ax.set_xticks(counts, [str(c) for c in counts])
    if len(counts) == 1:
        ax.set_xlim(counts[0] - 1, counts[0] + 1)
    else:
        ax.margins(x=0.2)  # room for the labels right of the last count



def series_labels(df: pd.DataFrame) -> pd.Series:
    """runtime, plus threads per rank where a workload sweeps several."""
    if "threads" in df.columns and df["threads"].nunique() > 1:
        return df["runtime"] + " (" + df["threads"].astype(int).astype(str) + " thr/rank)"
    return df["runtime"].astype(str)



def keep_inside(ax, artists: list, sides=("left", "right", "bottom", "top"),
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



def place_notes(ax, notes: list[tuple]) -> list:
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



def only_workload(*tables: pd.DataFrame | None) -> str | None:
    """The one workload these tables are about, when there is exactly one."""
    names = set()
    for t in tables:
        if not is_empty_table(t, "workload"):
            names |= set(t["workload"].unique())
    return names.pop() if len(names) == 1 else None



def numeric_column(df: pd.DataFrame, col: str) -> np.ndarray:
    """A column as floats, NaN where empty or absent (CSV round trips leave '' or nothing)."""
    if col not in df:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(float)


def error_bars(estimate, low, high) -> tuple[np.ndarray, int]:
    """matplotlib's ``yerr`` (or ``xerr``) of estimates with the intervals [low, high]: a
    2 x n array (below, above), never negative, and how many estimates lie outside their
    own interval. Such a side (a table of an older version, where a statistic and an
    interval of different methods were put together: issue 40) is drawn with length 0,
    never fails the figure (matplotlib refuses a negative error); ``outside_note`` says so
    under it. NaN stays NaN (no bar)."""
    estimate, low, high = (np.asarray(v, dtype=float).ravel() for v in (estimate, low, high))
    below, above = estimate - low, high - estimate
    with np.errstate(invalid="ignore"):
        outside = int(np.count_nonzero((below < 0) | (above < 0)))
        return np.vstack([np.where(below < 0, 0.0, below),
                          np.where(above < 0, 0.0, above)]), outside


def outside_note(outside: int) -> str:
    """The figure's note for ``error_bars``' estimates outside their own interval ("" for
    none)."""
    if not outside:
        return ""
    return (f"{outside} estimate{'s lie' if outside != 1 else ' lies'} outside "
            f"{'their' if outside != 1 else 'its'} own 95% interval in the table: "
            "its error bar is cut at the estimate on that side (the table holds both values)")
