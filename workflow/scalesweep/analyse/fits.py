"""Scaling-law fits of a time-vs-count series: Amdahl's law and the Universal Scalability Law.

Pure functions on a table of runs (one row per run; rows with the same count are repeats),
as ``scaling.scaling_table`` takes it. Both laws are fitted in the time form, by least
squares on log(time), so every point weighs by its relative error whatever its magnitude:

- Amdahl:  T(n) = T1 * (s + (1 - s) / n)                                  (t1_s, serial_fraction)
- USL:     T(n) = T1 * (1 + sigma (n - 1) + kappa n (n - 1)) / n          (t1_s, sigma, kappa)
  the time form of Gunther's throughput X(n) = lambda n / (1 + sigma (n - 1) + kappa n (n - 1))
  with lambda = 1 / T1 (one unit of work). kappa = 0 is Amdahl with s = sigma.

n is the count itself (nodes, ranks or GPUs), so T1 is the modelled time at a count of 1,
an extrapolation when the series starts higher (the LRZ table starts at 4 nodes).

Uncertainty comes from the repeats, by a seeded bootstrap: with at least two repeats at
every count the repeats are resampled within each count ("repeats"); otherwise (one run
per count, as in published tables) the log residuals of the fit, scaled by sqrt(N / (N - p)),
are resampled onto the fitted curve ("residuals"). Intervals are bootstrap percentiles,
widened where needed to hold the least-squares estimate itself: a percentile interval of a
skewed or bounded bootstrap (a serial fraction at 0) can miss it, and every table gives an
estimate inside its own interval (issue 40); widening only raises the coverage.

Predictions at counts not run are refused, with the reason, when
- the series has fewer distinct counts than parameters + 1 (``too_few_points``: nothing is
  fitted; Amdahl needs 3 counts, the USL 4), or
- the fit is poor (``poor_fit``): R^2 of log(time) below ``MIN_R2_LOG`` or a lack of fit
  above ``MAX_LACK_OF_FIT_LOG``. The lack of fit is the root mean square, over counts, of
  log(mean measured time / fitted time): 0.10 is a curve that misses the measured means
  by about 10% on average, repeat noise averaged out. Laws that miss the points they were
  fitted to by more than that say little about the points they were not.

Predicted efficiency is the scaling table's: baseline time x baseline count /
(count x predicted time) x 100, with the measured mean time at the baseline count (the
smallest, unless given), so a predicted point reads like a measured row of scaling.csv.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import optimize

from scalesweep.analyse.frame import (TableError, left_out, require_positive_times,
                                      require_table, require_valid)
from scalesweep.analyse.stats import CONFIDENCE
from scalesweep.plan.fitlaws import MODELS, can_fit, figure_series, min_counts  # noqa: F401

MIN_R2_LOG = 0.90
MAX_LACK_OF_FIT_LOG = 0.10
DEFAULT_BOOTSTRAP = 1000
DEFAULT_SEED = 0
STATUSES = ("ok", "poor_fit", "too_few_points", "failed")


@dataclass(frozen=True, eq=False)
class Fit:
    """One law fitted to one series. ``reason`` says why predictions are refused ('' if not)."""

    model: str
    status: str
    reason: str
    counts: tuple[int, ...]
    n_runs: int
    baseline_count: int
    baseline_time_s: float
    params: dict[str, float] = field(default_factory=dict)
    ci95: dict[str, tuple[float, float]] = field(default_factory=dict)
    r2_log: float = np.nan
    rmse_log: float = np.nan
    lack_of_fit_log: float = np.nan
    bootstrap: str = ""  # "repeats" | "residuals" | "" (not fitted)
    n_boot: int = 0
    seed: int = DEFAULT_SEED
    residuals: pd.DataFrame = field(default_factory=pd.DataFrame)
    samples: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))

    @property
    def can_predict(self) -> bool:
        return self.status == "ok"

    @property
    def fitted(self) -> bool:
        return self.status in ("ok", "poor_fit")


def model_time(model: str, params, counts) -> np.ndarray:
    """T(n) of ``model`` at ``counts``; ``params`` a dict by name or a sequence in order."""
    if model not in MODELS:
        raise TableError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
    if isinstance(params, dict):
        params = [params[name] for name in MODELS[model]]
    n = np.asarray(counts, dtype=float)
    if model == "amdahl":
        t1, s = params
        return t1 * (s + (1 - s) / n)
    t1, sigma, kappa = params
    return t1 * (1 + sigma * (n - 1) + kappa * n * (n - 1)) / n


def fit_series(
    runs: pd.DataFrame,
    model: str = "amdahl",
    count_col: str = "nodes",
    time_col: str = "time_s",
    baseline: int | None = None,
    n_boot: int = DEFAULT_BOOTSTRAP,
    seed: int = DEFAULT_SEED,
) -> Fit:
    """Fit ``model`` to one series (every row one run; same count = repeats)."""
    if model not in MODELS:
        raise TableError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
    counts, times = _series(runs, count_col, time_col)
    distinct = tuple(int(c) for c in np.unique(counts))
    base = distinct[0] if baseline is None else int(baseline)
    if base not in distinct:
        raise TableError(f"baseline {count_col}={base} is not in the series "
                         f"({count_col} present: {', '.join(map(str, distinct))})")
    common = dict(model=model, counts=distinct, n_runs=len(times), baseline_count=base,
                  baseline_time_s=float(times[counts == base].mean()), seed=seed)
    need = min_counts(model)
    if len(distinct) < need:
        return Fit(status="too_few_points", reason=(
            f"too few points to fit: {len(distinct)} distinct {count_col} "
            f"({', '.join(map(str, distinct))}); {model} has {need - 1} parameters and "
            f"needs at least {need}"), **common)

    estimate = _least_squares(model, counts, times)
    if estimate is None:
        return Fit(status="failed", reason=f"the {model} fit did not converge", **common)
    fitted = model_time(model, estimate, counts)
    log_res = np.log(times) - np.log(fitted)
    log_t = np.log(times)
    ss_tot = float(((log_t - log_t.mean()) ** 2).sum())
    ss_res = float((log_res**2).sum())
    if ss_tot > 0:
        r2 = 1 - ss_res / ss_tot
    else:  # every time equal: a flat law (s = 1) fits it exactly, or nothing does
        r2 = 1.0 if ss_res < 1e-10 * len(times) else np.nan
    rmse = float(np.sqrt((log_res**2).mean()))
    per_count = pd.Series(log_res).groupby(counts).mean()
    lack = float(np.sqrt((per_count**2).mean()))

    samples, method = _bootstrap(model, counts, times, estimate, fitted, log_res, n_boot, seed)
    alpha = (1 - CONFIDENCE) / 2
    names = MODELS[model]
    ci = {}
    for i, name in enumerate(names):
        good = samples[:, i][np.isfinite(samples[:, i])]
        ci[name] = (tuple(map(float, _holding(float(estimate[i]), np.quantile(good, alpha),
                                              np.quantile(good, 1 - alpha))))
                    if good.size else (np.nan, np.nan))
    problems = []
    if not (r2 >= MIN_R2_LOG):  # also a NaN R^2
        problems.append(f"R^2 of log(time) {r2:.3f} < {MIN_R2_LOG}")
    if lack > MAX_LACK_OF_FIT_LOG:
        problems.append(f"the curve misses the measured means by {lack:.3f} in log(time) "
                        f"(about {np.expm1(lack) * 100:.0f}%), more than {MAX_LACK_OF_FIT_LOG}")
    residuals = pd.DataFrame({
        "count": counts.astype(int), "time_s": times, "fitted_s": fitted,
        "residual_log": log_res, "residual_pct": np.expm1(log_res) * 100,
    })
    return Fit(
        status="poor_fit" if problems else "ok",
        reason=("poor fit, no predictions: " + "; ".join(problems)) if problems else "",
        params=dict(zip(names, map(float, estimate))), ci95=ci, r2_log=r2, rmse_log=rmse,
        lack_of_fit_log=lack, bootstrap=method, n_boot=len(samples), residuals=residuals,
        samples=samples, **common,
    )


def fitted_curve(fit: Fit, counts) -> pd.DataFrame:
    """The fitted time at ``counts`` with its bootstrap 95% band, refused fit or not
    (for drawing a fit over the counts it was fitted to): count, time_s, ci95_low, ci95_high."""
    n = np.asarray(counts, dtype=float)
    if not fit.fitted:
        nan = np.full(n.shape, np.nan)
        return pd.DataFrame({"count": n, "time_s": nan, "ci95_low": nan, "ci95_high": nan})
    point = model_time(fit.model, fit.params, n)
    draws = np.array([model_time(fit.model, p, n) for p in fit.samples]) if len(fit.samples) \
        else np.empty((0, n.size))
    alpha = (1 - CONFIDENCE) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: no samples
        low = np.nanquantile(draws, alpha, axis=0) if len(draws) else np.full(n.shape, np.nan)
        high = np.nanquantile(draws, 1 - alpha, axis=0) if len(draws) else np.full(n.shape, np.nan)
    low, high = _holding(point, low, high)
    return pd.DataFrame({"count": n, "time_s": point, "ci95_low": low, "ci95_high": high})


def _holding(estimate, low, high):
    """The percentile interval [low, high] widened to hold ``estimate`` (elementwise; a
    NaN bound stays NaN)."""
    with np.errstate(invalid="ignore"):
        return (np.where(np.isnan(low), low, np.fmin(low, estimate)),
                np.where(np.isnan(high), high, np.fmax(high, estimate)))


PREDICTION_COLUMNS = [
    "model", "count", "time_s", "time_ci95_low", "time_ci95_high", "efficiency_pct",
    "efficiency_ci95_low_pct", "efficiency_ci95_high_pct", "speedup", "measured",
    "extrapolation_factor", "note",
]


def predict(fit: Fit, counts) -> pd.DataFrame:
    """Predicted time and efficiency at ``counts``, with 95% bootstrap CIs.

    Columns: ``PREDICTION_COLUMNS``. ``measured`` says whether the count is in the series;
    ``extrapolation_factor`` = count / largest measured count (> 1 beyond the series).
    A fit that may not predict gives NaN values and its reason in ``note``.
    """
    counts = [int(c) for c in counts]
    bad = [c for c in counts if c < 1]
    if bad:
        raise TableError(f"prediction counts must be positive whole numbers, not {bad[0]}")
    top = max(fit.counts)
    frame = pd.DataFrame({
        "model": fit.model, "count": counts, "measured": [c in fit.counts for c in counts],
        "extrapolation_factor": [c / top for c in counts],
    })
    if not fit.can_predict:
        for col in PREDICTION_COLUMNS:
            if col not in frame:
                frame[col] = np.nan
        frame["note"] = fit.reason
        return frame[PREDICTION_COLUMNS]
    band = fitted_curve(fit, counts)
    base = fit.baseline_time_s * fit.baseline_count

    def efficiency(t):
        return base / (np.asarray(counts) * t) * 100

    frame = frame.assign(
        time_s=band["time_s"].to_numpy(),
        time_ci95_low=band["ci95_low"].to_numpy(),
        time_ci95_high=band["ci95_high"].to_numpy(),
        efficiency_pct=efficiency(band["time_s"].to_numpy()),
        # efficiency falls as time grows: the time CI's ends swap
        efficiency_ci95_low_pct=efficiency(band["ci95_high"].to_numpy()),
        efficiency_ci95_high_pct=efficiency(band["ci95_low"].to_numpy()),
        speedup=fit.baseline_time_s / band["time_s"].to_numpy(),
        note="",
    )
    return frame[PREDICTION_COLUMNS]


def describe_prediction(row: pd.Series, count_name: str = "nodes") -> str:
    """'at 256 nodes: efficiency 83% +- 4% (95% CI 79-87%), time 61.2 s [58.1, 64.5]'."""
    if pd.isna(row["time_s"]):
        return f"at {row['count']} {count_name}: no prediction ({row['note']})"
    half = (row["efficiency_ci95_high_pct"] - row["efficiency_ci95_low_pct"]) / 2
    return (f"at {row['count']} {count_name}: efficiency {row['efficiency_pct']:.0f}% +- "
            f"{half:.0f}% (95% CI {row['efficiency_ci95_low_pct']:.0f}-"
            f"{row['efficiency_ci95_high_pct']:.0f}%), time {_g(row['time_s'])} s "
            f"[{_g(row['time_ci95_low'])}, {_g(row['time_ci95_high'])}]")


FIT_COLUMNS = [
    "model", "status", "counts", "n_runs", "baseline_count", "baseline_time_s",
    "t1_s", "t1_s_ci95_low", "t1_s_ci95_high",
    "serial_fraction", "serial_fraction_ci95_low", "serial_fraction_ci95_high",
    "sigma", "sigma_ci95_low", "sigma_ci95_high", "kappa", "kappa_ci95_low", "kappa_ci95_high",
    "r2_log", "rmse_log", "lack_of_fit_log", "bootstrap", "n_boot", "seed", "reason",
]


def fit_row(fit: Fit) -> dict:
    """One flat row of a fits table (``FIT_COLUMNS``): parameters of the other law NaN."""
    row = {
        "model": fit.model, "status": fit.status, "counts": ";".join(map(str, fit.counts)),
        "n_runs": fit.n_runs, "baseline_count": fit.baseline_count,
        "baseline_time_s": fit.baseline_time_s, "r2_log": fit.r2_log, "rmse_log": fit.rmse_log,
        "lack_of_fit_log": fit.lack_of_fit_log, "bootstrap": fit.bootstrap,
        "n_boot": fit.n_boot, "seed": fit.seed, "reason": fit.reason,
    }
    for name in ("t1_s", "serial_fraction", "sigma", "kappa"):
        low, high = fit.ci95.get(name, (np.nan, np.nan))
        row.update({name: fit.params.get(name, np.nan), f"{name}_ci95_low": low,
                    f"{name}_ci95_high": high})
    return {col: row[col] for col in FIT_COLUMNS}


def fit_groups(
    runs: pd.DataFrame,
    group_cols=(),
    models=tuple(MODELS),
    count_col: str = "nodes",
    time_col: str = "time_s",
    baseline: int | None = None,
    n_boot: int = DEFAULT_BOOTSTRAP,
    seed: int = DEFAULT_SEED,
) -> list[tuple[dict, Fit]]:
    """Every model fitted to every group: [(group values, fit)], groups in table order."""
    group_cols = [group_cols] if isinstance(group_cols, str) else list(group_cols)
    require_table(runs, [*group_cols, count_col, time_col])
    out = []
    keys = group_cols if group_cols else np.zeros(len(runs), dtype=int)
    for key, group in runs.groupby(keys, sort=False, dropna=False):
        values = dict(zip(group_cols, key if isinstance(key, tuple) else (key,))) \
            if group_cols else {}
        for model in models:
            out.append((values, fit_series(group, model, count_col, time_col, baseline,
                                           n_boot, seed)))
    return out


def holdout_errors(
    runs: pd.DataFrame,
    train_max: int,
    model: str = "amdahl",
    count_col: str = "nodes",
    time_col: str = "time_s",
    n_boot: int = DEFAULT_BOOTSTRAP,
    seed: int = DEFAULT_SEED,
) -> tuple[Fit, pd.DataFrame]:
    """Fit on counts <= ``train_max``, predict the others, and compare with what was measured.

    Returns (the fit, one row per held-out count): the prediction columns plus
    measured_time_s, measured_efficiency_pct (same baseline), time_error_pct =
    (predicted - measured) / measured x 100, efficiency_error_pts = predicted - measured
    efficiency (percentage points), within_ci (measured time inside the 95% CI).
    """
    counts, times = _series(runs, count_col, time_col)
    train = runs.loc[counts <= train_max]
    test_counts = sorted({int(c) for c in counts[counts > train_max]})
    if train.empty or not test_counts:
        raise TableError(f"{count_col} <= {train_max} must leave points on both sides")
    fit = fit_series(train, model, count_col, time_col, n_boot=n_boot, seed=seed)
    table = predict(fit, test_counts)
    measured = pd.Series(times).groupby(counts).mean()
    table["measured_time_s"] = measured.loc[test_counts].to_numpy()
    base = fit.baseline_time_s * fit.baseline_count
    table["measured_efficiency_pct"] = base / (table["count"] * table["measured_time_s"]) * 100
    table["time_error_pct"] = (table["time_s"] - table["measured_time_s"]) / \
        table["measured_time_s"] * 100
    table["efficiency_error_pts"] = table["efficiency_pct"] - table["measured_efficiency_pct"]
    table["within_ci"] = (table["measured_time_s"] >= table["time_ci95_low"]) & \
        (table["measured_time_s"] <= table["time_ci95_high"])
    return fit, table


# --- fitting ------------------------------------------------------------------------------

def _series(runs: pd.DataFrame, count_col: str, time_col: str) -> tuple[np.ndarray, np.ndarray]:
    require_table(runs, [count_col, time_col])
    require_positive_times(runs, time_col)
    counts = pd.to_numeric(runs[count_col], errors="coerce")
    whole = counts.notna() & np.isfinite(counts) & (counts > 0) & (counts % 1 == 0)
    require_valid(runs, count_col, whole, "a positive whole number")
    return counts.to_numpy(float), pd.to_numeric(runs[time_col]).to_numpy(float)


def _shape(model: str, shape, counts: np.ndarray) -> np.ndarray:
    """T(n) / T1: the law without its scale."""
    return model_time(model, [1.0, *shape], counts)


def _bounds(model: str):
    # Amdahl's s and the USL's sigma are fractions; kappa >= 0. T1 is profiled out.
    if model == "amdahl":
        return ([0.0], [1.0])
    return ([0.0, 0.0], [1.0, np.inf])


def _starts(model: str, counts: np.ndarray, times: np.ndarray) -> list[np.ndarray]:
    """Initial shapes: Amdahl's a + b / n by linear least squares on relative errors."""
    design = np.column_stack([np.ones_like(counts), 1 / counts]) / times[:, None]
    (a, b), _ = optimize.nnls(design, np.ones_like(times))
    s = min(max(a / (a + b), 1e-6), 1 - 1e-6) if a + b > 0 else 0.5
    if model == "amdahl":
        return [np.array([s])]
    top = counts.max()
    return [np.array([s, k / (top * top)]) for k in (0.0, 0.01, 0.1, 1.0)]


