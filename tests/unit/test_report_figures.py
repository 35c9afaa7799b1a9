"""The report's figure and table functions on small synthetic tables: anomalies are drawn,
NaN confidence intervals are survived, and empty inputs give a figure that says so."""

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from scalesweep.report import figures as rf
from scalesweep.report import run_figures as rrf
from scalesweep.report import run_tables as rtab
from scalesweep.report import style as rstyle


def texts(fig) -> str:
    """Every text on a figure: titles, labels, annotations, legends, footers."""
    found = [t.get_text() for t in fig.findobj(plt.Text)]
    return "\n".join(t for t in found if t)


def scaling(efficiency_2=91.0, flag_2="", runtimes=("native",)):
    rows = []
    for rt in runtimes:
        rows.append(dict(workload="cnn", runtime=rt, threads=1, count=1, time_s=10.0, n=2,
                         linear_time_s=10.0, efficiency_pct=100.0, flag=""))
        rows.append(dict(workload="cnn", runtime=rt, threads=1, count=2, n=2,
                         time_s=5.0 * 100 / efficiency_2, linear_time_s=5.0,
                         efficiency_pct=efficiency_2, flag=flag_2))
    return pd.DataFrame(rows)


def points(states=("done", "done", "done", "failed")):
    rows = []
    for i, state in enumerate(states):
        rows.append(dict(workload="cnn", runtime="native", nodes=1, gpus=0, ranks=1 + i // 2,
                         threads=1, repeat=1 + i % 2, path=f"p{i}", state=state,
                         reason="killed by signal SIGKILL" if state == "failed" else np.nan,
                         log="results/runs/x/run.log" if state == "failed" else np.nan))
    return pd.DataFrame(rows)


def overhead(low=-3.0, high=9.0, significant=True, p=0.01, runtimes=("charliecloud",)):
    rows = []
    for rt in runtimes:
        for ranks in (1, 2):
            rows.append(dict(workload="cnn", nodes=1, gpus=0, ranks=ranks, threads=1, runtime=rt,
                             n_native=2, n=2, native_s=10.0, time_s=10.3, overhead_pct=3.0,
                             overhead_ci95_low_pct=low, overhead_ci95_high_pct=high,
                             p_value=p, significant=significant))
    return pd.DataFrame(rows)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- efficiency ---------------------------------------------------------------------------

def test_efficiency_draws_the_100_percent_line_and_values():
    fig = rf.efficiency_figure(scaling())
    ax = fig.axes[0]
    assert any(np.allclose(line.get_ydata(), 100) for line in ax.get_lines())
    assert "ideal (100%)" in texts(fig) and "91%" in texts(fig)
    assert ax.get_xscale() == "linear"  # two counts: linear x


def test_efficiency_log2_axis_beyond_two_counts():
    df = pd.concat([scaling(), scaling().assign(count=4, time_s=3.0, linear_time_s=2.5,
                                                 efficiency_pct=83.3).iloc[[1]]])
    ax = rf.efficiency_figure(df).axes[0]
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]


def test_superlinear_and_high_variance_are_marked():
    fig = rf.efficiency_figure(scaling(efficiency_2=112.0, flag_2="superlinear;high_variance"))
    text = texts(fig)
    assert "112%" in text and "superlinear" in text and "high variance" in text
    stars = [c for c in fig.axes[0].collections
             if c.get_offsets().shape[0] == 1 and tuple(c.get_offsets()[0]) == (2.0, 112.0)]
    assert len(stars) >= 2  # the star and the ring on the super-linear point


def test_efficiency_repeats_as_dots_and_missing_points_named():
    runs = pd.DataFrame(dict(workload="cnn", runtime="native", threads=1, count=[1, 1, 2, 2],
                             time_s=[9.0, 11.0, 5.0, 6.0]))
    fig = rf.efficiency_figure(scaling(), runs, points())
    dots = [c for c in fig.axes[0].collections if c.get_offsets().shape[0] == 4]
    assert dots, "repeats are drawn"
    assert "NOT IN THIS FIGURE: 1 of 4" in texts(fig)
    assert "failed: native n1-g0-r2-t1 rep2" in texts(fig)


