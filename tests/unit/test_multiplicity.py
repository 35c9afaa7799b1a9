"""A campaign's verdicts decided over the campaign (scalesweep.analyse.multiplicity): a
"faster" at p 0.047 alone is not one over 6 comparisons; the q values are scipy's
Benjamini-Hochberg; the campaign's tables (overhead_summary, the CLI, compare) agree."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from scalesweep.analyse.multiplicity import adjust_verdicts
from scalesweep.analyse.overhead import verdict_table
from scalesweep.analyse.verdict import overhead_verdict
from scalesweep.campaign.compare import compare_runs


def row(verdict, p, eq_p, low, high, text=None):
    return {"verdict": verdict, "p_value": p, "equivalence_p_value": eq_p,
            "overhead_ci95_low_pct": low, "overhead_ci95_high_pct": high,
            "verdict_text": text or f"{verdict} (overhead {(low + high) / 2:.1f}%, 95% CI "
                                    f"{low:.1f}% .. {high:.1f}%, n=8 same-block pairs)"}


def campaign_of_six() -> pd.DataFrame:
    """The issue's A/A campaign: native-aa 'faster by 5.2%' at p 0.047 alone, beside five
    comparisons that differ in nothing (large p) and are equivalent."""
    rows = [row("faster", 0.047, 0.40, -10.1, -0.1,
                "faster by 5.2% (overhead -5.2%, 95% CI -10.1% .. -0.1%, n=8 same-block pairs)")]
    rows += [row("equivalent", p, 0.001 * (k + 1), -1.5, 1.5)
             for k, p in enumerate([0.30, 0.45, 0.60, 0.75, 0.90])]
    return pd.DataFrame(rows)


def test_p_0047_alone_is_not_significant_over_six_comparisons():
    out = adjust_verdicts(campaign_of_six())
    aa = out.iloc[0]
    expected_q = stats.false_discovery_control([0.047, 0.30, 0.45, 0.60, 0.75, 0.90])
    assert out["q_value"].to_numpy() == pytest.approx(expected_q)
    assert aa["q_value"] == pytest.approx(0.282)
    assert aa["verdict"] == "inconclusive" and aa["verdict_unadjusted"] == "faster"
    assert aa["comparisons"] == 6
    text = aa["verdict_text"]
    assert text.startswith("inconclusive: not significant over the campaign's 6 comparisons "
                           "(p 0.047 alone, Benjamini-Hochberg q 0.28 >= 0.05)")
    assert "faster" not in text and "slower" not in text
    # the evidence stays: the overhead and its interval
    assert "overhead -5.2%, 95% CI -10.1% .. -0.1%, n=8 same-block pairs" in text
    assert aa["verdict_text_unadjusted"].startswith("faster by 5.2%")
    # the equivalences hold over the campaign (their q below 5%)
    assert out["verdict"].iloc[1:].eq("equivalent").all()
    assert out["verdict_text"].iloc[1:].tolist() == campaign_of_six()["verdict_text"].iloc[1:].tolist()


def test_a_real_difference_survives_and_adjusting_twice_changes_nothing():
    table = campaign_of_six()
    table.loc[0, ["p_value", "overhead_ci95_low_pct", "overhead_ci95_high_pct"]] = [1e-4, -9.0, -4.0]
    out = adjust_verdicts(table)
    assert out.loc[0, "verdict"] == "faster"
    assert out.loc[0, "verdict_text"] == table.loc[0, "verdict_text"]
    pd.testing.assert_frame_equal(adjust_verdicts(out), out)


def test_an_equivalence_that_does_not_hold_over_the_campaign_is_inconclusive():
    # three equivalence tests: 0.04 alone, but q = 0.04 x 3 / 2 = 0.06 with a 0.5 beside it
    table = pd.DataFrame([row("equivalent", 0.8, 0.001, -1, 1),
                          row("equivalent", 0.7, 0.04, -4.5, 4.0),
                          row("inconclusive", 0.5, 0.5, -9, 8)])
    out = adjust_verdicts(table)
    assert out["verdict"].tolist() == ["equivalent", "inconclusive", "inconclusive"]
    assert out.loc[1, "equivalence_q_value"] == pytest.approx(0.06)
    assert "equivalence within the margin not shown over the campaign's 3 comparisons" in \
        out.loc[1, "verdict_text"]


def test_overhead_summary_and_verdict_table_rows_agree_with_overhead_verdict():
    """The adjustment only removes claims: a row adjusted to a claim had that claim alone."""
    rng = np.random.default_rng(7)
    rows = []
    for group in range(6):
        for block in range(8):
            base = float(np.exp(rng.normal(0, 0.03)))
            for runtime in ("native", "native-aa"):
                rows.append({"g": group, "runtime": runtime, "block_id": f"{group}-{block}",
                             "time_s": base * float(np.exp(rng.normal(0, 0.03)))})
    runs = pd.DataFrame(rows)
    table = verdict_table(runs, ["g"], pair_col="block_id", margin_pct=5.0)
    out = adjust_verdicts(table)
    for _, r in out.iterrows():
        alone = overhead_verdict(
            runs[(runs.g == r.g) & (runs.runtime == "native")]["time_s"],
            runs[(runs.g == r.g) & (runs.runtime == "native-aa")]["time_s"],
            paired=True, margin_pct=5.0)
        assert r["verdict_unadjusted"] == alone["verdict"]
        assert r["verdict"] in (alone["verdict"], "inconclusive")


def test_compare_names_a_regression_only_over_every_matched_point():
    rng = np.random.default_rng(11)

    def campaign(shift):
        return pd.DataFrame([{"workload": "cnn", "payload": "cnn", "model_label": "",
                              "runtime": "native", "nodes": 1, "gpus": 0, "ranks": r,
                              "threads": 1, "time_s": 10 * (1 + shift * (r == 1))
                              * float(np.exp(rng.normal(0, 0.01)))}
                             for r in range(1, 9) for _ in range(6)])

    out = compare_runs(campaign(0.0), campaign(0.10), threshold=2.0)
    assert "q_value" in out.columns
    q = stats.false_discovery_control(out["p_value"].to_numpy(float))
    assert out["q_value"].to_numpy() == pytest.approx(q)
    regressions = out[out["verdict"] == "regression"]
    assert regressions["ranks"].tolist() == [1]  # the real one, nothing named by chance
    assert (out.loc[out["verdict"].isin(["regression", "improvement"]), "q_value"] < 0.05).all()


def test_an_inconclusive_verdict_says_what_settling_it_would_cost():
    """overhead.csv's inconclusive row: the measurement its repeats_needed blocks would
    take at the series' own seconds per block, and that it is beyond max_repeats."""
    from test_blocks import base_config, run

    from scalesweep.analyse.collect import with_blocks
    from scalesweep.analyse.summary import overhead_summary

    rng = np.random.default_rng(5)
    rows = []
    for k in range(1, 6):
        t = 10.0 * float(np.exp(rng.normal(0, 0.08)))
        for runtime in ("native", "charliecloud"):
            row = run(runtime, "charliecloud", k, t * float(np.exp(rng.normal(0, 0.08))),
                      2 * k + (runtime != "native"))
            row["harness_wall_s"] = 12.0  # a block: 24 s
            rows.append(row)
    config = base_config(max_repeats=6)
    table = overhead_summary(with_blocks(pd.DataFrame(rows)), config)
    row_ = table.iloc[0]
    assert row_["verdict"] == "inconclusive" and row_["repeats_to_decide"] > 1
    more = int(row_["repeats_to_decide"])  # to a verdict, as the futility stop counts
    minutes = more * 24 / 60
    expected = (f"~{more * 24:.0f} s" if more * 24 < 120 else f"~{minutes:.0f} min")
    assert (f"to a verdict about {more} more pairs, {expected} of measurement at 24 s per "
            "block") in row_["verdict_text"]
    assert ("beyond measurement.max_repeats=6: it cannot settle within this campaign's "
            "budget") in row_["verdict_text"]


def test_adjusting_again_keeps_what_was_added_to_a_text_since():
    """The report's second pass (add_q_values) must not drop what overhead_summary added
    to a verdict's text after deciding it (the cost of settling it, the spread)."""
    once = adjust_verdicts(campaign_of_six())
    once.loc[0, "verdict_text"] += "; ~7 min of measurement at 32 s per block"
    once.loc[1, "verdict_text"] += "; runs differ far more from each other"
    twice = adjust_verdicts(once)
    assert twice["verdict_text"].tolist() == once["verdict_text"].tolist()
