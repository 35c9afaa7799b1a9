"""Warm-up blocks (measurement.warmup_blocks, issue #39): the first blocks of every series
are measured like any other, kept and labelled (runs.csv and points.csv: warmup), and
left out of every statistic; sweep.repeats and measurement.max_repeats count the blocks
after them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO
from test_blocks import base_config, run
from scalesweep.analyse.collect import point_states, with_blocks, with_warmup
from scalesweep.analyse.decision import blocks_at_spread, decide
from scalesweep.analyse.fits import campaign_training_runs
from scalesweep.analyse.summary import overhead_summary, scaling_summary
from scalesweep.plan.adaptive import Series, asked_blocks, block_bounds, repeat_bounds
from scalesweep.plan.sweep import WARMUP_BLOCKS, is_warmup, sweep_points

SERIES = Series("cnn", 1, 0, 1, 1, "charliecloud")


def config(warmup: int, adaptive: bool = False) -> dict:
    return base_config(warmup_blocks=warmup, adaptive=adaptive, max_repeats=6)


def test_the_default_is_the_schemas_one_warm_up_block():
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    default = schema["properties"]["measurement"]["properties"]["warmup_blocks"]["default"]
    assert default == WARMUP_BLOCKS == 1
    assert is_warmup({}, 1) and not is_warmup({}, 2)  # a config without the key
    assert not is_warmup({"measurement": {"warmup_blocks": 0}}, 1)


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_a_fixed_series_measures_its_warm_up_blocks_then_sweep_repeats(warmup):
    points = sweep_points(config(warmup))  # sweep.repeats: 3
    per_series = {}
    for p in points:
        per_series.setdefault(Series.of(p), set()).add(p.repeat)
    assert per_series and all(r == set(range(1, warmup + 4)) for r in per_series.values())
    assert block_bounds(config(warmup), "cnn") == (warmup + 3, warmup + 3)


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_the_walk_asks_for_the_warm_up_blocks_on_top(warmup):
    cfg = config(warmup, adaptive=True)
    assert repeat_bounds(cfg, "cnn") == (3, 6)  # counted: the config's numbers
    assert block_bounds(cfg, "cnn") == (warmup + 3, warmup + 6)
    asked = []

    def wants_more(k):  # a decision that always wants another block
        asked.append(k)
        return {"series": SERIES.as_dict(), "round": k, "enough": False,
                "valid_repeats": {}, "comparisons": {}}

    assert asked_blocks(SERIES, cfg, wants_more) == warmup + 6
    assert asked[0] == warmup + 3  # the first decision: after the minimum of blocks
    assert asked_blocks(SERIES, cfg, lambda k: None) == warmup + 3  # none made yet


def _runs(cold: float, blocks: int = 8, disturbed_first: bool = False) -> list[dict]:
    """A series whose first block is cold: its container run ``cold`` times slower."""
    rng = np.random.default_rng(3)
    rows = []
    for k in range(1, blocks + 1):
        t = 10.0 * (1 + 0.01 * rng.standard_normal())
        factor = cold if k == 1 else 1.02 * (1 + 0.005 * rng.standard_normal())
        rows += [{**run("native", "charliecloud", k, t, 2 * k),
                  "disturbed": disturbed_first and k == 1},
                 run("charliecloud", "charliecloud", k, t * factor, 2 * k + 1)]
    return rows


KEPT = ["verdict", "overhead_pct", "ci_half_width_pp", "n", "n_native", "p_value"]


def test_decisions_ignore_the_warm_up_blocks():
    runs = _runs(cold=1.25, disturbed_first=True)
    with_warm = decide(SERIES, 8, runs, config(1, adaptive=True))
    without = decide(SERIES, 8, [r for r in runs if r["repeat"] != 1],
                     config(0, adaptive=True))
    assert with_warm["valid_repeats"] == without["valid_repeats"]
    assert with_warm["valid_repeats"]["native"] == list(range(2, 9))
    assert with_warm["disturbed_repeats"] == {"native": [], "charliecloud": []}
    got, want = (d["comparisons"]["charliecloud"] for d in (with_warm, without))
    assert {k: got[k] for k in KEPT} == {k: want[k] for k in KEPT}
    # the cold block, counted, changes the comparison: the test can tell
    counted = decide(SERIES, 8, runs, config(0, adaptive=True))["comparisons"]["charliecloud"]
    assert counted["n"] == want["n"]  # (its native run: disturbed)
    runs[0]["disturbed"] = False
    counted = decide(SERIES, 8, runs, config(0, adaptive=True))["comparisons"]["charliecloud"]
    assert counted["n"] == want["n"] + 1
    assert counted["ci_half_width_pp"] > 5 * want["ci_half_width_pp"]


def _table(rows: list[dict], warmup: int) -> pd.DataFrame:
    return with_warmup(with_blocks(pd.DataFrame(rows)), {"measurement": {"warmup_blocks": warmup}})


def test_the_verdict_leaves_out_a_cold_first_block_as_if_never_measured():
    rows = _runs(cold=1.25, disturbed_first=True)
    cfg = config(1)
    table = overhead_summary(_table(rows, 1), cfg).iloc[0]
    reference = overhead_summary(_table([r for r in rows if r["repeat"] != 1], 0), cfg).iloc[0]
    for col in (*KEPT, "overhead_ci95_low_pct", "overhead_ci95_high_pct", "verdict_text"):
        assert table[col] == reference[col], col
    # counted apart: n_warmup (both sides), never in n_disturbed (its native run was both)
    assert table["n_warmup"] == 2 and table["n_disturbed"] == 0
    assert reference["n_warmup"] == 0
    # warmup_blocks 0: today's behaviour, the cold block in the verdict
    rows[0]["disturbed"] = False
    cold = overhead_summary(_table(rows, 0), config(0)).iloc[0]
    assert cold["n"] == reference["n"] + 1
    # (the effect: one cold run widens the interval and changes the verdict)
    assert cold["ci_half_width_pp"] > 5 * reference["ci_half_width_pp"]
    assert reference["verdict"] == "equivalent" != cold["verdict"]


def test_scaling_and_fits_leave_out_warm_up_runs_and_count_them():
    rows = _runs(cold=1.25)
    runs = _table(rows, 1)
    table = scaling_summary(runs, config(1))
    assert set(table["n"]) == {7} and set(table["n_warmup"]) == {1}
    assert set(table["n_disturbed"]) == {0}
    assert (campaign_training_runs(runs)["repeat"] > 1).all()
    assert set(scaling_summary(_table(rows, 0), config(0))["n"]) == {8}


def test_points_carry_the_warm_up_flag_beside_their_state(tmp_path):
    points = sweep_points(config(1))
    states = point_states(points, str(tmp_path), config=config(1))
    assert (states["warmup"] == (states["repeat"] == 1)).all()
    assert set(states["state"]) == {"missing"}  # a flag, not a state
    assert not point_states(points, str(tmp_path), config=config(0))["warmup"].any()


@pytest.mark.parametrize("spread", [(0.0, 0.0), (0.01, 0.03), (0.01, 0.5)])
def test_the_plan_counts_the_warm_up_blocks(spread):
    """`scalesweep plan`'s blocks (decision.blocks_at_spread): the same decisions, the
    warm-up blocks on top."""
    blocks = [blocks_at_spread(SERIES, config(w, adaptive=True), {"charliecloud": spread})
              for w in (0, 1, 2)]
    assert blocks == [blocks[0], blocks[0] + 1, blocks[0] + 2]
    assert 3 <= blocks[0] <= 6
