"""The statistics behind a paired verdict, checked by hand and against scipy: normality of
the per-pair log ratios (Shapiro-Wilk) picks the paired t interval or the rank interval
(Hodges-Lehmann estimate, exact Wilcoxon signed-rank CI and tests); Benjamini-Hochberg
q values and the count of chance "significant" results for campaigns with many
comparisons."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from scalesweep.analyse.stats import (EXACT_SIGNED_RANK_MAX_N, expected_false_positives,
                                      fdr_adjust, rank_ci_order, rank_interval, rank_min_pairs,
                                      signed_rank_cdf, signed_rank_p, walsh_averages)
from scalesweep.analyse.verdict import (CI_METHODS, PAIRED_T, RANK_METHOD, RANK_TOO_FEW,
                                        UNPAIRED_METHOD, overhead_verdict)


def times_with(d, base=60.0):
    """(native, container) times whose per-pair log ratios are exactly ``d``."""
    d = np.asarray(d, dtype=float)
    native = np.full(d.size, base)
    return native, native * np.exp(d)


# --- which method -------------------------------------------------------------------------

def test_normal_log_ratios_get_the_paired_t_interval():
    rng = np.random.default_rng(4)
    d = rng.normal(0.01, 0.02, 10)
    assert stats.shapiro(d).pvalue >= 0.05
    v = overhead_verdict(*times_with(d), paired=True, margin_pct=5)
    assert v["ci_method"] == PAIRED_T == "paired t"
    assert v["normality_p_value"] == pytest.approx(stats.shapiro(d).pvalue)
    half = stats.t.ppf(0.975, 9) * d.std(ddof=1) / math.sqrt(10)
    assert v["ci95_low_pct"] == pytest.approx(math.expm1(d.mean() - half) * 100)
    assert v["ci95_high_pct"] == pytest.approx(math.expm1(d.mean() + half) * 100)
    assert v["p_value"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue)
    assert "Hodges" not in v["verdict_text"]


def test_normality_is_not_computed_where_it_cannot_be():
    two = overhead_verdict([10.0, 10.2], [10.1, 10.4], paired=True)
    assert two["ci_method"] == "paired t" and math.isnan(two["normality_p_value"])
    flat = overhead_verdict([10.0] * 4, [10.5] * 4, paired=True)  # no spread
    assert flat["ci_method"] == "paired t" and math.isnan(flat["normality_p_value"])
    unpaired = overhead_verdict([10.0, 10.2, 9.9], [10.1, 10.4, 10.3])
    assert unpaired["ci_method"] == UNPAIRED_METHOD == "Fieller/Welch"
    assert math.isnan(unpaired["normality_p_value"])
    for v in (two, flat, unpaired):
        assert v["ci_method"] in CI_METHODS
        assert isinstance(v["normality_p_value"], float)


# a hand-computed case: 7 pairs, one of them an outlier (normality rejected)
D7 = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.50]


def test_an_outlier_pair_switches_to_the_hodges_lehmann_wilcoxon_interval():
    """The 28 Walsh averages (d_i + d_j) / 2 of D7: the 21 of the first six are
    0.005 x (i + j) (i + j = 2, 3, 4, 4, 5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8, ...), then
    0.255, 0.26, 0.265, 0.27, 0.275, 0.28 and 0.5. The exact two-sided 5% critical
    value of the signed-rank statistic for n = 7 is 2 (P(T <= 2) = 3/128 <= 2.5% <
    P(T <= 3) = 5/128), so the 95% CI is [W_(3), W_(26)] = [0.02, 0.275]; the
    Hodges-Lehmann estimate is the median, (W_(14) + W_(15)) / 2 = 0.04."""
    assert stats.shapiro(D7).pvalue < 0.05
    v = overhead_verdict(*times_with(D7), paired=True, margin_pct=5)
    assert v["ci_method"] == RANK_METHOD == "Hodges-Lehmann/Wilcoxon"
    assert v["normality_p_value"] == pytest.approx(stats.shapiro(D7).pvalue)
    assert v["overhead_pct"] == pytest.approx(math.expm1(0.04) * 100)
    assert v["ci95_low_pct"] == pytest.approx(math.expm1(0.02) * 100)
    assert v["ci95_high_pct"] == pytest.approx(math.expm1(0.275) * 100)
    # every pair slower: T = 28, two-sided p = 2 x 2^-7
    assert v["p_value"] == pytest.approx(2 / 128)
    assert v["p_value"] == pytest.approx(stats.wilcoxon(D7, method="exact").pvalue)
    # the 90% interval (critical value 3: [W_(4), W_(25)] = [0.02, 0.27]) reaches past
    # ln(1.05): not equivalent; the 95% CI excludes 0: slower
    assert v["verdict"] == "slower"
    assert v["verdict_text"].startswith(
        f"slower by {v['overhead_pct']:.1f}% (95% Hodges-Lehmann/Wilcoxon CI 2.0% .. ")
    assert v["verdict_text"].endswith("n=7 pairs)")


def test_the_paired_t_interval_would_have_been_pulled_by_the_outlier():
    """Why the switch matters: with the outlier, the t interval of D7 is wide and
    centred on the mean (0.101), the rank interval on the bulk of the pairs."""
    d = np.array(D7)
    half = stats.t.ppf(0.975, 6) * d.std(ddof=1) / math.sqrt(7)
    assert d.mean() - half < 0  # the t interval would say "inconclusive"
    assert overhead_verdict(*times_with(D7), paired=True, margin_pct=5)["ci95_low_pct"] > 0


def signed_rank_distribution_by_enumeration(n):
    counts = np.zeros(n * (n + 1) // 2 + 1)
    for signs in itertools.product((0, 1), repeat=n):
        counts[sum(r for r, s in zip(range(1, n + 1), signs) if s)] += 1
    return np.cumsum(counts) / 2**n


@pytest.mark.parametrize("n", [1, 2, 5, 7, 10])
def test_the_exact_signed_rank_distribution_is_that_of_random_signs(n):
    np.testing.assert_allclose(signed_rank_cdf(n),
                               signed_rank_distribution_by_enumeration(n), rtol=1e-12)


def test_beyond_the_exact_range_the_signed_rank_distribution_is_normal():
    n = EXACT_SIGNED_RANK_MAX_N
    exact = signed_rank_cdf(n)
    top = n * (n + 1) // 2
    normal = stats.norm.cdf((np.arange(top + 1) + 0.5 - top / 2)
                            / math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    assert np.abs(exact - normal).max() < 1e-3  # where the two meet, they agree
    beyond = signed_rank_cdf(n + 1)
    assert beyond[-1] == pytest.approx(1) and beyond[(n + 1) * (n + 2) // 4] == pytest.approx(
        0.5, abs=1e-3)


def test_rank_interval_orders_match_the_published_critical_values():
    """Two-sided 5% critical values of the signed-rank statistic (standard tables):
    the CI is [W_(c+1), W_(N-c)]; none for n <= 5."""
    critical = {6: 0, 7: 2, 8: 3, 9: 5, 10: 8, 11: 10, 12: 13, 13: 17, 14: 21, 15: 25,
                20: 52, 25: 89, 30: 137}
    for n, c in critical.items():
        assert rank_ci_order(n, 0.95) == c + 1, n
    for n in range(1, 6):
        assert rank_ci_order(n, 0.95) == 0
    assert rank_min_pairs(0.95) == 6 and rank_min_pairs(0.90) == 5


def test_signed_rank_p_values_match_scipy_without_ties():
    rng = np.random.default_rng(17)
    for n in (6, 8, 12, 20):
        for _ in range(20):
            d = rng.standard_t(2, n) * 0.05 + 0.02
            walsh = walsh_averages(d)
            for alternative in ("two-sided", "greater", "less"):
                ours = signed_rank_p(walsh, n, 0.0, alternative)
                theirs = stats.wilcoxon(d, method="exact", alternative=alternative).pvalue
                assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-15)


def test_rank_verdicts_are_the_intervals_read_off():
    """equivalent <=> the 90% rank interval lies within ln(1 +- margin); else slower /
    faster <=> the 95% interval excludes 0 (the tests and the intervals are dual)."""
    rng = np.random.default_rng(5)
    bounds = (math.log(0.95), math.log(1.05))
    seen = set()
    for _ in range(400):
        n = int(rng.integers(6, 16))
        d = rng.standard_t(1.5, n) * rng.choice([0.003, 0.01, 0.03]) + rng.normal(0, 0.03)
        v = overhead_verdict(*times_with(d), paired=True, margin_pct=5)
        if v["ci_method"] != RANK_METHOD:
            continue
        walsh = walsh_averages(d)
        lo90, hi90 = rank_interval(walsh, n, 0.90)
        lo95, hi95 = rank_interval(walsh, n, 0.95)
        assert v["ci95_low_pct"] == pytest.approx(math.expm1(lo95) * 100)
        assert v["ci95_high_pct"] == pytest.approx(math.expm1(hi95) * 100)
        if bounds[0] < lo90 and hi90 < bounds[1]:
            expected = "equivalent"
        elif lo95 > 0:
            expected = "slower"
        elif hi95 < 0:
            expected = "faster"
        else:
            expected = "inconclusive"
        assert v["verdict"] == expected
        assert (v["equivalence_p_value"] < 0.05) == (expected == "equivalent")
        seen.add(expected)
        if expected == "inconclusive":
            assert v["repeats_needed"] > 0 or v["target_met"]
    assert {"equivalent", "slower", "faster", "inconclusive"} <= seen


def test_too_few_pairs_for_a_rank_interval_is_inconclusive_and_says_so():
    d = [0.01, 0.012, 0.011, 0.013, 0.30]  # 5 pairs, one outlier
    assert stats.shapiro(d).pvalue < 0.05
    v = overhead_verdict(*times_with(d), paired=True, margin_pct=5, target_ci_pp=3)
    assert v["ci_method"] == RANK_TOO_FEW
    assert v["ci_method"] == "Hodges-Lehmann (too few pairs for a 95% rank interval)"
    assert v["verdict"] == "inconclusive" and not v["target_met"]
    assert v["repeats_needed"] >= 1  # at least to the 6 pairs a rank interval needs
    assert math.isnan(v["ci95_low_pct"]) and math.isnan(v["equivalence_p_value"])
    assert v["overhead_pct"] == pytest.approx(
        math.expm1(np.median(walsh_averages(np.array(d)))) * 100)
    assert v["p_value"] == pytest.approx(2 / 32)  # all 5 positive: the smallest p there is
    assert "too few pairs for a rank interval" in v["verdict_text"]
    assert v["verdict_text"].startswith("inconclusive: about ")
    assert v["verdict_text"].endswith("n=5 pairs)")


def test_rank_repeats_needed_reach_the_target_by_the_t_projection_of_the_rank_spread():
    d = np.array([0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.60])
    v = overhead_verdict(*times_with(d), paired=True, margin_pct=5, target_ci_pp=3)
    assert v["ci_method"] == RANK_METHOD and not v["target_met"]
    walsh = walsh_averages(d)
    low, high = rank_interval(walsh, 8, 0.95)
    spread = (high - low) / 2 * math.sqrt(8) / stats.t.ppf(0.975, 7)

    def half(size):
        h = stats.t.ppf(0.975, size - 1) * spread / math.sqrt(size)
        return (math.expm1((low + high) / 2 + h) - math.expm1((low + high) / 2 - h)) * 50

    k = v["repeats_needed"]
    assert k > 0 and half(8 + k) <= 3 < half(8 + k - 1)


# --- many comparisons ---------------------------------------------------------------------

def test_benjamini_hochberg_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): x 4/1, 4/2, 4/3, 4/4 = 0.02, 0.02, 0.04,
    # 0.04; the running minimum from the top leaves them
    np.testing.assert_allclose(fdr_adjust([0.01, 0.04, 0.03, 0.005]),
                               [0.02, 0.04, 0.04, 0.02])
    # 0.04 x 3 = 0.12 is lowered to the next one's 0.041 x 3/2 = 0.0615
    np.testing.assert_allclose(fdr_adjust([0.041, 0.04, 0.9]), [0.0615, 0.0615, 0.9])
    # NaN stays and does not count: m = 2
    q = fdr_adjust([0.01, np.nan, 0.04])
    assert math.isnan(q[1])
    np.testing.assert_allclose(q[[0, 2]], [0.02, 0.04])
    assert fdr_adjust([]).size == 0
    assert np.isnan(fdr_adjust([np.nan, np.nan])).all()
    assert fdr_adjust(np.array([[0.01, 0.02], [0.03, 0.5]])).shape == (2, 2)
    np.testing.assert_allclose(fdr_adjust([0.3]), [0.3])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fdr_adjust([0.5, 1.5])


def bh_by_definition(p) -> list[float]:
    """Benjamini-Hochberg from its definition, a double loop: q_(i) = min over j >= i of
    p_(j) x m / j over the p values sorted ascending, at most 1; NaN left out of m and
    given back as NaN."""
    kept = sorted((v, i) for i, v in enumerate(p) if not math.isnan(v))
    m = len(kept)
    q = [math.nan] * len(p)
    for rank, (_, i) in enumerate(kept, 1):
        q[i] = min(1.0, min(kept[j - 1][0] * m / j for j in range(rank, m + 1)))
    return q


def bh_reference(p) -> np.ndarray:
    """statsmodels' multipletests(method="fdr_bh") over the p values that are not NaN
    where statsmodels is installed, else ``bh_by_definition``."""
    try:
        from statsmodels.stats.multitest import multipletests
    except ImportError:
        return np.array(bh_by_definition(p), dtype=float)
    p = np.asarray(p, dtype=float)
    q = np.full(p.size, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        q[ok] = multipletests(p[ok], method="fdr_bh")[1]
    return q


def test_benjamini_hochberg_matches_a_reference():
    # fdr_adjust is scipy's false_discovery_control over the p values that are not NaN.
    # m = 7: sorted 0.005, 0.01, 0.03, 0.04, 0.04, 0.2, 0.9 x 7/1 .. 7/7 = 0.035, 0.035,
    # 0.07, 0.07, 0.056, 0.2333, 0.9; the running minimum from the top leaves 0.035, 0.035,
    # 0.056, 0.056, 0.056, 0.2333, 0.9 (the tied 0.04s get one q)
    fixed = [0.01, np.nan, 0.04, 0.03, 0.005, 0.04, 0.9, np.nan, 0.2]
    by_hand = [0.035, np.nan, 0.056, 0.056, 0.035, 0.056, 0.9, np.nan, 1.4 / 6]
    np.testing.assert_allclose(bh_by_definition(fixed), by_hand, rtol=0, atol=1e-15)
    np.testing.assert_allclose(bh_reference(fixed), by_hand, rtol=0, atol=1e-15)
    np.testing.assert_allclose(fdr_adjust(fixed), by_hand, rtol=0, atol=1e-15)
    rng = np.random.default_rng(8)
    for m in (1, 2, 5, 40):
        p = np.r_[rng.uniform(0, 1, m), rng.uniform(0, 0.01, m // 2)]
        p[rng.uniform(size=p.size) < 0.2] = np.nan  # not tested: NaN, out of m
        p[: p.size // 3] = np.round(p[: p.size // 3], 2)  # ties
        q = fdr_adjust(p)
        assert (np.isnan(q) == np.isnan(p)).all()
        np.testing.assert_allclose(q, bh_reference(p), rtol=0, atol=1e-15)


def test_expected_false_positives_is_tests_times_level():
    assert expected_false_positives(20, 0.05) == pytest.approx(1.0)
    assert expected_false_positives(7) == pytest.approx(0.35)  # at 1 - CONFIDENCE
    assert expected_false_positives(0, 0.05) == 0.0
    with pytest.raises(ValueError):
        expected_false_positives(-1, 0.05)
    with pytest.raises(ValueError):
        expected_false_positives(3, 1.5)


def test_rates_are_total_work_over_total_time_never_a_mean_of_rates():
    from scalesweep.analyse.stats import rate_stats

    # two runs of the same work: 10 s (1 unit/s... 100 units) and 20 s: 150 units/30 s... no:
    # the same 100 units each: 10 units/s and 5 units/s -> 200 units in 30 s = 6.67/s
    out = rate_stats([10.0, 5.0])
    assert out["mean"] == pytest.approx(200 / 30)
    assert out["mean"] != pytest.approx(7.5)  # the arithmetic mean of the rates
    many = rate_stats([10.0, 10.5, 9.5, 10.2])
    assert many["ci95_low"] < many["mean"] < many["ci95_high"]
    assert rate_stats([]) ["n"] == 0 and np.isnan(rate_stats([3.0])["ci95_low"])
