"""``scalesweep compare``: synthetic campaigns with known changes, and two real tiny ones."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import scalesweep_cli, REPO
from scalesweep.campaign import compare
from scalesweep.plan.sweep import SweepPoint
from scalesweep.record.metrics import write_metrics


def point(nodes=1, ranks=1, repeat=1, workload="cnn_ddp", runtime="native", gpus=0):
    return SweepPoint(workload, runtime, nodes, gpus, ranks, 1, repeat)


def write_run(campaign: Path, p: SweepPoint, seconds: float, model: str | None = None,
              synthetic: bool = False) -> None:
    """A finished point's metrics.json: CNN (steady epoch time = seconds) or LLM (wall;
    ``model``: the model's name, if any)."""
    record = {"point": p.as_dict(), "harness_wall_s": 3 * seconds + 2, "ranks": p.ranks,
              "launcher": "local", "versions": {"torch": "2.13.0"}}
    if p.workload.startswith("llm"):
        record.update(wall_s=seconds, tokens_per_s=100 / seconds, requests_per_s=8 / seconds,
                      ttft_s={"n": 8, "p50": seconds / 40}, latency_s={"n": 8, "p50": seconds / 8})
        if model is not None:
            record["model"] = {"name": model, "synthetic": synthetic}
    else:
        record.update(epoch_s=[1.5 * seconds, seconds, seconds], train_s=3.5 * seconds,
                      images_per_s=64 / seconds, final_loss=0.4, final_accuracy=0.9)
    write_metrics(campaign / "results" / "runs" / p.path / "metrics.json", record)


def make_campaign(root: Path, name: str, points: dict, repeats=4, noise=0.01, seed=0) -> Path:
    """points: {SweepPoint without repeat (repeat=1): mean seconds}."""
    rng = np.random.default_rng(seed)
    campaign = root / name
    for p, seconds in points.items():
        for r in range(1, repeats + 1):
            write_run(campaign, SweepPoint(**{**p.as_dict(), "repeat": r}),
                      seconds * np.exp(rng.normal(0, noise)))
    return campaign


def scalesweep(*args) -> subprocess.CompletedProcess:
    return scalesweep_cli(*args)  # in this process (tests/conftest.py)


@pytest.fixture
def campaigns(tmp_path):
    base = {point(ranks=1): 10.0, point(ranks=2): 6.0, point(nodes=2): 5.0,
            point(nodes=4): 3.0, point(workload="llm", gpus=0): 20.0}
    changed = {point(ranks=1): 13.0,  # +30%: regression
               point(ranks=2): 6.06,  # +1%: within the threshold
               point(nodes=2): 3.5,  # -30%: improvement
               point(workload="llm", gpus=0): 20.1,
               point(nodes=8): 2.0}  # only in B; nodes=4 only in A
    a = make_campaign(tmp_path, "a", base, seed=1)
    b = make_campaign(tmp_path, "b", changed, seed=2)
    return a, b


def test_verdicts_point_by_point(campaigns):
    runs_a, skipped = compare.campaign_runs(campaigns[0])
    runs_b, _ = compare.campaign_runs(campaigns[1])
    assert skipped == [] and len(runs_a) == 20
    assert set(runs_a["payload"]) == {"cnn", "llm"}  # inferred from the metrics
    table = compare.compare_runs(runs_a, runs_b, threshold=5)
    by = {(r.workload, r.nodes, r.ranks): r for r in table.itertuples()}
    regression = by[("cnn_ddp", 1, 1)]
    assert regression.verdict == "regression"
    assert regression.change_pct == pytest.approx(30, abs=3)
    assert regression.change_ci95_low_pct < regression.change_pct < regression.change_ci95_high_pct
    assert regression.p_value < 0.001 and regression.n_a == 4 and regression.n_b == 4
    assert by[("cnn_ddp", 2, 1)].verdict == "improvement"
    assert by[("cnn_ddp", 2, 1)].change_pct == pytest.approx(-30, abs=3)
    assert by[("cnn_ddp", 1, 2)].verdict == "within_threshold"
    assert by[("llm", 1, 1)].verdict == "within_threshold"
    only_a, only_b = by[("cnn_ddp", 4, 1)], by[("cnn_ddp", 8, 1)]
    assert only_a.verdict == "only_in_a" and only_a.n_a == 4 and pd.isna(only_a.n_b)
    assert only_b.verdict == "only_in_b" and only_b.b_s == pytest.approx(2.0, rel=0.05)
    assert table["verdict"].tolist()[:2] == ["regression", "improvement"]  # worst first
    assert table.columns.tolist() == compare.COLUMNS