def test_efficiency_single_runtime_single_count():
    fig = rf.efficiency_figure(scaling().iloc[[0]])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1"]
    assert ax.get_lines()[1].get_ydata().tolist() == [100.0]


def test_efficiency_baseline_flags_name_their_series():
    df = scaling(runtimes=("native", "charliecloud")).assign(baseline_count=1)
    df.loc[2, "flag"] = "high_variance"  # charliecloud's baseline
    text = texts(rf.efficiency_figure(df))
    assert "charliecloud: high variance" in text
    assert "100%\n" not in text  # the baseline is 100% by definition: no value label


def test_efficiency_empty_says_no_data():
    for empty in (pd.DataFrame(), pd.DataFrame(columns=["workload", "runtime", "count"])):
        assert rstyle.NO_DATA in texts(rf.efficiency_figure(empty))


# --- overhead -----------------------------------------------------------------------------

def test_overhead_prints_the_definition_zero_line_and_significance():
    fig = rf.overhead_figure(overhead())
    text = texts(fig)
    assert "(container - native) / native x 100, positive = container slower" in text
    assert "+3.0%*" in text and "p=0.01" in text
    ax = fig.axes[0]
    assert any(np.allclose(line.get_ydata(), 0) for line in ax.get_lines())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["n1-g0-r1-t1", "n1-g0-r2-t1"]
    assert ax.get_ylim()[0] <= -3 and ax.get_ylim()[1] >= 9  # the CI fits


def test_overhead_nan_ci_and_untested_points_are_shown_not_dropped():
    df = overhead(low=np.nan, high=np.nan, significant=pd.NA, p=np.nan)
    fig = rf.overhead_figure(df)
    text = texts(fig)
    assert text.count("no 95% CI") == 2 and text.count("not tested") >= 2
    assert "+3.0%" in text


def test_overhead_from_csv_round_trip_with_empty_cells(tmp_path):
    df = pd.concat([overhead(), overhead(low=np.nan, high=np.nan, significant=pd.NA, p=np.nan)
                    .assign(ranks=4)])
    df.to_csv(tmp_path / "o.csv", index=False)
    fig = rf.overhead_figure(pd.read_csv(tmp_path / "o.csv"))
    assert "n1-g0-r4-t1" in texts(fig) and "no 95% CI" in texts(fig)


def test_overhead_two_runtimes_side_by_side():
    fig = rf.overhead_figure(overhead(runtimes=("charliecloud", "apptainer")))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "charliecloud" in legend and "apptainer" in legend


def test_overhead_empty_says_no_data_and_keeps_the_definition():
    fig = rf.overhead_figure(pd.DataFrame(columns=["workload", "runtime", "overhead_pct"]))
    assert rstyle.NO_DATA in texts(fig) and "positive = container slower" in texts(fig)


# --- epochs, memory, start-up, completeness ---------------------------------------------

def metrics(runtime="native", ranks=1, repeat=1, epochs=(3.0, 2.0, 2.1), rss=900.0, **extra):
    return {"point": dict(workload="cnn", runtime=runtime, nodes=1, gpus=0, ranks=ranks,
                          threads=1, repeat=repeat),
            "payload": "cnn", "epoch_s": list(epochs), "peak_rss_mb": rss, **extra}


def test_epochs_table_marks_the_first_epoch():
    df = rtab.epochs_table([("a", metrics()), ("b", metrics(ranks=2, epochs=(4.0,)))])
    assert list(df["epoch_s"]) == [3.0, 2.0, 2.1, 4.0]
    # a single epoch is the steady one
    assert list(df["first_epoch"]) == [True, False, False, False]
    assert not df["warmup"].any()  # no warm-up blocks given: no warm-up run
    assert list(df["count"]) == [1, 1, 1, 2]


