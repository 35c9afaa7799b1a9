"""Speedup and parallel efficiency on tables of runs (``scaling_table``): per group and
count against a baseline count, strong or weak, with Fieller's CI of the efficiency.
Outputs keep full precision: rounding is for whoever prints them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from scalesweep.analyse.frame import (TableError, as_list, describe_group, grouped,
                                      require_positive_times, require_table, require_valid)
from scalesweep.analyse.stats import CONFIDENCE, describe_repeats, fieller_from_moments
SCALING_MODES = ("strong", "weak")


# scaling_table's columns after the group columns and the count
SCALING_COLUMNS = ["time_s", "n", "median", "min", "max", "std", "ci95_low", "ci95_high",
                   "cv", "baseline_count", "baseline_time_s", "linear_time_s", "speedup",
                   "efficiency_pct", "efficiency_ci95_low_pct", "efficiency_ci95_high_pct",
                   "flag"]


def scaling_table(
    df: pd.DataFrame,
    count_col: str = "nodes",
    time_col: str = "time_s",
    group_cols: Iterable[str] = (),
    baseline: int | None = None,
    mode: str = "strong",
    cv_threshold: float = 0.05,
) -> pd.DataFrame:
    """Speedup and parallel efficiency per group x count, relative to a baseline count.

    Output columns: group columns, ``count_col``, time_s (mean over repeats), n, median,
    min, max, std, ci95_low, ci95_high, cv, baseline_count, baseline_time_s,
    linear_time_s, speedup, efficiency_pct, efficiency_ci95_low_pct,
    efficiency_ci95_high_pct, flag.

    With r = count / baseline_count:
    - strong (fixed total work): linear_time_s = baseline_time_s / r,
      speedup = baseline_time_s / time_s;
    - weak (fixed work per rank): linear_time_s = baseline_time_s, speedup is the
      scaled speedup r * baseline_time_s / time_s (work done per second, relative).
    In both, efficiency_pct = linear_time_s / time_s * 100 = speedup / r * 100. Its 95%
    CI is Fieller's interval for the ratio of mean times (baseline / this count, repeats
    independent), NaN with fewer than two repeats on a side or where unbounded; the
    baseline row's efficiency is 100 by definition (a zero-width interval).

    The baseline defaults to the smallest count of each group; an explicit one must
    exist in every group. flag joins with ';': superlinear (efficiency above 100 after
    rounding to 2 decimals), high_variance (cv > cv_threshold), single_repeat (n == 1).
    """
    if mode not in SCALING_MODES:
        raise TableError(f"mode must be one of {', '.join(SCALING_MODES)}, not {mode!r}")
    group_cols = as_list(group_cols)
    require_table(df, [*group_cols, count_col, time_col])
    require_positive_times(df, time_col)
    counts = pd.to_numeric(df[count_col], errors="coerce")
    whole = counts.notna() & np.isfinite(counts) & (counts > 0) & (counts % 1 == 0)
    require_valid(df, count_col, whole, "a positive whole number")
    runs = df.assign(**{count_col: counts.astype("int64")})

    table = describe_repeats(runs, [*group_cols, count_col], time_col)
    table = table.rename(columns={"mean": "time_s"}).sort_values(
        [*group_cols, count_col], kind="stable", ignore_index=True
    )
    per_group = []
    for key, group in grouped(table, group_cols):
        present = group[count_col].tolist()
        base = min(present) if baseline is None else baseline
        if base not in present:
            raise TableError(
                f"baseline {count_col}={base} is not in {describe_group(group_cols, key)}"
                f" ({count_col} present: {', '.join(map(str, present))})"
            )
        base_time = group.loc[group[count_col] == base, "time_s"].iloc[0]
        ratio = group[count_col] / base
        weak = mode == "weak"
        linear = base_time if weak else base_time / ratio
        per_group.append(
            group.assign(
                baseline_count=base,
                baseline_time_s=base_time,
                linear_time_s=linear,
                speedup=base_time / group["time_s"] * (ratio if weak else 1),
                efficiency_pct=linear / group["time_s"] * 100,
            )
        )
    table = pd.concat(per_group, ignore_index=True)
    table["efficiency_ci95_low_pct"], table["efficiency_ci95_high_pct"] = _efficiency_ci(
        runs, table, group_cols, count_col, time_col, mode)
    table["flag"] = [
        _scaling_flag(efficiency, cv, n, cv_threshold)
        for efficiency, cv, n in zip(table["efficiency_pct"], table["cv"], table["n"])
    ]
    return table[[*group_cols, count_col, *SCALING_COLUMNS]]


def _efficiency_ci(runs: pd.DataFrame, table: pd.DataFrame, group_cols: list[str],
                   count_col: str, time_col: str, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """95% CI of each row's efficiency: Fieller's interval for mean(baseline times) /
    mean(times) (independent samples, Welch-Satterthwaite df), times 100 / r (strong) or
    100 (weak). The baseline row is 100 by definition (a zero-width interval); NaN where
    either side has fewer than 2 repeats or the interval is unbounded."""
    samples = {
        key if isinstance(key, tuple) else (key,): group.to_numpy(float)
        for key, group in runs.assign(**{time_col: pd.to_numeric(runs[time_col])})
        .groupby([*group_cols, count_col], sort=False, dropna=False)[time_col]
    }
    low, high = np.full(len(table), np.nan), np.full(len(table), np.nan)
    for i, row in enumerate(table.itertuples(index=False)):
        values = dict(zip(table.columns, row))
        key = tuple(values[c] for c in group_cols)
        count, base = values[count_col], values["baseline_count"]
        if count == base:
            low[i] = high[i] = 100.0
            continue
        mine, baseline = samples.get((*key, count)), samples.get((*key, base))
        if mine is None or baseline is None or mine.size < 2 or baseline.size < 2:
            continue
        lo, hi = fieller_from_moments(
            baseline.mean(), 0.0 if np.ptp(baseline) == 0 else baseline.var(ddof=1),
            baseline.size, mine.mean(), 0.0 if np.ptp(mine) == 0 else mine.var(ddof=1),
            mine.size, CONFIDENCE)
        factor = 100.0 if mode == "weak" else 100.0 * base / count
        low[i], high[i] = lo * factor, hi * factor
    return low, high


def _scaling_flag(efficiency_pct: float, cv: float, n: int, cv_threshold: float) -> str:
    flags = []
    if round(efficiency_pct, 2) > 100:  # not for float noise such as 100.000000001
        flags.append("superlinear")
    if cv > cv_threshold:  # a NaN cv (n == 1) compares False
        flags.append("high_variance")
    if n == 1:
        flags.append("single_repeat")
    return ";".join(flags)
