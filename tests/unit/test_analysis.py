"""Scaling and overhead math: the published tables, properties, and CI coverage."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scalesweep.analyse.overhead import overhead_table
from scalesweep.analyse.scaling import scaling_table
from scalesweep.analyse.stats import describe_repeats
from scalesweep.analyse.verdict import OVERHEAD_DEFINITION, overhead_pct

IN_REPO = Path(__file__).parents[1] / "data" / "published"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "published"
PUBLISHED = ["sng_3dgan_1rank.csv", "odo_llm_astrollama.csv", "llsc_singularity_snn.csv"]
# Hypothesis' per-example deadline misfires on a shared 2-core machine.
quick = settings(max_examples=60, deadline=None)


def published(name: str) -> pd.DataFrame:
    for folder in (IN_REPO, SHARED):
        if (folder / name).is_file():
            return pd.read_csv(folder / name)
    pytest.skip(f"published table {name} is in neither {IN_REPO} nor {SHARED}")


@pytest.mark.parametrize("name", PUBLISHED)
def test_in_repo_copy_equals_shared_original(name):
    if not (SHARED / name).is_file():
        pytest.skip(f"no shared original at {SHARED / name} to compare with")
    assert (IN_REPO / name).read_bytes() == (SHARED / name).read_bytes()


# --- Brayford & Vallecorsa, 3DGAN on SuperMUC-NG (strong scaling, base 4 nodes) ---

def lrz_ours() -> pd.DataFrame:
    return scaling_table(published("sng_3dgan_1rank.csv")).set_index("nodes")


def test_lrz_every_printed_efficiency_reproduces():
    printed = published("sng_3dgan_1rank.csv").set_index("nodes")["efficiency_pct"].dropna()
    ours = lrz_ours()["efficiency_pct"]
    assert len(printed) == 7
    assert {n: round(ours[n], 1) for n in printed.index} == printed.to_dict()
    assert ours[4] == 100  # the baseline row, printed blank


def test_lrz_every_printed_linear_time_reproduces_to_its_last_digit():
    printed = published("sng_3dgan_1rank.csv").set_index("nodes")["linear_time_s"]
    ours = lrz_ours()["linear_time_s"]
    assert len(printed) == 8
    for nodes, value in printed.items():
        assert abs(ours[nodes] - value) < 0.01, nodes
        # The authors truncated to 2 decimals: flooring ours gives each printed value ...
        assert math.floor(ours[nodes] * 100) / 100 == pytest.approx(value, abs=1e-9)
    # ... where rounding would print 237.88, 118.94, 59.47.
    assert [round(ours[n], 2) for n in (64, 128, 256)] == [237.88, 118.94, 59.47]


def test_lrz_speedup_baseline_and_flags():
    ours = lrz_ours()
    assert (ours["baseline_count"] == 4).all() and (ours["baseline_time_s"] == 3806).all()
    assert ours.at[512, "speedup"] == pytest.approx(3806 / 33)
    assert (ours["flag"] == "single_repeat").all()  # one time per count, none superlinear


# --- Dahal et al., AstroLLaMA on Odo: nothing printed to match, ours is the record ---

def test_odo_overhead_per_gpu_count():
    wide = published("odo_llm_astrollama.csv")
    runs = wide.melt(id_vars="gpus", var_name="runtime", value_name="time_s")
    runs["runtime"] = runs["runtime"].str.removesuffix("_s")
    ours = overhead_table(runs, group_cols=["gpus"]).set_index("gpus")["overhead_pct"]
    # The container was faster at every GPU count, so every overhead is negative; with
    # (c - n) / c instead the same data would read -10.71 ... -75.56.
    assert ours.round(2).to_dict() == {
        0: -9.67, 1: -39.93, 2: -43.04, 3: -26.71, 4: -35.45,
        5: -34.44, 6: -33.15, 7: -25.65, 8: -24.92,
    }


# --- Jordan et al. (HPEC 2019), Singularity: one printed row reproduces, two do not ---

def llsc() -> tuple[pd.Series, pd.Series, pd.DataFrame]:
    table = published("llsc_singularity_snn.csv")
    ours = overhead_table(table, time_col="mean_s", group_cols=["task"])
    printed = table.dropna(subset=["overhead_pct"]).set_index("task")["overhead_pct"]
    return ours.set_index("task")["overhead_pct"], printed, table


def test_llsc_training_row_reproduces():
    ours, printed, _ = llsc()
    assert printed["training"] == 33.0
    assert round(ours["training"], 1) == 33.0


def test_llsc_inference_rows_do_not_reproduce_and_we_do_not_bend_to_them():
    ours, printed, _ = llsc()
    assert round(ours["inference_gpu"], 1) == -19.5 != printed["inference_gpu"]  # -24.4
    assert round(ours["inference_cpu"], 1) == -24.4 != printed["inference_cpu"]  # -19.5


def test_llsc_printed_inference_values_are_ours_with_gpu_and_cpu_swapped():
    ours, printed, table = llsc()
    # The shared README's explanation, (c - n) / c, matches neither printed value ...
    means = table.pivot(index="task", columns="runtime", values="mean_s")
    native, container = means["native"], means["singularity"]
    other_definition = ((container - native) / container * 100).round(1)
    assert other_definition["inference_gpu"] == -24.3 != printed["inference_gpu"]
    assert other_definition["inference_cpu"] == -32.2 != printed["inference_cpu"]
    # ... while ours, with the two inference rows exchanged, matches both exactly.
    assert round(ours["inference_cpu"], 1) == printed["inference_gpu"]
    assert round(ours["inference_gpu"], 1) == printed["inference_cpu"]


# --- scaling_table ---

def runs(**columns) -> pd.DataFrame:
    return pd.DataFrame(columns)


def test_explicit_baseline_missing_names_value_and_counts_present():
    table = runs(task=["a", "a", "b", "b"], nodes=[1, 2, 2, 4], time_s=[10, 5, 8, 4])
    with pytest.raises(ValueError, match=r"nodes=1 is not in group task=b \(nodes present: 2, 4\)"):
        scaling_table(table, group_cols=["task"], baseline=1)


def test_each_group_defaults_to_its_smallest_count():
    table = runs(task=["a", "a", "b", "b"], nodes=[1, 2, 2, 4], time_s=[10, 5, 8, 5])
    out = scaling_table(table, group_cols=["task"])
    assert out["baseline_count"].tolist() == [1, 1, 2, 2]
    assert out["efficiency_pct"].tolist() == pytest.approx([100, 100, 100, 80])


def test_explicit_baseline_above_smallest_count():
    out = scaling_table(published("sng_3dgan_1rank.csv"), baseline=8).set_index("nodes")
    assert out.at[16, "linear_time_s"] == 955
    assert out.at[4, "linear_time_s"] == 3820  # counts below the baseline extrapolate up


def test_repeats_are_averaged_described_and_flagged():
    table = runs(nodes=[1, 1, 2, 2, 2, 4], time_s=[10.0, 12.0, 5.0, 5.1, 4.9, 2.0])
    out = scaling_table(table).set_index("nodes")
    assert out["n"].tolist() == [2, 3, 1]
    assert out["time_s"].tolist() == pytest.approx([11, 5, 2])
    assert out.at[1, "std"] == pytest.approx(math.sqrt(2))
    assert out.at[1, "ci95_high"] - 11 == pytest.approx(12.706205 * 1, rel=1e-6)
    assert out["flag"].tolist() == ["high_variance", "superlinear", "superlinear;single_repeat"]


def test_superlinear_needs_more_than_rounding_noise():
    table = runs(nodes=[1, 2, 4], time_s=[100.0, 50 / 1.00004, 25 / 1.0004])
    assert scaling_table(table)["flag"].tolist() == ["single_repeat"] * 2 + [
        "superlinear;single_repeat"
    ]


def test_weak_scaling_uses_the_baseline_time_as_ideal():
    out = scaling_table(runs(gpus=[1, 2, 8], time_s=[10.0, 10.0, 12.5]), count_col="gpus",
                        mode="weak")
    assert out["linear_time_s"].tolist() == [10, 10, 10]
    assert out["efficiency_pct"].tolist() == pytest.approx([100, 100, 80])
    assert out["speedup"].tolist() == pytest.approx([1, 2, 6.4])  # scaled speedup


@pytest.mark.parametrize(
    ("nodes", "time_s", "message"),
    [
        ([1, 2], [10, 0], "time_s must be a positive number; row 1 has '0'"),
        ([1, 2], [10, "x"], "time_s must be a positive number; row 1 has 'x'"),
        ([1, 2], [10, None], "row 1 has an empty cell"),
        ([1, 1.5], [10, 5], "nodes must be a positive whole number; row 1 has '1.5'"),
        ([0, 2], [10, 5], "nodes must be a positive whole number; row 0 has '0'"),
    ],
)
def test_bad_values_are_named_with_their_row(nodes, time_s, message):
    with pytest.raises(ValueError, match=message):
        scaling_table(runs(nodes=nodes, time_s=time_s))


def test_missing_columns_and_bad_mode_are_value_errors():
    with pytest.raises(ValueError, match="missing column time_s .needs nodes, time_s; has nodes, t"):
        scaling_table(runs(nodes=[1], t=[1.0]))
    with pytest.raises(ValueError, match="mode must be one of strong, weak"):
        scaling_table(runs(nodes=[1], time_s=[1.0]), mode="fast")


# --- overhead_table ---

def test_overhead_definition_is_relative_to_native():
    assert OVERHEAD_DEFINITION == "(container - native) / native * 100"
    assert overhead_pct(100.0, 110.0) == pytest.approx(10)
    assert overhead_pct(110.0, 100.0) == pytest.approx(-9.0909, abs=1e-4)


def test_missing_baseline_names_the_group():
    table = runs(gpus=[1, 1, 2], runtime=["native", "apptainer", "apptainer"],
                 time_s=[1.0, 1.1, 0.6])
    with pytest.raises(ValueError, match=r"no runtime='native' rows in group gpus=2 "
                                         r"\(runtime present: apptainer\)"):
        overhead_table(table, group_cols=["gpus"])


def test_statistic_picks_mean_median_or_min_of_each_side():
    table = runs(runtime=["native"] * 3 + ["charliecloud"] * 3 + ["apptainer"] * 3,
                 time_s=[10, 11, 15, 12, 13, 20, 10, 10, 10])
    by = {s: overhead_table(table, statistic=s).set_index("runtime") for s in
          ("mean", "median", "min")}
    assert by["mean"].index.tolist() == ["charliecloud", "apptainer"]  # file order
    assert by["mean"].at["charliecloud", "overhead_pct"] == pytest.approx(25)
    assert by["median"].at["charliecloud", "overhead_pct"] == pytest.approx(200 / 11)
    assert by["min"].at["charliecloud", "overhead_pct"] == pytest.approx(20)
    # the CI describes the ratio of means only; Welch's p is given for every statistic
    assert by["min"]["overhead_ci95_low_pct"].isna().all()
    assert by["min"]["p_value"].tolist() == by["mean"]["p_value"].tolist()


def test_without_repeats_there_is_no_ci_or_test():
    out = overhead_table(runs(runtime=["native", "apptainer"], time_s=[10.0, 11.0]))
    assert out.loc[0, ["overhead_ci95_low_pct", "overhead_ci95_high_pct", "p_value"]].isna().all()
    assert out.loc[0, "significant"] is pd.NA


def test_a_clear_slowdown_is_significant_and_bracketed():
    table = runs(runtime=["native"] * 4 + ["apptainer"] * 4,
                 time_s=[10.0, 10.1, 9.9, 10.0, 12.0, 12.1, 11.9, 12.0])
    row = overhead_table(table).iloc[0]
    assert row["overhead_pct"] == pytest.approx(20)
    assert 0 < row["overhead_ci95_low_pct"] < 20 < row["overhead_ci95_high_pct"]
    assert row["p_value"] < 1e-6 and row["significant"]


def test_identical_repeats_give_a_zero_width_ci_and_no_test():
    table = runs(runtime=["native"] * 3 + ["apptainer"] * 3, time_s=[10.0] * 3 + [12.0] * 3)
    row = overhead_table(table).iloc[0]
    assert row["overhead_ci95_low_pct"] == row["overhead_ci95_high_pct"] == pytest.approx(20)
    assert np.isnan(row["p_value"]) and row["significant"] is pd.NA


# --- properties ---

times = st.floats(min_value=0.01, max_value=1e5, allow_nan=False)


@quick
@given(base_time=times, base_count=st.integers(1, 16), doublings=st.integers(1, 8))
def test_perfectly_linear_strong_scaling_is_100_percent(base_time, base_count, doublings):
    counts = [base_count * 2**k for k in range(doublings + 1)]
    out = scaling_table(runs(nodes=counts, time_s=[base_time * base_count / c for c in counts]))
    assert out["efficiency_pct"].tolist() == pytest.approx([100] * len(counts))
    assert out["speedup"].tolist() == pytest.approx([c / base_count for c in counts])
    assert not out["flag"].str.contains("superlinear").any()


@quick
@given(base_time=times, counts=st.lists(st.integers(1, 4096), min_size=1, max_size=8,
                                        unique=True))
def test_constant_time_weak_scaling_is_100_percent(base_time, counts):
    out = scaling_table(runs(nodes=counts, time_s=[base_time] * len(counts)), mode="weak")
    assert out["efficiency_pct"].tolist() == pytest.approx([100] * len(counts))


@quick
@given(st.lists(times, min_size=2, max_size=10, unique=True))
def test_speedup_rises_as_time_falls(values):
    falling = sorted(values, reverse=True)
    out = scaling_table(runs(nodes=range(1, len(falling) + 1), time_s=falling))
    assert out["speedup"].is_monotonic_increasing and out["speedup"].is_unique


@quick
@given(st.lists(times, min_size=1, max_size=8), st.sampled_from(["mean", "median", "min"]))
def test_identical_samples_have_zero_overhead_and_no_significance(sample, statistic):
    table = runs(runtime=["native"] * len(sample) + ["apptainer"] * len(sample),
                 time_s=sample * 2)
    row = overhead_table(table, statistic=statistic).iloc[0]
    assert row["overhead_pct"] == 0
    assert row["significant"] is not True
    assert np.isnan(row["p_value"]) or row["p_value"] == pytest.approx(1)
    low, high = row["overhead_ci95_low_pct"], row["overhead_ci95_high_pct"]
    if statistic == "mean" and len(sample) > 1 and not np.isnan(low):  # NaN: unbounded
        assert low <= 0 <= high


@quick
@given(st.lists(times, min_size=2, max_size=6), st.lists(times, min_size=2, max_size=6),
       st.floats(min_value=1e-3, max_value=1e3))
@example(native=[0.75, 0.75], container=[0.75] * 3, scale=1e-3)  # mean(0.00075 x 3) != 0.00075
def test_overhead_does_not_depend_on_the_time_unit(native, container, scale):
    def overhead(factor):
        table = runs(runtime=["native"] * len(native) + ["x"] * len(container),
                     time_s=[t * factor for t in native + container])
        return overhead_table(table).iloc[0]

    plain, scaled = overhead(1), overhead(scale)
    for col in ("overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct", "p_value"):
        assert scaled[col] == pytest.approx(plain[col], rel=1e-6, abs=1e-9, nan_ok=True)


@quick
@given(st.lists(times, min_size=1, max_size=10))
def test_describe_repeats_orders_its_summaries(values):
    row = describe_repeats(runs(time_s=values), []).iloc[0]
    assert row["min"] <= row["median"] <= row["max"]
    assert row["min"] <= row["mean"] * (1 + 1e-12) and row["mean"] <= row["max"] * (1 + 1e-12)
    if len(values) == 1:
        assert np.isnan(row["std"]) and np.isnan(row["ci95_low"]) and np.isnan(row["cv"])
    else:
        assert row["ci95_low"] <= row["mean"] <= row["ci95_high"]


def test_a_time_interval_never_goes_below_zero_and_other_values_keep_theirs():
    """Two repeats of 1.48 and 1.07 s (8 ranks on the H200) gave ci95_low -1.22 s: a size's
    interval is intersected with [0, inf); values that can be negative keep the t-interval."""
    table = runs(runtime="native", time_s=[1.48, 1.07])
    row = describe_repeats(table, []).iloc[0]
    assert row["ci95_low"] == 0.0 and row["ci95_high"] == pytest.approx(1.275 + 12.706 * 0.2899 / 2 ** 0.5, rel=1e-3)
    signed = describe_repeats(runs(runtime="native", time_s=[-0.2, 0.5]), []).iloc[0]
    assert signed["ci95_low"] < -0.2


# --- coverage on synthetic data with a known truth (seeded, so deterministic) ---

TRIALS, REPEATS = 400, 5


def synthetic_trials(native_sd: float, container_mean: float, container_sd: float):
    rng = np.random.default_rng(20190925)
    native = rng.normal(100, native_sd, (TRIALS, REPEATS))
    container = rng.normal(container_mean, container_sd, (TRIALS, REPEATS))
    return runs(
        trial=np.repeat(np.arange(TRIALS), 2 * REPEATS),
        runtime=np.tile(["native"] * REPEATS + ["apptainer"] * REPEATS, TRIALS),
        time_s=np.hstack([native, container]).ravel(),
    )


def test_overhead_ci_covers_the_true_overhead_about_95_percent_of_the_time():
    out = overhead_table(synthetic_trials(5, 110, 8), group_cols=["trial"])
    covered = (out["overhead_ci95_low_pct"] <= 10) & (10 <= out["overhead_ci95_high_pct"])
    assert 0.92 <= covered.mean() <= 0.98


def test_welch_test_is_significant_about_5_percent_of_the_time_when_nothing_differs():
    out = overhead_table(synthetic_trials(5, 100, 8), group_cols=["trial"])
    assert 0.02 <= out["significant"].mean() <= 0.08


def test_mean_ci_covers_the_true_mean_about_95_percent_of_the_time():
    table = synthetic_trials(5, 100, 8)
    out = describe_repeats(table[table["runtime"] == "native"], ["trial"])
    assert 0.92 <= ((out["ci95_low"] <= 100) & (100 <= out["ci95_high"])).mean() <= 0.98
