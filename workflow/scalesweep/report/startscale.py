"""The start-up-at-scale figure (issue #44; pure: tables in, Figure out): per runtime the
slowest rank's start as K ranks start together, measured and modelled, for each place;
and the model's prediction at a site's scale, with its interval, labelled a prediction."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scalesweep.report.style import apply_theme, is_empty_table, no_data_figure  # noqa: E402


def _place(row) -> str:
    if row["place"] == "local":
        return "node's disk"
    if row["place"] == "site":  # under Slurm: the site's own file system, per node count
        return f"site's file system, {int(row['nodes'])} node(s)"
    return f"bounded FS, +{row['service_us']:g} µs/op"


def startup_scale_figure(curves: pd.DataFrame, model: pd.DataFrame) -> plt.Figure:
    """``curves``: startup_scale.csv; ``model``: startup_model.csv."""
    if is_empty_table(curves, "t_max_s"):
        return no_data_figure("Start-up at scale")
    apply_theme()
    runtimes = list(dict.fromkeys(curves["runtime"]))
    fig, axes = plt.subplots(1, len(runtimes) + 1, figsize=(4.2 * (len(runtimes) + 1), 4.2),
                             squeeze=False)
    fits = model.drop_duplicates("runtime").set_index("runtime") if len(model) else model
    for ax, rt in zip(axes[0], runtimes):
        data = curves[curves["runtime"] == rt].assign(where=lambda d: d.apply(_place, axis=1))
        for i, (where, g) in enumerate(data.groupby("where", sort=False)):
            g = g.sort_values("ranks")
            colour = f"C{i}"
            ax.errorbar(g["ranks"], g["t_max_s"], yerr=[g["t_max_s"] - g["t_max_low_s"],
                                                        g["t_max_high_s"] - g["t_max_s"]],
                        fmt="o-", color=colour, label=where, capsize=3)
            if rt in getattr(fits, "index", []) and pd.notna(fits.loc[rt].get("a_s")):
                f = fits.loc[rt]
                k = np.linspace(g["ranks"].min(), g["ranks"].max(), 50)
                if (g["place"] == "site").any():
                    continue  # no server counters: no model curve
                w = float(g["server_busy_s_per_start"].fillna(0).median())
                ax.plot(k, f["a_s"] * np.maximum(1, k / f["cores"]) + f["d"] * w
                        + f["b"] * (k - 1) * w,
                        "--", color=colour, alpha=0.7)
        ax.set(title=rt, xlabel="ranks starting together (K)", ylabel="slowest rank's start (s)")
        ax.legend(fontsize=7, title="measured (dashed: model)", title_fontsize=7)
    ax = axes[0][-1]
    preds = model.dropna(subset=["predicted_s"]) if "predicted_s" in model else model.iloc[0:0]
    if preds.empty:
        ax.text(0.5, 0.5, "no prediction (see startup_model.csv: not_fitted)", ha="center",
                va="center", transform=ax.transAxes, fontsize=8)
        ax.set_axis_off()
    else:
        for i, (rt, g) in enumerate(preds.groupby("runtime", sort=False)):
            g = g.sort_values("nodes")
            ax.plot(g["nodes"], g["predicted_s"], "s--", color=f"C{i}", label=rt)
            ax.fill_between(g["nodes"], g["low_s"], g["high_s"], color=f"C{i}", alpha=0.15)
        first = preds.iloc[0]
        ax.text(0.02, 0.98, "not modelled: the data a start reads; the site's own start",
                transform=ax.transAxes, va="top", fontsize=7)
        ax.set(xscale="log", yscale="log", xlabel="nodes starting together",
               ylabel="predicted slowest start (s)",
               title=f"PREDICTION at {first['site']}\n{first['metadata_ops_per_s']:,.0f} "
                     "metadata ops/s (site file)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