def test_epoch_figure_shows_warmup_and_steady_epochs():
    recs = [(str(i), metrics(runtime=rt, ranks=r, repeat=rep))
            for i, (rt, r, rep) in enumerate([(rt, r, rep) for rt in ("native", "charliecloud")
                                              for r in (1, 2) for rep in (1, 2)])]
    fig = rrf.epoch_time_figure(rtab.epochs_table(recs))
    assert "first epoch (warm-up)" in texts(fig) and "24 epochs of 8 runs" in texts(fig)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "2"]


def test_epoch_figure_empty_and_llm_only():
    assert rstyle.NO_DATA in texts(rrf.epoch_time_figure(rtab.epochs_table([])))
    llm = metrics(epochs=())
    assert rstyle.NO_DATA in texts(rrf.epoch_time_figure(rtab.epochs_table([("x", llm)])))


def test_memory_figure_labels_bars_and_survives_missing_values():
    runs = pd.DataFrame(dict(workload="cnn", runtime=["native", "native", "charliecloud"],
                             count=[1, 1, 1], nodes=1, threads=1, gpus=0, payload="cnn",
                             peak_rss_mb=[900.0, 910.0, np.nan]))
    fig = rrf.memory_figure(runs)
    assert "905 MB" in texts(fig) and "largest rank" in texts(fig)
    assert rstyle.NO_DATA in texts(rrf.memory_figure(runs.assign(peak_rss_mb=np.nan)))
    assert rstyle.NO_DATA in texts(rrf.memory_figure(pd.DataFrame()))


def test_scale_labels_keep_geometries_apart():
    df = pd.DataFrame(dict(count=[2, 2, 1], nodes=[1, 2, 1], threads=1))
    labels, order = rstyle.scale_labels(df)
    assert order == ["1\n(n1)", "2\n(n1)", "2\n(n2)"] and labels.iloc[1] == "2\n(n2)"


STARTUP = {"runtime": "charliecloud", "image_digest": "sha256:abc", "start": "t0", "probes": {
    "import_torch": {"native": {"n": 3, "median_s": 1.0, "min_s": 0.9, "samples_s": [0.9, 1.0, 1.1]},
                     "container": {"n": 3, "median_s": 1.2, "min_s": 1.1, "samples_s": [1.1, 1.2, 1.3]},
                     "startup_overhead_s": 0.2,
                     "fs_ops": {"native": {"open": 1447, "open_failed": 147, "stat": 18354,
                                           "read": 2303, "bytes_read": 23986628, "mmap": 263,
                                           "files": 1279, "open_root": 1441},
                                "container": {"open": 2177, "open_failed": 86, "open_root": 2161,
                                              "open_image": 0, "open_bound": 4}}},
    "noop": {"native": {"n": 3, "median_s": 0.001, "min_s": 0.001, "samples_s": [0.001] * 3},
             "container": {"n": 3, "median_s": 0.005, "min_s": 0.004, "samples_s": [0.004, 0.005, 0.006]},
             "startup_overhead_s": 0.004},
}}


def test_startup_table_and_figure():
    table = rtab.startup_table([STARTUP])
    assert list(table["probe"]) == ["noop", "import_torch"]  # probe order, not alphabetical
    assert table.loc[1, "startup_overhead_s"] == pytest.approx(0.2)
    assert list(table.columns) == rtab.STARTUP_COLUMNS
    # one traced start per side (issue #44); a probe recorded before it was traced: empty
    torch = table.set_index("probe").loc["import_torch"]
    assert (torch["native_open"], torch["container_open"], torch["native_bytes_read"],
            torch["container_open_root"], torch["container_open_bound"]) == (
        1447, 2177, 23986628, 2161, 4)
    assert table.set_index("probe").loc["noop", ["native_open", "container_open"]].isna().all()
    samples = rtab.startup_samples([STARTUP])
    assert len(samples) == 12 and set(samples["side"]) == {"native", "container"}
    fig = rrf.startup_figure(samples)
    assert "+200 ms" in texts(fig) and "+4 ms" in texts(fig)
    assert "not part of the container overhead" in texts(fig)
    assert fig.axes[0].get_yscale() == "log"


