"""The figures of LLM serving under load (llm_load.csv, and each run's requests.jsonl).

* ``latency_throughput_figure``: per workload (model) and GPU count, p99 time to first
  token against output throughput at each load level, one line per runtime (open-loop
  rates joined in rate order, closed-loop levels as squares, offline as a star), its 95%
  CI as vertical bars; the Pareto front of each runtime (the levels no other level beats
  on both throughput and latency) ringed;
* ``goodput_figure``: goodput (requests/s that met the target) against the offered rate,
  one line per runtime, with the line goodput = rate and each runtime's highest rate
  within the target;
* ``distribution_figure``: the empirical distributions (ECDF) of TTFT and TPOT of every
  request at each open-loop rate, one line per runtime, the target's limits drawn.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from scalesweep.analyse.frame import truthy
from scalesweep.record.load import tpot_s, ttft_s
from scalesweep.report.style import (finish_figure, apply_theme, no_data_figure,
                                     runtime_order, runtime_palette, shared_cores_note)

PANEL_IN = (6.4, 4.6)


def pareto_front(throughput, latency) -> np.ndarray:
    """Which (throughput, latency) points no other point beats on both (higher throughput
    and lower latency, one of them strictly)."""
    t, lat = np.asarray(throughput, float), np.asarray(latency, float)
    front = np.zeros(t.size, bool)
    for i in range(t.size):
        if not (np.isfinite(t[i]) and np.isfinite(lat[i])):
            continue
        better = (t >= t[i]) & (lat <= lat[i]) & ((t > t[i]) | (lat < lat[i]))
        front[i] = not better.any()
    return front


def _panels(table: pd.DataFrame) -> list[tuple]:
    keys = ["workload", "model_label", "nodes", "gpus"]
    return list(table[keys].drop_duplicates().itertuples(index=False, name=None))


def _panel_title(workload, model, nodes, gpus) -> str:
    return f"{workload}: {model}\n{int(nodes)} node(s), {int(gpus)} GPU(s) per node"


def _grid(n: int):
    ncols = min(3, n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_IN[0] * ncols, PANEL_IN[1] * nrows),
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_axis_off()
    return fig, axes.flat


def _select(table, panel):
    w, m, n, g = panel
    return table[(table["workload"] == w) & (table["model_label"] == m)
                 & (table["nodes"] == n) & (table["gpus"] == g)]


def latency_throughput_figure(table: pd.DataFrame, targets: dict | None = None) -> plt.Figure:
    """``targets``: each workload's latency target (record.load.target_of), if any."""
    targets = targets or {}
    need = {"output_tokens_per_s", "ttft_p99_s", "runtime", "shape"}
    if table is None or table.empty or not need <= set(table.columns):
        return no_data_figure("latency vs throughput", "no run measured load levels")
    apply_theme()
    panels = _panels(table)
    fig, axes = _grid(len(panels))
    palette = runtime_palette(table["runtime"].unique())
    for ax, panel in zip(axes, panels):
        rows = _select(table, panel)
        target = targets.get(panel[0])
        for rt in runtime_order(rows["runtime"].unique()):
            r = rows[rows["runtime"] == rt]
            color = palette[rt]
            x = r["output_tokens_per_s"].to_numpy(float)
            y = r["ttft_p99_s"].to_numpy(float)
            low = r.get("ttft_p99_ci95_low_s", pd.Series(np.nan, index=r.index)).to_numpy(float)
            high = r.get("ttft_p99_ci95_high_s", pd.Series(np.nan, index=r.index)).to_numpy(float)
            err = np.array([np.where(np.isfinite(low), y - low, 0), np.where(np.isfinite(high), high - y, 0)])
            ax.errorbar(x, y, yerr=np.clip(err, 0, None), fmt="none", ecolor=color, alpha=0.6, capsize=2)
            opened = r[~r["shape"].isin(["closed", "offline"])].sort_values("rate")
            ax.plot(opened["output_tokens_per_s"], opened["ttft_p99_s"], "o-", color=color, label=rt)
            for shape, marker in (("closed", "s"), ("offline", "*")):
                s = r[r["shape"] == shape]
                ax.plot(s["output_tokens_per_s"], s["ttft_p99_s"], marker, color=color, ms=8,
                        linestyle="none", label=f"{rt} ({shape})" if len(s) else None)
            front = pareto_front(x, y)
            ax.plot(x[front], y[front], "o", mfc="none", mec="black", ms=13, mew=1.2,
                    label="Pareto front" if rt == runtime_order(rows["runtime"].unique())[0] else None)
        if target:
            ax.axhline(target["ttft_s"], color="0.3", ls="--", lw=1,
                       label=f"target p{_pct(target)} TTFT {target['ttft_s']:g} s")
        ax.set_xlabel("output throughput (tokens/s)")
        ax.set_ylabel("p99 time to first token (s)")
        ax.set_yscale("log")
        ax.set_title(_panel_title(*panel), fontsize="small")
        ax.legend(fontsize="x-small", loc="best")
    fig.suptitle("Latency vs throughput at each load level", fontsize="medium")
    return finish_figure(fig, "", [
        "circles joined: open-loop request rates in rate order; squares: closed-loop concurrency "
        "levels; star: offline (every request at once); ringed: each runtime's Pareto front (no "
        "other level of it has both more throughput and less latency). Bars: 95% CI of the p99 "
        "(between runs, or one run's order-statistic interval)."],
        warnings=[shared_cores_note(table)])


