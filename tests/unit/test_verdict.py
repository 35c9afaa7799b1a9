"""Verdicts instead of bare percentages: overhead_verdict's known answers (by hand and with
scipy), its behaviour on A/A data, the verdict and summary tables aggregate writes, the
efficiency CI, disturbed runs kept but left out, and `scalesweep status` naming them."""

from __future__ import annotations

import json
import math
from argparse import Namespace
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from scalesweep.analyse import collect

from scalesweep.analyse import summary
from scalesweep.analyse.overhead import VERDICT_COLUMNS, overhead_table, verdict_table
from scalesweep.analyse.scaling import scaling_table
from scalesweep.analyse.stats import fieller_from_moments
from scalesweep.analyse.verdict import overhead_verdict
from scalesweep.campaign import status
from scalesweep.plan.sweep import SweepPoint
from scalesweep.record.metrics import write_metrics

KEYS = {"n_native", "n", "paired", "overhead_pct", "ci95_low_pct", "ci95_high_pct",
        "ci_half_width_pp", "p_value", "equivalence_p_value", "verdict", "verdict_text",
        "repeats_needed", "target_met", "ci_method", "normality_p_value", "ci90_low_pct",
        "ci90_high_pct", "repeats_to_decide"}
NATIVE = [10.02, 9.97, 10.05, 10.01, 9.95]
CONTAINER = [10.10, 10.03, 10.08, 10.09, 10.00]


# --- overhead_verdict: known answers -------------------------------------------------------

def test_paired_known_answer_by_hand_and_scipy():
    v = overhead_verdict(NATIVE, CONTAINER, paired=True)
    assert set(v) == KEYS and v["paired"] is True and v["n"] == v["n_native"] == 5
    d = np.log(np.array(CONTAINER) / np.array(NATIVE))
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert v["overhead_pct"] == pytest.approx((math.exp(d.mean()) - 1) * 100)
    assert v["ci95_low_pct"] == pytest.approx((math.exp(d.mean() - half) - 1) * 100)
    assert v["ci95_high_pct"] == pytest.approx((math.exp(d.mean() + half) - 1) * 100)
    assert v["ci_half_width_pp"] == pytest.approx((v["ci95_high_pct"] - v["ci95_low_pct"]) / 2)
    assert v["p_value"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue)
    tost = max(stats.ttest_1samp(d, math.log(0.98), alternative="greater").pvalue,
               stats.ttest_1samp(d, math.log(1.02), alternative="less").pvalue)
    assert v["equivalence_p_value"] == pytest.approx(tost)
    # 0.6% slower, CI well inside +-2%: equivalent, even though the CI excludes 0
    assert v["ci95_low_pct"] > 0 and v["verdict"] == "equivalent"
    assert v["verdict_text"] == (
        f"equivalent within +-2% (overhead {v['overhead_pct']:.1f}%, two one-sided tests' "
        f"90% CI {v['ci90_low_pct']:.1f}% .. {v['ci90_high_pct']:.1f}%, 95% CI "
        f"{v['ci95_low_pct']:.1f}% .. {v['ci95_high_pct']:.1f}%, n=5 pairs)")
    assert v["target_met"] and v["repeats_needed"] == 0


def test_unpaired_known_answer_matches_fieller_welch_and_a_scaled_welch_tost():
    v = overhead_verdict(NATIVE, CONTAINER)
    assert v["paired"] is False and v["n_native"] == v["n"] == 5
    table = overhead_table(pd.DataFrame(
        {"runtime": ["native"] * 5 + ["c"] * 5, "time_s": NATIVE + CONTAINER})).iloc[0]
    for ours, theirs in (("overhead_pct", "overhead_pct"), ("ci95_low_pct", "overhead_ci95_low_pct"),
                         ("ci95_high_pct", "overhead_ci95_high_pct"), ("p_value", "p_value")):
        assert v[ours] == pytest.approx(table[theirs])
    assert v["p_value"] == pytest.approx(stats.ttest_ind(CONTAINER, NATIVE, equal_var=False).pvalue)
    # H0: ratio <= R is Welch's test of container against R x native (Fieller's pivot)
    n = np.array(NATIVE)
    tost = max(stats.ttest_ind(CONTAINER, 0.98 * n, equal_var=False, alternative="greater").pvalue,
               stats.ttest_ind(CONTAINER, 1.02 * n, equal_var=False, alternative="less").pvalue)
    assert v["equivalence_p_value"] == pytest.approx(tost)
    assert v["verdict"] == "equivalent" and "n=5 native, 5 container" in v["verdict_text"]