def _solve(model: str, counts: np.ndarray, log_times: np.ndarray, start: np.ndarray):
    """Least squares on log(time) over the shape; log(T1) is the mean residual (profiled)."""
    def residuals(shape):
        r = log_times - np.log(_shape(model, shape, counts))
        return r - r.mean()

    low, high = _bounds(model)
    if model == "amdahl":  # one bounded shape parameter: Brent's method, ~10x faster
        result = optimize.minimize_scalar(lambda s: float((residuals([s]) ** 2).sum()),
                                          bounds=(0.0, 1.0), method="bounded",
                                          options={"xatol": 1e-12})
        x, cost = np.array([result.x]), result.fun / 2
        if not (result.success and np.isfinite(cost)):
            return None, np.inf
        log_t1 = float(np.mean(log_times - np.log(_shape(model, x, counts))))
        return np.array([np.exp(log_t1), *x]), cost
    start = np.minimum(np.maximum(start, low), np.where(np.isfinite(high), high, start))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = optimize.least_squares(residuals, start, bounds=(low, high), x_scale="jac",
                                        method="trf")
    if not np.all(np.isfinite(result.x)) or not np.isfinite(result.cost):
        return None, np.inf
    log_t1 = float(np.mean(log_times - np.log(_shape(model, result.x, counts))))
    return np.array([np.exp(log_t1), *result.x]), result.cost