def goodput_figure(table: pd.DataFrame, targets: dict | None = None) -> plt.Figure:
    targets = targets or {}
    opened = table[~table["shape"].isin(["closed", "offline"])] if table is not None and not table.empty \
        and "shape" in table else pd.DataFrame()
    if not opened.empty:
        opened = opened[opened["workload"].isin(list(targets))]
    if opened.empty or "goodput_rps" not in opened:
        return no_data_figure("goodput vs request rate",
                              "no open-loop rate measured against a latency target "
                              "(workloads.<name>.load.rates and load.target)")
    apply_theme()
    panels = _panels(opened)
    fig, axes = _grid(len(panels))
    palette = runtime_palette(opened["runtime"].unique())
    for ax, panel in zip(axes, panels):
        rows = _select(opened, panel)
        target = targets[panel[0]]
        top = float(pd.to_numeric(rows["rate"]).max())
        ax.plot([0, top], [0, top], color="0.6", ls=":", lw=1, label="goodput = offered rate")
        for rt in runtime_order(rows["runtime"].unique()):
            r = rows[rows["runtime"] == rt].sort_values("rate")
            ax.plot(r["rate"], r["goodput_rps"], "o-", color=palette[rt], label=rt)
            best = pd.to_numeric(r.get("max_rate_rps"), errors="coerce").dropna()
            if len(best):
                ax.axvline(best.iloc[0], color=palette[rt], ls="--", lw=1,
                           label=f"{rt}: highest rate within the target {best.iloc[0]:.3g}/s")
        ax.set_xlabel("offered request rate (requests/s)")
        ax.set_ylabel("goodput (requests/s within the target)")
        ax.set_title(f"{_panel_title(*panel)}\ntarget {_target_text(target)}", fontsize="small")
        ax.legend(fontsize="x-small")
    fig.suptitle("Goodput against the latency target")
    return finish_figure(fig, "", ["goodput: requests per second whose TTFT and TPOT both met the "
                             "target; dashed: the highest rate whose p-th percentiles met it "
                             "(bisection, median over runs)"],
                   warnings=[shared_cores_note(table)])


