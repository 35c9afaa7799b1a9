"""Seaborn figures for the report. Each function takes tidy tables and returns a Figure.

Error bars are the tables' own 95% confidence intervals (scaling.csv, llm.csv), drawn with
matplotlib; seaborn never computes one here (errorbar=None). Disturbed runs are drawn as
hollow grey markers, warm-up runs (measurement.warmup_blocks) as hollow dark diamonds:
shown, but not part of any statistic.
"""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from scalesweep.analyse.collect import SYNTHETIC_LABEL  # noqa: E402
from scalesweep.analyse.summary import llm_summary, scaling_rows  # noqa: E402
from scalesweep.plan.kinds import summarised_in  # noqa: E402
from scalesweep.analyse.fits import MODELS, can_fit, min_counts  # noqa: E402
from scalesweep.report.style import (  # noqa: E402
    NOT_DONE_COLOR,
    OUTSIDE_LEGEND,
    counted_mask,
    error_bars,
    left_out_handles,
    numeric_column,
    outside_note,
    runtime_order,
    runtime_palette,
    scatter_left_out,
    shared_cores_note,
)

CI_NOTE = "error bars / bands: 95% CI of the table (Student t over the undisturbed repeats)"


def _left_out_notes(kinds) -> list[tuple[str, str]]:
    """The footer lines of the left-out runs drawn (style.scatter_left_out's kinds)."""
    return [(text, "0.25") for kind, text in (
        ("disturbed", "hollow grey: disturbed runs, shown but left out of the statistics"),
        ("warmup", "hollow dark diamonds: warm-up runs (the first measurement.warmup_blocks "
                   "block(s) of each series), shown but left out of the statistics"))
        if kind in kinds]


def _footer(fig: plt.Figure, lines: list[tuple[str, str]]) -> None:
    """Notes under the axes (red warnings first), wrapped to the figure's width, the
    figure grown to hold them."""
    width_in = fig.get_size_inches()[0]
    chars = max(40, int(width_in * 72 / (8 * 0.6)))  # fontsize 8
    lines = [(part, color) for text, color in lines if text
             for part in textwrap.wrap(text, chars)]
    width, height = fig.get_size_inches()
    line_in = 0.2
    footer = line_in * len(lines) + (0.1 if lines else 0)
    fig.set_size_inches(width, height + footer)
    fig.tight_layout(rect=(0, footer / (height + footer), 1, 1))
    for i, (text, color) in enumerate(lines):
        fig.text(0.01, (footer - 0.05 - i * line_in) / (height + footer), text, ha="left",
                 va="top", fontsize=8, color=color)


PANELS_PER_ROW = 3  # scaling panels side by side before a new row


