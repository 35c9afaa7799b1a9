"""The machine's drift over a campaign, and what it does to the runs (from runs.csv; pure:
a runs table in, a table out; its figure is ``scalesweep.report.drift.drift_figure``;
workflow/scripts/report_drift.py reads and writes the files).

- ``drift_table``: per series (workload, nodes, gpus, ranks, threads, runtime) the spread of
  the machine-speed probe (``scalesweep.measure.probe``) and of the run time across the series'
  runs (coefficients of variation), the Pearson correlation of run time with the probe
  (r, r squared, p) and a text saying whether the probe explains the run-to-run spread;
  for LLM series, the spread inside a run (CV of its requests' decode rates,
  ``within_run_cv_pct``) next to the spread between runs (CV of tokens/s across runs) and
  their ratio.
- ``drift_figure`` (``scalesweep.report.drift``): the probe's GFLOP/s and GB/s over the campaign's wall-clock time, every
  run a point, coloured by runtime, disturbed runs hollow grey.

The probe a series is correlated with is the kernel its workload leans on: GFLOP/s (the
float32 matrix multiply) for the CNN, GB/s (the matrix-vector multiply streaming its
matrix from memory, as a decode step streams the weights) for the LLM. Disturbed runs are
drawn but left out of every statistic, as everywhere in the report.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from scalesweep.analyse.frame import flag_column, truthy
from scalesweep.analyse.stats import cv_pct, rate_stats
from scalesweep.plan.kinds import kinds, summarised_in
from scalesweep.record.geometry import AXES as GEOMETRY

DRIFT_KEYS = ["workload", *GEOMETRY, "runtime"]
DRIFT_COLUMNS = [
    *DRIFT_KEYS, "payload", "n", "n_disturbed", "n_probed", "first_start", "last_end",
    "time_s_mean", "time_cv_pct", "probe_gflops_mean", "probe_gflops_cv_pct",
    "probe_gbps_mean", "probe_gbps_cv_pct", "probe_change_pct_max", "probe_kernel",
    "r", "r2", "p_value", "probe_explains",
    "tokens_per_s_mean", "between_run_cv_pct", "within_run_cv_pct", "spread_ratio",
    "spread", "note",
]
ALPHA = 0.05  # the correlation's test level
FAR_MORE = 3.0  # between-run CV this many times the within-run CV: "far more"
MIN_RUNS = 3  # a correlation over fewer probed runs says nothing
SERIES_LINES = 8  # the figure's footer names this many series, drift.csv all
KERNEL_OF = {kind.name: f"probe_{kind.probe_kernel}" for kind in kinds()}
DOES_NOT = "probe does not explain the spread"
FAR_MORE_TEXT = "runs differ far more from each other than inside themselves"
NO_PROBE = ("no run recorded the machine-speed probe (runs measured before it existed): "
            "no drift to show")


def numeric_series(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce")


def explained(time_s, probe, min_runs: int = MIN_RUNS, alpha: float = ALPHA) -> dict:
    """Pearson correlation of run time with the probe: r, r2, p_value and the text. The
    probe explains the spread where the correlation is significant at ``alpha`` and goes
    the physical way (a faster machine, a shorter run: r < 0); then r squared is the
    share of the run time's variance it accounts for."""
    t, p = np.asarray(time_s, dtype=float), np.asarray(probe, dtype=float)
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok], p[ok]
    out = {"r": np.nan, "r2": np.nan, "p_value": np.nan}
    if t.size < min_runs:
        out["probe_explains"] = (f"too few probed runs ({t.size}) to tell whether the probe "
                                 "explains the spread")
        return out
    if np.ptp(t) == 0 or np.ptp(p) == 0:
        out["probe_explains"] = f"{DOES_NOT} (run time or probe constant)"
        return out
    res = stats.pearsonr(p, t)
    r, pv = float(res.statistic), float(res.pvalue)
    out.update(r=r, r2=r * r, p_value=pv)
    detail = f"r {r:+.2f}, p {pv:.2g}, n {t.size}"
    if pv < alpha and r < 0:
        out["probe_explains"] = (f"probe explains {100 * r * r:.0f}% of the run-to-run "
                                 f"variance ({detail})")
    elif pv < alpha:
        out["probe_explains"] = (f"{DOES_NOT}: run time rises with the probe's speed "
                                 f"({detail})")
    else:
        out["probe_explains"] = f"{DOES_NOT} ({detail})"
    return out


