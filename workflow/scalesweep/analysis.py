"""Scaling and container-overhead math on tables of runs (pure pandas functions).

Input tables hold one row per run; rows that agree on every grouping column (and on
the count or runtime) are repeats of one measurement. Outputs keep full precision:
rounding is for whoever prints them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd
from scipy import stats

# The one overhead definition: positive = the container is slower than native.
# Published tables differ (HPEC 2019 mixes definitions), so the report quotes this.
OVERHEAD_DEFINITION = "(container - native) / native * 100"
CONFIDENCE = 0.95
STATISTICS = ("mean", "median", "min")
SCALING_MODES = ("strong", "weak")


class TableError(ValueError):
    """The table cannot be analysed as asked: a missing column, value or baseline."""


def overhead_pct(native_s, container_s):
    """Container overhead in percent, by ``OVERHEAD_DEFINITION``."""
    return (np.asarray(container_s) - np.asarray(native_s)) / np.asarray(native_s) * 100


def describe_repeats(
    df: pd.DataFrame, group_cols: Iterable[str], value_col: str = "time_s"
) -> pd.DataFrame:
    """One row per group: n, mean, median, min, max, std, ci95_low, ci95_high, cv.

    std uses ddof=1; std, the Student-t CI of the mean and cv are NaN where n == 1.
    """
    group_cols = _as_list(group_cols)
    _require_table(df, [*group_cols, value_col])
    values = pd.to_numeric(df[value_col], errors="coerce")
    _require_valid(df, value_col, values.notna() & np.isfinite(values), "a number")
    table = (
        df.assign(**{value_col: values})
        .groupby(_group_keys(df, group_cols), sort=False, dropna=False)[value_col]
        .agg(n="count", mean="mean", median="median", min="min", max="max", std="std")
    )
    table = table.reset_index(drop=not group_cols)
    half_width = (
        stats.t.ppf((1 + CONFIDENCE) / 2, table["n"] - 1) * table["std"] / np.sqrt(table["n"])
    )
    table["ci95_low"] = table["mean"] - half_width
    table["ci95_high"] = table["mean"] + half_width
    table["cv"] = table["std"] / table["mean"]
    return table


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
    linear_time_s, speedup, efficiency_pct, flag.

    With r = count / baseline_count:
    - strong (fixed total work): linear_time_s = baseline_time_s / r,
      speedup = baseline_time_s / time_s;
    - weak (fixed work per rank): linear_time_s = baseline_time_s, speedup is the
      scaled speedup r * baseline_time_s / time_s (work done per second, relative).
    In both, efficiency_pct = linear_time_s / time_s * 100 = speedup / r * 100.

    The baseline defaults to the smallest count of each group; an explicit one must
    exist in every group. flag joins with ';': superlinear (efficiency above 100 after
    rounding to 2 decimals), high_variance (cv > cv_threshold), single_repeat (n == 1).
    """
    if mode not in SCALING_MODES:
        raise TableError(f"mode must be one of {', '.join(SCALING_MODES)}, not {mode!r}")
    group_cols = _as_list(group_cols)
    _require_table(df, [*group_cols, count_col, time_col])
    _require_positive_times(df, time_col)
    counts = pd.to_numeric(df[count_col], errors="coerce")
    whole = counts.notna() & np.isfinite(counts) & (counts > 0) & (counts % 1 == 0)
    _require_valid(df, count_col, whole, "a positive whole number")
    runs = df.assign(**{count_col: counts.astype("int64")})

    table = describe_repeats(runs, [*group_cols, count_col], time_col)
    table = table.rename(columns={"mean": "time_s"}).sort_values(
        [*group_cols, count_col], kind="stable", ignore_index=True
    )
    per_group = []
    for key, group in _grouped(table, group_cols):
        present = group[count_col].tolist()
        base = min(present) if baseline is None else baseline
        if base not in present:
            raise TableError(
                f"baseline {count_col}={base} is not in {_describe_group(group_cols, key)}"
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
    table["flag"] = [
        _scaling_flag(efficiency, cv, n, cv_threshold)
        for efficiency, cv, n in zip(table["efficiency_pct"], table["cv"], table["n"])
    ]
    return table[[*group_cols, count_col, "time_s", "n", "median", "min", "max", "std",
                  "ci95_low", "ci95_high", "cv", "baseline_count", "baseline_time_s",
                  "linear_time_s", "speedup", "efficiency_pct", "flag"]]


def _scaling_flag(efficiency_pct: float, cv: float, n: int, cv_threshold: float) -> str:
    flags = []
    if round(efficiency_pct, 2) > 100:  # not for float noise such as 100.000000001
        flags.append("superlinear")
    if cv > cv_threshold:  # a NaN cv (n == 1) compares False
        flags.append("high_variance")
    if n == 1:
        flags.append("single_repeat")
    return ";".join(flags)


def overhead_table(
    df: pd.DataFrame,
    runtime_col: str = "runtime",
    time_col: str = "time_s",
    group_cols: Iterable[str] = (),
    baseline_runtime: str = "native",
    statistic: str = "mean",
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Overhead of each runtime against ``baseline_runtime``, per group.

    Output columns: group columns, runtime, n_native, n, native_s, time_s (``statistic``
    of the repeats), overhead_pct = (time_s - native_s) / native_s * 100
    (``OVERHEAD_DEFINITION``), overhead_ci95_low_pct, overhead_ci95_high_pct, p_value,
    significant.

    With at least two repeats on both sides: p_value is Welch's t-test of the means
    (any statistic) and significant is p_value < alpha; the CI is Fieller's interval
    for the ratio of means with Welch-Satterthwaite degrees of freedom, given only for
    statistic="mean" (it does not describe a median or a minimum) and NaN where the
    interval is unbounded. Identical repeats on both sides give a zero-width CI and no
    test. Where a test is impossible p_value is NaN and significant is <NA>.
    """
    if statistic not in STATISTICS:
        raise TableError(f"statistic must be one of {', '.join(STATISTICS)}, not {statistic!r}")
    group_cols = _as_list(group_cols)
    _require_table(df, [*group_cols, runtime_col, time_col])
    _require_positive_times(df, time_col)
    data = df.assign(**{time_col: pd.to_numeric(df[time_col])})
    rows = []
    for key, group in _grouped(data, group_cols):
        is_base = group[runtime_col] == baseline_runtime
        if not is_base.any():
            raise TableError(
                f"no {runtime_col}={baseline_runtime!r} rows in "
                f"{_describe_group(group_cols, key)} ({runtime_col} present: "
                f"{', '.join(map(str, group[runtime_col].unique()))})"
            )
        native = group.loc[is_base, time_col].to_numpy(float)
        for runtime, runs in group[~is_base].groupby(runtime_col, sort=False):
            container = runs[time_col].to_numpy(float)
            native_s = getattr(np, statistic)(native)
            time_s = getattr(np, statistic)(container)
            low, high, p_value = _uncertainty(native, container, statistic == "mean")
            rows.append({
                **dict(zip(group_cols, key)),
                runtime_col: runtime,
                "n_native": native.size,
                "n": container.size,
                "native_s": native_s,
                "time_s": time_s,
                "overhead_pct": overhead_pct(native_s, time_s),
                "overhead_ci95_low_pct": low,
                "overhead_ci95_high_pct": high,
                "p_value": p_value,
                "significant": pd.NA if np.isnan(p_value) else bool(p_value < alpha),
            })
    table = pd.DataFrame(rows, columns=[
        *group_cols, runtime_col, "n_native", "n", "native_s", "time_s", "overhead_pct",
        "overhead_ci95_low_pct", "overhead_ci95_high_pct", "p_value", "significant",
    ])
    return table.astype({"significant": "boolean"})


def _uncertainty(native: np.ndarray, container: np.ndarray, with_ci: bool):
    """(CI low %, CI high %, Welch p) of the overhead; NaN where repeats are missing."""
    if native.size < 2 or container.size < 2:
        return np.nan, np.nan, np.nan
    if np.ptp(native) == 0 and np.ptp(container) == 0:
        # Identical repeats leave no variance to test with. Checked here because the mean
        # of equal floats can miss them by an ulp, which would read as a tiny variance.
        point = overhead_pct(native[0], container[0])
        return (point, point, np.nan) if with_ci else (np.nan, np.nan, np.nan)
    with warnings.catch_warnings():
        # Nearly identical repeats make scipy warn of precision loss; p is still right.
        warnings.simplefilter("ignore", RuntimeWarning)
        p_value = float(stats.ttest_ind(container, native, equal_var=False).pvalue)
    if not with_ci:
        return np.nan, np.nan, p_value
    low, high = _fieller_ratio_ci(native, container)
    return (low - 1) * 100, (high - 1) * 100, p_value


def _fieller_ratio_ci(native: np.ndarray, container: np.ndarray) -> tuple[float, float]:
    """Fieller's CI for mean(container) / mean(native), independent samples."""
    a, b = container.mean(), native.mean()
    var_a = container.var(ddof=1) / container.size
    var_b = native.var(ddof=1) / native.size
    ratio = a / b
    # Welch-Satterthwaite df of a - ratio * b, the pivot Fieller's interval inverts.
    dof = (var_a + ratio**2 * var_b) ** 2 / (
        var_a**2 / (container.size - 1) + (ratio**2 * var_b) ** 2 / (native.size - 1)
    )
    t = stats.t.ppf((1 + CONFIDENCE) / 2, dof)
    denominator = b * b - t * t * var_b
    if denominator <= 0:  # native mean not distinguishable from 0: unbounded interval
        return np.nan, np.nan
    half = t * np.sqrt(a * a * var_b + b * b * var_a - t * t * var_a * var_b)
    return (a * b - half) / denominator, (a * b + half) / denominator


def _as_list(cols: Iterable[str]) -> list[str]:
    return [cols] if isinstance(cols, str) else list(cols)


def _group_keys(df: pd.DataFrame, group_cols: list[str]):
    # groupby needs at least one key: with no group columns the whole table is one group.
    return group_cols if group_cols else np.zeros(len(df), dtype=int)


def _grouped(df: pd.DataFrame, group_cols: list[str]) -> Iterator[tuple[tuple, pd.DataFrame]]:
    for key, group in df.groupby(_group_keys(df, group_cols), sort=False, dropna=False):
        yield (key if group_cols else ()), group


def _describe_group(group_cols: list[str], key: tuple) -> str:
    if not group_cols:
        return "the table"
    return "group " + ", ".join(f"{col}={value}" for col, value in zip(group_cols, key))


def _require_table(df: pd.DataFrame, required: list[str]) -> None:
    """The required columns exist and there is at least one row."""
    missing = [col for col in required if col not in df.columns]
    if missing:
        raise TableError(
            f"missing column {', '.join(missing)} (needs {', '.join(required)}; "
            f"has {', '.join(map(str, df.columns))})"
        )
    if df.empty:
        raise TableError("no rows")


def _require_positive_times(df: pd.DataFrame, col: str) -> None:
    values = pd.to_numeric(df[col], errors="coerce")
    _require_valid(df, col, values.notna() & np.isfinite(values) & (values > 0),
                   "a positive number")


def _require_valid(df: pd.DataFrame, col: str, ok: pd.Series, what: str) -> None:
    """Raise naming the first bad row by its index label (the CLI labels file lines)."""
    if ok.all():
        return
    first_bad = int(np.flatnonzero(~ok.to_numpy())[0])
    label, value = df.index[first_bad], df[col].iloc[first_bad]
    shown = "an empty cell" if pd.isna(value) else f"'{value}'"
    raise TableError(f"{col} must be {what}; {df.index.name or 'row'} {label} has {shown}")