def test_change_is_a_ratio_of_means_with_fieller_ci(tmp_path):
    p = point()
    a, b = tmp_path / "a", tmp_path / "b"
    for r, (ta, tb) in enumerate(zip([10, 11, 12], [12, 13, 14]), 1):
        write_run(a, SweepPoint(**{**p.as_dict(), "repeat": r}), ta)
        write_run(b, SweepPoint(**{**p.as_dict(), "repeat": r}), tb)
    row = compare.compare_runs(compare.campaign_runs(a)[0], compare.campaign_runs(b)[0]).iloc[0]
    assert row["a_s"] == pytest.approx(11) and row["b_s"] == pytest.approx(13)
    assert row["change_pct"] == pytest.approx(2 / 11 * 100)
    # Welch's t on (12,13,14) vs (10,11,12): t = 2 / sqrt(2/3), df = 4
    assert row["p_value"] == pytest.approx(0.0705, abs=0.001)
    # +18% but not significant: its CI reaches past +-5% both ways, so it cannot tell
    assert row["change_ci95_low_pct"] < 0 and row["change_ci95_high_pct"] > 5
    assert row["verdict"] == "inconclusive"


def test_without_repeats_nothing_is_significant(tmp_path):
    a = make_campaign(tmp_path, "a", {point(): 10.0}, repeats=1)
    b = make_campaign(tmp_path, "b", {point(): 20.0}, repeats=1)
    row = compare.compare_runs(compare.campaign_runs(a)[0], compare.campaign_runs(b)[0]).iloc[0]
    assert row["change_pct"] == pytest.approx(100, rel=0.05)
    assert row["verdict"] == "untested" and np.isnan(row["p_value"])


def test_threshold_and_significance_both_needed():
    assert compare.verdict(30, 0.001, 5, 0.05, 20, 40) == "regression"
    assert compare.verdict(-30, 0.001, 5, 0.05, -40, -20) == "improvement"
    assert compare.verdict(4, 0.001, 5, 0.05, 3, 4.9) == "within_threshold"
    assert compare.verdict(30, 0.2, 5, 0.05, -10, 70) == "inconclusive"
    assert compare.verdict(30, float("nan"), 5, 0.05) == "untested"
    assert compare.verdict(30, 0.001, 40, 0.05, 10, 35) == "within_threshold"


def test_within_threshold_needs_the_whole_ci_inside_it():
    # the case: +1.5% with a 95% CI of -15.7% .. +18.6% is not "within 5%"
    assert compare.verdict(1.5, 0.85, 5, 0.05, -15.7, 18.6) == "inconclusive"
    # significant but small, with a CI reaching past +5%: maybe a regression, cannot tell
    assert compare.verdict(4, 0.01, 5, 0.05, 1, 7) == "inconclusive"
    assert compare.verdict(-4, 0.01, 5, 0.05, -7, -1) == "inconclusive"
    # the bounds themselves are inside; an unbounded (NaN) CI never is
    assert compare.verdict(0, 0.9, 5, 0.05, -5, 5) == "within_threshold"
    assert compare.verdict(0, 0.9, 5, 0.05, float("nan"), float("nan")) == "inconclusive"
    # a point estimate inside the threshold without a CI (one repeat a side) is untested
    assert compare.verdict(1, float("nan"), 5, 0.05) == "untested"
    # identical repeats: a zero-width CI decides "within", but beyond it there is no test
    assert compare.verdict(2, float("nan"), 5, 0.05, 2, 2) == "within_threshold"
    assert compare.verdict(9, float("nan"), 5, 0.05, 9, 9) == "untested"


