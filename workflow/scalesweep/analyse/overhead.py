"""Container overhead on tables of runs, per group and runtime against the baseline
runtime: ``overhead_table`` (a statistic of the repeats, Welch's test, Fieller's CI) and
``verdict_table`` (``scalesweep.analyse.verdict.overhead_verdict`` on the pairs of
``scalesweep.analyse.pairing``, or unpaired). Outputs keep full precision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scalesweep.analyse.frame import (TableError, as_list, describe_group, grouped,
                                      require_positive_times, require_table, truthy)
from scalesweep.analyse.pairing import (ROW_KEYS, SAME_BLOCK, UNPAIRED, Pairs, pair_records,
                                        side_pairs)
from scalesweep.analyse.stats import CONFIDENCE
from scalesweep.analyse.verdict import (EQUIVALENCE_MARGIN_PCT, TARGET_CI_PP, overhead_uncertainty,
                                        overhead_pct, overhead_verdict)
STATISTICS = ("mean", "median", "min")


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
    group_cols = as_list(group_cols)
    require_table(df, [*group_cols, runtime_col, time_col])
    require_positive_times(df, time_col)
    data = df.assign(**{time_col: pd.to_numeric(df[time_col])})
    rows = []
    for key, group in grouped(data, group_cols):
        is_base = _baseline_mask(group[runtime_col].to_numpy(), runtime_col, baseline_runtime,
                                 group_cols, key)
        native = group.loc[is_base, time_col].to_numpy(float)
        for runtime, runs in group[~is_base].groupby(runtime_col, sort=False):
            container = runs[time_col].to_numpy(float)
            native_s = getattr(np, statistic)(native)
            time_s = getattr(np, statistic)(container)
            low, high, p_value = overhead_uncertainty(native, container, statistic == "mean")
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
    "normality_p_value", "p_value", "significant", "equivalence_p_value",
    "equivalence_ci90_low_pct", "equivalence_ci90_high_pct", "margin_pct",
    "verdict", "verdict_text", "repeats_needed", "repeats_to_decide", "target_ci_pp",
    "target_met",
]


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
    memo=None,
) -> pd.DataFrame:
    """``overhead_verdict`` of every runtime against ``baseline_runtime``, per group.

    Output columns: group columns, runtime, then ``VERDICT_COLUMNS``: paired, pairing
    (SAME_BLOCK, SAME_REPEAT or UNPAIRED), n_native, n (pairs when paired), n_disturbed
    (runs of either side left out), n_pairs_split (pairs whose runs were not measured
    together), n_pairs_machine_differs (pairs whose machine-speed probes differ), native_s,
    time_s, overhead_pct, overhead_ci95_low_pct, overhead_ci95_high_pct,
    ci_half_width_pp, ci_method, normality_p_value, p_value, significant (p_value < 1 -
    confidence), equivalence_p_value, equivalence_ci90_low_pct and
    equivalence_ci90_high_pct (the interval the equivalence test decides on), margin_pct, verdict, verdict_text, repeats_needed,
    target_ci_pp, target_met.

    Rows where ``exclude_col`` is true (disturbed runs) are counted and left out. The
    comparison is paired when each ``pair_col`` value (``block_id``: the block the run
    was measured in, SAME_BLOCK; any other column, e.g. a repeat number, SAME_REPEAT)
    occurs at most once per side and at least two of them are valid on both sides; only
    those pairs are used, and native_s / time_s are then the geometric means over the
    pairs (so that overhead_pct = (time_s - native_s) / native_s x 100 holds under the
    paired t method; under the rank method, ci_method's Hodges-Lehmann/Wilcoxon,
    overhead_pct is the Hodges-Lehmann shift its rank CI is built around, never the
    geometric means' ratio, which can lie outside that CI).
    Otherwise it is unpaired over the valid runs, with arithmetic means. A pair is left
    out (and counted) where its two runs were not measured together: more than
    ``max_pair_gap_s`` seconds between the end of the first and the start of the second
    (columns start, end), as after one of them was measured again; or where their
    machine-speed probes differ by more than ``probe_tolerance_pct``
    (``scalesweep.measure.probe.pair_probe_difference_pct``). Where a ``hosts`` column exists,
    pairs whose two runs ran on the same nodes are preferred (used alone when there are
    at least two of them).

    Each row is ``comparison_row`` of a ``Comparison``: everything it is computed from
    (the group, the runtime, the settings, and both sides' rows: times, exclusions, pair
    keys and the columns the pairing reads), and nothing else. ``memo``
    (scalesweep.analyse.memo.Memo, made by the caller: the aggregation): rows by a digest
    of the whole Comparison and the code's version, so a row whose inputs are unchanged
    since it was computed is taken, not computed again (a campaign plus one run changes
    one), and no changed input can be served an old row.
    """
    group_cols = as_list(group_cols)
    require_table(df, [*group_cols, runtime_col, time_col])
    times = pd.to_numeric(df[time_col], errors="coerce")
    data = df.assign(**{time_col: times})
    if exclude_col and exclude_col in df.columns:
        excluded = df[exclude_col].map(truthy)
    else:
        excluded = pd.Series(False, index=df.index)
    data = data.assign(_excluded=excluded.astype(bool))
    # only the columns read below: each group's slices of runs.csv's hundred columns were
    # most of the time at 2,000 groups (#31)
    used = dict.fromkeys([*group_cols, runtime_col, time_col, *([pair_col] if pair_col else []),
                          *ROW_KEYS])
    data = data[[c for c in used if c in data.columns]]
    rows = []
    # per group and runtime, the rows' positions, and numpy arrays and dicts of the
    # columns: slicing the table itself per group was most of the time at 2,000 groups
    runtime_of = data[runtime_col].to_numpy()
    time_of = data[time_col].to_numpy(float)
    excluded_of = data["_excluded"].to_numpy(bool)
    pairing = bool(pair_col) and pair_col in data.columns
    if pairing:
        pair_of = data[pair_col].to_numpy()
        records = pair_records(data, pair_col, time_col)

    def side(at: np.ndarray) -> Side:
        return Side(tuple(time_of[at].tolist()), tuple(excluded_of[at].tolist()),
                    tuple(pair_of[at].tolist()) if pairing else None,
                    tuple(records[i] for i in at) if pairing else None)

    settings = Settings(margin_pct, target_ci_pp, confidence, max_pair_gap_s,
                        probe_tolerance_pct)
    positions = data[group_cols].reset_index(drop=True).assign(_pos=np.arange(len(data)))
    for key, group in grouped(positions, group_cols):
        at = group["_pos"].to_numpy()
        is_base = _baseline_mask(runtime_of[at], runtime_col, baseline_runtime, group_cols, key)
        base = at[is_base]
        others = at[~is_base]
        for runtime in pd.unique(runtime_of[others]):
            if pd.isna(runtime):  # (groupby leaves out a missing runtime)
                continue
            runs = others[runtime_of[others] == runtime]
            comparison = Comparison(tuple(zip(group_cols, key)), runtime_col, runtime,
                                    time_col, pair_col if pairing else None, settings,
                                    side(base), side(runs))
            rows.append(comparison_row(comparison) if memo is None
                        else memo.cached(comparison_row, comparison))
    table = pd.DataFrame(rows, columns=[*group_cols, runtime_col, *VERDICT_COLUMNS])
    return table.astype({"significant": "boolean"})


@dataclass(frozen=True)
class Settings:
    """The settings a verdict is decided under (see ``verdict_table``)."""

    margin_pct: float
    target_ci_pp: float
    confidence: float
    max_pair_gap_s: float | None
    probe_tolerance_pct: float | None


@dataclass(frozen=True)
class Side:
    """One side's runs: times, whether each is left out (disturbed), and where paired
    their pair keys and the columns the pairing reads (``pair_records``)."""

    times: tuple
    excluded: tuple
    keys: tuple | None = None
    records: tuple | None = None


@dataclass(frozen=True)
class Comparison:
    """Everything one row of ``verdict_table`` is computed from, and nothing else
    (``comparison_row`` reads only this): a cache keyed by a digest of the whole of it
    (``scalesweep.analyse.memo.Memo.cached``) cannot serve a row for other inputs."""

    group: tuple  # ((column, value), ...)
    runtime_col: str
    runtime: object
    time_col: str
    pair_col: str | None  # None: unpaired (no such column)
    settings: Settings
    native: Side
    container: Side


def comparison_row(c: Comparison) -> dict:
    """One row of ``verdict_table``: the verdict of ``c.container`` against ``c.native``."""
    s = c.settings
    base_excluded = np.asarray(c.native.excluded, bool)
    runs_excluded = np.asarray(c.container.excluded, bool)
    if c.pair_col is not None:
        pairs = side_pairs((np.asarray(c.native.keys, object), list(c.native.records)),
                           (np.asarray(c.container.keys, object), list(c.container.records)),
                           c.pair_col, c.time_col, s.max_pair_gap_s, s.probe_tolerance_pct)
    else:
        pairs = Pairs()
    if pairs.native is None and pairs.how == SAME_BLOCK:
        # runs of blocks are compared in their pairs or not at all: never the runs
        # measured apart, nor those whose pair was left out, side by side
        pairs.native, pairs.container = pairs.surviving
    if pairs.native is not None:
        native, container = pairs.native, pairs.container
        native_s, time_s = ((np.exp(np.log(native).mean()), np.exp(np.log(container).mean()))
                            if native.size else (np.nan, np.nan))
    else:
        native = np.asarray(c.native.times, float)[~base_excluded]
        container = np.asarray(c.container.times, float)[~runs_excluded]
        native_s = native.mean() if native.size else np.nan
        time_s = container.mean() if container.size else np.nan
    paired = pairs.native is not None
    v = overhead_verdict(native, container, paired=paired, margin_pct=s.margin_pct,
                         target_ci_pp=s.target_ci_pp, confidence=s.confidence)
    p_value = v["p_value"]
    return {
        **dict(c.group),
        c.runtime_col: c.runtime,
        "paired": v["paired"],
        "pairing": pairs.how if paired else UNPAIRED,
        "n_native": v["n_native"], "n": v["n"],
        "n_disturbed": int(base_excluded.sum() + runs_excluded.sum()),
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
        "significant": pd.NA if np.isnan(p_value) else bool(p_value < 1 - s.confidence),
        "equivalence_p_value": v["equivalence_p_value"],
        # the (1 - 2 alpha) interval the two one-sided tests decide on
        "equivalence_ci90_low_pct": v["ci90_low_pct"],
        "equivalence_ci90_high_pct": v["ci90_high_pct"],
        "margin_pct": s.margin_pct,
        "verdict": v["verdict"],
        "verdict_text": _with_pairing(v["verdict_text"], pairs, paired),
        "repeats_needed": v["repeats_needed"],
        # the pairs more until the verdict is decided (not only narrow)
        "repeats_to_decide": v["repeats_to_decide"],
        "target_ci_pp": s.target_ci_pp, "target_met": v["target_met"],
    }


def _with_pairing(text: str, pairs: "Pairs", paired: bool) -> str:
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


def _baseline_mask(runtimes: np.ndarray, runtime_col: str, baseline_runtime: str,
                   group_cols: list[str], key: tuple) -> np.ndarray:
    """Which of a group's rows (their ``runtimes``) are ``baseline_runtime``'s; a
    TableError naming the group where there are none."""
    is_base = runtimes == baseline_runtime
    if not is_base.any():
        raise TableError(
            f"no {runtime_col}={baseline_runtime!r} rows in "
            f"{describe_group(group_cols, key)} ({runtime_col} present: "
            f"{', '.join(map(str, pd.unique(runtimes)))})"
        )
    return is_base
