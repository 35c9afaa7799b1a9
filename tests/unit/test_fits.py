"""Scaling-law fits: known parameters recovered, refusals, the LRZ hold-out validation,
``scalesweep fit``, and the fits rule of the workflow."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import scalesweep_cli

from scalesweep.analyse import fits
from scalesweep.analyse.frame import TableError
from scalesweep.report.fit_figure import fit_figure
from scalesweep.analyse.scaling import scaling_table

PUBLISHED = Path(__file__).parents[1] / "data" / "published"
BOOT = 200  # resamples in tests: enough for a stable 95% interval, quick on 2 cores


def series(model, params, counts, repeats=1, noise=0.0, seed=0, count_col="nodes"):
    rng = np.random.default_rng(seed)
    rows = []
    for count in counts:
        true = fits.model_time(model, params, [count])[0]
        for _ in range(repeats):
            rows.append({count_col: count, "time_s": true * np.exp(rng.normal(0, noise))})
    return pd.DataFrame(rows)


def lrz() -> pd.DataFrame:
    return pd.read_csv(PUBLISHED / "sng_3dgan_1rank.csv")


# --- known parameters ---------------------------------------------------------------------

@pytest.mark.parametrize("model,params", [("amdahl", [120.0, 0.04]),
                                          ("usl", [80.0, 0.03, 0.0008])])
def test_exact_data_gives_exact_parameters(model, params):
    fit = fits.fit_series(series(model, params, [1, 2, 4, 8, 16, 32]), model, n_boot=20)
    assert fit.status == "ok" and fit.bootstrap == "residuals"
    names = fits.MODELS[model]
    for name, value in zip(names, params):
        assert fit.params[name] == pytest.approx(value, rel=1e-5, abs=1e-9)
    assert fit.r2_log == pytest.approx(1.0)
    assert fit.rmse_log < 1e-6


def test_amdahl_recovered_from_noisy_repeats():
    data = series("amdahl", [200.0, 0.03], [1, 2, 4, 8, 16, 32], repeats=5, noise=0.03, seed=1)
    fit = fits.fit_series(data, "amdahl", n_boot=BOOT, seed=3)
    assert fit.status == "ok" and fit.bootstrap == "repeats" and fit.n_boot == BOOT
    assert fit.params["t1_s"] == pytest.approx(200, rel=0.03)
    assert fit.params["serial_fraction"] == pytest.approx(0.03, abs=0.005)
    low, high = fit.ci95["serial_fraction"]
    assert low < 0.03 < high and high - low < 0.01
    low, high = fit.ci95["t1_s"]
    assert low < 200 < high


def test_usl_recovered_and_beats_amdahl_on_retrograde_data():
    truth = {"t1_s": 100.0, "sigma": 0.02, "kappa": 0.0005}
    data = series("usl", list(truth.values()), [1, 2, 4, 8, 16, 32, 64], repeats=4,
                  noise=0.02, seed=7)
    usl = fits.fit_series(data, "usl", n_boot=BOOT)
    amdahl = fits.fit_series(data, "amdahl", n_boot=BOOT)
    assert usl.status == "ok"
    assert usl.params["t1_s"] == pytest.approx(100, rel=0.02)
    assert usl.params["sigma"] == pytest.approx(0.02, abs=0.005)
    assert usl.params["kappa"] == pytest.approx(0.0005, rel=0.2)
    for name, value in truth.items():
        low, high = usl.ci95[name]
        assert low <= value <= high, name
    # Amdahl cannot bend back up: it misses the retrograde end by far more
    assert amdahl.lack_of_fit_log > 5 * usl.lack_of_fit_log


def test_usl_with_kappa_zero_is_amdahl():
    n = np.array([1, 3, 10, 50])
    assert np.allclose(fits.model_time("usl", [50, 0.1, 0.0], n),
                       fits.model_time("amdahl", [50, 0.1], n))


def test_bootstrap_is_seeded():
    data = series("amdahl", [100.0, 0.05], [2, 4, 8, 16], noise=0.05, seed=2)
    one = fits.fit_series(data, "amdahl", n_boot=100, seed=11)
    two = fits.fit_series(data, "amdahl", n_boot=100, seed=11)
    other = fits.fit_series(data, "amdahl", n_boot=100, seed=12)
    assert one.ci95 == two.ci95
    assert one.ci95 != other.ci95
    assert one.params == other.params  # the estimate itself is not random


# --- predictions --------------------------------------------------------------------------

def test_predicted_efficiency_is_the_scaling_tables():
    data = series("amdahl", [100.0, 0.02], [2, 4, 8, 16], repeats=3, noise=0.01, seed=4)
    fit = fits.fit_series(data, "amdahl", n_boot=BOOT)
    table = scaling_table(data, "nodes")
    predicted = fits.predict(fit, [2, 16, 64])
    base = table["time_s"].iloc[0]
    assert fit.baseline_count == 2 and fit.baseline_time_s == pytest.approx(base)
    for _, row in predicted.iterrows():
        assert row["efficiency_pct"] == pytest.approx(base * 2 / (row["count"] * row["time_s"])
                                                      * 100)
        assert row["time_ci95_low"] <= row["time_s"] <= row["time_ci95_high"]
        assert row["efficiency_ci95_low_pct"] <= row["efficiency_pct"] \
            <= row["efficiency_ci95_high_pct"]
    assert predicted["measured"].tolist() == [True, True, False]
    assert predicted["extrapolation_factor"].tolist() == [0.125, 1.0, 4.0]
    line = fits.describe_prediction(predicted.iloc[2])
    assert line.startswith("at 64 nodes: efficiency ") and "% +- " in line and "95% CI" in line


def test_explicit_baseline_moves_the_efficiency_not_the_fit():
    data = series("amdahl", [100.0, 0.02], [2, 4, 8, 16])
    default = fits.fit_series(data, "amdahl", n_boot=0)
    at_four = fits.fit_series(data, "amdahl", baseline=4, n_boot=0)
    assert at_four.params == pytest.approx(default.params)
    assert at_four.baseline_count == 4
    with pytest.raises(TableError, match="baseline nodes=3 is not in the series"):
        fits.fit_series(data, "amdahl", baseline=3)


# --- refusals -----------------------------------------------------------------------------

def test_too_few_counts_are_not_fitted():
    two = series("amdahl", [10.0, 0.1], [1, 2], repeats=3, noise=0.01)
    for model in fits.MODELS:
        fit = fits.fit_series(two, model)
        assert fit.status == "too_few_points" and not fit.fitted and not fit.can_predict
        assert fit.reason.startswith("too few points to fit: 2 distinct nodes (1, 2)")
        out = fits.predict(fit, [4])
        assert out["time_s"].isna().all() and out["note"].iloc[0] == fit.reason
    three = series("amdahl", [10.0, 0.1], [1, 2, 4])
    assert fits.fit_series(three, "amdahl", n_boot=10).status == "ok"
    usl = fits.fit_series(three, "usl")
    assert usl.status == "too_few_points" and "needs at least 4" in usl.reason


def test_poor_fit_refuses_to_predict_and_says_why():
    zigzag = pd.DataFrame({"nodes": [1, 2, 4, 8, 16], "time_s": [10, 5.2, 7, 2, 4]})
    for model in fits.MODELS:
        fit = fits.fit_series(zigzag, model, n_boot=20)
        assert fit.status == "poor_fit" and fit.fitted and not fit.can_predict
        assert fit.reason.startswith("poor fit, no predictions:")
        assert fit.lack_of_fit_log > fits.MAX_LACK_OF_FIT_LOG
        out = fits.predict(fit, [32])
        assert out["time_s"].isna().all() and "poor fit" in out["note"].iloc[0]
        assert len(fit.residuals) == 5  # the residuals are still there to look at


@pytest.mark.parametrize("rows,message", [
    ({"nodes": [1, 2], "time_s": [1, 0]}, "time_s must be a positive number"),
    ({"nodes": [1, 2.5], "time_s": [1, 1]}, "nodes must be a positive whole number"),
    ({"gpus": [1, 2], "time_s": [1, 1]}, "missing column nodes"),
])
def test_bad_tables_are_refused(rows, message):
    with pytest.raises(TableError, match=message):
        fits.fit_series(pd.DataFrame(rows), "amdahl")


def test_unknown_model_is_refused():
    with pytest.raises(TableError, match="model must be one of amdahl, usl"):
        fits.fit_series(series("amdahl", [1, 0.1], [1, 2, 4]), "gustafson")


# --- the LRZ validation ---------------------------------------------------------------------

# Fitted on 4..32 nodes (single runs: residual bootstrap), predicted at 64..512: the
# point predictions are deterministic (the bootstrap only widens them), so pinned here.
LRZ_TIME_ERROR_PCT = {64: 7.23, 128: 23.39, 256: 53.87, 512: 94.83}


@pytest.mark.parametrize("model", list(fits.MODELS))
def test_lrz_first_half_predicts_the_second_half(model):
    fit, table = fits.holdout_errors(lrz(), train_max=32, model=model, n_boot=BOOT)
    print(f"\nLRZ 3DGAN, {model} fitted on 4-32 nodes: {fit.params}")
    print(table[["count", "time_s", "time_ci95_low", "time_ci95_high", "measured_time_s",
                 "time_error_pct", "efficiency_pct", "measured_efficiency_pct",
                 "efficiency_error_pts", "within_ci"]].round(2).to_string(index=False))
    assert fit.status == "ok" and fit.bootstrap == "residuals"
    assert table["count"].tolist() == [64, 128, 256, 512]
    assert table["time_error_pct"].notna().all() and table["efficiency_error_pts"].notna().all()
    # the error is what it is: the first half's 94-95% efficiency reads as a serial
    # fraction of ~0.2%, the second half recovers to 96-97% (a law cannot)
    assert table.set_index("count")["time_error_pct"].round(2).to_dict() == \
        pytest.approx(LRZ_TIME_ERROR_PCT, abs=0.05)
    assert fit.params["t1_s"] == pytest.approx(15174.8, rel=1e-4)
    assert fit.params["serial_fraction" if model == "amdahl" else "sigma"] == \
        pytest.approx(0.002288, rel=1e-3)


def test_lrz_whole_series_fits_well():
    fit = fits.fit_series(lrz(), "amdahl", n_boot=BOOT)
    assert fit.status == "ok" and fit.r2_log > 0.999 and fit.rmse_log < 0.03
    assert fit.params["serial_fraction"] == pytest.approx(0.00013, rel=0.01)
    row = fits.predict(fit, [256]).iloc[0]
    assert row["efficiency_pct"] == pytest.approx(94.2, abs=0.5)  # measured: 97.5


# --- figure ---------------------------------------------------------------------------------

def test_figure_for_fitted_and_too_short_series(tmp_path):
    data = series("amdahl", [100.0, 0.05], [1, 2, 4, 8], repeats=2, noise=0.02, count_col="count")
    good = [fits.fit_series(data, m, "count", n_boot=30) for m in fits.MODELS]
    short = data[data["count"] <= 2]
    few = [fits.fit_series(short, m, "count") for m in fits.MODELS]
    fig = fit_figure([("native", data, good), ("container", short, few)], "count",
                          title="t")
    fig.savefig(tmp_path / "fit.png", dpi=60)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("container: too few points to fit (2 count: 1, 2" in t for t in texts)
    assert any(t.endswith("%") for t in texts)  # predicted efficiencies are annotated
    assert (tmp_path / "fit.png").stat().st_size > 5_000


# --- scalesweep fit -------------------------------------------------------------------------

def scalesweep(*args) -> subprocess.CompletedProcess:
    return scalesweep_cli(*args)  # in this process (tests/conftest.py)


def test_fit_command_prints_parameters_quality_and_predictions():
    out = scalesweep("fit", PUBLISHED / "sng_3dgan_1rank.csv", "--model", "amdahl",
                     "--predict", "256,1024", "--bootstrap", "100")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "== the table: nodes 4, 8, 16, 32, 64, 128, 256, 512" in text
    assert "serial fraction s = 0.0001302  (95% CI " in text
    assert "fit: R^2(log) 0.9998" in text and "bootstrap over residuals, 100 resamples" in text
    assert "at 256 nodes: efficiency 94% +- " in text and "(measured)" in text
    assert "at 1024 nodes: efficiency " in text and "(extrapolated 2x)" in text
    assert "ignored numeric column(s) linear_time_s, efficiency_pct" in out.stderr


def test_fit_command_groups_and_refuses(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("task,nodes,time_s\ntrain,1,10\ntrain,2,5.5\n"
                    "infer,1,10\ninfer,2,5.2\ninfer,4,7\ninfer,8,3\n")
    out = scalesweep("fit", path, "--predict", "16", "--bootstrap", "20")
    assert out.returncode == 0, out.stderr
    assert "== task=train: nodes 1, 2" in out.stdout
    assert "not fitted: too few points to fit: 2 distinct nodes (1, 2)" in out.stdout
    assert "poor fit, no predictions: R^2 of log(time)" in out.stdout
    assert "at 16 nodes" not in out.stdout
    csv = scalesweep("fit", path, "--predict", "16", "--bootstrap", "20", "--csv")
    table = pd.read_csv(io.StringIO(csv.stdout))
    assert table[["task", "model", "status"]].values.tolist() == [
        ["train", "amdahl", "too_few_points"], ["train", "usl", "too_few_points"],
        ["infer", "amdahl", "poor_fit"], ["infer", "usl", "poor_fit"]]
    assert "time_s_at_16" in table and table["time_s_at_16"].isna().all()


@pytest.mark.parametrize("args,message", [
    (["missing.csv"], "missing.csv: no such file"),
    (["{bad}"], "time_s must be a positive number; line 3 has '-1'"),
    (["{bad}", "--count-col", "gpus"], "missing column gpus"),
])
def test_fit_command_bad_input_exits_2(tmp_path, args, message):
    bad = tmp_path / "bad.csv"
    bad.write_text("nodes,time_s\n1,10\n2,-1\n")
    out = scalesweep("fit", *[a.replace("{bad}", str(bad)) for a in args])
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


# --- the workflow's fits rule ------------------------------------------------------------------


def test_flat_series_is_a_perfect_serial_fit():
    flat = pd.DataFrame({"nodes": [1, 2, 4, 8], "time_s": [5.0] * 4})
    fit = fits.fit_series(flat, "amdahl", n_boot=10)
    assert fit.status == "ok" and fit.r2_log == 1.0
    assert fit.params["serial_fraction"] == pytest.approx(1, abs=1e-6)
    assert fits.predict(fit, [16])["time_s"].iloc[0] == pytest.approx(5)