def test_startup_empty():
    assert rtab.startup_table([]).empty and list(rtab.startup_table([]).columns) == rtab.STARTUP_COLUMNS
    assert rstyle.NO_DATA in texts(rrf.startup_figure(rtab.startup_samples([])))


def test_missing_table_and_completeness_figure():
    pts = points(("done", "done", "missing", "failed"))
    missing = rtab.missing_table(pts)
    assert list(missing["state"]) == ["missing", "failed"]
    assert missing.loc[1, "reason"] == "killed by signal SIGKILL" and missing.loc[0, "reason"] == ""
    assert list(missing.columns) == rtab.MISSING_COLUMNS
    fig = rrf.completeness_figure(pts)
    text = texts(fig)
    assert "2 of 4 requested runs finished" in text and "1 failed" in text and "1 missing" in text
    assert rtab.missing_table(points(("done",))).empty
    assert rstyle.NO_DATA in texts(rrf.completeness_figure(pd.DataFrame()))


def test_not_done_note():
    assert rstyle.not_done_note(None) == ""
    assert rstyle.not_done_note(points(("done", "done"))) == "all 2 requested points finished"
    assert rstyle.not_done_note(points(), workload="other") == ""


def test_provenance_table_collects_versions_and_digests():
    cnn = metrics(hosts=["a", "b"], launcher="mpirun", git_commit="abc", slurm={"job_id": "42"},
                  image={"content_digest": "sha256:d", "builder": {"name": "charliecloud",
                                                                   "version": "0.31"}},
                  versions={"torch": "2.13.0+cpu", "python": "3.11.2"})
    llm = {"point": dict(workload="llm", runtime="native", nodes=1, gpus=0, ranks=1, threads=1,
                         repeat=1), "engine": {"name": "llamacpp", "version": "0.3.36"},
           "model": {"name": "m", "sha256": "s"}, "slurm_job_id": "7",
           "host": {"python": "3.11.7", "platform": "Linux"}}
    df = rtab.provenance_table([("c.json", cnn), ("l.json", llm)])
    assert list(df.columns) == rtab.PROVENANCE_COLUMNS
    c, l_ = df.iloc[0], df.iloc[1]
    assert (c["hosts"], c["slurm_job_id"], c["image_builder"], c["torch"]) == \
        ("a;b", "42", "charliecloud 0.31", "2.13.0+cpu")
    assert (l_["engine_version"], l_["slurm_job_id"], l_["python"]) == ("0.3.36", "7", "3.11.7")
    assert l_["image_digest"] is None or math.isnan(l_["image_digest"])
    assert rtab.provenance_table([]).empty


def test_runtime_colours_are_stable():
    one = rstyle.runtime_palette(["charliecloud"])
    two = rstyle.runtime_palette(["native", "charliecloud", "apptainer"])
    assert one["charliecloud"] == two["charliecloud"] != two["native"]


# --- verdicts, the tables' CIs, disturbed runs, shared cores, models ------------------------

def errorbar_segments(ax) -> list[tuple[float, float]]:
    """(low, high) of every vertical error bar segment drawn on ax."""
    from matplotlib.collections import LineCollection

    out = []
    for c in ax.collections:
        if isinstance(c, LineCollection):
            for seg in c.get_segments():
                if len(seg) == 2 and seg[0][0] == seg[1][0]:
                    out.append((min(seg[0][1], seg[1][1]), max(seg[0][1], seg[1][1])))
    return out


def test_overhead_figure_shows_the_verdicts_and_the_shared_cores_label():
    df = overhead().assign(verdict=["slower", "inconclusive"], repeats_needed=[0, 7],
                           margin_pct=2.0, n_disturbed=[0, 1], shared_cores=[False, True],
                           verdict_text=["slower by 3.0% (95% CI 1.0% .. 5.0%, n=5 pairs)",
                                         "inconclusive: about 7 more repeats needed (...)"])
    text = texts(rf.overhead_figure(df))
    assert "slower by 3.0% (95% CI 1.0% .. 5.0%, n=5 pairs)" in text
    assert "inconclusive: ~7 more repeats" in text
    assert "shared cores: scaling and overhead figures are not physical" in text
    assert "(shared cores)" in text and "disturbed runs were left out of 1" in text
    assert "95% confidence intervals of the tables" in text
    segments = errorbar_segments(rf.overhead_figure(df).axes[0])
    assert sorted(segments) == [(-3.0, 9.0), (-3.0, 9.0)]  # the table's CI, as given


