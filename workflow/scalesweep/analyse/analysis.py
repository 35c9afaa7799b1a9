"""Scaling and container-overhead math on tables of runs (pure pandas functions).

Input tables hold one row per run; rows that agree on every grouping column (and on
the count or runtime) are repeats of one measurement. Outputs keep full precision:
rounding is for whoever prints them.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable, Iterator

import numpy as np
import pandas as pd
from scipy import special, stats

# The one overhead definition: positive = the container is slower than native.
# Published tables differ (HPEC 2019 mixes definitions), so the report quotes this.
OVERHEAD_DEFINITION = "(container - native) / native * 100"
CONFIDENCE = 0.95
STATISTICS = ("mean", "median", "min")
SCALING_MODES = ("strong", "weak")
VERDICTS = ("slower", "faster", "equivalent", "inconclusive")
EQUIVALENCE_MARGIN_PCT = 2.0  # schema default of measurement.equivalence_margin_pct
TARGET_CI_PP = 2.0  # schema default of measurement.target_ci_pp
MAX_REPEATS = 1000  # repeats_needed is capped here (per runtime, in all)
MIN_REPEATS = 3  # fewer than 2 usable values: ask for this many in all


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
    group_cols = _as_list(group_cols)
    rows = []
    for key, group in _grouped(df, group_cols):
        rows.append({**dict(zip(group_cols, key)),
                     **rate_stats(pd.to_numeric(group[rate_col], errors="coerce"))})
    return pd.DataFrame(rows, columns=[*group_cols, "n", "mean", "std", "ci95_low",
                                       "ci95_high"])


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
        lo, hi = _fieller_from_moments(
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
        is_base = _baseline_mask(group, runtime_col, baseline_runtime, group_cols, key)
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


VERDICT_COLUMNS = [
    "paired", "pairing", "n_native", "n", "n_disturbed", "n_pairs_split",
    "n_pairs_machine_differs", "native_s", "time_s", "overhead_pct",
    "overhead_ci95_low_pct", "overhead_ci95_high_pct", "ci_half_width_pp", "ci_method",
    "normality_p_value", "p_value", "significant", "equivalence_p_value", "margin_pct",
    "verdict", "verdict_text", "repeats_needed", "target_ci_pp", "target_met",
]
# how a paired comparison's pairs were formed, as every table says it
SAME_BLOCK = "same-block pairs"
SAME_REPEAT = "pairs on the repeat number"
UNPAIRED = "unpaired"


def verdict_table(
    df: pd.DataFrame,
    group_cols: Iterable[str] = (),
    runtime_col: str = "runtime",
    time_col: str = "time_s",
    baseline_runtime: str = "native",
    pair_col: str | None = "repeat",
    exclude_col: str | None = "disturbed",
    margin_pct: float = EQUIVALENCE_MARGIN_PCT,
    target_ci_pp: float = TARGET_CI_PP,
    confidence: float = CONFIDENCE,
    max_pair_gap_s: float | None = None,
    probe_tolerance_pct: float | None = None,
) -> pd.DataFrame:
    """``overhead_verdict`` of every runtime against ``baseline_runtime``, per group.

    Output columns: group columns, runtime, then ``VERDICT_COLUMNS``: paired, pairing
    (SAME_BLOCK, SAME_REPEAT or UNPAIRED), n_native, n (pairs when paired), n_disturbed
    (runs of either side left out), n_pairs_split (pairs whose runs were not measured
    together), n_pairs_machine_differs (pairs whose machine-speed probes differ), native_s,
    time_s, overhead_pct, overhead_ci95_low_pct, overhead_ci95_high_pct,
    ci_half_width_pp, ci_method, normality_p_value, p_value, significant (p_value < 1 -
    confidence), equivalence_p_value, margin_pct, verdict, verdict_text, repeats_needed,
    target_ci_pp, target_met.

    Rows where ``exclude_col`` is true (disturbed runs) are counted and left out. The
    comparison is paired when each ``pair_col`` value (``block_id``: the block the run
    was measured in, SAME_BLOCK; any other column, e.g. a repeat number, SAME_REPEAT)
    occurs at most once per side and at least two of them are valid on both sides; only
    those pairs are used, and native_s / time_s are then the geometric means over the
    pairs (so that overhead_pct = (time_s - native_s) / native_s x 100 still holds).
    Otherwise it is unpaired over the valid runs, with arithmetic means. A pair is left
    out (and counted) where its two runs were not measured together: more than
    ``max_pair_gap_s`` seconds between the end of the first and the start of the second
    (columns start, end), as after one of them was measured again; or where their
    machine-speed probes differ by more than ``probe_tolerance_pct``
    (``scalesweep.measure.probe.pair_probe_difference_pct``). Where a ``hosts`` column exists,
    pairs whose two runs ran on the same nodes are preferred (used alone when there are
    at least two of them).
    """
    group_cols = _as_list(group_cols)
    _require_table(df, [*group_cols, runtime_col, time_col])
    times = pd.to_numeric(df[time_col], errors="coerce")
    data = df.assign(**{time_col: times})
    if exclude_col and exclude_col in df.columns:
        excluded = df[exclude_col].map(truthy)
    else:
        excluded = pd.Series(False, index=df.index)
    data = data.assign(_excluded=excluded.astype(bool))
    rows = []
    for key, group in _grouped(data, group_cols):
        is_base = _baseline_mask(group, runtime_col, baseline_runtime, group_cols, key)
        base = group[is_base]
        for runtime, runs in group[~is_base].groupby(runtime_col, sort=False):
            pairs = _valid_pairs(base, runs, pair_col, time_col, max_pair_gap_s,
                                 probe_tolerance_pct)
            if pairs.native is None and pairs.how == SAME_BLOCK:
                # runs of blocks are compared in their pairs or not at all: never the
                # runs measured apart, nor those whose pair was left out, side by side
                pairs.native, pairs.container = pairs.surviving
            if pairs.native is not None:
                native, container = pairs.native, pairs.container
                native_s, time_s = ((np.exp(np.log(native).mean()),
                                     np.exp(np.log(container).mean()))
                                    if native.size else (np.nan, np.nan))
            else:
                native = base.loc[~base["_excluded"], time_col].to_numpy(float)
                container = runs.loc[~runs["_excluded"], time_col].to_numpy(float)
                native_s = native.mean() if native.size else np.nan
                time_s = container.mean() if container.size else np.nan
            paired = pairs.native is not None
            v = overhead_verdict(native, container, paired=paired,
                                 margin_pct=margin_pct, target_ci_pp=target_ci_pp,
                                 confidence=confidence)
            p_value = v["p_value"]
            rows.append({
                **dict(zip(group_cols, key)),
                runtime_col: runtime,
                "paired": v["paired"],
                "pairing": pairs.how if paired else UNPAIRED,
                "n_native": v["n_native"], "n": v["n"],
                "n_disturbed": int(base["_excluded"].sum() + runs["_excluded"].sum()),
                "n_pairs_split": pairs.split,
                "n_pairs_machine_differs": pairs.machine_differs,
                "native_s": native_s, "time_s": time_s,
                "overhead_pct": v["overhead_pct"],
                "overhead_ci95_low_pct": v["ci95_low_pct"],
                "overhead_ci95_high_pct": v["ci95_high_pct"],
                "ci_half_width_pp": v["ci_half_width_pp"],
                "ci_method": v.get("ci_method", "paired t" if paired else "Fieller/Welch"),
                "normality_p_value": v.get("normality_p_value", np.nan),
                "p_value": p_value,
                "significant": pd.NA if np.isnan(p_value) else bool(p_value < 1 - confidence),
                "equivalence_p_value": v["equivalence_p_value"],
                "margin_pct": margin_pct,
                "verdict": v["verdict"],
                "verdict_text": _with_pairing(v["verdict_text"], pairs, paired),
                "repeats_needed": v["repeats_needed"],
                "target_ci_pp": target_ci_pp, "target_met": v["target_met"],
            })
    table = pd.DataFrame(rows, columns=[*group_cols, runtime_col, *VERDICT_COLUMNS])
    return table.astype({"significant": "boolean"})


def _with_pairing(text: str, pairs: "_Pairs", paired: bool) -> str:
    """The verdict text, saying which pairs it rests on and which were left out."""
    if paired and pairs.how == SAME_BLOCK:
        text = text.replace(" pairs)", " same-block pairs)")
    left = []
    if pairs.split:
        left.append(f"{pairs.split} pair{'s' if pairs.split != 1 else ''} not measured "
                    "together left out")
    if pairs.machine_differs:
        left.append(f"{pairs.machine_differs} pair{'s' if pairs.machine_differs != 1 else ''}"
                    " on a machine whose speed differed left out")
    return text + (f"; {', '.join(left)}" if left else "")


def truthy(value) -> bool:
    """A flag from a table or a CSV round trip: True, 'True', 'true', 1 (NaN: False)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    try:
        return bool(value) and not pd.isna(value)
    except (TypeError, ValueError):
        return False


