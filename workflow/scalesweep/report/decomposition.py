"""The figure of decomposition.csv: where the container's cost goes.

One panel per workload (and model) and component, in the components' order
(``scalesweep.analyse.components.COMPONENTS``); in each, one marker per container
runtime and mode and geometry: the paired difference container - native in the
component's unit, with its 95% CI as error bars (the table's), coloured by the verdict;
a comparison the campaign did not measure for that component says "not measured" at
its place, never a bar.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from scalesweep.analyse.components import COMPONENTS
from scalesweep.analyse.decomposition import NOT_MEASURED
from scalesweep.report.style import (CI_TEXT, finish_figure, apply_theme, error_bars, no_data_figure,
                                     outside_note, shared_cores_note)

VERDICT_COLORS = {"slower": "#d62728", "faster": "#2ca02c", "equivalent": "0.35",
                  "inconclusive": "#ff7f0e"}
PANEL_COLUMNS = 4


def _label(row) -> str:
    mode = row.get("mode")
    name = f"{row['runtime']}/{mode}" if isinstance(mode, str) and mode else str(row["runtime"])
    return f"{name}\n{int(row['nodes'])}n x {int(row['ranks'])}r"


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):  # empty, None, text
        return np.nan


def decomposition_figure(table: pd.DataFrame) -> plt.Figure:
    """The figure (see the module's text) of ``table`` (decomposition.csv)."""
    if table is None or table.empty:
        return no_data_figure("where the container's cost goes",
                              "no comparison of a container with native")
    apply_theme()
    table = table.assign(_where=[
        f"{w}" + (f" ({m})" if isinstance(m, str) and m else "")
        for w, m in zip(table["workload"], table.get("model_label", [""] * len(table)))])
    panels = [(where, c) for where in dict.fromkeys(table["_where"]) for c in COMPONENTS]
    ncols = min(PANEL_COLUMNS, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    outside = 0  # estimates outside their own interval: drawn, bar cut, and said
    for ax, (where, component) in zip(axes.flat, panels):
        rows = table[(table["_where"] == where) & (table["component"] == component.key)]
        labels = [_label(r) for _, r in rows.iterrows()]
        x = np.arange(len(rows))
        for xi, (_, row) in zip(x, rows.iterrows()):
            if not bool(row["measured"]):
                ax.text(xi, 0, NOT_MEASURED, ha="center", va="center", rotation=90,
                        fontsize="x-small", color="0.45")
                continue
            diff = _number(row["difference"])
            if not np.isfinite(diff):
                ax.text(xi, 0, "no estimate", ha="center", va="center", rotation=90,
                        fontsize="x-small", color="0.45")
                continue
            low, high = _number(row["difference_ci95_low"]), _number(row["difference_ci95_high"])
            err = None
            if np.isfinite(low) and np.isfinite(high):
                err, cut = error_bars([diff], [low], [high])
                outside += cut
            ax.errorbar([xi], [diff], yerr=err, fmt="o", capsize=4,
                        color=VERDICT_COLORS.get(row["verdict"], "0.2"))
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set_xticks(x, labels, fontsize="x-small")
        ax.set_xlim(-0.7, max(len(rows), 1) - 0.3)
        unit = rows["unit"].iloc[0] if len(rows) else ""
        ax.set_ylabel(f"container - native ({unit})", fontsize="small")
        ax.set_title(f"{where}\n{component.label}", fontsize="small")
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=v)
               for v, c in VERDICT_COLORS.items()]
    fig.legend(handles=handles, loc="upper right", fontsize="small", title="verdict")
    return finish_figure(fig, "", [
        "each marker: the paired difference container - native of one comparison "
        "(same-block pairs, disturbed runs left out), in the component's unit; "
        + CI_TEXT + " (decomposition.csv); colour: the component's verdict",
        "\"not measured\": the campaign's runs did not record that component"],
        warnings=[shared_cores_note(table), outside_note(outside)])
