"""Warm-up runs (measurement.warmup_blocks: runs.csv's ``warmup``) in the report: drawn
apart from the runs the statistics use (hollow dark diamonds, 'warm-up run (left out)') or
left out with the caption saying so, never in a mean; labelled in the epoch and
provenance tables; never chosen by ``scalesweep rerun --disturbed``."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from scalesweep.campaign.rerun import without_disturbed_warmup
from scalesweep.report import figures as rf
from scalesweep.report import memory as mr
from scalesweep.report import plots as rp
from scalesweep.report import run_figures as rrf
from scalesweep.report import run_tables as rtab
from scalesweep.report import style as rstyle
from scalesweep.report.drift import drift_figure
from scalesweep.report.load_figures import request_rows


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(plt.Text) if t.get_text())


def dots(fig) -> tuple[list[float], list[float]]:
    """(y of every filled marker, y of every hollow one: no face, or a white one)."""
    filled, hollow = [], []
    for ax in fig.axes:
        for c in ax.collections:
            if not isinstance(c, PathCollection) or not len(c.get_offsets()):
                continue
            faces = c.get_facecolors()
            empty = len(faces) == 0 or np.allclose(faces[:, :3], 1.0)
            (hollow if empty else filled).extend(float(y) for y in c.get_offsets()[:, 1])
    return filled, hollow


def scaling():
    return pd.DataFrame([
        dict(workload="cnn", runtime="native", threads=1, count=1, time_s=10.0, n=2,
             linear_time_s=10.0, efficiency_pct=100.0, flag=""),
        dict(workload="cnn", runtime="native", threads=1, count=2, time_s=5.5, n=2,
             linear_time_s=5.0, efficiency_pct=5 / 5.5 * 100, flag="")])


def runs():
    """Two counted runs per count, and a warm-up run per count twice as slow."""
    rows = [dict(workload="cnn", runtime="native", threads=1, nodes=1, gpus=0, ranks=c,
                 count=c, repeat=rep, time_s=t, warmup=rep == 1, disturbed=False)
            for c, base in ((1, 10.0), (2, 5.5))
            for rep, t in ((1, 2 * base * (1 if c == 1 else 10 / 11)), (2, base), (3, base))]
    return pd.DataFrame(rows)


def test_masks_count_a_disturbed_warmup_run_as_warmup_only():
    df = pd.DataFrame(dict(warmup=[True, True, False, False],
                           disturbed=[True, False, "True", False]))
    assert list(rstyle.warmup_mask(df)) == [True, True, False, False]
    assert list(rstyle.disturbed_mask(df)) == [False, False, True, False]
    assert list(rstyle.counted_mask(df)) == [False, False, False, True]
    assert list(rstyle.counted_mask(df.drop(columns="warmup"))) == [False, True, False, True]
    assert "2 warm-up runs" in rstyle.warmup_note(df) and rstyle.warmup_note(df[2:]) == ""


def test_efficiency_figure_draws_warmup_runs_hollow_and_apart():
    fig = rf.efficiency_figure(scaling(), runs())
    filled, hollow = dots(fig)
    assert pytest.approx(50.0) in hollow  # the warm-up runs: half the efficiency
    assert all(abs(y - 50.0) > 1 for y in filled)
    assert rstyle.WARMUP_LABEL in texts(fig) and "2 warm-up runs" in texts(fig)
    assert rstyle.WARMUP_LABEL not in texts(rf.efficiency_figure(scaling(), runs()[lambda d: ~d["warmup"]]))


def test_scaling_figure_draws_warmup_runs_hollow_and_apart():
    table = scaling().assign(ci95_low=np.nan, ci95_high=np.nan)
    fig = rp.scaling_figure(table, runs())
    filled, hollow = dots(fig)
    assert pytest.approx(20.0) in hollow and all(y < 15 for y in filled)
    assert rstyle.WARMUP_LABEL in texts(fig) and "warm-up runs" in texts(fig)


def metrics(repeat, epochs, runtime="native"):
    return {"point": dict(workload="cnn", runtime=runtime, nodes=1, gpus=0, ranks=1,
                          threads=1, repeat=repeat),
            "payload": "cnn", "epoch_s": list(epochs)}


def test_epoch_tables_label_the_warmup_runs():
    recs = [("a", metrics(1, (30.0, 20.0))), ("b", metrics(2, (3.0, 2.0)))]
    epochs = rtab.epochs_table(recs, warmup_blocks=1)
    assert list(epochs["warmup"]) == [True, True, False, False]
    assert list(epochs["first_epoch"]) == [True, False, True, False]
    assert not rtab.epochs_table(recs)["warmup"].any()  # no warm-up blocks
    prov = rtab.provenance_table(recs, warmup_blocks=1)
    assert "warmup" in rtab.PROVENANCE_COLUMNS and list(prov["warmup"]) == [True, False]
    assert list(rtab.provenance_table(recs, warmup_blocks=2)["warmup"]) == [True, True]


def test_epoch_figure_keeps_warmup_runs_out_of_the_boxes():
    recs = [(str(i), metrics(rep, (30.0, 20.0, 21.0) if rep == 1 else (3.0, 2.0, 2.1), rt))
            for i, (rt, rep) in enumerate((rt, rep) for rt in ("native", "charliecloud")
                                          for rep in (1, 2, 3))]
    fig = rrf.epoch_time_figure(rtab.epochs_table(recs, warmup_blocks=1))
    filled, hollow = dots(fig)
    assert {20.0, 21.0, 30.0} <= set(hollow) and max(filled) < 5
    assert rstyle.WARMUP_LABEL in texts(fig) and "2 warm-up runs" in texts(fig)
    assert "first epoch (warm-up)" in texts(fig)


def test_memory_figure_leaves_warmup_runs_out_of_the_mean():
    df = pd.DataFrame(dict(workload="cnn", runtime="native", count=1, nodes=1, threads=1,
                           gpus=0, payload="cnn", repeat=[1, 2, 3],
                           peak_rss_mb=[2000.0, 900.0, 910.0], warmup=[True, False, False]))
    fig = rrf.memory_figure(df)
    assert "905 MB" in texts(fig) and rstyle.WARMUP_LABEL in texts(fig)
    filled, hollow = dots(fig)
    assert 2000.0 in hollow and 2000.0 not in filled


def test_memory_timeline_caption_counts_the_warmup_runs_it_leaves_out():
    points = pd.DataFrame(dict(state=["done", "disturbed", "failed", "done"],
                               warmup=[True, True, True, False]))
    assert mr._warmup_left_out(points).startswith("2 warm-up runs")
    assert mr._warmup_left_out(points.assign(warmup=False)) == ""
    assert mr._warmup_left_out(None) == ""


def test_drift_figure_draws_warmup_runs_apart_and_out_of_the_range():
    df = pd.DataFrame(dict(workload="cnn", runtime="native", repeat=[1, 2, 3],
                           start=["2026-01-01T10:00:00Z", "2026-01-01T10:10:00Z",
                                  "2026-01-01T10:20:00Z"],
                           probe_gflops=[50.0, 10.0, 11.0], probe_gbps=[5.0, 1.0, 1.1],
                           warmup=[True, False, False], disturbed=False))
    text = texts(drift_figure(df))
    assert "cnn: native (warm-up)" in text and "10-11" in text and "1 warm-up runs" in text


def test_load_distributions_leave_warmup_runs_out(tmp_path):
    rows = []
    for name, warm in (("warm", True), ("counted", False)):
        point = tmp_path / name
        point.mkdir()
        from scalesweep.record.pointdir import REQUESTS_JSONL

        (point / REQUESTS_JSONL).write_text("\n".join(json.dumps(
            dict(level="r1", ok=True, t_send=0.0, t_first=0.1 * i, t_end=1.0,
                 output_tokens=5)) for i in range(1, 4)) + "\n")
        rows.append(dict(workload="llm", model_label="m", nodes=1, gpus=0, runtime="native",
                         path=str(point / "metrics.json"), disturbed=False, warmup=warm,
                         load_levels=json.dumps([{"level": "r1", "rate": 2.0}])))
    requests = request_rows(pd.DataFrame(rows))
    assert len(requests) == 3  # the counted run's three requests alone
    assert len(request_rows(pd.DataFrame(rows).drop(columns="warmup"))) == 6


def test_rerun_disturbed_skips_disturbed_warmup_runs():
    table = pd.DataFrame(dict(path=["a/rep1/native", "a/rep2/native", "a/rep3/native"],
                              state="disturbed", warmup=[True, False, "False"]))
    chosen, skipped = without_disturbed_warmup(table, {"disturbed"})
    assert list(chosen["path"]) == ["a/rep2/native", "a/rep3/native"]
    assert list(skipped["path"]) == ["a/rep1/native"]
    # --where alone (no --disturbed) chooses what it names, warm-up runs too
    chosen, skipped = without_disturbed_warmup(table, set())
    assert len(chosen) == 3 and skipped.empty
    chosen, skipped = without_disturbed_warmup(table.drop(columns="warmup"), {"disturbed"})
    assert len(chosen) == 3 and skipped.empty


def test_made_table_counts_the_warmup_runs():
    from scalesweep.report.made import made_table

    made = made_table(runs(), None, "2026-01-01T00:00:00Z", "abc")
    row = made.set_index(made.columns[0]).loc["runs"].iloc[0]
    assert row == "6 (0 disturbed, 2 warm-up: kept, left out of the statistics)"
