"""LLM serving under load, from runs.csv's ``load_levels`` (each run's levels, summarised by
the payload: ``scalesweep.plan.kinds.llm.compact_level``):

* ``load_runs``: one row per run and load level (closed-loop concurrency, open-loop rate,
  offline), with the run's identity (block, repeat, disturbed) beside the level's figures;
* ``load_summary`` (llm_load.csv): per workload, model, runtime, geometry and level, over
  the valid runs: the mean of the runs' TTFT/TPOT/ITL/end-to-end percentiles with its
  confidence interval (the t interval between runs with two or more; with one run, that
  run's percentile and its own distribution-free interval), throughput, goodput against the target,
  whether the level met it, and the highest rate within the target;
* ``load_verdicts`` (llm_load_overhead.csv): the container's effect at each level on p99
  TTFT, p99 TPOT and output throughput (as seconds per output token), and on the highest
  rate within the target (as seconds per request), with the same pairing (same-block
  pairs), exclusion of disturbed runs and verdicts as overhead.csv
  (``scalesweep.analyse.overhead.verdict_table``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from scalesweep.analyse.collect import SHARED_CORES_NOTE, with_blocks
from scalesweep.analyse.frame import truthy, without_warmup
from scalesweep.analyse.overhead import verdict_table
from scalesweep.analyse.stats import CONFIDENCE, t_quantile
from scalesweep.plan.kinds.llm import LOAD_METRICS, QUANTILES, level_label
from scalesweep.plan.sweep import REFERENCE
from scalesweep.record.load import PERCENTILES as PERCENTILE_Q
from scalesweep.record.load import bounded_ci_min_n

RUN_KEYS = ["workload", "model_label", "arm", "runtime", "nodes", "gpus", "threads"]
LEVEL_KEYS = ["shape", "rate", "concurrency"]
IDENTITY = ["repeat", "block_id", "disturbed", "warmup", "shared_cores", "synthetic_model", "start", "end",
            "hosts", "path", "payload", "probe_gflops", "probe_gbps", "client_placement"]
# what the verdicts compare, each as a "time" (higher is worse): (column, what it is)
VERDICT_METRICS = {
    "ttft_p90_s": "p90 time to first token (s)",
    "ttft_p99_s": "p99 time to first token (s)",
    "tpot_p90_s": "p90 time per output token (s)",
    "tpot_p99_s": "p99 time per output token (s)",
    "s_per_output_token": "output throughput, as seconds per output token",
}
# compared at the levels that set their own pace (closed loop, offline) only: below the
# server's capacity an open loop's throughput is the rate it was offered
OFFERED = ("s_per_output_token",)
MAX_RATE_METRIC = ("s_per_request_at_max_rate", "the highest rate within the target, as "
                   "seconds per request")


def load_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run and load level (runs without load levels give none)."""
    if runs.empty or "load_levels" not in runs.columns:
        return pd.DataFrame()
    rows = []
    for _, run in runs[runs["load_levels"].notna()].iterrows():
        try:
            levels = json.loads(run["load_levels"])
        except (TypeError, ValueError):
            continue
        ident = {k: run.get(k) for k in (*RUN_KEYS, *IDENTITY) if k in run.index}
        for lv in levels:
            rows.append({**ident, **{k: lv.get(k) for k in LEVEL_KEYS}, "level": lv.get("level"),
                         **{k: v for k, v in lv.items() if k not in LEVEL_KEYS and k != "level"},
                         "max_rate_rps": run.get("max_rate_rps"),
                         "max_rate_missed_rps": run.get("max_rate_missed_rps"),
                         "max_rate_bound": run.get("max_rate_bound")})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    tput = pd.to_numeric(out.get("output_tokens_per_s"), errors="coerce")
    out["s_per_output_token"] = 1.0 / tput.where(tput > 0)
    out["level_label"] = [level_label(s, r, c) for s, r, c in
                          zip(out["shape"], out["rate"], out["concurrency"])]
    return out


TARGET_TEXT = {True: "met", False: "missed",
               None: "met by the sample percentiles, too few requests for early stopping to confirm"}


def target_text(verdicts: list) -> str:
    """A level's target column over its runs (each True, False or None: record.load's
    meets_target): every run alike, or how many of each."""
    values = [None if v is None or v != v else truthy(v) for v in verdicts]
    if not values:
        return ""
    kinds = {v: values.count(v) for v in dict.fromkeys(values)}
    if len(kinds) == 1:
        return TARGET_TEXT[values[0]]
    return "; ".join(f"{n} of {len(values)} runs {TARGET_TEXT[v]}" for v, n in kinds.items())