def _least_squares(model: str, counts: np.ndarray, times: np.ndarray, starts=None):
    """Best parameters (T1, ...) over the starting shapes, or None."""
    log_times = np.log(times)
    best, best_cost = None, np.inf
    for start in starts if starts is not None else _starts(model, counts, times):
        x, cost = _solve(model, counts, log_times, start)
        if x is not None and cost < best_cost:
            best, best_cost = x, cost
    return best


def _bootstrap(model, counts, times, estimate, fitted, log_res, n_boot, seed):
    """(n_boot x parameters) refitted estimates, and which bootstrap was used."""
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(counts == c) for c in np.unique(counts)]
    by_repeats = all(len(g) >= 2 for g in groups)
    start = [np.asarray(estimate[1:])]
    scale = np.sqrt(len(times) / max(len(times) - len(estimate), 1))
    centred = (log_res - log_res.mean()) * scale
    samples = np.full((max(int(n_boot), 0), len(estimate)), np.nan)
    for i in range(len(samples)):
        if by_repeats:
            rows = np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups])
            c, t = counts[rows], times[rows]
        else:
            c, t = counts, fitted * np.exp(rng.choice(centred, size=len(centred), replace=True))
        refit = _least_squares(model, c, t, start)
        if refit is not None:
            samples[i] = refit
    return samples, "repeats" if by_repeats else "residuals"