class _Pairs:
    """The pairs of one comparison: (native, container) times, or None where unpaired;
    how they were formed, and how many were left out and why."""

    def __init__(self, native=None, container=None, how=UNPAIRED, split=0,
                 machine_differs=0, surviving=(np.array([]), np.array([]))):
        self.native, self.container, self.how = native, container, how
        self.split, self.machine_differs = split, machine_differs
        self.surviving = surviving  # the pairs left where fewer than 2 remain


def _valid_pairs(base: pd.DataFrame, runs: pd.DataFrame, pair_col: str | None,
                 time_col: str, max_gap_s: float | None = None,
                 probe_tolerance_pct: float | None = None) -> _Pairs:
    """The valid pairs, matched on ``pair_col`` and in its order (see ``verdict_table``)."""
    if not pair_col or pair_col not in base.columns or pair_col not in runs.columns:
        return _Pairs()
    how = SAME_BLOCK if pair_col == "block_id" else SAME_REPEAT
    sides = []
    for side in (base, runs):
        keys = side[pair_col].to_numpy()
        if pd.isna(keys).any() or len(set(keys.tolist())) != len(keys):
            if how == SAME_BLOCK:
                raise TableError(f"{pair_col}: every run must name its block, once per "
                                 "runtime (empty or repeated block ids)")
            return _Pairs()
        records = side.to_dict("records")
        sides.append({k: r for k, r in zip(keys.tolist(), records)
                      if not r["_excluded"] and _usable(np.array([r[time_col]], float))[0]})
    return block_pairs(sides[0], sides[1], time_col, how, max_gap_s, probe_tolerance_pct)