def test_a_clear_10_percent_slowdown_is_slower():
    rng = np.random.default_rng(7)
    native = 100 + rng.normal(0, 1, 6)
    container = 110 + rng.normal(0, 1, 6)
    for paired in (True, False):
        v = overhead_verdict(native, container, paired=paired)
        assert v["verdict"] == "slower" and 0 < v["ci95_low_pct"] < 10 < v["ci95_high_pct"]
        assert v["verdict_text"].startswith(f"slower by {v['overhead_pct']:.1f}% (95% CI ")
    faster = overhead_verdict(container, native, paired=True)
    assert faster["verdict"] == "faster" and faster["ci95_high_pct"] < 0
    assert faster["verdict_text"].startswith(f"faster by {-faster['overhead_pct']:.1f}%")


def test_equal_samples_are_equivalent_given_enough_repeats():
    rng = np.random.default_rng(3)
    same = 50 + rng.normal(0, 0.5, 12)
    assert overhead_verdict(same, same, paired=True)["verdict"] == "equivalent"
    assert overhead_verdict(same, same)["verdict"] == "equivalent"
    assert overhead_verdict(same[:2], same[:2][::-1])["verdict"] == "inconclusive"


def test_wide_noise_is_inconclusive_and_says_how_many_more_repeats():
    rng = np.random.default_rng(11)
    native, container = 100 + rng.normal(0, 8, 4), 101 + rng.normal(0, 8, 4)
    for paired in (True, False):
        v = overhead_verdict(native, container, paired=paired)
        assert v["verdict"] == "inconclusive" and not v["target_met"]
        assert v["repeats_needed"] > 0
        assert v["verdict_text"].startswith("inconclusive: about ")
        assert f"{v['repeats_needed']} more repeats needed" in v["verdict_text"]


def test_repeats_needed_is_the_smallest_n_that_reaches_the_target():
    d = np.array([0.01, -0.02, 0.03, 0.0])  # log ratios
    native = np.full(4, 10.0)
    v = overhead_verdict(native, native * np.exp(d), paired=True, target_ci_pp=1.0)
    k = v["repeats_needed"]
    sd = d.std(ddof=1)

    def half(n):
        h = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
        return (math.exp(d.mean() + h) - math.exp(d.mean() - h)) * 50

    assert k > 0 and half(4 + k) <= 1.0 < half(4 + k - 1)
    assert overhead_verdict(native, native * np.exp(d), paired=True,
                            target_ci_pp=50.0)["repeats_needed"] == 0


def test_too_few_values_zero_variance_and_bad_input():
    one = overhead_verdict([10.0], [11.0])
    assert one["verdict"] == "inconclusive" and one["repeats_needed"] == 2
    assert one["overhead_pct"] == pytest.approx(10) and math.isnan(one["ci95_low_pct"])
    none = overhead_verdict([], [1.0, 2.0])
    assert none["repeats_needed"] == 3 and "no usable runs" in none["verdict_text"]
    unusable = overhead_verdict([10.0, float("nan"), 0.0], [10.0, 10.0, 10.0], paired=True)
    assert unusable["n"] == 1 and unusable["repeats_needed"] == 2
    for paired in (True, False):
        flat = overhead_verdict([10.0] * 3, [10.5] * 3, paired=paired)
        assert flat["ci95_low_pct"] == pytest.approx(5) == flat["ci95_high_pct"]
        assert flat["verdict"] == "slower" and math.isnan(flat["p_value"]) and flat["target_met"]
        same = overhead_verdict([10.0] * 3, [10.0] * 3, paired=paired)
        assert same["verdict"] == "equivalent" and same["repeats_needed"] == 0
    with pytest.raises(ValueError, match="paired samples differ in length"):
        overhead_verdict([1.0, 2.0], [1.0], paired=True)


def test_the_margin_and_the_target_are_parameters():
    v = overhead_verdict(NATIVE, CONTAINER, paired=True, margin_pct=0.5, target_ci_pp=0.01)
    assert v["verdict"] == "slower" and not v["target_met"] and v["repeats_needed"] > 0
    assert "equivalent within +-5%" in overhead_verdict(NATIVE, CONTAINER, margin_pct=5)[
        "verdict_text"]