def request_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """Every request of every valid run's open-loop levels (requests.jsonl beside each
    run's metrics.json, runs.csv's ``path``), with its runtime, geometry and rate. Disturbed
    and warm-up runs (runs.csv's ``warmup``: measurement.warmup_blocks) are left out, as
    every statistic leaves them out."""
    from scalesweep.record.pointdir import REQUESTS_JSONL

    rows = []
    for _, run in runs.iterrows():
        if (truthy(run.get("disturbed")) or truthy(run.get("warmup"))
                or not isinstance(run.get("load_levels"), str)):
            continue
        path = Path(str(run["path"]))
        point = path if path.is_dir() else path.parent
        requests = point / REQUESTS_JSONL
        rates = {lv["level"]: lv.get("rate") for lv in json.loads(run["load_levels"])
                 if lv.get("rate") is not None and not lv.get("bisection")}
        try:
            lines = requests.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            r = json.loads(line)
            if r.get("level") not in rates or not r.get("ok"):
                continue
            rows.append({"workload": run["workload"], "model_label": run.get("model_label"),
                         "nodes": run["nodes"], "gpus": run["gpus"], "runtime": run["runtime"],
                         "rate": rates[r["level"]],
                         "ttft_s": ttft_s(r),  # from the scheduled arrival, as the tables
                         "tpot_s": tpot_s(r)})
    return pd.DataFrame(rows)


def distribution_figure(requests: pd.DataFrame, targets: dict | None = None) -> plt.Figure:
    targets = targets or {}
    if requests is None or requests.empty:
        return no_data_figure("TTFT and TPOT distributions", "no open-loop request recorded")
    apply_theme()
    groups = list(requests[["workload", "model_label", "nodes", "gpus", "rate"]]
                  .drop_duplicates().sort_values("rate").itertuples(index=False, name=None))
    series = {g[:4] for g in groups}
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 3.0 * len(groups)), squeeze=False)
    palette = runtime_palette(requests["runtime"].unique())
    for (ax_t, ax_p), (w, m, n, g, rate) in zip(axes, groups):
        rows = requests[(requests["workload"] == w) & (requests["model_label"] == m)
                        & (requests["nodes"] == n) & (requests["gpus"] == g) & (requests["rate"] == rate)]
        target = targets.get(w)
        for ax, col, limit in ((ax_t, "ttft_s", "ttft_s"), (ax_p, "tpot_s", "tpot_s")):
            for rt in runtime_order(rows["runtime"].unique()):
                v = np.sort(pd.to_numeric(rows.loc[rows["runtime"] == rt, col], errors="coerce").dropna())
                if v.size:
                    ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=palette[rt],
                            label=f"{rt} ({v.size} requests)")
            if target:
                ax.axvline(target[limit], color="0.3", ls="--", lw=1, label=f"target {target[limit]:g} s")
            ax.set_xscale("log")
            ax.set_xlabel(f"{'time to first token' if col == 'ttft_s' else 'time per output token'} (s)")
            ax.set_ylabel("fraction of requests")
            where = f"{w}, {int(n)} node(s) x {int(g)} GPU(s), " if len(series) > 1 else ""
            ax.set_title(f"{where}{rate:g} requests/s: {'TTFT' if col == 'ttft_s' else 'TPOT'}",
                         fontsize="small")
            ax.legend(fontsize="x-small")
    only = next(iter(series)) if len(series) == 1 else None
    fig.suptitle("TTFT and TPOT of every request per open-loop rate"
                 + (f"\n{only[0]}: {only[1]}, {int(only[2])} node(s) x {int(only[3])} GPU(s)" if only else ""),
                 fontsize="medium")
    return finish_figure(fig, "", ["undisturbed runs' requests, every repeat pooled (warm-up runs, the "
                             "first measurement.warmup_blocks block(s) of each series, left "
                             "out)"])


def _pct(target: dict) -> str:
    return f"{100 * float(target.get('percentile', 0.99)):g}"


def _target_text(target: dict) -> str:
    return (f"{target.get('name') or 'custom'}: p{_pct(target)} TTFT <= {target['ttft_s']:g} s, "
            f"TPOT <= {target['tpot_s']:g} s")