def _g(value: float) -> str:
    return f"{value:.4g}"


def prediction_counts(counts) -> list[int]:
    """Where a figure predicts when nobody said: 2x and 4x the largest count (the doubling
    steps of the studies' sweeps)."""
    top = int(max(counts))
    return [2 * top, 4 * top]


# --- a campaign's fits (rule fits: fits.csv), also `scalesweep fit` on its runs.csv -----
CAMPAIGN_SERIES = ["workload", "runtime", "threads"]  # as scaling.csv groups them


def campaign_training_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs scaling.csv is made of (CNN training, disturbed and warm-up runs left
    out: ``frame.left_out``)."""
    if "payload" not in runs:
        return runs.iloc[0:0]
    from scalesweep.plan.kinds import summarised_in

    runs = runs[runs["payload"].isin(summarised_in("scaling"))]
    return runs[~left_out(runs)]  # kept in runs.csv, left out of every statistic


def campaign_fits(runs: pd.DataFrame, config: dict) -> list[tuple[dict, pd.DataFrame, list]]:
    """[(series values, its runs, [one fit per model])] of a campaign's training runs,
    per CAMPAIGN_SERIES, with the sweep's baseline where it was measured."""
    from scalesweep.plan.sweep import workload_axes

    out = []
    for key, group in campaign_training_runs(runs).groupby(CAMPAIGN_SERIES, sort=True):
        baseline = workload_axes(config, key[0]).get("baseline")
        present = set(group["count"].astype(int))
        base = baseline if baseline is not None and int(baseline) in present else None
        found = [fit_series(group, model, "count", "time_s", base) for model in MODELS]
        out.append((dict(zip(CAMPAIGN_SERIES, key)), group, found))
    return out
