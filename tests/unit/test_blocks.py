"""Pairs are runs measured together: arms and blocks (sweep.BLOCK_DIR), same-block pairing
(scalesweep.analyse.overhead.verdict_table), and the CLI giving a campaign's own verdicts (campaign.json)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from scalesweep.analyse.overhead import verdict_table
from scalesweep.analyse.pairing import SAME_BLOCK

from scalesweep.analyse.collect import RUN_COLUMNS, with_blocks
from scalesweep.analyse.summary import campaign_record, overhead_summary, scaling_summary
from scalesweep.plan.sweep import SweepPoint, arms_of, block_order, sweep_points
from scalesweep.record import columns


def base_config(**measurement):
    from conftest import with_site

    return with_site({
        "site": "local",
        "sweep": {"runtimes": ["native", "charliecloud"], "nodes": [1],
                  "ranks_per_node": [1, 2], "threads_per_rank": [1], "repeats": 3},
        "measurement": {"order": "alternate", "equivalence_margin_pct": 5.0,
                        "target_ci_pp": 3.0, "warmup_blocks": 0, **measurement},
        "workloads": {"cnn": {"payload": "cnn", "parallel": "ddp", "dataset": "d"}},
    })


def test_every_compared_runtime_has_blocks_of_its_own_with_native():
    points = sweep_points(base_config(aa_calibration=True))
    arms = {(p.arm, p.runtime) for p in points}
    assert arms == {("charliecloud", "native"), ("charliecloud", "charliecloud"),
                    ("native-aa", "native"), ("native-aa", "native-aa")}
    p = next(p for p in points if p.runtime == "native" and p.arm == "native-aa")
    assert p.path == f"cnn/native-aa/n1-g0-r{p.ranks}-t1/rep{p.repeat}/native"
    assert p.block == f"cnn/native-aa/n1-g0-r{p.ranks}-t1/rep{p.repeat}"
    assert SweepPoint.from_path(p.path) == p
    # native's runs in the two arms are different runs
    assert len({q.path for q in points if q.runtime == "native"}) == 2 * 2 * 3


def test_adding_a_runtime_leaves_the_existing_blocks_as_they_were():
    before = set(sweep_points(base_config()))
    after = set(sweep_points(base_config(aa_calibration=True)))
    assert before <= after  # nothing measured before is re-planned or re-paired
    assert {p.arm for p in after - before} == {"native-aa"}


def test_arms_and_block_order():
    assert arms_of(["native"]) == ["native"]
    assert arms_of(["charliecloud"]) == ["charliecloud"]
    assert arms_of(["native", "a", "b"]) == ["a", "b"]
    cfg = base_config()
    p1 = SweepPoint("cnn", "native", 1, 0, 1, 1, 1, "charliecloud")
    p2 = SweepPoint("cnn", "native", 1, 0, 1, 1, 2, "charliecloud")
    assert block_order(p1, cfg) == ["native", "charliecloud"]
    assert block_order(p2, cfg) == ["charliecloud", "native"]  # ABBA
    # an old record without arm: its own runtime
    assert SweepPoint("cnn", "charliecloud", 1, 0, 1, 1, 1).arm == "charliecloud"


T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def run(runtime, arm, repeat, time_s, start_min, *, ranks=1, dur_s=30, disturbed=False):
    start = T0 + timedelta(minutes=start_min)
    row = dict.fromkeys(RUN_COLUMNS)
    row.update(workload="cnn", payload="cnn", runtime=runtime, arm=arm, nodes=1, gpus=0,
               ranks=ranks, threads=1, repeat=repeat, count=ranks, world_size=ranks,
               time_s=time_s, disturbed=disturbed, shared_cores=False, hosts="h1",
               start=start.isoformat(), end=(start + timedelta(seconds=dur_s)).isoformat(),
               path=f"x/{arm}/{runtime}/{repeat}")
    return row


def drifting_campaign(aa_blocks: bool):
    """The issue's A/A: native then (10 minutes later) native-aa on a machine whose speed
    drifts; ``aa_blocks``: native-aa measured in blocks of its own, as now."""
    rows = []
    for k in range(1, 9):  # the campaign: native + charliecloud, minutes 0..16
        drift = 1.0 + 0.01 * k
        rows += [run("native", "charliecloud", k, 10 * drift, 2 * k),
                 run("charliecloud", "charliecloud", k, 10 * drift * 1.001, 2 * k + 1)]
    for k in range(1, 9):  # the A/A, minutes 30..46: the machine is 25% faster now
        drift = 0.75 * (1.0 + 0.005 * (k % 3))
        if aa_blocks:
            rows += [run("native", "native-aa", k, 10 * drift, 30 + 2 * k),
                     run("native-aa", "native-aa", k, 10 * drift * (1 + 0.002 * (-1) ** k),
                         31 + 2 * k)]
        else:  # the old pairing: native-aa "paired" with native of the same repeat number
            rows.append(run("native-aa", "charliecloud", k, 10 * drift, 31 + 2 * k))
    return with_blocks(pd.DataFrame(rows))


def test_the_aa_check_on_a_drifting_machine_is_not_called_faster():
    cfg = base_config()
    table = overhead_summary(drifting_campaign(aa_blocks=True), cfg)
    aa = table[table["runtime"] == "native-aa"].iloc[0]
    assert aa["pairing"] == SAME_BLOCK
    assert aa["verdict"] == "equivalent", aa["verdict_text"]
    assert "same-block pairs" in aa["verdict_text"]
    cc = table[table["runtime"] == "charliecloud"].iloc[0]
    assert cc["n"] == 8 and cc["verdict"] == "equivalent"


def test_runs_that_only_share_a_repeat_number_were_the_false_verdict():
    # what the issue saw: native-aa measured later, "paired" on the repeat number alone
    runs = drifting_campaign(aa_blocks=False)
    old = verdict_table(runs, ["workload", "nodes", "ranks"], pair_col="repeat",
                                 margin_pct=5.0)
    assert old.set_index("runtime").loc["native-aa", "verdict"] == "faster"
    # paired on the block, with the time check, the same runs are not pairs at all
    new = verdict_table(runs, ["workload", "nodes", "ranks"], pair_col="block_id",
                                 margin_pct=5.0, max_pair_gap_s=600)
    row = new.set_index("runtime").loc["native-aa"]
    assert row["n_pairs_split"] == 8 and row["n"] == 0
    # and the runs measured apart are never compared side by side instead
    assert row["pairing"] == SAME_BLOCK and row["verdict"] == "inconclusive"
    assert "8 pairs not measured together left out" in row["verdict_text"]


def test_a_pair_measured_apart_is_left_out_and_counted():
    rows = []
    for k in range(1, 6):
        rows += [run("native", "charliecloud", k, 10.0 + 0.1 * k, 2 * k),
                 run("charliecloud", "charliecloud", k, 10.1 + 0.1 * k, 2 * k + 1)]
    rows[-1] = run("charliecloud", "charliecloud", 5, 7.0, 120)  # re-measured 2 h later
    table = overhead_summary(with_blocks(pd.DataFrame(rows)), base_config())
    row = table.iloc[0]
    assert row["n"] == 4 and row["n_pairs_split"] == 1
    assert "1 pair not measured together left out" in row["verdict_text"]


def test_block_start_and_end_span_the_block():
    runs = with_blocks(pd.DataFrame([run("native", "charliecloud", 1, 10, 0),
                                     run("charliecloud", "charliecloud", 1, 10, 1)]))
    assert runs["block_id"].nunique() == 1
    assert set(runs["block_start"]) == {T0.isoformat()}
    assert set(runs["block_end"]) == {(T0 + timedelta(minutes=1, seconds=30)).isoformat()}


def test_every_runs_csv_column_has_a_declared_role():
    undeclared = [c for c in RUN_COLUMNS if columns.role(c) is None]
    assert not undeclared
    # no measured value is ever a grouping column
    from scalesweep.campaign.analysis_cli import is_measurement

    for name in ("achieved_gflops_per_rank", "flops_per_step", "block_id", "probe_gbps"):
        assert is_measurement(name), name
    for name in ("workload", "arm", "nodes", "model_label"):
        assert not is_measurement(name), name


def scalesweep(*args) -> subprocess.CompletedProcess:
    from conftest import scalesweep_cli

    return scalesweep_cli(*args)  # in this process (tests/conftest.py)


def test_the_cli_on_a_campaigns_runs_csv_gives_the_campaigns_verdicts(tmp_path):
    rng = np.random.default_rng(1)
    rows = []
    for ranks in (1, 2):
        for k in range(1, 7):
            t = 10.0 / ranks * (1 + 0.03 * rng.standard_normal())
            rows += [run("native", "charliecloud", k, t, 10 * k, ranks=ranks),
                     run("charliecloud", "charliecloud", k, t * 1.02, 10 * k + 1, ranks=ranks)]
    rows = [{**r, "achieved_gflops_per_rank": float(rng.uniform(1, 2))} for r in rows]
    runs = with_blocks(pd.DataFrame(rows))
    cfg = base_config()
    cfg["sweep"]["baseline"] = 1
    summary = tmp_path / "results" / "summary"
    summary.mkdir(parents=True)
    runs.to_csv(summary / "runs.csv", index=False)
    expected = overhead_summary(pd.read_csv(summary / "runs.csv"), cfg)
    (summary / "campaign.json").write_text(json.dumps(campaign_record(cfg, runs)))
    result = scalesweep("overhead", summary / "runs.csv")
    assert result.returncode == 0, result.stderr
    out = pd.read_csv(io.StringIO(result.stdout))
    assert out["verdict_text"].tolist() == expected["verdict_text"].tolist()
    assert "campaign's own analysis" in result.stderr and "+-5.0%" in result.stderr
    scaling = scalesweep("scaling", summary / "runs.csv")
    assert scaling.returncode == 0, scaling.stderr
    got = pd.read_csv(io.StringIO(scaling.stdout))
    want = scaling_summary(pd.read_csv(summary / "runs.csv"), cfg)
    assert len(got) == len(want) == 4  # 2 runtimes x 2 counts, never n=1 rows
    assert got["n"].min() >= 6
    fit = scalesweep("fit", summary / "runs.csv")
    assert fit.returncode == 0, fit.stderr
    # an option asks for another analysis: said so
    other = scalesweep("overhead", summary / "runs.csv", "--margin-pct", "2")
    assert other.returncode == 0, other.stderr
    assert "not as its campaign did" in other.stderr


@pytest.mark.parametrize("margin", [5.0])
def test_campaign_record_says_what_the_verdicts_rest_on(margin):
    runs = with_blocks(pd.DataFrame([run("native", "charliecloud", 1, 10, 0)]))
    record = campaign_record(base_config(), runs)
    assert record["settings"]["margin_pct"] == margin
    assert record["settings"]["pair_col"] == "block_id"
    assert record["runs"] == 1 and record["first_start"] == T0.isoformat()


def test_the_verdict_says_when_runs_differ_far_more_than_inside_themselves():
    rng = np.random.default_rng(3)
    rows = []
    for k in range(1, 9):
        t = 10 * float(np.exp(0.15 * rng.standard_normal()))  # 15% between runs
        for rt, minute in (("native", 2 * k), ("native-aa", 2 * k + 1)):
            r = run(rt, "native-aa", k, t * (1 + 0.01 * rng.standard_normal()), minute)
            rows.append({**r, "payload": "llm", "within_run_cv_pct": 3.0})
    table = overhead_summary(with_blocks(pd.DataFrame(rows)), base_config())
    row = table.iloc[0]
    assert row["time_cv_pct"] > 9 and row["within_run_cv_pct"] == 3.0
    assert "runs differ far more from each other than inside themselves" in row["verdict_text"]
    # the same-block pairs still see through it: no false difference
    assert row["verdict"] in ("equivalent", "inconclusive")