@pytest.mark.parametrize("paired", [True, False])
def test_aa_simulation_calls_identical_runtimes_equivalent_and_rarely_different(paired):
    """Both sides from the same distribution (1% noise, 10 repeats, a shared block drift
    when paired), 400 seeds: equivalent in the large majority, a false 'slower' or
    'faster' in about 5% at most (the 95% CI's own error rate)."""
    verdicts = Counter()
    for seed in range(400):
        rng = np.random.default_rng(seed)
        drift = rng.normal(0, 3, 10) if paired else 0
        native = 100 + drift + rng.normal(0, 1, 10)
        aa = 100 + drift + rng.normal(0, 1, 10)
        verdicts[overhead_verdict(native, aa, paired=paired)["verdict"]] += 1
    assert verdicts["equivalent"] / 400 >= 0.9
    assert (verdicts["slower"] + verdicts["faster"]) / 400 <= 0.06


# --- verdict_table -------------------------------------------------------------------------

def runs_table(native, container, disturbed=(), repeats=None, runtime="charliecloud"):
    repeats = repeats or {}
    rows = []
    for rt, times in (("native", native), (runtime, container)):
        for k, t in zip(repeats.get(rt, range(1, len(times) + 1)), times):
            rows.append({"workload": "cnn", "runtime": rt, "repeat": k, "time_s": t,
                         "disturbed": (rt, k) in disturbed})
    return pd.DataFrame(rows)


def test_verdict_table_pairs_by_repeat_and_leaves_disturbed_runs_out():
    df = runs_table(NATIVE + [30.0], CONTAINER + [10.05], disturbed={("native", 6)})
    row = verdict_table(df, ["workload"]).iloc[0]
    assert row["paired"] and row["n"] == 5 and row["n_disturbed"] == 1
    expected = overhead_verdict(NATIVE, CONTAINER, paired=True)
    assert row["overhead_pct"] == pytest.approx(expected["overhead_pct"])
    assert row["verdict_text"] == expected["verdict_text"]
    # geometric means: overhead_pct is still (time_s - native_s) / native_s x 100
    assert row["overhead_pct"] == pytest.approx((row["time_s"] - row["native_s"])
                                                / row["native_s"] * 100)
    assert list(verdict_table(df, ["workload"]).columns) == [
        "workload", "runtime", *VERDICT_COLUMNS]


def test_verdict_table_unpaired_when_fewer_than_two_valid_pairs():
    """test_report's partial campaign: native rep2 failed, so native has rep1 only."""
    df = runs_table([10.0], [10.3, 10.4], repeats={"native": [1], "charliecloud": [1, 2]})
    row = verdict_table(df).iloc[0]
    assert not row["paired"] and row["n_native"] == 1 and row["n"] == 2
    assert math.isnan(row["overhead_ci95_low_pct"]) and row["verdict"] == "inconclusive"
    assert row["native_s"] == 10.0 and row["time_s"] == pytest.approx(10.35)


def test_verdict_table_treats_the_aa_runtime_like_a_container_and_csv_flags():
    df = pd.concat([runs_table(NATIVE, CONTAINER),
                    runs_table(NATIVE, NATIVE, runtime="native-aa").query("runtime != 'native'")])
    df["disturbed"] = df["disturbed"].map({True: "True", False: "False"})  # a CSV round trip
    table = verdict_table(df, ["workload"]).set_index("runtime")
    assert table.loc["native-aa", "verdict"] == "equivalent"
    assert table.loc["native-aa", "overhead_pct"] == 0


# --- efficiency CI --------------------------------------------------------------------------

def test_scaling_efficiency_ci_is_fieller_and_100_at_the_baseline():
    base, two = [10.0, 10.2, 9.8], [5.5, 5.4, 5.6]
    out = scaling_table(pd.DataFrame({"nodes": [1] * 3 + [2] * 3, "time_s": base + two}))
    row = out.set_index("nodes").loc[2]
    lo, hi = fieller_from_moments(np.mean(base), np.var(base, ddof=1), 3,
                                  np.mean(two), np.var(two, ddof=1), 3, 0.95)
    assert row["efficiency_ci95_low_pct"] == pytest.approx(lo * 50)
    assert row["efficiency_ci95_high_pct"] == pytest.approx(hi * 50)
    assert row["efficiency_ci95_low_pct"] < row["efficiency_pct"] < row["efficiency_ci95_high_pct"]
    baseline = out.set_index("nodes").loc[1]
    assert baseline["efficiency_ci95_low_pct"] == baseline["efficiency_ci95_high_pct"] == 100
    single = scaling_table(pd.DataFrame({"nodes": [1, 1, 2], "time_s": [10.0, 10.2, 5.0]}))
    assert single["efficiency_ci95_low_pct"].isna().tolist() == [False, True]


