"""The statistics, general and in one place: the repeats of a measurement described
(mean, Student t CI, cv), rates (harmonic means), Welch's difference, Fieller's ratio
interval and Welch's ratio test, Shapiro-Wilk, the Wilcoxon signed-rank distribution and
its Hodges-Lehmann interval, and Benjamini-Hochberg over many tests. The analyses
(``scaling``, ``overhead``, ``verdict``), the report's tables and the drift table use
these and compute none of their own.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import special, stats

from scalesweep.analyse.frame import (as_list, group_keys, grouped, require_table,
                                      require_valid)

CONFIDENCE = 0.95
# The signed-rank statistic's null distribution is exact up to this many pairs (normal
# with a continuity correction beyond).
EXACT_SIGNED_RANK_MAX_N = 400


def usable(values: np.ndarray) -> np.ndarray:
    """Which values are usable times or rates: finite and positive."""
    return np.isfinite(values) & (values > 0)


def describe_repeats(
    df: pd.DataFrame, group_cols: Iterable[str], value_col: str = "time_s"
) -> pd.DataFrame:
    """One row per group: n, mean, median, min, max, std, ci95_low, ci95_high, cv.

    std uses ddof=1; std, the Student-t CI of the mean and cv are NaN where n == 1.
    What is described here is a size (a time, a memory peak: never below 0): a group whose
    values are all >= 0 has its interval intersected with [0, inf), which keeps its
    coverage (the mean cannot be negative) and never prints a negative time, as the
    t-interval of two repeats can (seen on the H200: 8 ranks, ci95_low -1.22 s).
    """
    group_cols = as_list(group_cols)
    require_table(df, [*group_cols, value_col])
    values = pd.to_numeric(df[value_col], errors="coerce")
    require_valid(df, value_col, values.notna() & np.isfinite(values), "a number")
    table = (
        df.assign(**{value_col: values})
        .groupby(group_keys(df, group_cols), sort=False, dropna=False)[value_col]
        .agg(n="count", mean="mean", median="median", min="min", max="max", std="std")
    )
    table = table.reset_index(drop=not group_cols)
    half_width = (
        stats.t.ppf((1 + CONFIDENCE) / 2, table["n"] - 1) * table["std"] / np.sqrt(table["n"])
    )
    low = table["mean"] - half_width
    table["ci95_low"] = low.where(~((table["min"] >= 0) & (low < 0)), 0.0)
    table["ci95_high"] = table["mean"] + half_width
    table["cv"] = table["std"] / table["mean"]
    return table


def rate_stats(rates) -> dict:
    """n, mean, std, ci95_low, ci95_high of a rate (work per second: images/s, tokens/s,
    GFLOP/s) over repeats that each did the same work: the mean is the harmonic mean (total
    work over total time), never the arithmetic mean of the rates; its 95% CI is the
    Student t interval of the mean time per unit of work (1 / rate), inverted. std is the
    rates' own (ddof=1). NaN CI where n < 2 (or the interval of 1/rate reaches 0)."""
    x = np.asarray(rates, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    n = int(x.size)
    out = {"n": n, "mean": np.nan, "std": np.nan, "ci95_low": np.nan, "ci95_high": np.nan}
    if not n:
        return out
    inv = 1.0 / x
    out["mean"] = float(1.0 / inv.mean())
    if n >= 2:
        out["std"] = 0.0 if np.ptp(x) == 0 else float(x.std(ddof=1))
        sd = 0.0 if np.ptp(inv) == 0 else float(inv.std(ddof=1))
        half = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * sd / np.sqrt(n)
        low_inv, high_inv = inv.mean() - half, inv.mean() + half
        if low_inv > 0:
            out["ci95_low"], out["ci95_high"] = float(1 / high_inv), float(1 / low_inv)
    return out


def describe_rates(df: pd.DataFrame, group_cols: Iterable[str], rate_col: str) -> pd.DataFrame:
    """``rate_stats`` of ``rate_col`` per group: group columns, n, mean, std, ci95_low,
    ci95_high."""
    group_cols = as_list(group_cols)
    rows = []
    # (the columns used only: slices of a wide table per group cost more than the stats)
    for key, group in grouped(df[[*dict.fromkeys([*group_cols, rate_col])]], group_cols):
        rows.append({**dict(zip(group_cols, key)),
                     **rate_stats(pd.to_numeric(group[rate_col], errors="coerce"))})
    return pd.DataFrame(rows, columns=[*group_cols, "n", "mean", "std", "ci95_low",
                                       "ci95_high"])


def sample_stats(values) -> dict:
    """n, mean, std (ddof=1) and the Student t 95% CI of the mean of the finite values; std
    and CI are NaN where n < 2, and zero-width where the values are identical."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    out = {"n": n, "mean": float(x.mean()) if n else np.nan, "std": np.nan,
           "ci95_low": np.nan, "ci95_high": np.nan}
    if n >= 2:
        out["std"] = 0.0 if np.ptp(x) == 0 else float(x.std(ddof=1))
        half = stats.t.ppf((1 + CONFIDENCE) / 2, n - 1) * out["std"] / np.sqrt(n)
        out["ci95_low"], out["ci95_high"] = out["mean"] - half, out["mean"] + half
    return out


def cv_pct(values) -> float:
    """Sample coefficient of variation in percent (NaN with fewer than 2 finite values)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2 or x.mean() == 0:
        return np.nan
    return float(100.0 * x.std(ddof=1) / abs(x.mean()))


def welch_difference(sample, baseline, confidence: float = CONFIDENCE
                     ) -> tuple[float, float, float]:
    """(mean(sample) - mean(baseline), CI low, CI high): Welch's interval (unequal variances,
    Welch-Satterthwaite degrees of freedom). The CI is NaN where either side has fewer
    than 2 finite values; zero-width where neither side varies."""
    a = np.asarray(sample, dtype=float)
    b = np.asarray(baseline, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return np.nan, np.nan, np.nan
    diff = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return diff, np.nan, np.nan
    va = 0.0 if np.ptp(a) == 0 else float(a.var(ddof=1))
    vb = 0.0 if np.ptp(b) == 0 else float(b.var(ddof=1))
    se_a, se_b = va / a.size, vb / b.size
    if se_a + se_b == 0:
        return diff, diff, diff
    dof = (se_a + se_b) ** 2 / (se_a**2 / (a.size - 1) + se_b**2 / (b.size - 1))
    half = float(stats.t.ppf((1 + confidence) / 2, dof) * np.sqrt(se_a + se_b))
    return diff, diff - half, diff + half


def welch_p(sample, baseline) -> float:
    """Welch's two-sided t-test p of mean(sample) = mean(baseline) (NaN where a side has
    fewer than 2 values)."""
    a, b = np.asarray(sample, dtype=float), np.asarray(baseline, dtype=float)
    if a.size < 2 or b.size < 2:
        return np.nan
    with warnings.catch_warnings():
        # Nearly identical repeats make scipy warn of precision loss; p is still right.
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def fieller_ratio_ci(native: np.ndarray, container: np.ndarray) -> tuple[float, float]:
    """Fieller's CI for mean(container) / mean(native), independent samples."""
    return fieller_from_moments(
        container.mean(), container.var(ddof=1), container.size,
        native.mean(), native.var(ddof=1), native.size, CONFIDENCE)


def fieller_from_moments(a: float, var_a: float, n_a: int, b: float, var_b: float,
                          n_b: int, confidence: float) -> tuple[float, float]:
    """Fieller's CI for mean a / mean b of independent samples (sample variances var_a,
    var_b of n_a, n_b values); NaN where unbounded, a point where neither side varies."""
    var_a, var_b = var_a / n_a, var_b / n_b
    ratio = a / b
    if var_a == 0 and var_b == 0:
        return ratio, ratio
    # Welch-Satterthwaite df of a - ratio * b, the pivot Fieller's interval inverts.
    dof = (var_a + ratio**2 * var_b) ** 2 / (
        (var_a**2 / (n_a - 1) if var_a else 0) + ((ratio**2 * var_b) ** 2 / (n_b - 1) if var_b else 0)
    )
    t = stats.t.ppf((1 + confidence) / 2, dof)
    denominator = b * b - t * t * var_b
    if denominator <= 0:  # native mean not distinguishable from 0: unbounded interval
        return np.nan, np.nan
    half = t * np.sqrt(a * a * var_b + b * b * var_a - t * t * var_a * var_b)
    return (a * b - half) / denominator, (a * b + half) / denominator


def ratio_test(a, var_a, n_a, b, var_b, n_b, ratio, alternative):
    """One-sided Welch t-test of mean(a) / mean(b) against ``ratio`` (Fieller's pivot
    a - ratio x b): alternative "greater" tests H0 a/b <= ratio, "less" H0 a/b >= ratio."""
    se_a, se_b = var_a / n_a, ratio**2 * var_b / n_b
    se = np.sqrt(se_a + se_b)
    diff = a - ratio * b
    if se == 0:
        return 0.0 if (diff > 0 if alternative == "greater" else diff < 0) else 1.0
    terms = (se_a**2 / (n_a - 1) if n_a > 1 else 0) + (se_b**2 / (n_b - 1) if n_b > 1 else 0)
    dof = (se_a + se_b) ** 2 / terms
    t = diff / se
    return float(stats.t.sf(t, dof) if alternative == "greater" else stats.t.cdf(t, dof))


@functools.lru_cache(maxsize=8192)
def t_quantile(q: float, dof: int) -> float:
    """Student t quantile (stats.t.ppf), cached: the projections of repeats_needed ask
    for the same few degrees of freedom again and again."""
    return float(special.stdtrit(dof, q))


def normality_p(values) -> float:
    """Shapiro-Wilk p of the finite ``values`` (the verdict's log ratios, the report's
    normality rule); NaN with fewer than 3 of them or where they are all equal."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 3 or np.ptp(x) == 0:
        return np.nan
    with warnings.catch_warnings():
        # near-constant or very long samples: scipy warns, the p value is still given
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.shapiro(x).pvalue)


def walsh_averages(d: np.ndarray) -> np.ndarray:
    """The n(n+1)/2 Walsh averages (d_i + d_j) / 2, i <= j, sorted."""
    i, j = np.triu_indices(d.size)
    return np.sort((d[i] + d[j]) / 2)


@functools.lru_cache(maxsize=32)
def signed_rank_cdf(n: int) -> np.ndarray:
    """P(T <= t) for t = 0 .. n(n+1)/2, T the Wilcoxon signed-rank statistic of n pairs
    under H0 (symmetry about the tested value): exact (each rank's sign a fair coin) up
    to EXACT_SIGNED_RANK_MAX_N pairs, normal with a continuity correction beyond."""
    top = n * (n + 1) // 2
    if n <= EXACT_SIGNED_RANK_MAX_N:
        p = np.zeros(top + 1)
        p[0] = 1.0
        for rank in range(1, n + 1):
            shifted = p[:top + 1 - rank].copy()
            p *= 0.5
            p[rank:] += 0.5 * shifted
        cdf = np.cumsum(p)
    else:
        sd = np.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        cdf = stats.norm.cdf((np.arange(top + 1) + 0.5 - top / 2) / sd)
    cdf = np.minimum(cdf, 1.0)
    cdf.setflags(write=False)
    return cdf


def signed_rank_le(n: int, t: int) -> float:
    """P(T <= t) under H0."""
    t = int(t)
    if t < 0:
        return 0.0
    return float(signed_rank_cdf(n)[min(t, n * (n + 1) // 2)])


def signed_rank_p(walsh: np.ndarray, n: int, mu: float, alternative: str) -> float:
    """The signed-rank test of the centre of d against ``mu``, from d's Walsh averages:
    T = #(averages > mu), the sum of the ranks of |d - mu| over the positive d - mu.
    alternative "greater": H0 centre <= mu, p = P(T >= #(averages > mu)); "less": H0
    centre >= mu, p = P(T <= #(averages >= mu)); "two-sided": twice the smaller of the
    two (at most 1). An average equal to mu (a tie, as where a pair's times are equal)
    counts against rejecting, so that each test rejects exactly where the closed rank
    interval of ``rank_interval`` excludes mu. Exact up to EXACT_SIGNED_RANK_MAX_N
    pairs."""
    top = n * (n + 1) // 2
    # P(T >= t) = P(T <= top - t), by the symmetry of T under H0
    greater = signed_rank_le(n, top - np.count_nonzero(walsh > mu))
    less = signed_rank_le(n, np.count_nonzero(walsh >= mu))
    if alternative == "greater":
        return greater
    if alternative == "less":
        return less
    return float(min(1.0, 2 * min(greater, less)))


def rank_ci_order(n: int, level: float) -> int:
    """k of the two-sided rank CI [W_(k), W_(N+1-k)] (1-based order statistics of the N
    sorted Walsh averages) at ``level``: k - 1 is the largest c with P(T <= c) <= (1 -
    level) / 2, so the coverage is at least ``level``; 0 where no such interval exists."""
    cdf = signed_rank_cdf(n)
    return int(np.searchsorted(cdf, (1 - level) / 2, side="right"))


def rank_min_pairs(level: float) -> int:
    """The fewest pairs with a two-sided rank CI at ``level``: 2^-n <= (1 - level) / 2."""
    n = 1
    while 0.5**n > (1 - level) / 2:
        n += 1
    return n


def rank_interval(walsh: np.ndarray, n: int, level: float) -> tuple[float, float]:
    k = rank_ci_order(n, level)
    if k == 0:
        return np.nan, np.nan
    return float(walsh[k - 1]), float(walsh[walsh.size - k])


def fdr_adjust(p_values) -> np.ndarray:
    """Benjamini-Hochberg adjusted p values (q values) of ``p_values``, in their order.

    q_(i) = min over j >= i of p_(j) x m / j for the p values sorted ascending (m the
    number of them that are not NaN), at most 1: a result with q < alpha is a discovery
    at a false discovery rate of alpha (independent or positively dependent tests).
    scipy's ``false_discovery_control(method="bh")`` computes it over the p values that
    are not NaN: NaN stays NaN and does not count in m. Raises ValueError for a p outside
    [0, 1].
    """
    p = np.asarray(p_values, dtype=float)
    shape = p.shape
    p = p.ravel()
    q = np.full(p.size, np.nan)
    ok = ~np.isnan(p)
    if ((p[ok] < 0) | (p[ok] > 1)).any():
        raise ValueError("p values must lie in [0, 1]")
    if ok.any():
        q[ok] = stats.false_discovery_control(p[ok], method="bh")
    return q.reshape(shape)


def expected_false_positives(n_tests: int, alpha: float = 1 - CONFIDENCE) -> float:
    """How many of ``n_tests`` comparisons would come out "significant" at level
    ``alpha`` by chance alone if none of them had a real difference: n_tests x alpha."""
    if n_tests < 0 or not 0 <= alpha <= 1:
        raise ValueError("n_tests must be >= 0 and alpha in [0, 1]")
    return float(n_tests * alpha)