def spread_text(between: float, within: float, far_more: float = FAR_MORE) -> tuple[float, str]:
    """(ratio, text): the between-run CV over the within-run CV, and what it means."""
    if not (np.isfinite(between) and np.isfinite(within)) or within <= 0:
        return np.nan, ""
    ratio = between / within
    numbers = f"between runs {between:.1f}%, inside a run {within:.1f}% (CV)"
    if ratio > far_more:
        return ratio, f"{FAR_MORE_TEXT} ({numbers})"
    return ratio, f"runs differ from each other about as much as inside themselves ({numbers})"


def _kernel(payload, df: pd.DataFrame) -> str:
    kernel = KERNEL_OF.get(str(payload), "probe_gflops")
    return kernel if numeric_series(df, kernel).notna().any() else \
        next((k for k in ("probe_gflops", "probe_gbps") if numeric_series(df, k).notna().any()), kernel)


def drift_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per series (``DRIFT_KEYS``): see the module's doc. Statistics over the
    undisturbed runs; n counts them, n_disturbed those left out, n_probed those with a
    probe figure. Warm-up runs (runs.csv's warmup) are left out before anything."""
    if runs is not None and not runs.empty:
        runs = runs[~flag_column(runs, "warmup")]
    if runs is None or runs.empty or any(k not in runs.columns for k in DRIFT_KEYS):
        return pd.DataFrame([{"note": "no runs"}], columns=DRIFT_COLUMNS)
    rows = []
    for key, group in runs.groupby(DRIFT_KEYS, sort=True, dropna=False):
        disturbed = group["disturbed"].map(truthy).astype(bool) if "disturbed" in group \
            else pd.Series(False, index=group.index)
        g = group[~disturbed]
        payload = g["payload"].iloc[0] if "payload" in g and len(g) else \
            (group["payload"].iloc[0] if "payload" in group else None)
        row = dict(zip(DRIFT_KEYS, key))
        starts = pd.to_datetime(group.get("start"), utc=True, errors="coerce") \
            if "start" in group else pd.Series(dtype="datetime64[ns, UTC]")
        ends = pd.to_datetime(group.get("end"), utc=True, errors="coerce") \
            if "end" in group else pd.Series(dtype="datetime64[ns, UTC]")
        time_s = numeric_series(g, "time_s")
        kernel = _kernel(payload, g)
        probe = numeric_series(g, kernel)
        row.update(
            payload=payload, n=len(g), n_disturbed=int(disturbed.sum()),
            n_probed=int((numeric_series(g, "probe_gflops").notna()
                          | numeric_series(g, "probe_gbps").notna()).sum()),
            first_start=None if starts.isna().all() else starts.min().isoformat(),
            last_end=None if ends.isna().all() else ends.max().isoformat(),
            time_s_mean=float(time_s.mean()) if time_s.notna().any() else np.nan,
            time_cv_pct=cv_pct(time_s),
            # rates: total work over total time (harmonic mean)
            probe_gflops_mean=rate_stats(numeric_series(g, "probe_gflops"))["mean"],
            probe_gflops_cv_pct=cv_pct(numeric_series(g, "probe_gflops")),
            probe_gbps_mean=rate_stats(numeric_series(g, "probe_gbps"))["mean"],
            probe_gbps_cv_pct=cv_pct(numeric_series(g, "probe_gbps")),
            probe_change_pct_max=float(numeric_series(g, "probe_change_pct").max()),
            probe_kernel=kernel,
            **explained(time_s, probe),
        )
        notes = []
        if row["n_probed"] == 0:
            notes.append("no probed run")
        if payload in summarised_in("llm"):  # its requests' spread inside a run
            tps = numeric_series(g, "tokens_per_s")
            within = numeric_series(g, "within_run_cv_pct")
            row.update(tokens_per_s_mean=rate_stats(tps)["mean"],
                       between_run_cv_pct=cv_pct(tps),
                       within_run_cv_pct=float(within.mean()) if within.notna().any() else np.nan)
            row["spread_ratio"], row["spread"] = spread_text(row["between_run_cv_pct"],
                                                             row["within_run_cv_pct"])
            if within.isna().all():
                notes.append("no run recorded its requests' decode rates: no within-run spread")
        row["note"] = "; ".join(notes)
        rows.append(row)
    return pd.DataFrame(rows, columns=DRIFT_COLUMNS)