def test_efficiency_ci_covers_the_true_efficiency_about_95_percent_of_the_time():
    rng = np.random.default_rng(2019)
    covered = []
    for _ in range(300):
        df = pd.DataFrame({"nodes": [1] * 5 + [4] * 5,
                           "time_s": np.r_[rng.normal(100, 4, 5), rng.normal(31.25, 1.5, 5)]})
        row = scaling_table(df).set_index("nodes").loc[4]  # true efficiency 80%
        covered.append(row["efficiency_ci95_low_pct"] <= 80 <= row["efficiency_ci95_high_pct"])
    assert 0.91 <= np.mean(covered) <= 0.99


# --- runs.csv rows, points.csv states, the summary tables ---------------------------------

def cnn_metrics(runtime="native", ranks=1, repeat=1, epochs=(4.0, 2.0, 2.2), disturbed=None,
                shared=None, arm=None):
    m = {"point": dict(workload="cnn", runtime=runtime, nodes=1, gpus=0, ranks=ranks,
                       threads=1, repeat=repeat, arm=arm or runtime),
         "epoch_s": list(epochs), "train_s": sum(epochs), "images_per_epoch": 384,
         "images_per_s": 384 * len(epochs) / sum(epochs), "final_loss": 0.1,
         "final_accuracy": 0.9}
    if disturbed is not None:
        m.update(disturbed=disturbed, interference={
            "outside_cpu_pct_max": 45.0 if disturbed else 1.0, "steal_pct_max": None,
            "load1_max": 2.5, "reasons": ["node0: outside processes used 45.0%"] if disturbed else []})
        m["allocation"] = {"exclusive": None, "shared_cores": bool(shared), "cpus_bound": "0-1",
                           "ncpus_bound": 2, "gpus_visible": None, "hosts": ["node0"]}
        m["order"] = {"scheme": "alternate", "block": repeat, "position": 1, "sequence": []}
    return m


def test_run_row_new_columns_and_steady_state_images_per_s():
    row = collect.run_row(cnn_metrics(disturbed=True, shared=True), "p", "cnn")
    assert row["time_s"] == pytest.approx(2.1)
    assert row["images_per_s"] == pytest.approx(384 / 2.1)  # the epochs time_s covers
    assert (row["disturbed"], row["outside_cpu_pct"], row["steal_pct"], row["load1_max"]) == \
        (True, 45.0, None, 2.5)
    assert row["disturbed_reason"] == "node0: outside processes used 45.0%"
    assert row["shared_cores"] is True and row["exclusive"] is None and row["order_position"] == 1
    old = collect.run_row({**cnn_metrics(), "images_per_epoch": None}, "p", "cnn")
    assert old["disturbed"] is False and old["disturbed_reason"] == "" and not old["shared_cores"]
    assert old["images_per_s"] == pytest.approx(384 / 2.1)  # from the payload's own numbers
    llm = collect.run_row({"point": dict(workload="llm", runtime="native", nodes=1, gpus=0,
                                         ranks=1, threads=2, repeat=1),
                           "wall_s": 3.0, "model": {"name": "tiny", "synthetic": True}},
                          "p", "llm")
    assert llm["model_label"] == "tiny (synthetic weights)" and llm["synthetic_model"] is True


def test_point_states_mark_disturbed_runs_from_metrics_or_from_collect(tmp_path):
    points = [SweepPoint("cnn", "native", 1, 0, 1, 1, k) for k in (1, 2, 3)]
    for p, disturbed in zip(points[:2], (True, False)):
        write_metrics(tmp_path / "runs" / p.path / "metrics.json",
                      cnn_metrics(repeat=p.repeat, disturbed=disturbed))
    states = collect.point_states(points, str(tmp_path))
    assert states["state"].tolist() == ["disturbed", "done", "missing"]
    assert "outside processes" in states.loc[0, "reason"]
    done = [str(tmp_path / "runs" / p.path / "metrics.json") for p in points[:2]]
    again = collect.point_states(points, str(tmp_path), done=done,
                                 disturbed={done[0]: "noisy neighbour"})
    assert again["state"].tolist() == ["disturbed", "done", "missing"]
    assert again.loc[0, "reason"] == "noisy neighbour"


