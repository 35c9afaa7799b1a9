"""Seaborn figures for the report. Each function takes tidy tables and returns a Figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def scaling_figure(scaling: pd.DataFrame, runs: pd.DataFrame) -> plt.Figure:
    """Measured (mean +- 95% CI, repeats as dots) vs ideal time, one panel per workload."""
    sns.set_theme(style="whitegrid", context="notebook")
    workloads = sorted(scaling["workload"].unique()) if not scaling.empty else []
    fig, axes = plt.subplots(1, max(1, len(workloads)), figsize=(6 * max(1, len(workloads)), 4.5),
                             squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        table = scaling[scaling["workload"] == workload].copy()
        table["series"] = table["runtime"] + " (" + table["threads"].astype(str) + " thr/rank)"
        dots = runs[runs["workload"] == workload].copy()
        dots["series"] = dots["runtime"] + " (" + dots["threads"].astype(str) + " thr/rank)"
        sns.lineplot(data=table, x="count", y="time_s", hue="series", marker="o", ax=ax)
        for _, s in table.groupby("series"):
            ax.fill_between(s["count"], s["ci95_low"], s["ci95_high"], alpha=0.15)
            ax.plot(s["count"], s["linear_time_s"], linestyle="--", color="grey", linewidth=1)
        sns.stripplot(data=dots, x="count", y="time_s", hue="series", native_scale=True,
                      ax=ax, size=4, alpha=0.6, legend=False, jitter=False)
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
        ax.legend(fontsize="small")
    if not workloads:
        axes[0][0].text(0.5, 0.5, "no finished runs yet", ha="center", va="center")
    fig.tight_layout()
    return fig


def llm_figure(runs: pd.DataFrame) -> plt.Figure:
    """The OLCF study's figure: wall time for the prompt set vs GPU count, per runtime."""
    sns.set_theme(style="whitegrid", context="notebook")
    llm = runs[runs["payload"] == "llm"] if "payload" in runs else runs.iloc[0:0]
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4.5))
    if llm.empty:
        ax_t.text(0.5, 0.5, "no finished LLM runs yet", ha="center", va="center")
    else:
        sns.barplot(data=llm, x="gpus", y="time_s", hue="runtime", errorbar=("ci", 95),
                    capsize=0.1, ax=ax_t)
        sns.stripplot(data=llm, x="gpus", y="time_s", hue="runtime", dodge=True, ax=ax_t,
                      color="black", size=3, legend=False)
        ax_t.set_xlabel("GPUs (0 = CPU only)")
        ax_t.set_ylabel("wall time for the prompt set (s)")
        sns.barplot(data=llm, x="gpus", y="tokens_per_s", hue="runtime", errorbar=("ci", 95),
                    capsize=0.1, ax=ax_r)
        ax_r.set_xlabel("GPUs (0 = CPU only)")
        ax_r.set_ylabel("generated tokens / s")
        synthetic = llm.get("synthetic_model")
        if synthetic is not None and synthetic.fillna(False).astype(bool).any():
            fig.suptitle("synthetic random-weight model: engine and runtime throughput only",
                         fontsize="small")
    fig.tight_layout()
    return fig
