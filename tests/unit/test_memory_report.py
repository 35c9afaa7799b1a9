"""The memory report (scalesweep.report.memory) on synthetic metrics: the timeline table on
a normalised grid, the peak table (mean, std, n, difference to native), the figure of
mean +- std bands, and runs without a timeline (older metrics) left out, never a crash."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from scalesweep.analyse.collect import run_row
from scalesweep.report import memory as mr


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(fig) -> str:
    """Every text of the figure, wrapped footer lines joined again."""
    return " ".join(t.get_text() for t in fig.findobj(plt.Text) if t.get_text())


def metrics(runtime="native", repeat=1, ranks=2, nodes=1, gpus=0, base=100.0, n=11,
            timeline=True, disturbed=False, gpu=None):
    """A CNN run's metrics; its ranks' RSS rises linearly from base to 2 x base over n - 1 s
    (rank 1 holds half of rank 0), None before the ranks start (the first sample)."""
    m = {
        "point": dict(workload="cnn", runtime=runtime, nodes=nodes, gpus=gpus, ranks=ranks,
                      threads=1, repeat=repeat),
        "payload": "cnn", "epoch_s": [2.0, 1.0], "train_s": 3.0, "final_loss": 0.5,
        "final_accuracy": 0.9, "peak_rss_mb": 2 * base + 5, "disturbed": disturbed,
    }
    if timeline:
        t = [float(i) for i in range(n + 1)]
        r0 = [None] + [base + base * i / max(n - 1, 1) for i in range(n)]
        rss = {str(k): [None if v is None else v / (k + 1) for v in r0] for k in range(ranks)}
        total = [None] + [sum(rss[k][i] for k in rss) for i in range(1, n + 1)]
        m["memory_timeline"] = {"interval_s": 1.0, "t_s": t, "rss_mb": rss,
                                "total_rss_mb": total, "nodes": nodes, "nodes_sampled": 1}
        if gpu is not None:
            m["memory_timeline"]["gpu_mem_mb"] = [gpu] * (n + 1)
    return m


def records(*ms):
    return [(f"p{i}", m, run_row(m, f"p{i}", "cnn")) for i, m in enumerate(ms)]


# --- tables --------------------------------------------------------------------------------

def test_timeline_table_normalises_each_run_to_its_ranks_span():
    table = mr.timeline_table(records(metrics(), metrics(timeline=False)))
    assert list(table.columns) == mr.TIMELINE_COLUMNS
    assert len(table) == mr.GRID_POINTS  # the run without a timeline is left out
    assert table["t_frac"].iloc[0] == 0 and table["t_frac"].iloc[-1] == 1
    assert (table["duration_s"] == 10.0).all()  # from t=1 (first rank sample) to t=11
    # at the start: 100 + 50 MB, at the end 200 + 100 MB; the largest rank is rank 0
    assert table["total_rss_mb"].iloc[0] == pytest.approx(150)
    assert table["total_rss_mb"].iloc[-1] == pytest.approx(300)
    assert table["rank_rss_max_mb"].iloc[50] == pytest.approx(150)
    assert table["gpu_mem_mb"].isna().all()
    assert table["count"].iloc[0] == 2 and not table["disturbed"].any()


def test_old_and_malformed_timelines_are_left_out():
    broken = metrics()
    broken["memory_timeline"]["t_s"] = broken["memory_timeline"]["t_s"][:-1]  # lengths differ
    empty = metrics()
    empty["memory_timeline"].update(rss_mb={}, total_rss_mb=[None] * 12)
    lone = metrics(n=1)  # one sample with a rank: no span
    recs = records(metrics(timeline=False), broken, empty, lone)
    assert mr.timeline_table(recs).empty and list(mr.timeline_table(recs).columns) == mr.TIMELINE_COLUMNS
    peaks = mr.peak_table(recs)
    assert len(peaks) == 1 and peaks["n"].iloc[0] == 1  # the lone sample still has a peak
    assert mr.peak_table(records(metrics(timeline=False))).empty
    assert list(mr.peak_table([]).columns) == mr.PEAK_COLUMNS


def test_peak_table_mean_std_n_and_difference_to_native():
    recs = records(metrics("native", 1, base=100), metrics("native", 2, base=110),
                   metrics("charliecloud", 1, base=120), metrics("charliecloud", 2, base=130),
                   metrics("charliecloud", 3, base=900, disturbed=True))
    table = mr.peak_table(recs)
    assert list(table.columns) == mr.PEAK_COLUMNS
    assert list(table["runtime"]) == ["native", "charliecloud"]
    native, cc = table.iloc[0], table.iloc[1]
    assert (native["n"], native["n_disturbed"], cc["n"], cc["n_disturbed"]) == (2, 0, 2, 1)
    # peak total = 3 x base (rank 0: 2 base, rank 1: base), peak rank = 2 x base
    assert native["peak_total_rss_mb_mean"] == pytest.approx(315)
    assert native["peak_total_rss_mb_std"] == pytest.approx(np.std([300, 330], ddof=1))
    assert cc["peak_rank_rss_mb_mean"] == pytest.approx(250)  # the disturbed run left out
    assert cc["peak_total_rss_diff_mb"] == pytest.approx(375 - 315)
    assert cc["peak_total_rss_diff_pct"] == pytest.approx((375 - 315) / 315 * 100)
    assert cc["peak_rank_rss_diff_mb"] == pytest.approx(250 - 210)
    assert cc["native_n"] == 2 and pd.isna(native["native_n"])
    assert pd.isna(native["peak_total_rss_diff_mb"]) and pd.isna(cc["peak_gpu_mem_mb_mean"])
    assert native["reported_peak_rss_mb_mean"] == pytest.approx(215)
    assert native["note"] == ""


def test_peak_table_one_repeat_multinode_and_gpu():
    table = mr.peak_table(records(metrics("native", nodes=2, gpus=1, gpu=512.0),
                                  metrics("apptainer", nodes=2, gpus=1, gpu=640.0)))
    assert table["peak_total_rss_mb_std"].isna().all()  # one repeat: no std
    assert list(table["peak_gpu_mem_mb_mean"]) == [512.0, 640.0]
    assert table["peak_gpu_mem_diff_mb"].iloc[1] == pytest.approx(128)
    assert "harness's node only (1 of 2)" in table["note"].iloc[0]


# --- figure --------------------------------------------------------------------------------

def test_figure_bands_per_runtime_and_geometry():
    recs = records(*[metrics(rt, rep, ranks=ranks, base=base + 10 * rep)
                     for rt, base in (("native", 100), ("charliecloud", 140))
                     for ranks in (1, 2) for rep in (1, 2, 3)],
                   metrics("charliecloud", 4, ranks=1, base=500, disturbed=True))
    table = mr.timeline_table(recs)
    fig = mr.memory_timeline_figure(table, title="cnn: memory over time")
    axes = [ax for ax in fig.axes if ax.get_xlabel()]
    # 2 geometries x (total, largest rank), no GPU column; the 1-rank row's largest rank
    # is its total: said, not drawn again
    assert len(axes) == 3
    text = texts(fig)
    assert "n1-g0-r1-t1: one rank per run" in text
    assert "cnn: memory over time" in text
    assert "n1-g0-r1-t1" in text and "n1-g0-r2-t1" in text
    assert "native: n=3, run ~10 s" in text and "charliecloud: n=3" in text
    assert "disturbed run (left out)" in text and "1 disturbed runs (interference during the measurement) drawn as dashed grey" in text
    assert "+- 1 standard deviation" in text and "sampled every 1 s" in text
    first = axes[0]
    bands = [c for c in first.collections if c.__class__.__name__ in ("PolyCollection", "FillBetweenPolyCollection")]
    assert len(bands) == 2  # one band per runtime
    native_line = next(line for line in first.get_lines() if line.get_label().startswith("native"))
    assert native_line.get_ydata()[-1] == pytest.approx(2 * 120)  # mean of 2 x (110, 120, 130)
    assert first.get_xlim() == (0, 1)


def test_figure_gpu_column_one_repeat_and_no_data():
    table = mr.timeline_table(records(metrics("native", gpus=1, gpu=1000.0)))
    fig = mr.memory_timeline_figure(table)
    assert len([ax for ax in fig.axes if ax.get_xlabel()]) == 3
    assert "GPU memory used (MB)" in texts(fig)
    assert not [c for c in fig.axes[0].collections if c.__class__.__name__.endswith("PolyCollection")]
    for empty in (pd.DataFrame(), pd.DataFrame(columns=mr.TIMELINE_COLUMNS)):
        assert "no data: no finished run" in texts(mr.memory_timeline_figure(empty))
    points = pd.DataFrame([dict(workload="cnn", runtime="native", nodes=1, gpus=0, ranks=1,
                                threads=1, repeat=1, state="failed", reason="x", log="l")])
    assert "NOT IN THIS FIGURE" in texts(mr.memory_timeline_figure(pd.DataFrame(), points))


def test_one_rank_draws_one_panel_with_its_geometry_once():
    """An LLM point (one rank: the payload and its server): the largest rank is the sum,
    so the figure has the one panel, not two identical ones (issue #27)."""
    table = mr.timeline_table(records(*[metrics(rt, rep, ranks=1, base=100 + rep)
                                        for rt in ("native", "charliecloud")
                                        for rep in (1, 2)]))
    fig = mr.memory_timeline_figure(table, title="llm: memory over time")
    assert len(fig.axes) == 1 and fig.axes[0].get_ylabel() == mr.METRICS[0][1]
    assert fig.axes[0].get_title(loc="left") == "n1-g0-r1-t1"
    assert fig.axes[0].get_legend() is not None