def test_efficiency_error_bars_are_the_tables_ci_and_disturbed_runs_hollow():
    df = scaling().assign(efficiency_ci95_low_pct=[100.0, 85.0],
                          efficiency_ci95_high_pct=[100.0, 97.0], shared_cores=[False, True])
    runs = pd.DataFrame(dict(workload="cnn", runtime="native", threads=1, count=[1, 1, 2, 2],
                             time_s=[9.0, 11.0, 5.0, 8.0], disturbed=[False, False, False, True]))
    fig = rf.efficiency_figure(df, runs)
    ax = fig.axes[0]
    assert (85.0, 97.0) in errorbar_segments(ax)
    text = texts(fig)
    assert "91% (CI 85-97%)" in text and "1 disturbed runs" in text
    assert "shared cores: scaling and overhead figures are not physical" in text
    hollow = [c for c in ax.collections if type(c).__name__ == "PathCollection"
              and c.get_offsets().shape[0] == 1 and len(c.get_facecolor()) == 0]
    assert hollow and tuple(hollow[0].get_offsets()[0]) == (2.0, 5.0 / 8.0 * 100)


def test_completeness_counts_disturbed_runs_apart():
    pts = points(("done", "disturbed", "done", "done"))
    pts["reason"] = pts["reason"].astype(object)
    pts.loc[1, "reason"] = "outside processes used 40%"
    text = texts(rrf.completeness_figure(pts))
    assert "3 of 4 requested runs finished" in text and "1 disturbed" in text
    assert rtab.missing_table(pts).empty  # finished, so not in the missing table
    assert rstyle.not_done_note(pts) == "all 4 requested points finished"


def test_epochs_and_provenance_carry_disturbance_and_allocation():
    m = metrics(disturbed=True, interference={"reasons": ["busy"]},
                allocation={"shared_cores": True, "exclusive": False, "cpus_bound": "0-1"})
    epochs = rtab.epochs_table([("a", m), ("b", metrics(repeat=2))])
    assert epochs["disturbed"].tolist() == [True] * 3 + [False] * 3
    assert epochs["shared_cores"].tolist() == [True] * 3 + [False] * 3
    fig = rrf.epoch_time_figure(epochs)
    assert "1 disturbed runs" in texts(fig) and "not physical" in texts(fig)
    prov = rtab.provenance_table([("a", m)]).iloc[0]
    assert (prov["disturbed"], prov["disturbed_reason"], prov["shared_cores"],
            prov["cpus_bound"]) == (True, "busy", True, "0-1")


def test_scaling_figure_draws_the_tables_ci_not_a_bootstrap():
    from scalesweep.report import plots

    table = pd.DataFrame(dict(workload="cnn", runtime="native", threads=1, count=[1, 2],
                              time_s=[10.0, 5.5], ci95_low=[9.0, 5.0], ci95_high=[11.0, 6.0],
                              linear_time_s=[10.0, 5.0], shared_cores=[False, False]))
    runs = pd.DataFrame(dict(workload="cnn", runtime="native", threads=1, count=[1, 1, 2, 2],
                             time_s=[9.5, 10.5, 5.5, 9.0], disturbed=[False, False, False, True]))
    fig = plots.scaling_figure(table, runs)
    assert sorted(errorbar_segments(fig.axes[0])) == [(5.0, 6.0), (9.0, 11.0)]
    assert "95% CI of the table" in texts(fig) and "disturbed" in texts(fig)