def test_a_noisy_unchanged_point_is_inconclusive_and_strict_fails_on_it(tmp_path):
    # the same mean, 15% run-to-run noise, 4 repeats: the CI is far wider than +-5%
    a = make_campaign(tmp_path, "a", {point(): 10.0}, noise=0.15, seed=3)
    b = make_campaign(tmp_path, "b", {point(): 10.0}, noise=0.15, seed=4)
    row = compare.compare_runs(compare.campaign_runs(a)[0], compare.campaign_runs(b)[0]).iloc[0]
    assert row["change_ci95_low_pct"] < -5 or row["change_ci95_high_pct"] > 5
    assert row["p_value"] >= 0.05 and row["verdict"] == "inconclusive"
    lenient = scalesweep("compare", a, b, "--fail-on-regression")
    assert lenient.returncode == 0, lenient.stderr
    assert "1 points (1 inconclusive)" in lenient.stderr
    strict = scalesweep("compare", a, b, "--strict")
    assert strict.returncode == compare.EXIT_UNDECIDED == 3, strict.stderr
    assert "1 point(s) inconclusive or untested" in strict.stderr
    assert "exit 3" in strict.stderr
    # a wider threshold that the CI fits inside passes even when strict
    wide = scalesweep("compare", a, b, "--strict", "--threshold", "200")
    assert wide.returncode == 0, wide.stderr
    assert pd.read_csv(io.StringIO(wide.stdout))["verdict"].tolist() == ["within_threshold"]


def test_strict_fails_on_a_regression_first_and_on_untested_points(tmp_path, campaigns):
    a, b = campaigns
    strict = scalesweep("compare", a, b, "--strict")  # a regression and only_in rows
    assert strict.returncode == compare.EXIT_REGRESSION == 1, strict.stderr
    ok = scalesweep("compare", a, b, "--strict", "--threshold", "50")
    assert ok.returncode == 0, ok.stdout + ok.stderr  # only_in_a / only_in_b do not count
    one_a = make_campaign(tmp_path, "one_a", {point(): 10.0}, repeats=1)
    one_b = make_campaign(tmp_path, "one_b", {point(): 10.1}, repeats=1)
    assert scalesweep("compare", one_a, one_b, "--fail-on-regression").returncode == 0
    assert scalesweep("compare", one_a, one_b, "--strict").returncode == 3