CONFIG = {"workloads": {"cnn": {"payload": "cnn"}, "llm": {"payload": "llm"}},
          "sweep": {}, "measurement": {"equivalence_margin_pct": 3.0, "target_ci_pp": 1.5}}


def summary_runs():
    """native in the blocks of each compared runtime (its arm), as the workflow measures."""
    rows = []
    rng = np.random.default_rng(5)
    arms = ("native-aa", "charliecloud")
    for rt, factor in (("native", 1.0), ("native-aa", 1.0), ("charliecloud", 1.06)):
        for arm in (arms if rt == "native" else (rt,)):
            for ranks in (1, 2):
                for rep in (1, 2, 3, 4):
                    t = 10 / ranks * factor + rng.normal(0, 0.03)
                    rows.append(collect.run_row(cnn_metrics(
                        rt, ranks, rep, epochs=(t * 1.5, t, t), shared=ranks == 2,
                        disturbed=(rt, ranks, rep) == ("native", 1, 4), arm=arm),
                        f"{arm}{rt}{ranks}{rep}", "cnn"))
            for model, synthetic in (("tiny", True), ("real", False)):
                for rep in (1, 2, 3):
                    rows.append(collect.run_row({
                        "point": dict(workload="llm", runtime=rt, nodes=1, gpus=0, ranks=1,
                                      threads=2, repeat=rep, arm=arm),
                        "wall_s": (20 if model == "tiny" else 40) * factor + rng.normal(0, 0.1),
                        "tokens_per_s": 30.0 + rep,
                        "model": {"name": model, "synthetic": synthetic},
                    }, f"{arm}{rt}{model}{rep}", "llm"))
    return collect.with_blocks(pd.DataFrame(rows))


def test_overhead_summary_rows_verdicts_models_and_shared_cores():
    table = summary.overhead_summary(summary_runs(), CONFIG)
    assert len(table) == 2 * 2 + 2 * 2  # cnn 2 geometries x 2 runtimes; llm 2 models x 2
    assert set(table["runtime"]) == {"native-aa", "charliecloud"}
    assert (table["margin_pct"] == 3.0).all() and (table["target_ci_pp"] == 1.5).all()
    cnn = table[table["workload"] == "cnn"].set_index(["ranks", "runtime"])
    assert cnn.loc[(1, "charliecloud"), "verdict"] == "slower"
    assert cnn.loc[(1, "native-aa"), "verdict"] == "equivalent"
    assert cnn.loc[(1, "charliecloud"), "n_disturbed"] == 1 and cnn.loc[(1, "charliecloud"), "n"] == 3
    assert cnn.loc[(2, "charliecloud"), "shared_cores"]
    assert cnn.loc[(2, "charliecloud"), "note"] == collect.SHARED_CORES_NOTE
    assert cnn.loc[(1, "charliecloud"), "note"] == ""
    llm = table[table["workload"] == "llm"]
    assert set(llm["model_label"]) == {"tiny (synthetic weights)", "real"}
    real = llm[(llm["model"] == "real") & (llm["runtime"] == "charliecloud")].iloc[0]
    assert real["native_s"] == pytest.approx(40, rel=0.01)  # never pooled with "tiny"


def test_scaling_and_llm_summaries():
    runs = summary_runs()
    scaling = summary.scaling_summary(runs, CONFIG)
    native = scaling[scaling["runtime"] == "native"].set_index("count")
    # native's runs of both arms are repeats of one count (independent runs)
    assert native.loc[1, "n"] == 6 and native.loc[1, "n_disturbed"] == 2
    assert native.loc[2, "shared_cores"] and not native.loc[1, "shared_cores"]
    assert {"efficiency_ci95_low_pct", "efficiency_ci95_high_pct", "note"} <= set(scaling.columns)
    llm = summary.llm_summary(runs)
    assert len(llm) == 6 and set(llm["model_label"]) == {"tiny (synthetic weights)", "real"}
    row = llm[(llm["model"] == "real") & (llm["runtime"] == "native")].iloc[0]
    assert row["mean"] == pytest.approx(40, rel=0.01) and row["tokens_per_s"] == pytest.approx(3 / (1 / 31 + 1 / 32 + 1 / 33))
    assert row["tokens_per_s_ci95_low"] < 32 < row["tokens_per_s_ci95_high"]
    assert bool(llm.set_index("model")["synthetic_model"].loc["tiny"].all())