def test_llm_figure_one_row_per_model_with_the_tables_ci_and_synthetic_label():
    from scalesweep.analyse import collect
    from scalesweep.analyse import summary

    from scalesweep.report import plots
    rows = []
    for model, synthetic, wall in (("tiny", True, 20.0), ("real", False, 40.0)):
        for rt, rep in [(rt, rep) for rt in ("native", "charliecloud") for rep in (1, 2, 3)]:
            rows.append(collect.run_row({
                "point": dict(workload="llm", runtime=rt, nodes=1, gpus=0, ranks=1,
                              threads=2, repeat=rep),
                "wall_s": wall + rep * 0.1, "tokens_per_s": 30.0 + rep,
                "model": {"name": model, "synthetic": synthetic}}, f"{model}{rt}{rep}", "llm"))
    runs = pd.DataFrame(rows)
    table = summary.llm_summary(runs)
    fig = plots.llm_figure(runs, table)
    assert len(fig.axes) == 4  # two models, never pooled
    text = texts(fig)
    assert "llm: tiny (synthetic weights)" in text and "llm: real" in text
    assert "synthetic weights: random-weight model" in text
    real = table[(table["model"] == "real") & (table["runtime"] == "native")].iloc[0]
    time_axes = [ax for ax in fig.axes if ax.get_title(loc="left") == "llm: real"][0]
    assert (pytest.approx(real["ci95_low"]), pytest.approx(real["ci95_high"])) in [
        (pytest.approx(lo), pytest.approx(hi)) for lo, hi in errorbar_segments(time_axes)]
    assert rstyle.NO_DATA not in text and "no finished LLM runs" in texts(plots.llm_figure(pd.DataFrame()))


# --- layout: titles that fit, legends beside the data (issue #27) ---------------------------

# The quickstart's LLM model label (its runs.csv): long, and flagged synthetic.
QUICKSTART_MODEL = "scalesweep-synthetic-llama-29M-random"


def _outside(inner, outer, slack=1.0) -> bool:
    return (inner.x0 < outer.x0 - slack or inner.x1 > outer.x1 + slack
            or inner.y0 < outer.y0 - slack or inner.y1 > outer.y1 + slack)