def test_help_documents_the_exit_codes():
    out = scalesweep("compare", "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "--strict" in text and "1 a regression" in text
    assert "3 no regression but a matched point inconclusive or untested" in text


def test_broken_metrics_are_skipped_and_named(campaigns):
    a, _ = campaigns
    bad = a / "results/runs" / point(repeat=9).path / "metrics.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    stray = a / "results/runs/somewhere/metrics.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    runs, skipped = compare.campaign_runs(a)
    assert len(runs) == 20 and len(skipped) == 2
    assert any(f"{point(repeat=9).path}/metrics.json" in s and "not valid JSON" in s
               for s in skipped)
    assert any("not a sweep point path" in s for s in skipped)


def test_command_table_figure_and_exit_codes(campaigns, tmp_path):
    a, b = campaigns
    out = scalesweep("compare", a, b, "--csv", tmp_path / "cmp.csv", "--plot",
                     tmp_path / "cmp.png")
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    assert table["verdict"].value_counts().to_dict() == {
        "regression": 1, "improvement": 1, "within_threshold": 2, "only_in_a": 1,
        "only_in_b": 1}
    assert pd.read_csv(tmp_path / "cmp.csv")["verdict"].tolist() == table["verdict"].tolist()
    assert (tmp_path / "cmp.png").stat().st_size > 10_000
    assert "6 points (1 regression, 1 improvement, 2 within threshold, 1 only in a, " \
           "1 only in b)" in out.stderr
    failing = scalesweep("compare", a, b, "--fail-on-regression")
    assert failing.returncode == 1 and "1 regression(s); failing as asked" in failing.stderr
    lenient = scalesweep("compare", a, b, "--fail-on-regression", "--threshold", "50")
    assert lenient.returncode == 0, lenient.stderr


def test_command_refuses_what_is_not_a_campaign(tmp_path, campaigns):
    (tmp_path / "empty" / "results" / "runs").mkdir(parents=True)
    for target, message in ((tmp_path / "nowhere", "no such campaign directory"),
                            (REPO / "config", "no results/runs/"),
                            (tmp_path / "empty", "no finished runs")):
        out = scalesweep("compare", campaigns[0], target)
        assert out.returncode == 2, out.stderr
        assert message in out.stderr and "Traceback" not in out.stderr


def test_provenance_differences_are_noted(campaigns):
    a = compare.campaign_runs(campaigns[0])[0]
    b = a.assign(torch="2.14.0")
    assert compare.provenance_notes(a, b) == ["torch differs: A 2.13.0; B 2.14.0"]


# --- never pooling what differs ---------------------------------------------------------------

def llm_campaign(root: Path, name: str, models: dict, repeats=2, seed=0) -> Path:
    """One LLM point (1 node, 1 GPU, native); models: {(model, synthetic): mean seconds},
    each model measured on its own repeats (the first model on repeats 1.., the next after)."""
    rng = np.random.default_rng(seed)
    campaign, repeat = root / name, 1
    for (model, synthetic), seconds in models.items():
        for _ in range(repeats):
            write_run(campaign, point(workload="llm", gpus=1, repeat=repeat),
                      seconds * np.exp(rng.normal(0, 0.005)), model=model, synthetic=synthetic)
            repeat += 1
    return campaign


def test_models_of_one_point_are_never_pooled(tmp_path):
    # same workload and point, two models (and the synthetic-weights variant of one)
    a = llm_campaign(tmp_path, "a", {("m1", False): 10.0, ("m2", False): 30.0,
                                     ("m2", True): 50.0}, seed=1)
    b = llm_campaign(tmp_path, "b", {("m1", False): 10.0, ("m2", False): 39.0,
                                     ("m2", True): 50.0}, seed=2)
    table = compare.compare_runs(compare.campaign_runs(a)[0], compare.campaign_runs(b)[0])
    assert len(table) == 3  # pooled, it would be one row of about +13%
    by = table.set_index("model_label")
    assert by.loc["m2", "verdict"] == "regression"
    assert by.loc["m2", "change_pct"] == pytest.approx(30, abs=2)
    assert by.loc["m2", "a_s"] == pytest.approx(30, rel=0.02)
    assert by.loc["m1", "verdict"] == "within_threshold"
    assert by.loc["m2 (synthetic weights)", "b_s"] == pytest.approx(50, rel=0.02)
    assert table[["n_a", "n_b"]].values.tolist() == [[2, 2]] * 3
    assert set(table["payload"]) == {"llm"} and set(table["runtime"]) == {"native"}


def test_a_changed_model_is_not_compared_across(tmp_path):
    a = llm_campaign(tmp_path, "a", {("m1", False): 10.0})
    b = llm_campaign(tmp_path, "b", {("m2", False): 10.0})
    out = scalesweep("compare", a, b)
    assert out.returncode == 0, out.stderr
    table = pd.read_csv(io.StringIO(out.stdout))
    assert table[["model_label", "verdict", "n_a", "n_b"]].fillna(0).values.tolist() == [
        ["m1", "only_in_a", 2, 0], ["m2", "only_in_b", 0, 2]]
    assert "note: workload llm: model differs (A m1; B m2)" in out.stderr


def test_runtimes_and_workloads_are_never_pooled(tmp_path):
    # the same geometry in two runtimes and two workloads: four rows, each its own
    points = {point(): 10.0, point(runtime="apptainer"): 11.0,
              point(workload="cnn_big"): 20.0, point(workload="cnn_big", runtime="apptainer"): 22.0}
    a = make_campaign(tmp_path, "a", points, seed=1)
    b = make_campaign(tmp_path, "b", {p: 1.3 * t if p.runtime == "apptainer" else t
                                      for p, t in points.items()}, seed=2)
    table = compare.compare_runs(compare.campaign_runs(a)[0], compare.campaign_runs(b)[0])
    assert len(table) == 4 and (table[["n_a", "n_b"]] == 4).all().all()
    verdicts = {(r.workload, r.runtime): r.verdict for r in table.itertuples()}
    assert verdicts == {("cnn_ddp", "apptainer"): "regression",
                        ("cnn_big", "apptainer"): "regression",
                        ("cnn_ddp", "native"): "within_threshold",
                        ("cnn_big", "native"): "within_threshold"}
    by = {(r.workload, r.runtime): r.a_s for r in table.itertuples()}
    assert by[("cnn_big", "apptainer")] == pytest.approx(22, rel=0.02)


def test_command_markdown_and_options(campaigns):
    a, b = campaigns
    out = scalesweep("compare", a, b, "--format", "markdown")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("| workload | payload | model_label ")
    assert lines[1].startswith("| -------- | ------- |")
    assert len(lines) == 2 + 6 and "| regression " in lines[2]
    assert "scalesweep compare: 6 points" in out.stderr and "|" not in out.stderr
    for bad in (["--threshold", "nan"], ["--threshold", "-1"]):
        refused = scalesweep("compare", a, b, *bad)
        assert refused.returncode == 2 and "argument --threshold: must be" in refused.stderr


# --- two real campaigns ------------------------------------------------------------------------
