"""``scalesweep plan``: jobs, node-hours, expectations from earlier campaigns, site limits."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from conftest import REPO, config_text, with_site, write_site
from scalesweep.campaign import history as plan_history
from scalesweep.campaign import profile as plan_profile
from scalesweep.plan.adaptive import MIN_COMPARED
from scalesweep.plan.config_read import load_config
from scalesweep.plan.sweep import SweepPoint, sweep_points
from scalesweep.record.metrics import write_metrics
from scalesweep.run.slurm import runtime_min

FRONTIER = REPO / "config" / "frontier.yaml"
FRONTIER_PROFILE = REPO / "profiles" / "frontier"


def scalesweep(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalesweep", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def frontier_like(directory: Path, nodes=(1, 100), max_runtime_min=240, repeats=1,
                  site_cap=0, warmup_blocks: int | None = 0) -> dict:
    """A small self-contained config (no dependency on config/*.yaml) on Frontier, or, for
    a ``site_cap`` other than its 120 minutes, on a Frontier whose retries are capped
    there (0: never), a site file in ``directory`` that extends sites/frontier.yaml.
    ``warmup_blocks``: measurement.warmup_blocks (none by default: the tests count the
    points of ``repeats`` blocks; None: no measurement section)."""
    site = "frontier" if site_cap == 120 else write_site(
        directory, "frontier-uncapped" if site_cap == 0 else f"frontier-cap{site_cap}",
        extends="frontier", slurm={"max_runtime_min": site_cap})
    return with_site({
        "site": site,
        "sweep": {"runtimes": ["native"], "nodes": list(nodes), "gpus_per_node": [8],
                  "threads_per_rank": [7], "repeats": repeats},
        "datasets": {"imgs": {"source": "synthetic", "classes": ["a", "b"],
                              "images_per_class": 8, "image_size": 64}},
        "workloads": {"cnn_ddp": {"payload": "cnn", "parallel": "ddp", "dataset": "imgs",
                                  "max_runtime_min": max_runtime_min}},
        **({} if warmup_blocks is None else {"measurement": {"warmup_blocks": warmup_blocks}}),
    })


def write_config(directory: Path, config: dict) -> list:
    """``config`` as the campaign's config.yaml; the plan's arguments that read it alone:
    its --configfile replaces a profile's `configfile:` (profiles/frontier names
    config/frontier.yaml)."""
    path = directory / "config" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_text(config))
    return ["-d", directory, "--configfile", path]


def run_plan(*args) -> dict:
    out = scalesweep("plan", *args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# --- the Frontier sweep ------------------------------------------------------------------------

@pytest.fixture
def frontier_configs(tmp_path):
    """config/frontier.yaml over the embedded default, or a fixture while it is absent."""
    if FRONTIER.is_file():
        return ["-d", REPO, "--configfile", FRONTIER], [REPO / "config" / "config.yaml", FRONTIER]
    cfg = frontier_like(tmp_path, nodes=(1, 2, 4, 8, 16, 30), max_runtime_min=30, repeats=3,
                        site_cap=120)
    cfg["sweep"]["runtimes"] = ["native", "apptainer", "apptainer-hostmpi"]
    return write_config(tmp_path, cfg), [tmp_path / "config" / "config.yaml"]


def repeat_bounds_by_hand(config: dict, attempts: int = 1) -> dict:
    """Runs and node-hours (attempt 1; every attempt) of a sweep at ``blocks`` repeats
    per series, counted from the sweep's points: a series (workload, arm, geometry)
    measures each of its runtimes once per block; its warm-up blocks
    (``measurement.warmup_blocks``), then ``sweep.repeats`` blocks at the least,
    ``measurement.max_repeats`` at the most."""
    points = [p for p in sweep_points(config) if p.repeat == 1]
    warmup = config["measurement"]["warmup_blocks"]
    low = warmup + config["sweep"]["repeats"]
    high = warmup + max(config["sweep"]["repeats"], config["measurement"]["max_repeats"])
    per_block = sum(p.nodes * runtime_min(config["workloads"][p.workload], config["_site"], 1)
                    for p in points) / 60
    every = sum(p.nodes * runtime_min(config["workloads"][p.workload], config["_site"], a)
                for p in points for a in range(1, attempts + 1)) / 60
    return {"first_runs": len(points) * low, "max_runs": len(points) * high,
            "max_node_h": per_block * high, "worst_node_h": every * high}


def test_frontier_sweep_node_hours_and_queue_limits(frontier_configs):
    args, files = frontier_configs
    out = run_plan(*args, "--profile", FRONTIER_PROFILE)
    config = load_config(files)
    profile = yaml.safe_load((FRONTIER_PROFILE / "config.yaml").read_text())
    attempts = 1 + int(profile.get("retries", 0))
    points = sweep_points(config)
    datasets = {config["workloads"][p.workload]["dataset"] for p in points
                if config["workloads"][p.workload]["payload"] == "cnn"}
    support_h = 2 * len(datasets) * float(profile["default-resources"]["runtime"]) / 60
    totals = out["totals"]
    assert out["site"] == "frontier"
    assert totals["support_jobs"] == 2 * len(datasets)
    assert totals["attempts"] == attempts
    # the maximum: measurement.max_repeats blocks of every series; the worst case: those
    # runs failing until their last attempt
    bound = repeat_bounds_by_hand(config, attempts)
    maximum = totals["repeats"]["maximum"]
    assert out["repeats_rule"]["first_dry_run_runs"] == len(points) == bound["first_runs"]
    assert maximum["runs"] == bound["max_runs"]
    assert maximum["requested_node_h"] == pytest.approx(bound["max_node_h"] + support_h)
    assert totals["worst_node_h"] == pytest.approx(bound["worst_node_h"] + support_h * attempts)
    # the minimum: each series stops once it may: after its warm-up and sweep.repeats
    # blocks, and a comparison needs MIN_COMPARED pairs (after the warm-up)
    warmup = config["measurement"]["warmup_blocks"]
    low = warmup + max(config["sweep"]["repeats"], MIN_COMPARED)
    assert totals["point_jobs"] == totals["repeats"]["minimum"]["runs"] == \
        len(points) // (warmup + config["sweep"]["repeats"]) * low
    assert totals["requested_node_h"] == pytest.approx(
        bound["max_node_h"] * low / (warmup + config["measurement"]["max_repeats"]) + support_h)
    assert totals["expected_node_h"] == pytest.approx(totals["requested_node_h"])
    assert totals["repeats"]["expected"]["runs"] is None  # nothing measured before
    jobs = totals["jobs"]
    warnings = "\n".join(out["warnings"])
    assert f"site frontier lets 4 of a user's jobs be eligible to run at once: {jobs} jobs " \
           f"run in at least {-(-jobs // 4)} waves" in warnings
    if jobs > 100:  # the OLCF study's sweep: 186 points
        assert f"{jobs} jobs exceed the 100 a user may have queued on site frontier" in warnings
    assert "refused at submission" not in warnings  # 30 nodes x <= 2 h: within the 1-91 bin
    # a Frontier node-hour charges one node-hour of the allocation (sites/frontier.yaml)
    assert out["cost"] == {"unit": "allocation node-hours", "per_node_hour": 1.0,
                           "requested": pytest.approx(totals["requested_node_h"]),
                           "worst": pytest.approx(totals["worst_node_h"]),
                           "expected": pytest.approx(totals["expected_node_h"])}


def test_frontier_text_output(frontier_configs):
    args, _ = frontier_configs
    out = scalesweep("plan", *args, "--profile", FRONTIER_PROFILE,
                     "--allocation-node-hours", "50")
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    for line in ("  minimum ", "  expected  unknown: nothing measured before", "  maximum ",
                 "  worst case "):
        assert line in out.stdout
    assert "Slurm jobs" in out.stdout
    assert "site limits from: OLCF Frontier User Guide" in out.stdout
    assert "cost at 1 allocation node-hours per node-hour: minimum " in out.stdout
    assert "the minimum node-hours (" in out.stdout and "exceed the allocation (50.0)" \
        in out.stdout
    assert scalesweep("plan", *args, "--profile", FRONTIER_PROFILE, "--strict").returncode == 1


def test_walltime_caps_by_node_count(tmp_path):
    # 100 nodes sits in Frontier's 92-183 bin (6 h): 4 h asks are fine, their 8 h retry is not
    args = write_config(tmp_path, frontier_like(tmp_path, nodes=(1, 100), max_runtime_min=240))
    out = run_plan(*args, "--profile", FRONTIER_PROFILE)
    warnings = "\n".join(out["warnings"])
    assert "cnn_ddp: 1 points ask for more walltime than site frontier-uncapped allows (e.g. " \
           "1 nodes: 240 min > 2 h): refused at submission" in warnings
    assert "cnn_ddp: 1 points' retries would ask for more than site frontier-uncapped's " \
           "walltime cap (e.g. 100 nodes, attempt 2: 480 min > 6 h)" in warnings


def test_more_nodes_than_the_machine(tmp_path):
    args = write_config(tmp_path, frontier_like(tmp_path, nodes=(10000,), max_runtime_min=60))
    out = run_plan(*args, "--site", "frontier")
    assert out["site"] == "frontier"
    assert any("ask for more than site frontier's 9472 nodes" in w for w in out["warnings"])
    odo = run_plan(*args, "--site", "odo")
    assert any("more than site odo's 30 nodes" in w for w in odo["warnings"])


def test_debug_qos_allows_one_job_of_two_hours(tmp_path):
    args = write_config(tmp_path, frontier_like(tmp_path, nodes=(1, 2), max_runtime_min=150))
    out = run_plan(*args, "--profile", FRONTIER_PROFILE, "--qos", "debug")
    warnings = "\n".join(out["warnings"])
    site = "site frontier-uncapped (debug QOS)"
    assert f"exceed the 1 a user may have queued on {site}" in warnings
    assert f"the profile's jobs: 20 exceeds {site}'s 1 queued" in warnings
    assert f"2 points ask for more walltime than {site} allows" in warnings


def test_unknown_site_and_missing_config_exit_2(tmp_path):
    write_config(tmp_path, frontier_like(tmp_path))
    out = scalesweep("plan", "-d", tmp_path, "--site", "summit")
    assert out.returncode == 2 and "unknown site 'summit'" in out.stderr
    assert "known sites: frontier, local, local-slurm, odo" in out.stderr
    out = scalesweep("plan", "-d", tmp_path / "nowhere")
    assert out.returncode == 2 and "no config:" in out.stderr
    out = scalesweep("plan", "-d", tmp_path, "--profile", tmp_path / "noprofile")
    assert out.returncode == 2 and "no config.yaml there" in out.stderr


# --- profiles -----------------------------------------------------------------------------------

def test_profile_runtime_overrides_and_list_forms(tmp_path):
    profile = tmp_path / "prof"
    profile.mkdir()
    (profile / "config.yaml").write_text(yaml.safe_dump({
        "retries": 2, "jobs": 5,
        "default-resources": ["runtime=15", "mem_mb=0"],
        "set-resources": ["run_point:runtime=10*attempt"],
    }))
    merged = plan_profile.read_profile(profile)
    assert merged["keep-going"] is True  # profiles/default underneath
    assert plan_profile.attempts_of(merged) == 3 and plan_profile.support_runtime_min(merged) == 15
    config = frontier_like(tmp_path, nodes=(2,))
    assert [plan_profile.point_runtime_min(config, merged, "cnn_ddp", a) for a in (1, 2, 3)] == \
        [10, 20, 30]
    assert plan_profile.point_runtime_min(config, plan_profile.read_profile(None), "cnn_ddp", 2) == 480
    assert plan_profile.minutes("'__import__(\"os\")'") is None  # arithmetic only, never code


# --- expectations from earlier campaigns -------------------------------------------------------

def test_expected_times_by_point_nodes_and_fit(tmp_path):
    history = tmp_path / "before"
    for nodes, wall in ((1, 1000.0), (2, 520.0), (4, 280.0), (8, 160.0)):
        for repeat, factor in ((1, 0.98), (2, 1.02)):
            p = SweepPoint("cnn_ddp", "native", nodes, 8, 8, 7, repeat)
            write_metrics(history / "results" / "runs" / p.path / "metrics.json", {
                "point": p.as_dict(), "epoch_s": [1.0, 1.0], "train_s": 2.0,
                "images_per_s": 1.0, "final_loss": 0.1, "final_accuracy": 0.9,
                "harness_wall_s": wall * factor})
    runs = plan_history.campaign_history([history])
    points = pd.DataFrame([
        SweepPoint("cnn_ddp", "native", 2, 8, 8, 7, 1).as_dict(),  # measured: point
        SweepPoint("cnn_ddp", "native", 4, 4, 4, 7, 1).as_dict(),  # other geometry: nodes
        SweepPoint("cnn_ddp", "native", 16, 8, 8, 7, 1).as_dict(),  # not run: fit
        SweepPoint("cnn_ddp", "apptainer", 2, 8, 8, 7, 1).as_dict(),  # nothing: requested
    ])
    out = plan_history.expected_seconds(points, runs)
    assert out["expected_source"].tolist() == ["point", "nodes", "fit", "requested"]
    assert out["expected_s"].iloc[0] == pytest.approx(520)
    assert out["expected_s"].iloc[1] == pytest.approx(280)
    assert 90 < out["expected_s"].iloc[2] < 110  # Amdahl through 1000/520/280/160 s
    assert pd.isna(out["expected_s"].iloc[3])


def test_plan_uses_earlier_campaigns(tmp_path):
    args = write_config(tmp_path / "next", frontier_like(tmp_path, nodes=(1, 2),
                                                          max_runtime_min=30))
    history = tmp_path / "before"
    for repeat in (1, 2):
        p = SweepPoint("cnn_ddp", "native", 1, 8, 8, 7, repeat)
        write_metrics(history / "results" / "runs" / p.path / "metrics.json", {
            "point": p.as_dict(), "epoch_s": [1.0], "train_s": 1.0, "images_per_s": 1.0,
            "final_loss": 0.1, "final_accuracy": 0.9, "harness_wall_s": 2400.0})
    out = run_plan(*args, "--from-campaign", history, "--profile", FRONTIER_PROFILE)
    workload = out["workloads"][0]
    assert workload["expected_from"] == "1 point, 1 requested"
    # 1 node x 40 min measured + 2 nodes x 30 min requested (no measurement) + staging
    assert workload["expected_node_h"] == pytest.approx(40 / 60 + 2 * 30 / 60)
    assert any("cnn_ddp: 1 points are expected to take longer than their first attempt asks "
               "(e.g. 1 nodes: 40.0 min > 30 min)" in w for w in out["warnings"])


# --- adaptive repeats: minimum, expected, maximum ----------------------------------------------

def write_pairs(campaign: Path, sd: float, n: int, mean: float = 0.01, ranks: int = 1) -> None:
    """``n`` blocks of the embedded default's cnn_ddp series (charliecloud arm, ``ranks``
    ranks): native 1 s an epoch, charliecloud exp(mean + sd z_k) s, the z_k with mean 0
    and sample sd exactly 1: ln(t_charliecloud / t_native) spreads by ``sd``."""
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    for k in range(1, n + 1):
        for runtime, t in (("native", 1.0), ("charliecloud", math.exp(mean + sd * z[k - 1]))):
            p = SweepPoint("cnn_ddp", runtime, 1, 0, ranks, 1, k, "charliecloud")
            write_metrics(campaign / "results" / "runs" / p.path / "metrics.json", {
                "point": p.as_dict(), "epoch_s": [1.5 * t, t, t], "train_s": 3 * t,
                "images_per_s": 1.0, "final_loss": 0.1, "final_accuracy": 0.9,
                "harness_wall_s": 60.0 * t})


def blocks_for_target(sd: float, mean: float, target_pp: float, low: int, high: int) -> int:
    """The paired-t CI of mean ln-ratio, back-transformed: the first block count from
    ``low`` at which its half-width is within ``target_pp`` (else ``high``)."""
    for n in range(low, high + 1):
        half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
        if 50 * (math.exp(mean + half) - math.exp(mean - half)) <= target_pp:
            return n
    return high


def test_embedded_default_repeats_minimum_expected_maximum(tmp_path):
    """The embedded default (3 series of native + charliecloud): the maximum is
    measurement.max_repeats blocks of each, the minimum the MIN_COMPARED pairs a
    comparison needs, the expected unknown until something was measured, then from the
    spread of the pairs measured before (the series' own, its workload's other series,
    or an assumed one)."""
    default = REPO / "config" / "config.yaml"
    config = load_config([default])
    m = config["measurement"]
    bound = repeat_bounds_by_hand(config)
    args = ["-d", tmp_path, "--configfile", default]
    out = scalesweep("plan", *args)
    assert out.returncode == 0, out.stderr
    assert "expected  unknown: nothing measured before: this campaign has no results/runs/ " \
           "yet and no --from-campaign DIR was given" in out.stdout
    assert f"at most measurement.max_repeats ({m['max_repeats']}) blocks" in out.stdout
    # 3 of 3 series with a spread: cnn_ddp's 1-rank series from its own 6 pairs, its
    # 2-rank series from those pooled, llm from the assumed spread
    before = tmp_path / "before"
    sd = 0.03
    write_pairs(before, sd, 6)
    totals = run_plan(*args, "--from-campaign", before, "--assume-spread-pct", "3")["totals"]
    repeats = totals["repeats"]
    warmup = m["warmup_blocks"]  # every count of blocks includes the warm-up ones
    assert warmup == 1  # the schema's default
    assert repeats["maximum"]["runs"] == bound["max_runs"] == 3 * 2 * (warmup + m["max_repeats"])
    assert repeats["maximum"]["requested_node_h"] == pytest.approx(
        bound["max_node_h"] + 2 * 60 / 60)  # + staging and verification, 60 min each
    counted = max(config["sweep"]["repeats"], MIN_COMPARED)
    low = warmup + counted
    assert repeats["minimum"]["runs"] == totals["point_jobs"] == 3 * 2 * low
    expected = warmup + blocks_for_target(sd, 0.01, m["target_ci_pp"], counted,
                                          m["max_repeats"])
    assert low < expected < warmup + m["max_repeats"]  # the spread asks for more
    assert repeats["expected"]["runs"] == 3 * 2 * expected
    assert repeats["expected"]["complete"] and repeats["expected"]["blocks"] == str(expected)
    text = scalesweep("plan", *args, "--from-campaign", before).stdout
    assert f"expected  {2 * 2 * expected + 2 * low:>6,} runs" in text
    assert "at least: the 1 series with nothing measured at their minimum; 1 series from " \
           "their own pairs measured before, 1 pooled over their workload's other series" in text


def test_plan_reads_the_measurement_settings_validation_filled_in(tmp_path):
    """measurement.max_repeats and target_ci_pp have one default, the schema's
    (workflow/schemas/config.schema.yaml), which validation fills in: the plan reads the
    validated values and restates neither (a second default could drift from the
    schema's). A config that sets neither plans with the schema's."""
    import re

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    measurement = schema["properties"]["measurement"]["properties"]
    source = "".join((REPO / "workflow" / "scalesweep" / "campaign" / f"{name}.py").read_text()
                     for name in ("cost", "estimate", "history", "profile", "dry_run"))
    for key in ("max_repeats", "target_ci_pp", "warmup_blocks"):
        assert not re.search(rf"""get\(\s*['"]{key}['"]\s*,""", source), key
    cfg = frontier_like(tmp_path, nodes=(1,), repeats=3, warmup_blocks=None)
    assert "measurement" not in cfg
    rule = run_plan(*write_config(tmp_path, cfg))["repeats_rule"]
    assert rule["max_repeats"] == measurement["max_repeats"]["default"]
    assert rule["warmup_blocks"] == measurement["warmup_blocks"]["default"] == 1
    assert rule["blocks_first"] == "4"  # the warm-up block, then sweep.repeats
    assert rule["target_ci_pp"] == measurement["target_ci_pp"]["default"]