def _valid(data: pd.DataFrame) -> pd.Series:
    if "disturbed" not in data.columns:
        return pd.Series(True, index=data.index)
    return ~data["disturbed"].map(truthy).astype(bool)


def _interval(values: np.ndarray, own_low, own_high) -> tuple[float, float, str]:
    """(low, high, method) of a figure over runs: between runs (t interval of the mean)
    with two or more, else the one run's own interval (order statistics)."""
    values = values[np.isfinite(values)]
    if values.size >= 2:
        half = t_quantile(0.5 + CONFIDENCE / 2, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
        return values.mean() - half, values.mean() + half, f"between {values.size} runs (t)"
    if values.size == 1:
        return own_low, own_high, "within the run (order statistics)"
    return np.nan, np.nan, ""


def _request_counts(runs: pd.DataFrame) -> pd.Series:
    """Each run's request count at a level ("n"); NaN where a run did not record it (an
    older or hand-edited record): counted as 0 in a sum, never a crash."""
    if "n" not in runs:
        return pd.Series(np.nan, index=runs.index, dtype=float)
    return pd.to_numeric(runs["n"], errors="coerce").astype(float)


def load_summary(levels: pd.DataFrame) -> pd.DataFrame:
    """llm_load.csv: per workload, model, runtime, geometry and level, over its valid runs
    (warm-up runs left out: ``without_warmup``; disturbed ones counted, n_disturbed)."""
    levels = without_warmup(levels)
    if levels.empty:
        return pd.DataFrame()
    keys = [k for k in (*RUN_KEYS, *LEVEL_KEYS, "level_label") if k != "arm"]
    data = levels.assign(_valid=_valid(levels))
    data = data[~data.get("bisection", pd.Series(False, index=data.index)).map(truthy).astype(bool)]
    # the server's capacity per runtime and geometry: the most requests/s a level that sets
    # its own pace (closed loop, offline) reached, the median over runs
    paced = data[data["_valid"] & data["shape"].isin(["closed", "offline"])]
    series = [k for k in keys if k not in (*LEVEL_KEYS, "level_label")]
    capacity = {}
    if not paced.empty and "requests_per_s" in paced:
        per_run = paced.assign(_rps=pd.to_numeric(paced["requests_per_s"], errors="coerce")) \
            .groupby([*series, "path"], dropna=False)["_rps"].max().reset_index()
        for k, g in per_run.groupby(series, dropna=False):
            capacity[k if isinstance(k, tuple) else (k,)] = float(g["_rps"].median())
    rows = []
    for key, group in data.groupby(keys, dropna=False, sort=False):
        good = group[group["_valid"]]
        row = dict(zip(keys, key))
        row["capacity_rps"] = capacity.get(tuple(row[k] for k in series), np.nan)
        counts = _request_counts(good)
        row.update(n_runs=len(good), n_disturbed=int((~group["_valid"]).sum()),
                   requests=int(counts.sum()))
        for m in LOAD_METRICS:
            for q in QUANTILES:
                col = f"{m}_{q}_s"
                if col not in good:
                    continue
                vals = pd.to_numeric(good[col], errors="coerce").to_numpy(float)
                # the runs' mean, which their t interval is centred on (a median beside a
                # mean's interval can lie outside it: issue 40); one run: its own value
                row[col] = float(np.nanmean(vals)) if np.isfinite(vals).any() else np.nan
                one = good.iloc[0] if len(good) == 1 else {}
                low, high, method = _interval(vals, one.get(f"{col[:-2]}_low_s", np.nan),
                                              one.get(f"{col[:-2]}_high_s", np.nan))
                own = [pd.to_numeric(good.get(f"{col[:-2]}_{side}_s"), errors="coerce")
                       for side in ("low", "high")]
                if len(good) and any(o.isna().any() for o in own):
                    # a run's own interval of this percentile is unbounded: its requests
                    # cannot bound it, and an interval over the runs would describe their
                    # extremes, not the percentile
                    n = counts.min()
                    per_run = (f"{int(n)} requests per run" if np.isfinite(n)
                               else "a run without its request count")
                    low, high = np.nan, np.nan
                    method = (f"none: {per_run}, at least "
                              f"{bounded_ci_min_n(PERCENTILE_Q[q])} for a 95% interval of the {q}")
                row[f"{m}_{q}_ci95_low_s"], row[f"{m}_{q}_ci95_high_s"] = low, high
                row[f"{m}_{q}_ci_method"] = method
            es = f"{m}_p99_es_s"
            if es in good:
                supported = good.get(f"{m}_p99_supported", pd.Series(False, index=good.index)).map(truthy)
                row[f"{m}_p99_early_stopping_s"] = (float(pd.to_numeric(good.loc[supported, es]).median())
                                                    if supported.any() else np.nan)
                row[f"{m}_p99_note"] = next((n for n in good.get(f"{m}_p99_note", []) if isinstance(n, str) and n), "")
        for col in ("output_tokens_per_s", "requests_per_s", "goodput_rps", "fraction_met"):
            if col in good:
                vals = pd.to_numeric(good[col], errors="coerce").to_numpy(float)
                row[col] = float(np.nanmedian(vals)) if np.isfinite(vals).any() else np.nan
        if "meets_target" in good and good.get("rate", pd.Series(dtype=float)).notna().any():
            row["target"] = target_text(list(good["meets_target"]))
        for col in ("max_rate_rps", "max_rate_missed_rps"):
            if col in good:
                rates = pd.to_numeric(good[col], errors="coerce").to_numpy(float)
                row[col] = float(np.nanmedian(rates)) if np.isfinite(rates).any() else np.nan
        if "max_rate_rps" in good:
            row["max_rate_bound"] = next((b for b in good.get("max_rate_bound", []) if isinstance(b, str)), "")
        row["synthetic_model"] = bool(group.get("synthetic_model", pd.Series([False])).map(truthy).any())
        row["shared_cores"] = bool(group.get("shared_cores", pd.Series([False])).map(truthy).any())
        best, cap = row.get("max_rate_rps", np.nan), row["capacity_rps"]
        beyond = bool(np.isfinite(best) and np.isfinite(cap) and best > cap)
        row["note"] = "; ".join(n for n in (
            SHARED_CORES_NOTE if row["shared_cores"] else "",
            (f"the highest rate within the target ({best:.3g}/s) is above the server's capacity "
             f"({cap:.3g} requests/s at its closed-loop or offline levels): a run this short ends "
             "before the queue reaches its steady state, and a longer one (load.requests) would "
             "find a lower rate") if beyond else "",
            "synthetic weights: latency and throughput only" if row["synthetic_model"] else "",
            "" if row["n_runs"] >= 2 else "one run: its own percentile CI, no between-run spread")
            if n)
        rows.append(row)
    return pd.DataFrame(rows)


def load_verdicts(levels: pd.DataFrame, settings: dict) -> pd.DataFrame:
    """llm_load_overhead.csv: every container runtime against native, per level and metric
    (and once per geometry for the highest rate within the target); warm-up runs left
    out (``without_warmup``)."""
    levels = without_warmup(levels)
    if levels.empty or levels["runtime"].nunique() < 2:
        return pd.DataFrame()
    data = levels[levels["arm"] != REFERENCE] if "arm" in levels else levels
    data = data[~data.get("bisection", pd.Series(False, index=data.index)).map(truthy).astype(bool)]
    if "block_id" not in data.columns:
        data = with_blocks(data)
    keys = ["workload", "model_label", "arm", "nodes", "gpus", "threads", "shape", "rate",
            "concurrency", "level_label"]
    tables = []
    from scalesweep.analyse.summary import probe_tolerance

    common = dict(baseline_runtime=settings["baseline_runtime"], pair_col=settings["pair_col"],
                  exclude_col="disturbed", margin_pct=settings["margin_pct"],
                  target_ci_pp=settings["target_ci_pp"], confidence=settings["confidence"],
                  max_pair_gap_s=settings["max_pair_gap_s"],
                  probe_tolerance_pct=probe_tolerance(data, settings))
    filled = data.assign(**{k: data[k].fillna("") for k in ("rate", "concurrency") if k in data})
    for metric, what in VERDICT_METRICS.items():
        sub = filled[pd.to_numeric(filled.get(metric), errors="coerce") > 0]
        if metric in OFFERED:  # an open loop's throughput is its offered rate: nothing to compare
            sub = sub[sub["shape"].isin(["closed", "offline"])]
        if sub.empty or sub["runtime"].nunique() < 2:
            continue
        sub = sub[_has_baseline(sub, keys, settings["baseline_runtime"])]
        if sub.empty:
            continue
        t = verdict_table(sub, keys, time_col=metric, **common)
        tables.append(_too_few_requests(t.assign(metric=metric, compared=what), sub, keys, metric))
    # the highest rate within the target: one figure per run (the first level's row)
    first = filled.sort_values("level").drop_duplicates("path") if "path" in filled else filled
    rate = pd.to_numeric(first.get("max_rate_rps"), errors="coerce")
    bounded = first.get("max_rate_bound", pd.Series("", index=first.index)).astype(str) == "bisection"
    sub = first[(rate > 0) & bounded].assign(**{MAX_RATE_METRIC[0]: 1.0 / rate})
    unbounded = first[~((rate > 0) & bounded)]
    run_keys = ["workload", "model_label", "arm", "nodes", "gpus", "threads"]
    if not sub.empty and sub["runtime"].nunique() >= 2:
        sub = sub[_has_baseline(sub, run_keys, settings["baseline_runtime"])]
        if not sub.empty:
            t = verdict_table(sub, run_keys, time_col=MAX_RATE_METRIC[0], **common)
            t = _within_resolution(t, sub, run_keys, settings["margin_pct"])
            left = unbounded.groupby(run_keys, dropna=False).size().to_dict()
            for i in t.index:
                k = left.get(tuple(t.at[i, c] for c in run_keys), 0)
                if k:
                    t.at[i, "verdict_text"] += (f"; {k} run{'s' if k != 1 else ''} whose rates all met "
                                                "the target, or none did, left out")
            tables.append(t.assign(metric=MAX_RATE_METRIC[0], compared=MAX_RATE_METRIC[1],
                                   level_label="highest rate within the target"))
    if not tables:
        return pd.DataFrame()
    out = pd.concat(tables, ignore_index=True)
    shared = levels.get("shared_cores", pd.Series(False, index=levels.index)).map(truthy).any()
    out["note"] = SHARED_CORES_NOTE if shared else ""
    front = ["workload", "model_label", "arm", "nodes", "gpus", "threads", "level_label", "runtime",
             "metric", "compared", "verdict", "verdict_text"]
    return out[[c for c in front if c in out] + [c for c in out if c not in front]]


def _within_resolution(table: pd.DataFrame, runs: pd.DataFrame, keys: list[str],
                       margin_pct: float) -> pd.DataFrame:
    """A bisection knows the highest rate only within its last bracket (the rate that met
    the target to the one that missed): where the widest bracket of a comparison's runs is
    wider than the equivalence margin, "equivalent" (identical grid points on both sides)
    says more than the runs know, and the row becomes inconclusive, saying so."""
    missed = pd.to_numeric(runs.get("max_rate_missed_rps"), errors="coerce")
    found = pd.to_numeric(runs["max_rate_rps"], errors="coerce")
    width = runs.assign(_pct=100.0 * (missed / found - 1.0)).groupby(keys, dropna=False)["_pct"].max()
    table = table.copy()
    table["resolution_pct"] = [width.get(tuple(r[k] for k in keys), np.nan)
                               for _, r in table.iterrows()]
    res = table["resolution_pct"]
    low, high = table["overhead_ci95_low_pct"], table["overhead_ci95_high_pct"]
    coarse = (((table["verdict"] == "equivalent") & (res > margin_pct))
              # slower / faster by less than the bracket: the grid, not the runs, decides
              | ((table["verdict"] == "slower") & ~(low > res))
              | ((table["verdict"] == "faster") & ~(high < -res)))
    for i in table.index[coarse]:
        table.at[i, "verdict"] = "inconclusive"
        table.at[i, "verdict_text"] = (
            f"inconclusive: the bisection resolves the highest rate to {res[i]:.0f}%, and the "
            f"difference is not clear of it (load.max_rate_steps: more steps narrow it); "
            f"as measured: {table.at[i, 'verdict_text']}")
    return table


def _too_few_requests(table: pd.DataFrame, runs: pd.DataFrame, keys: list[str],
                      metric: str) -> pd.DataFrame:
    """A percentile's verdict where a run's requests cannot bound that percentile (fewer
    than ``bounded_ci_min_n``: 368 for a p99): inconclusive, saying how many it needs
    (the comparison is then of the runs' extremes, not of the percentile)."""
    q = next((k for k in PERCENTILE_Q if f"_{k}_" in metric), None)
    if q is None or table.empty:
        return table
    need = bounded_ci_min_n(PERCENTILE_Q[q])
    fewest = runs.assign(_n=pd.to_numeric(runs.get("n"), errors="coerce")) \
        .groupby(keys, dropna=False)["_n"].min().to_dict()
    table = table.copy()
    for i in table.index:
        n = fewest.get(tuple(table.at[i, k] for k in keys))
        if n is not None and n == n and n < need:
            table.at[i, "verdict"] = "inconclusive"
            table.at[i, "verdict_text"] = (
                f"inconclusive: {int(n)} requests per run cannot bound a {q} (at least {need} "
                f"for a 95% interval: load.requests); as measured: {table.at[i, 'verdict_text']}")
    return table


def _has_baseline(data: pd.DataFrame, keys: list[str], baseline: str) -> pd.Series:
    """Rows of groups with a baseline run (a level only one side measured compares nothing)."""
    return data.groupby(keys, dropna=False)["runtime"].transform(lambda r: (r == baseline).any()).astype(bool)