def block_pairs(native: dict, other: dict, time_col: str = "time_s", how: str = SAME_BLOCK,
                max_gap_s: float | None = None,
                probe_tolerance_pct: float | None = None) -> _Pairs:
    """The pairs of two runtimes' valid runs, each side {block key: run row}: the blocks
    both measured, less those whose runs were more than ``max_gap_s`` apart (columns
    start, end) or saw machines whose probes differ by more than ``probe_tolerance_pct``
    (``scalesweep.measure.probe.pair_probe_difference_pct``); pairs on the same hosts preferred
    where at least two exist. The one pairing of the verdicts (``verdict_table``) and of
    the adaptive decisions (``scalesweep.analyse.decision.decide``)."""
    common = sorted(set(native) & set(other), key=_natural_key)
    split = machine = 0
    if max_gap_s is not None:
        together = [k for k in common if _gap_s(native[k], other[k]) <= max_gap_s]
        split, common = len(common) - len(together), together
    if probe_tolerance_pct is not None:
        from scalesweep.measure.probe import pair_probe_difference_pct

        alike = [k for k in common if not pair_probe_difference_pct(native[k], other[k])
                 > probe_tolerance_pct]  # NaN (no probe): kept
        machine, common = len(common) - len(alike), alike
    # Under Slurm the two runs of a block may get different nodes: pairs measured on
    # the same nodes are preferred, where at least two such pairs exist.
    same = [k for k in common if "hosts" in native[k] and "hosts" in other[k]
            and str(native[k]["hosts"]) == str(other[k]["hosts"])]
    if len(same) >= 2:
        common = same
    times = (np.array([float(native[k][time_col]) for k in common], dtype=float),
             np.array([float(other[k][time_col]) for k in common], dtype=float))
    if len(common) < 2:
        return _Pairs(how=how, split=split, machine_differs=machine, surviving=times)
    return _Pairs(times[0], times[1], how, split, machine)


def _natural_key(value):
    """Sort block ids and repeat numbers as numbers where they are (rep2 before rep10)."""
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(value))]


def _gap_s(a: dict, b: dict) -> float:
    """Seconds between the end of the earlier run and the start of the later one (0 when
    they overlap; NaN-safe: 0 when a time is missing, as in tables without times)."""
    starts = [_utc(a.get("start")), _utc(b.get("start"))]
    ends = [_utc(a.get("end")), _utc(b.get("end"))]
    if any(t is None for t in (*starts, *ends)):
        return 0.0
    first, second = (0, 1) if starts[0] <= starts[1] else (1, 0)
    return max(0.0, (starts[second] - ends[first]).total_seconds())


@functools.lru_cache(maxsize=65536)
def _utc_text(text: str):
    try:
        t = pd.to_datetime(text, utc=True)
    except (ValueError, TypeError):
        return None
    return None if pd.isna(t) else t


