"""The report's accuracy-parity, achieved-rate and MPI tables (scalesweep.report.tables),
the per-GPU and per-node LLM rates and the MPI columns of the per-run tables, on small
synthetic runs tables: known numbers, the noise rule, missing columns, no native baseline,
n = 1 and empty inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from scalesweep.analyse import collect

from scalesweep.analyse import summary

from scalesweep.platform.site import SiteError, load_site
from scalesweep.report import tables as rt
from scalesweep.report.run_tables import PROVENANCE_COLUMNS, provenance_table

GEOMETRY = dict(nodes=1, gpus=0, ranks=2, threads=1)


def run(runtime, repeat, accuracy=None, loss=None, **extra):
    return {"workload": "cnn", "runtime": runtime, **GEOMETRY, "repeat": repeat,
            "test_accuracy": accuracy, "test_loss": loss, "disturbed": False, **extra}


def runs_of(values: dict[str, list[float]], **extra) -> pd.DataFrame:
    """One run per value; test_loss = 1 - accuracy."""
    return pd.DataFrame([run(runtime, i + 1, a, 1 - a, **extra)
                         for runtime, accs in values.items() for i, a in enumerate(accs)])


def row(table: pd.DataFrame, runtime: str, **where) -> pd.Series:
    mask = table["runtime"] == runtime
    for col, value in where.items():
        mask &= table[col] == value
    assert mask.sum() == 1, table
    return table[mask].iloc[0]


# --- accuracy parity ----------------------------------------------------------------------

def test_parity_difference_and_welch_ci_match_scipy():
    native, container = [0.900, 0.910, 0.905, 0.902], [0.904, 0.899, 0.911]
    table = rt.accuracy_parity_table(runs_of({"native": native, "charliecloud": container}))
    assert list(table.columns) == rt.PARITY_COLUMNS
    assert list(table["runtime"]) == ["native", "charliecloud"]  # native first
    c = row(table, "charliecloud")
    assert (c["n"], c["n_native"]) == (3, 4)
    assert c["test_accuracy_mean"] == pytest.approx(np.mean(container))
    assert c["test_accuracy_std"] == pytest.approx(np.std(container, ddof=1))
    assert c["accuracy_diff"] == pytest.approx(np.mean(container) - np.mean(native))
    ci = stats.ttest_ind(container, native, equal_var=False).confidence_interval(0.95)
    assert (c["accuracy_diff_ci95_low"], c["accuracy_diff_ci95_high"]) == (
        pytest.approx(ci.low), pytest.approx(ci.high))
    # loss = 1 - accuracy: the same interval, mirrored
    assert c["loss_diff_ci95_low"] == pytest.approx(-ci.high)
    assert bool(c["accuracy_within_noise"]) and bool(c["loss_within_noise"])
    assert c["parity"] == "within noise"
    n = row(table, "native")
    assert n["parity"] == "baseline" and pd.isna(n["accuracy_diff"])
    assert n["n"] == 4 and pd.isna(n["accuracy_within_noise"])


def test_parity_outside_noise_when_the_ci_excludes_zero():
    table = rt.accuracy_parity_table(runs_of({"native": [0.90, 0.91, 0.905],
                                              "apptainer": [0.80, 0.81, 0.805]}))
    a = row(table, "apptainer")
    assert a["accuracy_diff"] == pytest.approx(-0.1)
    assert a["accuracy_diff_ci95_high"] < 0
    assert not a["accuracy_within_noise"] and not a["loss_within_noise"]
    assert a["parity"] == "outside noise: accuracy, loss"


def test_parity_ci_including_zero_is_not_enough_beyond_the_native_spread():
    # native barely varies; the container is noisy: its CI includes 0, but its mean is
    # further from native's than the native runs' own standard deviation
    native, container = [0.900, 0.901, 0.902], [0.85, 0.95, 0.91]
    table = rt.accuracy_parity_table(runs_of({"native": native, "singularity": container}))
    s = row(table, "singularity")
    assert s["accuracy_diff_ci95_low"] < 0 < s["accuracy_diff_ci95_high"]
    assert abs(s["accuracy_diff"]) > np.std(native, ddof=1)
    assert not s["accuracy_within_noise"]
    assert s["parity"].startswith("outside noise: accuracy")


def test_parity_identical_deterministic_runs():
    same = rt.accuracy_parity_table(runs_of({"native": [0.9] * 3, "charliecloud": [0.9] * 3}))
    c = row(same, "charliecloud")
    assert c["accuracy_diff"] == 0 and c["accuracy_diff_ci95_low"] == 0
    assert c["parity"] == "within noise"
    # no native spread at all: any difference is outside it
    off = rt.accuracy_parity_table(runs_of({"native": [0.9] * 3,
                                            "charliecloud": [0.9001] * 3}))
    assert row(off, "charliecloud")["parity"] == "outside noise: accuracy, loss"


def test_parity_no_native_baseline_keeps_the_runtime_and_says_so():
    table = rt.accuracy_parity_table(runs_of({"charliecloud": [0.9, 0.91]}))
    c = row(table, "charliecloud")
    assert c["parity"] == "no native run at this geometry" and c["n_native"] == 0
    assert c["n"] == 2 and c["test_accuracy_mean"] == pytest.approx(0.905)
    assert pd.isna(c["accuracy_diff"]) and pd.isna(c["accuracy_within_noise"])


def test_parity_is_per_geometry_never_across_geometries():
    runs = pd.concat([
        runs_of({"native": [0.90, 0.91], "charliecloud": [0.90, 0.91]}),
        runs_of({"charliecloud": [0.5, 0.51]}).assign(ranks=4),
    ], ignore_index=True)
    table = rt.accuracy_parity_table(runs)
    assert row(table, "charliecloud", ranks=2)["parity"] == "within noise"
    assert row(table, "charliecloud", ranks=4)["parity"] == "no native run at this geometry"


def test_parity_n1_is_undetermined_with_a_note():
    table = rt.accuracy_parity_table(runs_of({"native": [0.90, 0.91], "charliecloud": [0.9]}))
    c = row(table, "charliecloud")
    assert c["n"] == 1 and pd.isna(c["test_accuracy_std"])
    assert c["accuracy_diff"] == pytest.approx(-0.005)
    assert pd.isna(c["accuracy_diff_ci95_low"]) and pd.isna(c["accuracy_within_noise"])
    assert c["parity"] == "undetermined" and "native 2, charliecloud 1" in c["note"]


def test_parity_skips_runs_without_test_accuracy_and_leaves_disturbed_out():
    runs = runs_of({"native": [0.90, 0.91, 0.905], "charliecloud": [0.90, 0.91]})
    disturbed = pd.DataFrame([run("native", 4, 0.1, 0.9)]).assign(disturbed=True)
    older = pd.DataFrame([run("charliecloud", 9, 0.2, 0.8)])
    runs = pd.concat([runs, disturbed, older], ignore_index=True)
    runs.loc[runs["repeat"] == 9, ["test_accuracy", "test_loss"]] = np.nan  # run before them
    table = rt.accuracy_parity_table(runs)
    n, c = row(table, "native"), row(table, "charliecloud")
    assert (n["n"], n["n_disturbed"], c["n"]) == (3, 1, 2)
    assert n["test_accuracy_mean"] == pytest.approx(0.905)  # the disturbed 0.1 not in it
    assert c["parity"] == "within noise"


def test_parity_without_test_loss_decides_on_accuracy():
    runs = runs_of({"native": [0.90, 0.91], "charliecloud": [0.90, 0.91]}).drop(
        columns="test_loss")
    c = row(rt.accuracy_parity_table(runs), "charliecloud")
    assert c["parity"] == "within noise" and pd.isna(c["loss_diff"])
    one = rt.accuracy_parity_table(runs[runs["repeat"] == 1])  # n = 1: no CI to decide on
    assert row(one, "charliecloud")["parity"] == "undetermined"


def test_parity_empty_or_training_accuracy_only_gives_a_note_not_a_crash():
    training_only = runs_of({"native": [0.9, 0.9]}).drop(columns=["test_accuracy", "test_loss"])
    training_only["final_accuracy"] = 0.99
    never = runs_of({"native": [0.9]}).assign(test_accuracy=np.nan)
    for runs in (training_only, never, pd.DataFrame(), pd.DataFrame(columns=collect.RUN_COLUMNS)):
        table = rt.accuracy_parity_table(runs)
        assert list(table.columns) == rt.PARITY_COLUMNS and len(table) == 1
        assert table["note"].iloc[0] == rt.NO_TEST_ACCURACY
        assert "training-set accuracy" in table["note"].iloc[0]
        assert pd.isna(table["runtime"].iloc[0])


def test_parity_from_a_runs_csv_round_trip(tmp_path):
    runs = runs_of({"native": [0.90, 0.91, 0.905], "native-aa": [0.903, 0.907, 0.902]})
    runs.loc[0, "disturbed"] = True
    runs.to_csv(tmp_path / "runs.csv", index=False)
    table = rt.accuracy_parity_table(pd.read_csv(tmp_path / "runs.csv"))
    table.to_csv(tmp_path / "parity.csv", index=False)
    again = pd.read_csv(tmp_path / "parity.csv")
    aa = row(again, "native-aa")
    assert row(again, "native")["n_disturbed"] == 1 and aa["n_native"] == 2
    assert aa["parity"] == "within noise" and aa["accuracy_within_noise"]


# --- achieved rate -------------------------------------------------------------------------

def rate_runs(geometry: dict, rates=(10.0, 11.0, 12.0), runtime="native", **extra):
    return pd.DataFrame([{"workload": "cnn", "runtime": runtime, **geometry, "repeat": i + 1,
                          "achieved_gflops_per_rank": r, "flops_per_step": 2e9,
                          "parallel": "ddp", "disturbed": False, **extra}
                         for i, r in enumerate(rates)])


def test_rate_percent_of_a_gpu_peak_uses_gpus_per_rank():
    ddp = rate_runs(dict(nodes=2, gpus=4, ranks=4, threads=7))
    dp = rate_runs(dict(nodes=1, gpus=4, ranks=1, threads=7), rates=(40.0, 44.0, 48.0),
                   parallel="dp")
    table = rt.achieved_rate_table(pd.concat([ddp, dp]), peak_gflops_per_device=100.0,
                                   peak_of="gpu")
    assert list(table.columns) == rt.RATE_COLUMNS
    d = row(table, "native", ranks=4)
    assert (d["n"], d["flops_per_step"], d["devices_per_rank"]) == (3, 2e9, 1.0)
    # a rate: total work over total time (harmonic mean), never the mean of the rates (11)
    hm = 3 / (1 / 10 + 1 / 11 + 1 / 12)
    assert d["gflops_per_rank_mean"] == pytest.approx(hm) and d["gflops_per_rank_std"] == 1
    inv = np.array([1 / 10, 1 / 11, 1 / 12])
    half = stats.t.ppf(0.975, 2) * inv.std(ddof=1) / math.sqrt(3)
    assert d["gflops_per_rank_ci95_low"] == pytest.approx(1 / (inv.mean() + half))
    assert d["pct_of_peak_mean"] == pytest.approx(hm) and d["pct_of_peak_std"] == 1
    p = row(table, "native", ranks=1)
    assert p["devices_per_rank"] == 4 and p["parallel"] == "dp"
    assert p["pct_of_peak_mean"] == pytest.approx(3 / (1 / 40 + 1 / 44 + 1 / 48) / 400 * 100)


def test_rate_percent_of_a_core_peak_uses_threads():
    table = rt.achieved_rate_table(rate_runs(dict(nodes=1, gpus=0, ranks=2, threads=4)),
                                   **rt.node_peak({"gpus": 0, "peak_gflops_per_device": 5}))
    r = table.iloc[0]
    assert r["devices_per_rank"] == 4 and r["peak_gflops_per_device"] == 5
    assert r["pct_of_peak_mean"] == pytest.approx(3 / (1 / 10 + 1 / 11 + 1 / 12) / 20 * 100)


def test_rate_no_peak_or_a_peak_of_something_else_gives_no_percent():
    cpu = rate_runs(dict(nodes=1, gpus=0, ranks=2, threads=4))
    gpu = rate_runs(dict(nodes=1, gpus=2, ranks=2, threads=4))
    unknown = rt.achieved_rate_table(cpu).iloc[0]
    assert pd.isna(unknown["pct_of_peak_mean"]) and pd.isna(unknown["peak_gflops_per_device"])
    assert rt.NO_PEAK in unknown["note"]
    assert unknown["gflops_per_rank_mean"] == pytest.approx(3 / (1 / 10 + 1 / 11 + 1 / 12))
    # a GPU site's peak says nothing of a CPU-only point, nor of a CNN trained on the CPU
    on_gpu_site = rt.node_peak({"gpus": 8, "peak_gflops_per_device": 20000})
    assert on_gpu_site == {"peak_gflops_per_device": 20000.0, "peak_of": "gpu",
                           "trains_on_cpu": False, "tensor_peaks": {}}
    c = rt.achieved_rate_table(cpu, **on_gpu_site).iloc[0]
    assert pd.isna(c["pct_of_peak_mean"]) and "one GPU's" in c["note"]
    standin = rt.node_peak({"gpus": 8, "peak_gflops_per_device": 20000,
                            "payload_device": "cpu"})
    g = rt.achieved_rate_table(gpu, **standin).iloc[0]
    assert pd.isna(g["pct_of_peak_mean"]) and "the CPU" in g["note"]
    assert rt.achieved_rate_table(gpu, **on_gpu_site).iloc[0]["pct_of_peak_mean"] == \
        pytest.approx(3 / (1 / 10 + 1 / 11 + 1 / 12) / 20000 * 100)
    # a core's peak says nothing of a point that computed on GPUs
    cores = rt.achieved_rate_table(gpu, peak_gflops_per_device=50.0, peak_of="core").iloc[0]
    assert pd.isna(cores["pct_of_peak_mean"]) and "one core's" in cores["note"]


def test_rate_in_a_reduced_precision_is_held_to_that_precisions_peak():
    """On an H200 (issue #32) TF32 training reached 67 TFLOP/s: "100.7% of peak" against the
    FP32 peak, 13.6% of the TF32 tensor-core peak. Each precision is held to its own peak."""
    geometry = dict(nodes=1, gpus=1, ranks=1, threads=4)
    runs = pd.concat([rate_runs(geometry, rates=(100.0, 100.0, 100.0), precision="fp32"),
                      rate_runs(geometry, rates=(400.0, 400.0, 400.0), precision="bf16"),
                      rate_runs(geometry, rates=(300.0, 300.0, 300.0), precision="tf32")])
    peak = rt.node_peak({"gpus": 1, "peak_gflops_per_device": 200,
                         "peak_gflops_tensor": {"bf16": 1600}})
    table = rt.achieved_rate_table(runs, **peak).set_index("precision")
    assert table.loc["fp32", "pct_of_peak_mean"] == pytest.approx(50.0)
    assert table.loc["bf16", "pct_of_peak_mean"] == pytest.approx(25.0)
    assert table.loc["bf16", "peak_gflops_per_device"] == 1600
    assert pd.isna(table.loc["tf32", "pct_of_peak_mean"])
    assert "no tf32 peak declared" in table.loc["tf32", "note"]
    # the percent carries the rate's 95% CI
    noisy = rt.achieved_rate_table(rate_runs(geometry, precision="fp32"), **peak).iloc[0]
    assert noisy["pct_of_peak_ci95_low"] < noisy["pct_of_peak_mean"] < noisy["pct_of_peak_ci95_high"]
    assert noisy["pct_of_peak_ci95_low"] == pytest.approx(noisy["gflops_per_rank_ci95_low"] / 2)


def test_rate_n1_disturbed_and_differing_flops():
    runs = pd.concat([rate_runs(GEOMETRY, rates=(10.0,)),
                      rate_runs(GEOMETRY, rates=(1.0,), disturbed=True),
                      rate_runs(GEOMETRY, rates=(9.0, 9.5, 9.0), runtime="charliecloud")
                      .assign(flops_per_step=[2e9, 3e9, 2e9])], ignore_index=True)
    table = rt.achieved_rate_table(runs, peak_gflops_per_device=10.0, peak_of="core")
    n = row(table, "native")
    assert (n["n"], n["n_disturbed"], n["gflops_per_rank_mean"]) == (1, 1, 10.0)
    assert pd.isna(n["gflops_per_rank_std"]) and pd.isna(n["pct_of_peak_std"])
    assert "n=1" in n["note"] and n["pct_of_peak_mean"] == pytest.approx(100.0)
    c = row(table, "charliecloud")
    assert c["flops_per_step"] == 2e9 and "differs" in c["note"]  # the median


def test_rate_without_the_columns_or_values_says_so():
    no_column = rate_runs(GEOMETRY).drop(columns="achieved_gflops_per_rank")
    nan = rate_runs(GEOMETRY).assign(achieved_gflops_per_rank=np.nan)
    llm_only = pd.DataFrame([{"workload": "llm", "runtime": "native", **GEOMETRY,
                              "tokens_per_s": 5.0}])
    for runs in (no_column, nan, llm_only, pd.DataFrame()):
        table = rt.achieved_rate_table(runs, peak_gflops_per_device=1.0)
        assert len(table) == 1 and table["note"].iloc[0] == rt.NO_FLOPS


def test_site_schema_peak_key(tmp_path):
    assert load_site("local")["node"]["peak_gflops_per_device"] == 0
    site = tmp_path / "gpu.yaml"
    site.write_text(yaml.safe_dump({"name": "gpu", "extends": "local",
                                    "node": {"gpus": 4, "peak_gflops_per_device": 19.5}}))
    node = load_site(str(site))["node"]
    assert rt.node_peak(node) == {"peak_gflops_per_device": 19.5, "peak_of": "gpu",
                                  "trains_on_cpu": False, "tensor_peaks": {}}
    site.write_text(yaml.safe_dump({"name": "gpu", "extends": "local",
                                    "node": {"gpus": 1, "peak_gflops_tensor": {"bf16": 9.5}}}))
    assert rt.node_peak(load_site(str(site))["node"])["tensor_peaks"] == {"bf16": 9.5}
    site.write_text(yaml.safe_dump({"name": "gpu", "extends": "local",
                                    "node": {"peak_gflops_tensor": {"fp8": 1}}}))
    with pytest.raises(SiteError, match="fp8"):
        load_site(str(site))
    site.write_text(yaml.safe_dump({"name": "gpu", "extends": "local",
                                    "node": {"peak_gflops_per_device": -1}}))
    with pytest.raises(SiteError, match="peak_gflops_per_device"):
        load_site(str(site))


# --- MPI -------------------------------------------------------------------------------

def mpi_runs(runtime, origin, library, allreduce=(0.2, 0.3), times=(2.0, 2.2), **extra):
    return pd.DataFrame([{"workload": "cnn_mpi", "runtime": runtime, **GEOMETRY,
                          "repeat": i + 1, "parallel": "mpi", "mpi_origin": origin,
                          "mpi_library": library, "mpi_library_version": "MPICH 4.2",
                          "allreduce_s": a, "time_s": t, "disturbed": False, **extra}
                         for i, (a, t) in enumerate(zip(allreduce, times))])


def test_mpi_table_names_the_library_each_runtime_loaded():
    runs = pd.concat([
        mpi_runs("native", "host", "/usr/lib/libmpich.so.12"),
        mpi_runs("apptainer", "container", "/opt/mpich/lib/libmpi.so.12",
                 allreduce=(0.4, 0.6), times=(2.5, 2.7)),
        mpi_runs("apptainer-hostmpi", "host", "/usr/lib/libmpich.so.12"),
        # a DDP run: no MPI library, not in the table
        pd.DataFrame([{"workload": "cnn_ddp", "runtime": "native", **GEOMETRY, "repeat": 1,
                       "parallel": "ddp", "mpi_library": np.nan, "time_s": 1.0}]),
    ], ignore_index=True)
    table = rt.mpi_table(runs)
    assert list(table.columns) == rt.MPI_COLUMNS
    assert set(table["workload"]) == {"cnn_mpi"} and table["runtime"].iloc[0] == "native"
    a = row(table, "apptainer")
    assert (a["mpi_origin"], a["mpi_library"], a["n"]) == (
        "container", "/opt/mpich/lib/libmpi.so.12", 2)
    assert a["allreduce_s_mean"] == pytest.approx(0.5)
    assert a["allreduce_s_std"] == pytest.approx(np.std([0.4, 0.6], ddof=1))
    assert a["time_s_mean"] == pytest.approx(2.6)
    assert a["allreduce_pct_of_epoch"] == pytest.approx(0.5 / 2.6 * 100)
    assert row(table, "apptainer-hostmpi")["mpi_origin"] == "host"
    assert (table["note"] == "").all()


def test_mpi_table_separates_libraries_and_flags_mixed():
    runs = pd.concat([
        mpi_runs("apptainer-hostmpi", "host", "/host/libmpi.so.12", allreduce=(0.2,),
                 times=(2.0,)),
        mpi_runs("apptainer-hostmpi", "mixed", "/host/libmpi.so.12", allreduce=(0.2,),
                 times=(2.0,)).assign(repeat=2),
    ], ignore_index=True)
    table = rt.mpi_table(runs)
    assert len(table) == 2 and set(table["mpi_origin"]) == {"host", "mixed"}
    mixed = row(table, "apptainer-hostmpi", mpi_origin="mixed")
    assert "ranks loaded different MPI libraries" in mixed["note"]
    assert all("runs of this runtime and geometry loaded different" in n
               for n in table["note"])
    assert all("n=1" in n for n in table["note"]) and table["allreduce_s_std"].isna().all()


def test_mpi_table_disturbed_missing_allreduce_and_empty_inputs():
    runs = mpi_runs("native", "host", "/usr/lib/libmpich.so.12", allreduce=(0.2, np.nan, 0.9),
                    times=(2.0, 2.2, 9.0))
    runs.loc[2, "disturbed"] = True
    r = rt.mpi_table(runs.drop(columns="mpi_library_version")).iloc[0]
    assert (r["n"], r["n_disturbed"], r["n_allreduce"]) == (2, 1, 1)
    assert r["allreduce_s_mean"] == pytest.approx(0.2) and r["time_s_mean"] == pytest.approx(2.1)
    assert r["mpi_library_version"] == ""
    no_mpi = runs.assign(mpi_library=np.nan)
    for empty in (no_mpi, runs.drop(columns="mpi_library"), pd.DataFrame()):
        table = rt.mpi_table(empty)
        assert len(table) == 1 and table["note"].iloc[0] == rt.NO_MPI


# --- run_row to tables, per-run tables, LLM per GPU/node --------------------------------

def cnn_metrics(runtime, repeat, accuracy, mpi=None):
    return {"point": dict(workload="cnn", runtime=runtime, **GEOMETRY, repeat=repeat),
            "epoch_s": [3.0, 2.0, 2.0], "train_s": 7.0, "final_loss": 0.1,
            "final_accuracy": 0.99, "test_accuracy": accuracy, "test_loss": 1 - accuracy,
            "flops_per_step": 1e9, "steps_per_epoch": 40, "parallel": "mpi",
            "mpi": mpi, "allreduce_s": [0.5, 0.25, 0.25]}


def test_tables_from_run_rows():
    host = {"library": "/usr/lib/libmpich.so.12", "library_version": "MPICH 4.2",
            "vendor": "MPICH", "origin": "host", "ranks": []}
    rows = [collect.run_row(cnn_metrics("native", k, a, host), f"n{k}", "cnn")
            for k, a in ((1, 0.90), (2, 0.91))]
    rows += [collect.run_row(cnn_metrics("charliecloud", k, a, {**host, "origin": "container"}),
                             f"c{k}", "cnn") for k, a in ((1, 0.905), (2, 0.906))]
    runs = pd.DataFrame(rows)
    parity = rt.accuracy_parity_table(runs)
    assert row(parity, "charliecloud")["parity"] == "within noise"
    rate = rt.achieved_rate_table(runs, peak_gflops_per_device=40.0, peak_of="core")
    assert row(rate, "native")["gflops_per_rank_mean"] == pytest.approx(1e9 * 40 / 2.0 / 1e9)
    assert row(rate, "native")["pct_of_peak_mean"] == pytest.approx(20 / 40 * 100)
    mpi = rt.mpi_table(runs)
    assert list(mpi["mpi_origin"]) == ["host", "container"]
    assert row(mpi, "native")["allreduce_s_mean"] == pytest.approx(0.25)


def test_provenance_shows_the_mpi_library_where_present():
    host = {"library": "/usr/lib/libmpich.so.12", "library_version": "MPICH 4.2",
            "origin": "host"}
    with_mpi = cnn_metrics("native", 1, 0.9, host)
    without = {"point": dict(workload="cnn", runtime="native", **GEOMETRY, repeat=2)}
    table = provenance_table([("a.json", with_mpi), ("b.json", without)])
    assert list(table.columns) == PROVENANCE_COLUMNS
    assert {"mpi_origin", "mpi_library", "mpi_library_version"} <= set(collect.RUN_COLUMNS)
    a, b = table.iloc[0], table.iloc[1]
    assert (a["mpi_origin"], a["mpi_library"], a["mpi_library_version"], a["parallel"]) == (
        "host", "/usr/lib/libmpich.so.12", "MPICH 4.2", "mpi")
    assert pd.isna(b["mpi_origin"]) and pd.isna(b["mpi_library"])


def test_llm_summary_tokens_per_gpu_and_per_node():
    rows = []
    for nodes, gpus in ((2, 4), (1, 0)):
        for rep, tokens in enumerate((80.0, 88.0, 96.0), start=1):
            rows.append(collect.run_row({
                "point": dict(workload="llm", runtime="native", nodes=nodes, gpus=gpus,
                              ranks=1, threads=2, repeat=rep),
                "wall_s": 10.0 + rep, "tokens_per_s": tokens, "model": {"name": "m"}},
                f"{nodes}{gpus}{rep}", "llm"))
    table = summary.llm_summary(pd.DataFrame(rows))
    gpu = table[table["gpus"] == 4].iloc[0]
    hm = 3 / (1 / 80 + 1 / 88 + 1 / 96)  # total tokens over total time
    assert gpu["tokens_per_s"] == pytest.approx(hm)
    assert gpu["tokens_per_s_per_gpu"] == pytest.approx(hm / 8)
    assert gpu["tokens_per_s_per_node"] == pytest.approx(hm / 2)
    assert gpu["tokens_per_s_per_gpu_ci95_low"] == pytest.approx(gpu["tokens_per_s_ci95_low"] / 8)
    assert gpu["tokens_per_s_per_node_ci95_high"] == pytest.approx(
        gpu["tokens_per_s_ci95_high"] / 2)
    cpu = table[table["gpus"] == 0].iloc[0]
    assert pd.isna(cpu["tokens_per_s_per_gpu"])
    assert cpu["tokens_per_s_per_node"] == pytest.approx(3 / (1 / 80 + 1 / 88 + 1 / 96))