def test_points_of_runs_and_extra_repeats(tmp_path):
    runs = summary_runs()
    assert len(collect.runs_points(runs)) == len(runs)
    requested = [SweepPoint("cnn", "native", 1, 0, 1, 1, k) for k in (1, 2, 3)]
    extra = SweepPoint("cnn", "native", 1, 0, 1, 1, 4)
    other = SweepPoint("cnn", "native", 1, 0, 2, 1, 4)  # a geometry not requested
    for p in (*requested, extra, other):
        write_metrics(tmp_path / "runs" / p.path / "metrics.json", cnn_metrics(repeat=p.repeat))
    assert collect.extra_repeats(requested, str(tmp_path)) == [extra]


# --- scalesweep status ------------------------------------------------------------------------

def test_status_counts_and_lists_disturbed_runs(tmp_path, capsys):
    from conftest import tiny_config

    cfg = tiny_config()
    cfg["sweep"].update(ranks_per_node=[1], repeats=2)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    points = [SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, k) for k in (1, 2, 3)]
    for p, disturbed in zip(points, (True, False, False)):  # rep3: an added repeat
        m = cnn_metrics(repeat=p.repeat, disturbed=disturbed)
        m["point"]["workload"] = "cnn_ddp"
        write_metrics(tmp_path / "results" / "runs" / p.path / "metrics.json", m)
    args = Namespace(directory=str(tmp_path), configfile=None, config=None, profile="profiles/local",
                     all=False, json=False)
    assert status.run(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 requested points: 2 done, 1 disturbed, 0 failed")
    assert "1 disturbed run(s) left out of the statistics" in out
    assert points[0].path in out and "outside processes" in out
    assert f"snakemake --directory {tmp_path} --profile profiles/local" in out
    # past rep3 on disk: sweep.repeats 3 would replace nothing
    assert "--config 'sweep={repeats: 4}'" in out
    status.run(Namespace(**{**vars(args), "json": True}))
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["disturbed"] == 1


def test_pairs_on_the_same_nodes_are_preferred():
    """Under Slurm a block's runs can land on different nodes: the pairs that share their
    nodes are used where there are at least two of them."""
    import pandas as pd

    from scalesweep.analyse.overhead import verdict_table

    rows = []
    for k, (nat, cont, same) in enumerate([(10.0, 10.1, True), (10.0, 10.05, True),
                                           (10.0, 10.08, True), (10.0, 13.0, False)], 1):
        rows.append({"runtime": "native", "repeat": k, "time_s": nat, "hosts": "n1"})
        rows.append({"runtime": "charliecloud", "repeat": k, "time_s": cont,
                     "hosts": "n1" if same else "n2"})
    row = verdict_table(pd.DataFrame(rows)).iloc[0]
    assert bool(row["paired"]) and row["n"] == 3
    assert row["overhead_pct"] < 1.5


def test_equivalence_shows_the_90_percent_interval_it_was_decided_on():
    """TOST at 5% is the 90% CI inside the margin: the text shows that interval (scipy's t
    interval at 90%), so a 95% CI reaching past the margin is no contradiction."""
    rng = np.random.default_rng(14)  # a sample whose 95% CI reaches past +5%
    native = np.exp(rng.normal(0, 0.01, 12))
    container = native * np.exp(rng.normal(0.0, 0.055, 12))
    v = overhead_verdict(native, container, paired=True, margin_pct=5.0)
    d = np.log(container / native)
    low, high = stats.t.interval(0.90, d.size - 1, loc=d.mean(), scale=stats.sem(d))
    assert v["ci90_low_pct"] == pytest.approx(np.expm1(low) * 100)
    assert v["ci90_high_pct"] == pytest.approx(np.expm1(high) * 100)
    assert -5.0 < v["ci90_low_pct"] and v["ci90_high_pct"] < 5.0 < v["ci95_high_pct"]
    assert v["verdict"] == "equivalent"
    assert (f"two one-sided tests' 90% CI {v['ci90_low_pct']:.1f}% .. "
            f"{v['ci90_high_pct']:.1f}%, 95% CI") in v["verdict_text"]