def _utc(value):
    """A run's start or end as a UTC timestamp, None where missing or unreadable; each
    time stamp parsed once (every pair of a campaign, and every decision, reads them)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return None if pd.isna(value) else (value.tz_localize("UTC") if value.tzinfo is None
                                            else value)
    return _utc_text(str(value))


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
    return _fieller_from_moments(
        container.mean(), container.var(ddof=1), container.size,
        native.mean(), native.var(ddof=1), native.size, CONFIDENCE)


def _fieller_from_moments(a: float, var_a: float, n_a: int, b: float, var_b: float,
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


# --- verdicts: a conclusion with its evidence, never a bare percentage ---------------------

# How the CI of a verdict is made (its ``ci_method``; the tables name it).
PAIRED_T = "paired t"
RANK_METHOD = "Hodges-Lehmann/Wilcoxon"
RANK_TOO_FEW = "Hodges-Lehmann (too few pairs for a 95% rank interval)"
UNPAIRED_METHOD = "Fieller/Welch"
CI_METHODS = (PAIRED_T, RANK_METHOD, RANK_TOO_FEW, UNPAIRED_METHOD)
# Shapiro-Wilk of the per-pair log ratios: below this p their normality is rejected and
# the paired CI is the rank interval instead of the t interval.
NORMALITY_ALPHA = 0.05
# The signed-rank statistic's null distribution is exact up to this many pairs (normal
# with a continuity correction beyond).
EXACT_SIGNED_RANK_MAX_N = 400


def overhead_verdict(native, container, *, paired: bool = False,
                     margin_pct: float = EQUIVALENCE_MARGIN_PCT,
                     target_ci_pp: float = TARGET_CI_PP, confidence: float = CONFIDENCE) -> dict:
    """The container's overhead against native with its evidence and a verdict.

    ``native``, ``container``: times in seconds (positive; NaN, infinite or non-positive
    values are not usable and are dropped, pairwise when ``paired``). Positive overhead =
    the container is slower (``OVERHEAD_DEFINITION``).

    Paired (element k of both measured in the same block): on the per-pair log ratios
    d_k = ln(c_k / n_k), with 3 pairs or more, their normality is checked first
    (Shapiro-Wilk, ``normality_p_value``). Where it is not rejected at NORMALITY_ALPHA
    (and with 2 pairs, where it cannot be checked), ``ci_method`` PAIRED_T: the Student-t
    CI of mean d, back-transformed: overhead = (exp(mean d) - 1) x 100, the CI likewise
    (the geometric-mean ratio); p is the one-sample t-test of mean d = 0; equivalence is
    two one-sided t-tests (TOST) of mean d against ln(1 - margin/100) and
    ln(1 + margin/100). Where normality is rejected, ``ci_method`` RANK_METHOD: the
    Hodges-Lehmann estimate of the shift of d (the median of the Walsh averages
    (d_i + d_j) / 2, i <= j) as the overhead, the exact Wilcoxon signed-rank CI (order
    statistics of the Walsh averages; conservative, its coverage at least the level)
    back-transformed, p the exact two-sided signed-rank test of 0, equivalence the two
    one-sided signed-rank tests against the bounds (dual to: the 90% rank CI lies
    within them). With 5 pairs or fewer no 95% rank interval exists (every sign pattern
    has probability 2^-n > 2.5%): ``ci_method`` RANK_TOO_FEW, no CI, no equivalence test,
    the verdict inconclusive. Repeats needed with the rank method: the paired-t
    projection from the spread the rank CI implies (the sd a t interval of its width at
    this n would have), or, with too few pairs, from the sample sd of d, and at least
    the pairs a 95% rank interval needs.

    Unpaired (independent samples): overhead of the means, Fieller's CI for the ratio of
    means with Welch-Satterthwaite degrees of freedom and Welch's t-test, as
    ``overhead_table``; TOST with the same pivot: Welch's t of
    mean(c) - R x mean(n) for the ratio bounds R = 1 - margin/100 and 1 + margin/100
    (this accounts for the native mean's own uncertainty, unlike a test of the difference
    against a margin taken as fixed).

    The verdict, at 1 - confidence = alpha (5% by default):
    - "equivalent": TOST at alpha rejects both one-sided nulls (equivalence_p_value <
      alpha), i.e. the (1 - 2 alpha) = 90% CI lies within +-margin_pct;
    - else "slower" / "faster": the 95% CI excludes 0;
    - else "inconclusive", with the repeats still needed.
    repeats_needed: from the observed spread, the extra repeats per runtime (pairs when
    paired) for the 95% CI half-width to reach ``target_ci_pp`` percentage points (capped
    at MAX_REPEATS in all); 0 when target_met. With fewer than 2 usable values on a side
    (or pairs) the verdict is inconclusive and repeats_needed = 3 - n (at least 1).
    Identical values (zero spread) give a zero-width CI and no t-test (p_value NaN); the
    verdict then follows the exact difference.
    ``ci_method``: one of CI_METHODS (the unpaired path: UNPAIRED_METHOD);
    ``normality_p_value``: the Shapiro-Wilk p of the log ratios, NaN where not computed
    (unpaired, fewer than 3 pairs, zero spread).
    """
    native = np.asarray(native, dtype=float).ravel()
    container = np.asarray(container, dtype=float).ravel()
    alpha = 1 - confidence
    if paired:
        if native.size != container.size:
            raise ValueError(f"paired samples differ in length: {native.size} native, "
                             f"{container.size} container")
        ok = _usable(native) & _usable(container)
        native, container = native[ok], container[ok]
    else:
        native, container = native[_usable(native)], container[_usable(container)]
    out = {
        "n_native": int(native.size), "n": int(container.size), "paired": bool(paired),
        "overhead_pct": np.nan, "ci95_low_pct": np.nan, "ci95_high_pct": np.nan,
        "ci_half_width_pp": np.nan, "p_value": np.nan, "equivalence_p_value": np.nan,
        "verdict": "inconclusive", "verdict_text": "", "repeats_needed": 0,
        "target_met": False, "ci_method": PAIRED_T if paired else UNPAIRED_METHOD,
        "normality_p_value": np.nan,
    }
    if paired:
        stats_ = _paired_evidence(native, container, margin_pct, confidence)
    else:
        stats_ = _unpaired_evidence(native, container, margin_pct, confidence)
    out.update(stats_["evidence"])
    n_used = min(out["n_native"], out["n"])
    half = out["ci_half_width_pp"]
    out["target_met"] = bool(np.isfinite(half) and half <= target_ci_pp)
    if n_used < 2:
        out["repeats_needed"] = max(1, MIN_REPEATS - n_used)
    elif not out["target_met"]:
        out["repeats_needed"] = _repeats_for(stats_["half_width_at"], n_used,
                                             lambda hw, _low, _high: hw <= target_ci_pp)
    low, high = out["ci95_low_pct"], out["ci95_high_pct"]
    if n_used >= 2 and out["equivalence_p_value"] < alpha:
        out["verdict"] = "equivalent"
    elif n_used >= 2 and np.isfinite(low) and low > 0:
        out["verdict"] = "slower"
    elif n_used >= 2 and np.isfinite(high) and high < 0:
        out["verdict"] = "faster"
    to_decide = out["repeats_needed"]
    if out["verdict"] == "inconclusive" and n_used >= 2 and to_decide == 0:
        # narrow enough, yet undecided (the overhead sits near 0 or near the margin):
        # the repeats until the projected CIs decide one way or the other
        to_decide = _repeats_for(stats_["decides_at"], n_used, None)
    out["verdict_text"] = _verdict_text(out, margin_pct, to_decide)
    for key in ("overhead_pct", "ci95_low_pct", "ci95_high_pct", "ci_half_width_pp",
                "p_value", "equivalence_p_value", "normality_p_value"):
        out[key] = float(out[key])
    out["repeats_needed"] = int(out["repeats_needed"])
    return out


ROUNDING_SPREAD = 1e-12  # sd of log ratios below this: equal ratios up to float rounding


def _usable(values: np.ndarray) -> np.ndarray:
    return np.isfinite(values) & (values > 0)


def _paired_evidence(native, container, margin_pct, confidence):
    n = native.size
    d = np.log(container) - np.log(native)
    bounds = (np.log1p(-margin_pct / 100) if margin_pct < 100 else -np.inf,
              np.log1p(margin_pct / 100))
    evidence = {"ci_method": PAIRED_T, "normality_p_value": np.nan}
    if n == 0:
        return {"evidence": evidence, "half_width_at": None, "decides_at": None}
    mean = float(d.mean())
    evidence["overhead_pct"] = float(np.expm1(mean) * 100)
    if n < 2:
        return {"evidence": evidence, "half_width_at": None, "decides_at": None}
    sd = 0.0 if np.ptp(d) == 0 else float(d.std(ddof=1))
    # a spread at rounding level (equal ratios, printed to a few digits) is no
    # distribution to test: Shapiro-Wilk would reject float noise
    if sd > ROUNDING_SPREAD and n >= 3:
        evidence["normality_p_value"] = _normality_p(d)
        if evidence["normality_p_value"] < NORMALITY_ALPHA:
            return _rank_evidence(d, bounds, confidence, evidence)

    def interval(size, level):
        if sd == 0:
            return mean, mean
        half = _t_quantile((1 + level) / 2, size - 1) * sd / np.sqrt(size)
        return mean - half, mean + half

    low, high = interval(n, confidence)
    evidence["ci95_low_pct"] = float(np.expm1(low) * 100)
    evidence["ci95_high_pct"] = float(np.expm1(high) * 100)
    evidence["ci_half_width_pp"] = (evidence["ci95_high_pct"] - evidence["ci95_low_pct"]) / 2
    if sd == 0:
        evidence["equivalence_p_value"] = 0.0 if bounds[0] < mean < bounds[1] else 1.0
    else:
        se = sd / np.sqrt(n)
        # Student t tails (special.stdtr: stats.t.cdf without its per-call overhead)
        evidence["p_value"] = float(2 * special.stdtr(n - 1, -abs(mean) / se))
        p_low = special.stdtr(n - 1, -(mean - bounds[0]) / se)  # H0: mean <= lower bound
        p_high = special.stdtr(n - 1, (mean - bounds[1]) / se)  # H0: mean >= upper bound
        evidence["equivalence_p_value"] = float(max(p_low, p_high))

    def half_width_at(size):
        lo, hi = interval(size, confidence)
        return (np.expm1(hi) - np.expm1(lo)) * 50, lo, hi

    def decides_at(size):
        lo95, hi95 = interval(size, confidence)
        lo90, hi90 = interval(size, 2 * confidence - 1)
        return (bounds[0] < lo90 and hi90 < bounds[1]) or lo95 > 0 or hi95 < 0

    return {"evidence": evidence, "half_width_at": half_width_at, "decides_at": decides_at}


@functools.lru_cache(maxsize=8192)
def _t_quantile(q: float, dof: int) -> float:
    """Student t quantile (stats.t.ppf), cached: the projections of repeats_needed ask
    for the same few degrees of freedom again and again."""
    return float(special.stdtrit(dof, q))


def _normality_p(d: np.ndarray) -> float:
    """Shapiro-Wilk p of the log ratios d (3 values or more, not all equal)."""
    with warnings.catch_warnings():
        # near-constant or very long samples: scipy warns, the p value is still given
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.shapiro(d).pvalue)


def _walsh_averages(d: np.ndarray) -> np.ndarray:
    """The n(n+1)/2 Walsh averages (d_i + d_j) / 2, i <= j, sorted."""
    i, j = np.triu_indices(d.size)
    return np.sort((d[i] + d[j]) / 2)


@functools.lru_cache(maxsize=32)
def _signed_rank_cdf(n: int) -> np.ndarray:
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


def _signed_rank_le(n: int, t: int) -> float:
    """P(T <= t) under H0."""
    t = int(t)
    if t < 0:
        return 0.0
    return float(_signed_rank_cdf(n)[min(t, n * (n + 1) // 2)])


def _signed_rank_p(walsh: np.ndarray, n: int, mu: float, alternative: str) -> float:
    """The signed-rank test of the centre of d against ``mu``, from d's Walsh averages:
    T = #(averages > mu), the sum of the ranks of |d - mu| over the positive d - mu.
    alternative "greater": H0 centre <= mu, p = P(T >= #(averages > mu)); "less": H0
    centre >= mu, p = P(T <= #(averages >= mu)); "two-sided": twice the smaller of the
    two (at most 1). An average equal to mu (a tie, as where a pair's times are equal)
    counts against rejecting, so that each test rejects exactly where the closed rank
    interval of ``_rank_interval`` excludes mu. Exact up to EXACT_SIGNED_RANK_MAX_N
    pairs."""
    top = n * (n + 1) // 2
    # P(T >= t) = P(T <= top - t), by the symmetry of T under H0
    greater = _signed_rank_le(n, top - np.count_nonzero(walsh > mu))
    less = _signed_rank_le(n, np.count_nonzero(walsh >= mu))
    if alternative == "greater":
        return greater
    if alternative == "less":
        return less
    return float(min(1.0, 2 * min(greater, less)))


def _rank_ci_order(n: int, level: float) -> int:
    """k of the two-sided rank CI [W_(k), W_(N+1-k)] (1-based order statistics of the N
    sorted Walsh averages) at ``level``: k - 1 is the largest c with P(T <= c) <= (1 -
    level) / 2, so the coverage is at least ``level``; 0 where no such interval exists."""
    cdf = _signed_rank_cdf(n)
    return int(np.searchsorted(cdf, (1 - level) / 2, side="right"))


def _rank_min_pairs(level: float) -> int:
    """The fewest pairs with a two-sided rank CI at ``level``: 2^-n <= (1 - level) / 2."""
    n = 1
    while 0.5**n > (1 - level) / 2:
        n += 1
    return n


def _rank_interval(walsh: np.ndarray, n: int, level: float) -> tuple[float, float]:
    k = _rank_ci_order(n, level)
    if k == 0:
        return np.nan, np.nan
    return float(walsh[k - 1]), float(walsh[walsh.size - k])


def _rank_evidence(d: np.ndarray, bounds: tuple[float, float], confidence: float,
                   evidence: dict) -> dict:
    """The paired evidence where the log ratios are not normal: Hodges-Lehmann estimate,
    exact Wilcoxon signed-rank CI and tests (see ``overhead_verdict``)."""
    n = d.size
    walsh = _walsh_averages(d)
    shift = float(np.median(walsh))
    evidence["overhead_pct"] = float(np.expm1(shift) * 100)
    evidence["p_value"] = _signed_rank_p(walsh, n, 0.0, "two-sided")
    min_pairs = _rank_min_pairs(confidence)
    low, high = _rank_interval(walsh, n, confidence)
    if np.isfinite(low):
        evidence["ci_method"] = RANK_METHOD
        evidence["ci95_low_pct"] = float(np.expm1(low) * 100)
        evidence["ci95_high_pct"] = float(np.expm1(high) * 100)
        evidence["ci_half_width_pp"] = (evidence["ci95_high_pct"]
                                        - evidence["ci95_low_pct"]) / 2
        evidence["equivalence_p_value"] = max(
            _signed_rank_p(walsh, n, bounds[0], "greater"),  # H0: shift <= lower bound
            _signed_rank_p(walsh, n, bounds[1], "less"))  # H0: shift >= upper bound
        # the projections: a t interval as wide as the rank CI, at its centre
        centre = (low + high) / 2
        spread = (high - low) / 2 * np.sqrt(n) / stats.t.ppf((1 + confidence) / 2, n - 1)
    else:
        evidence["ci_method"] = RANK_TOO_FEW
        centre, spread = shift, float(d.std(ddof=1))

    def interval(size, level):
        half = _t_quantile((1 + level) / 2, size - 1) * spread / np.sqrt(size)
        return centre - half, centre + half

    def half_width_at(size):
        if size <= n:  # what was measured, not a projection
            half = evidence.get("ci_half_width_pp", np.nan)
            return (half if np.isfinite(half) else np.inf), low, high
        if size < min_pairs:
            return np.inf, np.nan, np.nan
        lo, hi = interval(size, confidence)
        return (np.expm1(hi) - np.expm1(lo)) * 50, lo, hi

    def decides_at(size):
        if size <= n or size < min_pairs:  # undecided as measured
            return False
        lo95, hi95 = interval(size, confidence)
        lo90, hi90 = interval(size, 2 * confidence - 1)
        return (bounds[0] < lo90 and hi90 < bounds[1]) or lo95 > 0 or hi95 < 0

    return {"evidence": evidence, "half_width_at": half_width_at, "decides_at": decides_at}


def _unpaired_evidence(native, container, margin_pct, confidence):
    evidence = {}
    nn, nc = native.size, container.size
    if nn == 0 or nc == 0:
        return {"evidence": evidence, "half_width_at": None, "decides_at": None}
    a, b = float(container.mean()), float(native.mean())
    evidence["overhead_pct"] = float(overhead_pct(b, a))
    if nn < 2 or nc < 2:
        return {"evidence": evidence, "half_width_at": None, "decides_at": None}
    still = np.ptp(native) == 0 and np.ptp(container) == 0
    var_a = 0.0 if np.ptp(container) == 0 else float(container.var(ddof=1))
    var_b = 0.0 if np.ptp(native) == 0 else float(native.var(ddof=1))
    if still:
        # no spread to test with; compared on the first values, as _uncertainty does (the
        # mean of equal floats can miss them by an ulp)
        point = float(overhead_pct(native[0], container[0]))
        evidence.update(overhead_pct=point, ci95_low_pct=point, ci95_high_pct=point,
                        ci_half_width_pp=0.0,
                        equivalence_p_value=0.0 if abs(point) < margin_pct else 1.0)
        return {"evidence": evidence, "half_width_at": None,
                "decides_at": lambda size: True}
    low, high, p_value = _uncertainty(native, container, True)
    evidence.update(ci95_low_pct=low, ci95_high_pct=high, p_value=p_value,
                    ci_half_width_pp=(high - low) / 2)
    evidence["equivalence_p_value"] = max(
        _ratio_test(a, var_a, nc, b, var_b, nn, 1 - margin_pct / 100, "greater"),
        _ratio_test(a, var_a, nc, b, var_b, nn, 1 + margin_pct / 100, "less"))

    def interval(k, level):
        return _fieller_from_moments(a, var_a, nc + k, b, var_b, nn + k, level)

    def half_width_at(size):
        k = size - min(nn, nc)
        lo, hi = interval(k, confidence)
        return (hi - lo) * 50, lo, hi

    def decides_at(size):
        k = size - min(nn, nc)
        lo95, hi95 = interval(k, confidence)
        lo90, hi90 = interval(k, 2 * confidence - 1)
        return ((1 - margin_pct / 100 < lo90 and hi90 < 1 + margin_pct / 100)
                or lo95 > 1 or hi95 < 1)

    return {"evidence": evidence, "half_width_at": half_width_at, "decides_at": decides_at}


def _ratio_test(a, var_a, n_a, b, var_b, n_b, ratio, alternative):
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


def _repeats_for(check, n: int, target) -> int:
    """Extra repeats until ``check`` says yes at n + k (the half-width target, or a
    decision): the smallest such k, found by doubling then bisecting (the half-width
    shrinks as n grows); MAX_REPEATS - n when not even MAX_REPEATS in all would do."""
    if check is None:
        return 0

    def ok(size: int) -> bool:
        result = check(size)
        if target is None:
            return bool(result)
        half, low, high = result
        return bool(np.isfinite(half) and target(half, low, high))

    if n >= MAX_REPEATS or ok(n):
        return 0
    low, step = n, 1  # low: known not ok
    while True:
        high = min(n + step, MAX_REPEATS)
        if ok(high):
            break
        if high == MAX_REPEATS:
            return MAX_REPEATS - n
        low, step = high, step * 2
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle):
            high = middle
        else:
            low = middle
    return high - n


def _verdict_text(v: dict, margin_pct: float, more: int) -> str:
    def pct(x: float) -> str:
        text = f"{x:.1f}"
        return ("0.0" if text == "-0.0" else text) + "%"

    n_text = (f"n={v['n']} pairs" if v["paired"]
              else f"n={v['n_native']} native, {v['n']} container")
    has_ci = np.isfinite(v["ci95_low_pct"]) and np.isfinite(v["ci95_high_pct"])
    method = v.get("ci_method")
    # the t and Fieller intervals are the default; a rank interval is named
    kind = f"{RANK_METHOD} " if method == RANK_METHOD else ""
    ci = (f"95% {kind}CI {pct(v['ci95_low_pct'])} .. {pct(v['ci95_high_pct'])}" if has_ci
          else "no 95% CI")
    if method == RANK_TOO_FEW:
        ci = ("no 95% CI: normality rejected (Shapiro-Wilk), too few pairs for a rank "
              "interval")
    overhead = v["overhead_pct"]
    if v["verdict"] == "equivalent":
        return f"equivalent within +-{margin_pct:g}% (overhead {pct(overhead)}, {ci}, {n_text})"
    if v["verdict"] == "slower":
        return f"slower by {pct(overhead)} ({ci}, {n_text})"
    if v["verdict"] == "faster":
        return f"faster by {pct(-overhead)} (overhead {pct(overhead)}, {ci}, {n_text})"
    about = (f"over {more} more repeats needed" if more and min(v["n"], v["n_native"]) + more
             >= MAX_REPEATS else f"about {more} more repeat{'s' if more != 1 else ''} needed")
    if not np.isfinite(overhead):
        return f"inconclusive: {about} (no usable runs on a side; {n_text})"
    return f"inconclusive: {about} (overhead {pct(overhead)}, {ci}, {n_text})"


# --- many comparisons in one campaign ------------------------------------------------------


def fdr_adjust(p_values) -> np.ndarray:
    """Benjamini-Hochberg adjusted p values (q values) of ``p_values``, in their order.

    q_(i) = min over j >= i of p_(j) x m / j for the p values sorted ascending (m the
    number of them that are not NaN), at most 1: a result with q < alpha is a discovery
    at a false discovery rate of alpha (independent or positively dependent tests).
    NaN stays NaN and does not count in m. Raises ValueError for a p outside [0, 1].
    """
    p = np.asarray(p_values, dtype=float)
    shape = p.shape
    p = p.ravel()
    q = np.full(p.size, np.nan)
    ok = ~np.isnan(p)
    if ((p[ok] < 0) | (p[ok] > 1)).any():
        raise ValueError("p values must lie in [0, 1]")
    m = int(ok.sum())
    if m:
        order = np.argsort(p[ok], kind="stable")
        scaled = p[ok][order] * m / np.arange(1, m + 1)
        adjusted = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
        values = np.empty(m)
        values[order] = adjusted
        q[ok] = values
    return q.reshape(shape)


def expected_false_positives(n_tests: int, alpha: float = 1 - CONFIDENCE) -> float:
    """How many of ``n_tests`` comparisons would come out "significant" at level
    ``alpha`` by chance alone if none of them had a real difference: n_tests x alpha."""
    if n_tests < 0 or not 0 <= alpha <= 1:
        raise ValueError("n_tests must be >= 0 and alpha in [0, 1]")
    return float(n_tests * alpha)


def _baseline_mask(group: pd.DataFrame, runtime_col: str, baseline_runtime: str,
                   group_cols: list[str], key: tuple) -> pd.Series:
    """The rows of ``baseline_runtime`` in ``group``; a TableError naming the group where
    there are none."""
    is_base = group[runtime_col] == baseline_runtime
    if not is_base.any():
        raise TableError(
            f"no {runtime_col}={baseline_runtime!r} rows in "
            f"{_describe_group(group_cols, key)} ({runtime_col} present: "
            f"{', '.join(map(str, group[runtime_col].unique()))})"
        )
    return is_base


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
