"""The scaling-law fits drawn (rule plot_fit, ``scalesweep fit --plot``): one panel per
series, the repeats, the fitted laws with their bootstrap bands and the predictions
(:mod:`scalesweep.analyse.fits` fits them)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from scalesweep.analyse.fits import Fit, fitted_curve, min_counts, predict, prediction_counts

def fit_figure(series: list[tuple[str, pd.DataFrame, list[Fit]]], count_col: str = "count",
               time_col: str = "time_s", predict_counts=None, title: str = "",
               count_label: str = "count", time_label: str = "time (s)"):
    """One panel: for each (label, its runs, its fits) the repeats as dots, mean +- 95% CI,
    the ideal (linear) time from the baseline, each fitted law with its bootstrap band, and
    the predictions with their CIs over a shaded 'not run' range. Fits that could not be
    made or may not predict are named with their reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from scalesweep.report.style import error_bars, outside_note

    from scalesweep.analyse.stats import describe_repeats

    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    colours = sns.color_palette(n_colors=max(len(series), 1))
    notes, measured_top, predicted_top, all_counts, drawn = [], 0, 0, set(), set()
    for colour, (label, runs, series_fits) in zip(colours, series):
        stats = describe_repeats(runs, [count_col], time_col).sort_values(count_col)
        x = stats[count_col].to_numpy(float)
        all_counts.update(int(c) for c in x)
        measured_top = max(measured_top, x.max())
        ax.scatter(runs[count_col], runs[time_col], s=12, alpha=0.5, color=colour)
        err, outside = error_bars(stats["mean"], stats["ci95_low"], stats["ci95_high"])
        notes.append(f"{label}, measured: {outside_note(outside)}" if outside else "")
        ax.errorbar(x, stats["mean"].to_numpy(float), yerr=np.nan_to_num(err), fmt="o",
                    color=colour, capsize=3, label=f"{label}: measured (mean, 95% CI)")
        targets = sorted(predict_counts or prediction_counts(x))
        predicting = any(f.can_predict for f in series_fits)
        top = max(targets + [x.max()]) if predicting else x.max()
        base = series_fits[0] if series_fits else None
        if base is not None:
            grid = np.geomspace(x.min(), top, 80) if top > x.min() else x
            ax.plot(grid, base.baseline_time_s * base.baseline_count / grid, ":", color=colour,
                    linewidth=1, label=f"{label}: ideal (linear from {base.baseline_count})")
        too_few = [f for f in series_fits if f.status == "too_few_points"]
        if too_few:
            notes.append(f"{label}: too few points to fit ({len(x)} {count_label}: "
                         f"{', '.join(str(int(c)) for c in x)}; " + ", ".join(
                             f"{f.model} needs {min_counts(f.model)}" for f in too_few) + ")")
        for offset, fit, style in zip((4, -10, 16), series_fits, ("-", "--", "-.")):
            if fit.status == "too_few_points":
                continue
            if not fit.fitted:
                notes.append(f"{label}, {fit.model}: {fit.reason}")
                continue
            end = top if fit.can_predict else x.max()
            grid = np.geomspace(x.min(), end, 80)
            band = fitted_curve(fit, grid)
            ax.plot(grid, band["time_s"], style, color=colour, linewidth=1.4,
                    label=f"{label}: {fit.model} fit (R$^2_{{log}}$ {fit.r2_log:.3f})")
            ax.fill_between(grid, band["ci95_low"], band["ci95_high"], color=colour, alpha=0.12)
            if not fit.can_predict:
                notes.append(f"{label}, {fit.model}: {fit.reason}")
                continue
            new = [c for c in targets if c not in fit.counts]
            predicted = predict(fit, new)
            if len(predicted):
                predicted_top = max(predicted_top, predicted["count"].max())
                drawn.update(int(c) for c in predicted["count"])
                err, outside = error_bars(predicted["time_s"], predicted["time_ci95_low"],
                                          predicted["time_ci95_high"])
                notes.append(f"{label}, {fit.model} predictions: {outside_note(outside)}"
                             if outside else "")
                ax.errorbar(predicted["count"], predicted["time_s"], yerr=err,
                            fmt="D", mfc="white", color=colour, capsize=3)
                for _, row in predicted.iterrows():
                    ax.annotate(f"{row['efficiency_pct']:.0f}%", (row["count"], row["time_s"]),
                                textcoords="offset points", xytext=(6, offset),
                                fontsize="x-small",
                                color=colour)
    if predicted_top:
        ax.axvspan(measured_top * 1.05, predicted_top * 1.15, color="grey", alpha=0.1,
                   label="predicted, not run (efficiency %)")
    if len(all_counts) > 2 or predicted_top:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    ticks = sorted(all_counts | drawn)
    if ticks:
        ax.set_xticks(ticks, [str(t) for t in ticks])
    if not series:
        ax.text(0.5, 0.5, "no finished runs yet", ha="center", va="center",
                transform=ax.transAxes)
    notes = [n for n in notes if n]
    if notes:
        fitted_none = all(not f.fitted for _, _, fs in series for f in fs)
        ax.text(0.5, 0.03, "\n".join(_wrap(n) for n in notes), ha="center", va="bottom",
                transform=ax.transAxes, fontsize="small" if fitted_none else "x-small",
                bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "grey"})
    ax.set_xlabel(count_label)
    ax.set_ylabel(time_label)
    ax.set_title(title)
    # beside the axes: inside, it hides points and bands
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    fig.tight_layout()
    return fig


def _wrap(text: str, width: int = 90) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))