def layout_problems(fig) -> list[str]:
    """Titles, footers, annotations and legends that leave the figure, and legends that
    cover an axes (they belong beside the data)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    visible = [ax for ax in fig.axes if ax.axison]
    texts_ = list(fig.texts)
    for ax in fig.axes:
        texts_ += [ax.title, ax._left_title, ax._right_title, *ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts_ += legend.get_texts()
            box = legend.get_window_extent(renderer)
            problems += [f"legend of {ax.get_title(loc='left') or ax.get_title()!r} covers "
                         "an axes" for other in visible
                         if box.overlaps(other.get_window_extent(renderer))]
    for text in texts_:
        if text.get_text() and text.get_visible() and _outside(
                text.get_window_extent(renderer), fig.bbox):
            problems.append(f"cut off: {text.get_text()!r}")
    for ax in visible:  # value labels stay in their axes: off it they run under the legend
        box = ax.get_window_extent(renderer)
        problems += [f"label {t.get_text()!r} leaves its axes" for t in ax.texts
                     if t.get_text() and _outside(t.get_window_extent(renderer), box)]
    return problems


def llm_runs(model=QUICKSTART_MODEL, synthetic=True):
    from scalesweep.analyse import collect

    rows = []
    for rt, rep in [(rt, rep) for rt in ("native", "native-aa", "charliecloud")
                    for rep in (1, 2, 3)]:
        rows.append(collect.run_row({
            "point": dict(workload="llm", runtime=rt, nodes=1, gpus=0, ranks=1, threads=2,
                          repeat=rep),
            "wall_s": 2.5 + rep * 0.1, "tokens_per_s": 190.0 + rep,
            "model": {"name": model, "synthetic": synthetic}}, f"{rt}{rep}", "llm"))
    return pd.DataFrame(rows)


def test_llm_figure_title_once_per_row_fits_and_legend_beside_the_data():
    from scalesweep.report import plots

    fig = plots.llm_figure(llm_runs())
    assert layout_problems(fig) == []
    title = f"llm: {QUICKSTART_MODEL} (synthetic weights)"
    titles = [t for ax in fig.axes for t in (ax.get_title(), ax.get_title(loc="left"))
              if t.replace("\n", " ") == title]
    assert len(titles) == 1, [ax.get_title(loc="left") for ax in fig.axes]
    assert sum(ax.get_legend() is not None for ax in fig.axes) == 1


def test_scaling_figure_legend_beside_and_says_why_no_law_is_fitted():
    from scalesweep.report import plots

    table = pd.DataFrame(dict(workload="cnn_ddp", runtime=["native", "native", "charliecloud",
                                                            "charliecloud"],
                              threads=1, count=[1, 2, 1, 2], time_s=[7.1, 3.8, 7.0, 3.7],
                              ci95_low=[6.9, 3.7, 6.8, 3.6], ci95_high=[7.3, 3.9, 7.2, 3.8],
                              linear_time_s=[7.1, 3.55, 7.0, 3.5]))
    fig = plots.scaling_figure(table, pd.DataFrame())
    assert layout_problems(fig) == []
    assert ("no scaling-law fit for cnn_ddp charliecloud, cnn_ddp native: 2 counts swept "
            "(1, 2), amdahl needs 3, usl needs 4") in texts(fig).replace("\n", " ")
    four = pd.concat([table, table.assign(count=table["count"] * 4)])
    assert "no scaling-law fit" not in texts(plots.scaling_figure(four, pd.DataFrame()))


def test_scaling_figure_draws_only_workloads_swept_at_several_counts():
    """On the H200 (issue #32) four one-GPU workloads and one 1-16 rank series gave five
    panels in one 5,400-pixel row; one count has nothing to scale: named in the footer,
    and panels wrap after three."""
    from scalesweep.report import plots

    def series(workload, counts):
        return pd.DataFrame(dict(workload=workload, runtime="native", threads=1, count=counts,
                                 time_s=[8.0 / c for c in counts],
                                 ci95_low=[7.0 / c for c in counts],
                                 ci95_high=[9.0 / c for c in counts],
                                 linear_time_s=[8.0 / c for c in counts]))

    table = pd.concat([series("cpu_ddp", [1, 2, 4, 8, 16])] +
                      [series(f"gpu_{k}", [1]) for k in ("ddp", "dp", "bf16", "tf32")])
    fig = plots.scaling_figure(table, pd.DataFrame())
    drawn = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in drawn] == ["cpu_ddp"]
    assert ("measured at one count, so not drawn: gpu_bf16, gpu_ddp, gpu_dp, gpu_tf32"
            in texts(fig).replace("\n", " "))
    assert layout_problems(fig) == []
    five = pd.concat([series(f"w{i}", [1, 2]) for i in range(5)])
    fig = plots.scaling_figure(five, pd.DataFrame())
    assert sum(ax.get_visible() for ax in fig.axes) == 5 and fig.get_size_inches()[0] == 27
    only_one = plots.scaling_figure(series("gpu_ddp", [1]), pd.DataFrame())
    assert "nothing to scale" in texts(only_one)


def test_memory_figure_error_bars_are_the_95_ci_of_the_bars_and_name_the_measure():
    from scalesweep.analyse.stats import describe_repeats

    # the quickstart's cnn_ddp peaks (runs.csv peak_rss_mb, MiB), 1 rank
    peaks = {"native": [760.7, 712.4, 721.0, 748.3, 687.2], "charliecloud": [725.5, 756.3,
                                                                             751.5, 738.4]}
    runs = pd.DataFrame([dict(workload="cnn_ddp", payload="cnn", runtime=rt, count=1, nodes=1,
                              gpus=0, threads=1, repeat=i, peak_rss_mb=v)
                         for rt, values in peaks.items() for i, v in enumerate(values, 1)])
    fig = rrf.memory_figure(runs, title="cnn_ddp: peak memory")
    expected = describe_repeats(runs, ["runtime"], "peak_rss_mb")
    drawn = np.array(sorted(errorbar_segments(fig.axes[0])))
    assert drawn == pytest.approx(np.array(sorted(zip(expected["ci95_low"],
                                                      expected["ci95_high"]))))
    text = texts(fig).replace("\n", " ")
    assert "reported_peak_rss_mb_mean" in text and "ru_maxrss" in text
    assert "peak_rank_rss_mb" in text and "no error bars" not in text
    assert layout_problems(fig) == []


def test_other_figures_keep_titles_and_legends_inside_the_figure_beside_the_data():
    startup = rtab.startup_samples([{"runtime": "charliecloud", "probes": {
        probe: {side: {"samples_s": [base * f for f in (1.0, 1.1, 0.9)]}
                for side, base in (("native", 0.01), ("container", 0.02))}
        for probe in rtab.STARTUP_PROBES}}])
    figures = {
        "efficiency": rf.efficiency_figure(scaling(flag_2="high_variance",
                                                   runtimes=("native", "charliecloud"))),
        "overhead": rf.overhead_figure(overhead(runtimes=("native-aa", "charliecloud"))),
        "startup": rrf.startup_figure(startup),
    }
    for name, fig in figures.items():
        assert layout_problems(fig) == [], name


def test_fit_figures_only_for_series_swept_at_enough_counts():
    from conftest import tiny_config
    from scalesweep.analyse import fits
    from scalesweep.plan.sweep import sweep_points

    config = tiny_config()  # 1 and 2 ranks: nothing to fit, no figure listed
    assert fits.figure_series(sweep_points(config), config) == []
    config["sweep"]["nodes"] = [1, 2]  # counts 1, 2, 4
    assert fits.figure_series(sweep_points(config), config) == [("cnn_ddp", "native")]
    assert not fits.can_fit([1, 2, 2]) and fits.can_fit([1, 2, 4])


def report_items() -> list[tuple[str, dict]]:
    """(path, keywords) of every report() item of the workflow's rule files."""
    import ast
    from pathlib import Path

    rules = Path(__file__).resolve().parents[2] / "workflow" / "rules"
    items = []
    for smk in sorted(rules.glob("*.smk")):
        text = smk.read_text()
        for start in [i for i in range(len(text)) if text.startswith("report(", i)
                      and not text[i - 1].isalnum() and not text[i - 1] == "_"]:
            depth, end = 0, start + len("report")
            while True:
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
                if depth == 0:
                    break
            call = ast.parse(text[start:end], mode="eval").body
            # literal paths only: not a mention in a comment ("report() items"), not
            # common.smk's report_table (its tables' categories are report.registry.TABLES')
            if call.args and isinstance(call.args[0], ast.Constant):
                keywords = {k.arg: getattr(k.value, "value", None) for k in call.keywords}
                items.append((call.args[0].value, keywords))
    return items


def test_every_figure_has_a_category_and_subcategory_never_other():
    items = report_items()
    figures = [(path, kw) for path, kw in items if path.endswith(".png")]
    assert len(figures) >= 10
    for path, kw in figures:
        assert kw.get("category") and kw.get("subcategory"), path
    # Snakemake files an item without a subcategory under "Other": never beside a figure
    with_figures = {kw["category"] for _, kw in figures}
    assert [path for path, kw in items
            if kw.get("category") in with_figures and not kw.get("subcategory")] == []


def test_overhead_value_labels_never_cover_another_point():
    from matplotlib.collections import PathCollection

    df = overhead(runtimes=("native-aa", "charliecloud")).assign(
        verdict="inconclusive", repeats_needed=8)  # both at +3%: side by side, same height
    fig = rf.overhead_figure(df)
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    markers = [ax.transData.transform(xy) for c in ax.collections
               if isinstance(c, PathCollection) for xy in c.get_offsets()]
    assert len(markers) == 4 and len(ax.texts) == 4
    for label in ax.texts:
        box, own_x = label.get_window_extent(renderer), ax.transData.transform(label.xy)[0]
        assert not [m for m in markers if abs(m[0] - own_x) > 1 and box.contains(*m)], \
            label.get_text()
