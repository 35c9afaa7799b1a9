"""The report's per-run figures (pure: tables in, Figure out): each epoch's time
(``epoch_time_figure``), each point's peak memory (``memory_figure``), the container
start-up probes (``startup_figure``), which requested points finished
(``completeness_figure``). Anomalies are drawn, never dropped; error bars are the tables'
own 95% confidence intervals; disturbed runs are hollow grey, warm-up runs hollow dark
diamonds, neither in any statistic (report/style.py)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D

from scalesweep.analyse.stats import describe_repeats
from scalesweep.plan.kinds import kind_of
from scalesweep.plan.sweep import RUNTIMES
from scalesweep.report.style import (
    OUTSIDE_LEGEND,
    is_empty_table,
    finish_figure,
    only_workload,
    scale_labels,
    apply_theme,
    count_axis_label,
    counted_mask,
    error_bars,
    flag_mask,
    disturbed_note,
    left_out_handles,
    no_data_figure,
    not_done_note,
    outside_note,
    point_label,
    runtime_order,
    runtime_palette,
    shared_cores_note,
    strip_left_out,
    warmup_note,
)
from scalesweep.report.run_tables import STARTUP_PROBES

def epoch_time_figure(epochs: pd.DataFrame, points: pd.DataFrame | None = None,
                      title: str = "") -> plt.Figure:
    """Distribution of per-epoch seconds per runtime x count: boxes over steady-state
    epochs of all undisturbed repeats, dots for each of them, 'x' for first (warm-up)
    epochs (``first_epoch``), which the steady-state time excludes but the figure still
    shows; every epoch of a disturbed run is a hollow grey dot, of a warm-up run (a warm-up
    block: ``warmup``) a hollow dark diamond (shown, not in the boxes)."""
    name = title or "per-epoch time"
    if is_empty_table(epochs, "runtime", "count", "epoch_s"):
        return finish_figure(no_data_figure(name, "no data: no finished CNN runs"),
                             not_done_note(points, only_workload(epochs, points)))
    apply_theme()
    df = epochs.copy()
    if "first_epoch" not in df and "warmup" in df:  # an epochs.csv from before warm-up blocks
        df = df.rename(columns={"warmup": "first_epoch"})
    df["first_epoch"] = flag_mask(df, "first_epoch")
    counted = counted_mask(df)
    df["x"], order = scale_labels(df)
    hue_order = runtime_order(df["runtime"])
    palette = runtime_palette(hue_order)
    fig, ax = plt.subplots(figsize=(max(9.5, 1.6 * len(order) * len(hue_order) + 5.5), 5.2))
    steady = df[~df["first_epoch"] & counted]
    warm = df[df["first_epoch"] & counted]
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
    left_out = strip_left_out(df, common, jitter=0.12)
    ax.set_xlabel(count_axis_label(df))
    ax.set_ylabel("seconds per epoch")
    ax.set_ylim(bottom=0)
    ax.set_title(name)
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], marker="X", linestyle="", color="0.4", markeredgecolor="black",
                       markersize=9, label="first epoch (warm-up)")]
    ax.legend(handles=handles + left_out_handles(left_out), **OUTSIDE_LEGEND)
    run_key = [c for c in ("runtime", "arm", "count", "repeat") if c in df]
    n_runs = df.groupby(run_key).ngroups if "repeat" in df else len(df)
    runs = df.drop_duplicates(run_key) if "repeat" in df else df
    return finish_figure(fig, not_done_note(points, only_workload(epochs)),
                         [f"{len(df)} epochs of {n_runs} runs; boxes: steady-state epochs (all but "
                          "the first, when a run has several) pooled over repeats; boxes show the "
                          "spread of epochs, not a confidence interval",
                          disturbed_note(runs), warmup_note(runs)],
                         warnings=[shared_cores_note(epochs)])



def memory_figure(runs: pd.DataFrame, points: pd.DataFrame | None = None,
                  title: str = "") -> plt.Figure:
    """Peak resident memory per runtime x count, each run's own peak (runs.csv's
    ``peak_rss_mb``; memory.csv's ``reported_peak_rss_mb_mean`` is the bar): bars are the
    mean over the undisturbed repeats with its 95% CI (Student t, ``describe_repeats`` as
    in every table), dots each repeat. CNN: the largest rank's ``ru_maxrss`` (the kernel's
    high-water mark); LLM: the inference server's peak as the payload sampled it."""
    name = title or "peak memory"
    if is_empty_table(runs, "runtime", "count", "peak_rss_mb") or runs["peak_rss_mb"].isna().all():
        return finish_figure(no_data_figure(name, "no data: no finished run recorded peak memory"),
                             not_done_note(points, only_workload(runs, points)))
    apply_theme()
    df = runs.dropna(subset=["peak_rss_mb"]).copy()
    df["x"], order = scale_labels(df)
    hue_order = runtime_order(df["runtime"])
    palette = runtime_palette(hue_order)
    fig, ax = plt.subplots(figsize=(max(9.5, 1.6 * len(order) * len(hue_order) + 5.5), 5.2))
    common = dict(x="x", y="peak_rss_mb", hue="runtime", order=order, hue_order=hue_order, ax=ax)
    valid = df[counted_mask(df)]  # neither disturbed nor warm-up
    width = 0.8 / len(hue_order)  # seaborn's dodge: the dots sit on their bars
    outside = 0  # means outside their own interval (error_bars)
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
                err, cut = error_bars(y[ok], low[ok], high[ok])
                outside += cut
                ax.errorbar(x[ok], y[ok], yerr=err, fmt="none", ecolor="black",
                            elinewidth=1.2, capsize=5, zorder=4)
        sns.stripplot(data=valid, palette=palette, dodge=True, jitter=0.1, size=5,
                      edgecolor="black", linewidth=0.5, legend=False, **common)
    left_out = strip_left_out(df, common)
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
    ax.legend(handles=handles + left_out_handles(left_out), **OUTSIDE_LEGEND)
    what = ("the inference server's peak RSS as the LLM payload sampled it" if llm else
            "the largest rank's ru_maxrss (the kernel's high-water mark of the rank process)")
    return finish_figure(fig, not_done_note(points, only_workload(runs)),
                         [f"bars: mean over the undisturbed repeats of each run's own peak: {what} "
                          "(runs.csv peak_rss_mb; memory.csv reported_peak_rss_mb_mean); "
                          "error bars: its 95% CI (Student t over the repeats); dots: each repeat",
                          "memory.csv's peak_rank_rss_mb and peak_total_rss_mb measure something "
                          "else: the largest of the harness's periodic samples of each rank process "
                          "with its descendants (memory over time), which miss peaks shorter than "
                          "the interval" + ("" if not llm else " and also count the payload's "
                                            "client process, not only the server"),
                          disturbed_note(df), warmup_note(df)],
                         warnings=[shared_cores_note(runs), outside_note(outside)])



def startup_figure(samples: pd.DataFrame, title: str = "") -> plt.Figure:
    """Container start-up cost, apart from any workload: per probe (no-op, python start,
    import torch) the native and in-container start times, median bars and each sample,
    log scale, with the difference of medians written above each probe."""
    name = title or "container start-up"
    if is_empty_table(samples, "runtime", "probe", "side", "seconds"):
        return no_data_figure(name, "no data: no container runtime in this sweep")
    apply_theme()
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
    return finish_figure(fig, "", ["bars: median, dots: each sample; the number above a probe is "
                             "container median - native median",
                             "measured apart from the workloads: not part of the container "
                             "overhead of any sweep point"])



def completeness_figure(points: pd.DataFrame) -> plt.Figure:
    """Finished repeats per requested point: one row per workload x runtime, one column per
    geometry; cells say done/requested and name failures, coloured by the fraction done."""
    if is_empty_table(points, "workload", "runtime", "state"):
        return no_data_figure("sweep completeness", "no data: no requested points")
    apply_theme()
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
    return finish_figure(fig, "", ["empty cell: that point was not requested; failed and missing "
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