def scaling_figure(scaling: pd.DataFrame, runs: pd.DataFrame) -> plt.Figure:
    """Measured time (mean, 95% CI error bars from scaling.csv, undisturbed repeats as
    dots, disturbed ones hollow grey) vs ideal time, one panel per workload. Series
    without numbers (every baseline run disturbed) are not drawn; their notes say why."""
    sns.set_theme(style="whitegrid", context="notebook")
    rows = scaling_rows(scaling)
    without = ("\n".join(sorted(set(scaling["note"].drop(rows.index).dropna())))
               if "note" in scaling else "")  # why a series has no numbers
    scaling = rows
    counts_of = scaling.groupby("workload")["count"].nunique() if not scaling.empty else {}
    # a workload measured at one count has nothing to scale: named below, not a panel
    single = sorted(w for w, n in dict(counts_of).items() if n < 2)
    workloads = sorted(w for w, n in dict(counts_of).items() if n >= 2)
    scaling = scaling[scaling["workload"].isin(workloads)] if not scaling.empty else scaling
    # each panel with its legend beside it, at most PANELS_PER_ROW a row
    ncols = max(1, min(len(workloads), PANELS_PER_ROW))
    nrows = max(1, -(-len(workloads) // ncols))
    fig, grid = plt.subplots(nrows, ncols, figsize=(9 * ncols, 4.5 * nrows), squeeze=False)
    axes = [list(grid.flat)]
    for ax in axes[0][len(workloads):] if workloads else []:
        ax.set_visible(False)
    palette = runtime_palette(scaling["runtime"] if not scaling.empty else [])
    colors = sns.color_palette("colorblind", 10)
    left_out = set()  # the kinds of left-out runs drawn (disturbed, warmup)
    outside = 0  # means outside their own interval (error_bars)
    for ax, workload in zip(axes[0], workloads):
        table = scaling[scaling["workload"] == workload].copy()
        table["series"] = table["runtime"] + " (" + table["threads"].astype(str) + " thr/rank)"
        dots = runs[runs["workload"] == workload].copy() if not runs.empty else runs
        if not dots.empty:
            dots["series"] = dots["runtime"] + " (" + dots["threads"].astype(str) + " thr/rank)"
        for i, (series, s) in enumerate(table.sort_values("count").groupby("series", sort=True)):
            runtime = s["runtime"].iloc[0]
            color = palette.get(runtime, colors[i % len(colors)])
            if table["threads"].nunique() > 1:  # several series per runtime: apart
                color = colors[i % len(colors)]
            x, y = s["count"].to_numpy(float), s["time_s"].to_numpy(float)
            low, high = numeric_column(s, "ci95_low"), numeric_column(s, "ci95_high")
            ax.plot(x, y, marker="o", color=color, label=series, linewidth=2)
            ok = ~(np.isnan(low) | np.isnan(high))
            if ok.any():
                err, cut = error_bars(y[ok], low[ok], high[ok])
                outside += cut
                ax.errorbar(x[ok], y[ok], yerr=err, fmt="none", ecolor=color, elinewidth=1.5,
                            capsize=5)
            ax.plot(s["count"], s["linear_time_s"], linestyle="--", color="grey", linewidth=1)
            mine = dots[dots["series"] == series] if not dots.empty else dots
            if not mine.empty:
                counted = counted_mask(mine)
                ax.scatter(mine.loc[counted, "count"], mine.loc[counted, "time_s"], color=color,
                           s=16, alpha=0.6, zorder=3)
                left_out |= scatter_left_out(ax, mine["count"], mine["time_s"], mine)
        ax.plot([], [], linestyle="--", color="grey", label="ideal (linear) time")
        counts = sorted(table["count"].unique())
        if len(counts) > 2:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("ranks (CPU) / GPUs")
        ax.set_ylabel("seconds per epoch")
        if ax.get_yscale() == "linear":
            ax.set_ylim(bottom=0)
        ax.set_title(workload)
        handles, _ = ax.get_legend_handles_labels()
        ax.legend(handles=handles + left_out_handles(left_out), **OUTSIDE_LEGEND)
    if not workloads:
        empty = ("every workload was measured at one count: nothing to scale" if single
                 else without or "no finished runs yet")
        axes[0][0].text(0.5, 0.5, empty, ha="center", va="center", wrap=True)
    one_count = (f"measured at one count, so not drawn: {', '.join(single)} "
                 "(their times: scaling.csv)" if single else "")
    _footer(fig, [(shared_cores_note(scaling, runs), NOT_DONE_COLOR),
                  (outside_note(outside), NOT_DONE_COLOR),
                  (one_count, "0.25"),
                  (CI_NOTE if workloads else "", "0.25"),
                  (no_fit_note(scaling), "0.25"),
                  *_left_out_notes(left_out)])
    return fig


def no_fit_note(scaling: pd.DataFrame) -> str:
    """Why no scaling law is fitted (and no fit figure listed) for the series swept at too
    few counts ('' where every series can be fitted)."""
    if scaling.empty:
        return ""
    several = scaling["threads"].nunique() > 1
    short: dict[tuple, list[str]] = {}  # counts -> the series swept at them
    for (workload, runtime, threads), s in scaling.groupby(["workload", "runtime", "threads"]):
        counts = tuple(sorted(int(c) for c in s["count"].unique()))
        if not can_fit(counts):
            short.setdefault(counts, []).append(
                f"{workload} {runtime}" + (f" ({threads} thr/rank)" if several else ""))
    needs = ", ".join(f"{model} needs {min_counts(model)}" for model in MODELS)
    return "; ".join(
        f"no scaling-law fit for {', '.join(names)}: {len(counts)} count"
        f"{'s' if len(counts) > 1 else ''} swept ({', '.join(map(str, counts))}), {needs}"
        for counts, names in short.items()) + (" (fits.csv: status, reason)" if short else "")


def llm_figure(runs: pd.DataFrame, table: pd.DataFrame | None = None) -> plt.Figure:
    """The OLCF study's figure: wall time for the prompt set (left) and generated tokens/s
    (right) vs GPU count, per runtime, one row of panels per model (never averaged across
    models; a synthetic model's label says "synthetic weights"). Bars are llm.csv's means
    (``llm_summary`` of the runs when no table is given), error bars its 95% CIs; dots
    are the repeats, disturbed ones hollow grey."""
    sns.set_theme(style="whitegrid", context="notebook")
    llm = runs[runs["payload"].isin(summarised_in("llm"))] if "payload" in runs else runs.iloc[0:0]
    if table is None:
        table = llm_summary(runs) if not llm.empty else pd.DataFrame()
    models = (sorted(set(zip(table["workload"], table["model_label"].fillna(""))))
              if not table.empty else [])
    fig, axes = plt.subplots(max(1, len(models)), 2, figsize=(13, 4.5 * max(1, len(models))),
                             squeeze=False)
    if not models:
        axes[0][0].text(0.5, 0.5, "no finished LLM runs yet", ha="center", va="center")
        for ax in axes[0]:
            ax.set_axis_off()
        fig.tight_layout()
        return fig
    if "model_label" not in llm:
        from scalesweep.analyse.collect import model_label

        llm = llm.assign(model_label=[model_label(m, s) for m, s in zip(
            llm.get("model", pd.Series(None, index=llm.index)),
            llm.get("synthetic_model", pd.Series(False, index=llm.index)))])
    left_out = set()  # the kinds of left-out runs drawn (disturbed, warmup)
    outside = 0  # means outside their own interval (error_bars)
    for row, (workload, model) in zip(axes, models):
        mine = table[(table["workload"] == workload) & (table["model_label"].fillna("") == model)]
        dots = llm[(llm["workload"] == workload) & (llm["model_label"].fillna("") == model)]
        runtimes = runtime_order(mine["runtime"])
        palette = runtime_palette(runtimes)
        gpus = sorted(int(g) for g in mine["gpus"].unique())
        width = 0.8 / max(1, len(runtimes))
        for ax, (value, low, high, ylabel) in zip(row, [
            ("mean", "ci95_low", "ci95_high", "wall time for the prompt set (s)"),
            ("tokens_per_s", "tokens_per_s_ci95_low", "tokens_per_s_ci95_high",
             "generated tokens / s"),
        ]):
            dot_col = "time_s" if value == "mean" else "tokens_per_s"
            for i, runtime in enumerate(runtimes):
                r = mine[mine["runtime"] == runtime]
                offset = (i - (len(runtimes) - 1) / 2) * width
                x = np.array([gpus.index(int(g)) for g in r["gpus"]]) + offset
                y = numeric_column(r, value)
                ax.bar(x, y, width=width * 0.95, color=palette[runtime], alpha=0.65,
                       label=runtime)
                lo, hi = numeric_column(r, low), numeric_column(r, high)
                ok = ~(np.isnan(lo) | np.isnan(hi) | np.isnan(y))
                if ok.any():
                    err, cut = error_bars(y[ok], lo[ok], hi[ok])
                    outside += cut
                    ax.errorbar(x[ok], y[ok], yerr=err, fmt="none", ecolor="black",
                                elinewidth=1.2, capsize=4)
                d = dots[dots["runtime"] == runtime]
                if dot_col in d and not d.empty:
                    dx = np.array([gpus.index(int(g)) if int(g) in gpus else np.nan
                                   for g in d["gpus"]]) + offset
                    counted = counted_mask(d).to_numpy()
                    dy = pd.to_numeric(d[dot_col], errors="coerce").to_numpy(float)
                    ax.scatter(dx[counted], dy[counted], color="black", s=9, zorder=3)
                    left_out |= scatter_left_out(ax, dx, dy, d, s=25)
            ax.set_xticks(range(len(gpus)), [str(g) for g in gpus])
            ax.set_xlabel("GPUs (0 = CPU only)")
            ax.set_ylabel(ylabel)
        # one title per row (workload and model), over both panels, wrapped to the figure
        width_in = fig.get_size_inches()[0] * (1 - row[0].get_position().x0)
        row[0].set_title("\n".join(textwrap.wrap(f"{workload}: {model}",
                                                 max(20, int(width_in * 72 / (12 * 0.6))))),
                         loc="left", fontsize="medium")
        row[-1].legend(**OUTSIDE_LEGEND)
    synthetic = any(SYNTHETIC_LABEL in m for _, m in models)
    _footer(fig, [
        (shared_cores_note(table, llm), NOT_DONE_COLOR),
        (outside_note(outside), NOT_DONE_COLOR),
        (f"{SYNTHETIC_LABEL}: random-weight model; its tokens/s measure engine and runtime "
         "only" if synthetic else "", NOT_DONE_COLOR),
        ("bars: llm.csv means over the undisturbed repeats; " + CI_NOTE + "; dots: repeats",
         "0.25"),
        *_left_out_notes(left_out),
    ])
    return fig
