"""Start-up at scale (issue #44): the measured curves of concurrent starts, a model of the
slowest rank fitted to them and checked on starts held out of the fit, and its prediction
at a site's scale. Pure functions of rule startup_scale's rows
(``scalesweep.run.startscale``: one row per concurrent start, each rank's seconds and the
file-system server's counters).

The model, for K ranks starting together on P cores, each start asking ``W`` seconds of
the file system's one metadata server::

    T_max(K) = a * max(1, K / P)  +  d * W  +  b * (K - 1) * W

- ``a``: one start's own time (interpreter, libraries, imports), shared out when there
  are more ranks than cores;
- ``d * W``: the rank's own operations, one after the other (``d`` >= 1: each also costs
  the round trip through the kernel, which the server's busy time does not hold);
- ``b * (K - 1) * W``: its wait behind the other ranks' operations in the one server's
  queue (``b`` = 1: all of them come first; less where the ranks' waits overlap their
  own CPU), the queueing term of a single server;
- ``W`` is measured: the server's busy time per start (``server_busy_s_per_start``: all
  it serves, the reads too, since here one server serves both; 0 on the node's own disk,
  whose cache the kernel keeps). a, d and b are fitted, not assumed: d and b are shares of
  server work, whatever the work. At a site the metadata server's work per start is its
  metadata operations alone (M / R, M L); the reads go to object servers, which the
  prediction does not model and says so. Fitted on the metadata busy time alone
  (``metadata_busy_s_per_start``, recorded beside it) the model missed the held-out K = 8
  by up to 19% and gave the SquashFS image a d of 270: the reads the server also serves
  slow the ranks here (BENCHMARKS.md section 14). The server shares the node's cores with the ranks:
  its busy time is wall clock, and at K above the cores it holds waits for a core too
  (``server_cpu_s_per_start`` beside it says how much).

Fitted by least squares on log(time) (each start weighs by its relative error), a, d and b
kept >= 0; intervals from a seeded bootstrap of the repeats within each (place, K). The
held-out check fits without the largest K and predicts it: its error is the error of an
extrapolation in K, the kind the site prediction makes.

The prediction at a site (``predict``): ``nodes`` nodes start together, each a cold client
of the site's metadata service (the ranks of a node share its client cache; each has cores
of its own, so the CPU factor is 1): ``T = a + max(d M L + b (nodes - 1) M / R, nodes M /
R)`` with ``M`` the metadata operations of one start, counted here by the server (each
rank a client with its own caches, asking once for each name and attribute, as a Lustre
client does), ``R`` the site's metadata rate (operations per second, all clients) and
``L`` one client's operation (its latency), both from its site file with their source; the
second term is the server's throughput bound, which a saturated server reaches whatever b.
``a`` is this machine's: a site's own start is not measured here. What a start reads is
not modelled (``not_modelled`` on each row). It is a prediction, labelled so wherever it
shows.

Measured here (BENCHMARKS.md section 14): ``T = a max(1, K/P) + b K W`` (no term of the
rank's own operations) missed the held-out K = 8 of the native starts by up to 25%; this
form by 4-12% (native, directory and SquashFS images).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import optimize

from scalesweep.analyse.stats import CONFIDENCE

N_BOOT = 400
CURVE_KEYS = ["runtime", "place", "service_us", "nodes", "ranks"]
FITTED_PLACES = ("local", "metafs")  # a site's own file system (Slurm) has no server counters


class StartModelError(ValueError):
    """Too few starts to fit, or a site that states no metadata rate."""


def starts_frame(records: list[dict]) -> pd.DataFrame:
    """One row per concurrent start of every record: its slowest, median and p95 rank."""
    rows = []
    for rec in records:
        for start in rec["starts"]:
            ranks = np.asarray(start["rank_s"], dtype=float)
            rows.append({"nodes": 1, **{k: v for k, v in start.items() if k != "rank_s"},
                         "cores": rec["cores"], "probe": rec["probe"],
                         "t_max_s": float(ranks.max()), "t_median_s": float(np.median(ranks)),
                         "t_p95_s": float(np.quantile(ranks, 0.95)),
                         "server_busy_s_per_start": start.get("server_busy_s_per_start", 0.0),
                         "metadata_busy_s_per_start": start.get("metadata_busy_s_per_start",
                                                                0.0),
                         "bytes_read_per_start": start.get("bytes_read_per_start", np.nan),
                         "metadata_ops_per_start": start.get("metadata_ops_per_start", np.nan)})
    return pd.DataFrame(rows)


def curves(starts: pd.DataFrame) -> pd.DataFrame:
    """The measured curves: per runtime, place, service time and K, the median over
    repeats of each start's slowest, median and p95 rank (with the slowest's range), and
    what one start asked of the server."""
    g = starts.groupby(CURVE_KEYS, sort=True, dropna=False)
    out = g.agg(repeats=("t_max_s", "size"), t_max_s=("t_max_s", "median"),
                t_max_low_s=("t_max_s", "min"), t_max_high_s=("t_max_s", "max"),
                t_median_s=("t_median_s", "median"), t_p95_s=("t_p95_s", "median"),
                ranks_per_core=("ranks_per_core", "first"),
                metadata_ops_per_start=("metadata_ops_per_start", "median"),
                metadata_busy_s_per_start=("metadata_busy_s_per_start", "median"),
                server_busy_s_per_start=("server_busy_s_per_start", "median"),
                bytes_read_per_start=("bytes_read_per_start", "median"))
    return out.reset_index()


def _fitted(starts: pd.DataFrame) -> pd.DataFrame:
    """The starts the model is fitted to: one node's, on its disk or the file system of ours."""
    return starts[starts["place"].isin(FITTED_PLACES) & (starts["nodes"] == 1)]


def _design(frame: pd.DataFrame) -> np.ndarray:
    k = frame["ranks"].to_numpy(float)
    cores = frame["cores"].to_numpy(float)
    w = frame["server_busy_s_per_start"].to_numpy(float)
    return np.column_stack([np.maximum(1.0, k / cores), w, (k - 1) * w])


PARAMS = ("a_s", "d", "b")


def _fit(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """a, d, b >= 0 minimising the squared log residuals of x @ (a, d, b) against t."""
    a0 = float(np.median(t / x[:, 0]))
    res = optimize.least_squares(
        lambda p: np.log(np.maximum(x @ p, 1e-12)) - np.log(t), x0=[a0, 1.0, 0.5],
        bounds=([1e-9, 0.0, 0.0], [np.inf, np.inf, np.inf]))
    return res.x


def model_time(params, frame: pd.DataFrame) -> np.ndarray:
    return _design(frame) @ np.asarray(params, dtype=float)


def fit(starts: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The model of one runtime's starts: a, d and b with their bootstrap intervals, and
    the lack of fit (root mean square of log(measured / modelled) over the curve's cells)."""
    cells = starts.groupby(CURVE_KEYS[1:], sort=True)
    if cells.ngroups < 3 or starts["server_busy_s_per_start"].max() <= 0:
        raise StartModelError(f"{starts['runtime'].iloc[0] if len(starts) else '?'}: "
                              f"{cells.ngroups} settings measured, none or too few on the "
                              "bounded-rate file system: nothing to fit")
    x, t = _design(starts), starts["t_max_s"].to_numpy(float)
    params = _fit(x, t)
    rng = np.random.default_rng(seed)
    groups = [idx.to_numpy() for _, idx in cells.groups.items()]
    boots = np.array([_fit(x[idx], t[idx]) for idx in (
        np.concatenate([rng.choice(g, len(g)) for g in groups]) for _ in range(n_boot))])
    lo, hi = np.quantile(boots, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2], axis=0)
    cell = starts.assign(model_s=x @ params).groupby(CURVE_KEYS[1:])
    lack = float(np.sqrt(np.mean(np.log(cell["t_max_s"].mean() / cell["model_s"].mean()) ** 2)))
    out = {"lack_of_fit_log": lack, "boot": boots, "starts": len(starts)}
    for i, name in enumerate(PARAMS):
        unit = "_s" if name.endswith("_s") else ""
        base = name[:-2] if unit else name
        out.update({name: params[i], f"{base}_low{unit}": lo[i], f"{base}_high{unit}": hi[i]})
    return out


def held_out(starts: pd.DataFrame) -> dict:
    """Fit without the largest K, predict its starts: the median and largest relative
    error of the predicted slowest rank (per setting, median over repeats)."""
    top = int(starts["ranks"].max())
    train, test = starts[starts["ranks"] < top], starts[starts["ranks"] == top]
    if train["ranks"].nunique() < 2 or test.empty:
        raise StartModelError("held-out check needs at least three values of K")
    params = _fit(_design(train), train["t_max_s"].to_numpy(float))
    test = test.assign(model_s=model_time(params, test))
    per = test.groupby(CURVE_KEYS[1:]).agg(t=("t_max_s", "median"), m=("model_s", "median"))
    err = (per["m"] - per["t"]) / per["t"] * 100
    return {"held_out_ranks": top, "held_out_settings": len(per),
            "held_out_median_err_pct": float(np.median(np.abs(err))),
            "held_out_max_err_pct": float(np.max(np.abs(err)))}


def models(starts: pd.DataFrame) -> pd.DataFrame:
    """One row per runtime: the fitted model, its intervals, its held-out error and the
    metadata operations of one start (median over its starts on the file system)."""
    rows = []
    for runtime, frame in _fitted(starts).groupby("runtime", sort=True):
        frame = frame.reset_index(drop=True)
        row = {"runtime": runtime, "probe": frame["probe"].iloc[0],
               "cores": int(frame["cores"].iloc[0]),
               "metadata_ops_per_start": float(frame["metadata_ops_per_start"].median()),
               "bytes_read_per_start": float(frame["bytes_read_per_start"].median())}
        try:
            f = fit(frame)
            row.update({k: v for k, v in f.items() if k != "boot"})
            row.update(held_out(frame))
        except StartModelError as exc:
            row["not_fitted"] = str(exc)
        rows.append(row)
    return pd.DataFrame(rows)


def predict(starts: pd.DataFrame, nodes: list[int], ops_per_s: float,
            latency_s: float | None = None, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """The slowest rank's start at each count of ``nodes`` on a site whose metadata
    service serves ``ops_per_s`` operations a second, all clients together, and one
    client's operation in ``latency_s`` (None: 1 / ops_per_s, a lower bound), per runtime::

        T(n) = a + max(d M L + b (n - 1) M / R,  n M / R)

    the rank's own operations at the client's latency and its wait behind the other
    nodes', never below the server's throughput bound (all n M operations served before
    the last start ends: b, fitted at K <= 8, does not hold a saturated server). The 95%
    interval is the bootstrap's of (a, d, b), widened both ways by the largest held-out
    error; the site's rate and latency are taken as given (their uncertainty is not in
    it: T's queue scales with 1 / R)."""
    if not ops_per_s or ops_per_s <= 0:
        raise StartModelError(f"metadata rate {ops_per_s!r}: the site states none")
    latency = latency_s if latency_s else 1.0 / ops_per_s
    rows = []
    for runtime, frame in _fitted(starts).groupby("runtime", sort=True):
        frame = frame.reset_index(drop=True)
        try:
            f, h = fit(frame, n_boot, seed), held_out(frame)
        except StartModelError as exc:
            rows.append({"runtime": runtime, "not_predicted": str(exc)})
            continue
        m = float(frame["metadata_ops_per_start"].median())
        widen = h["held_out_max_err_pct"] / 100
        for n in nodes:
            bound = n * m / ops_per_s  # the server's throughput bound
            boot = f["boot"][:, 0] + np.maximum(
                f["boot"][:, 1] * m * latency + f["boot"][:, 2] * (n - 1) * m / ops_per_s, bound)
            wait = max(f["d"] * m * latency + f["b"] * (n - 1) * m / ops_per_s, bound)
            est = f["a_s"] + wait
            lo, hi = np.quantile(boot, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
            rows.append({"runtime": runtime, "nodes": n, "metadata_ops_per_start": m,
                         "metadata_ops_per_s": ops_per_s, "predicted_s": est,
                         "low_s": min(lo, est) * (1 - widen), "high_s": max(hi, est) * (1 + widen),
                         "queue_s": wait, "bound_s": f["a_s"] + bound,
                         "at_bound": bool(bound >= wait), "label": "prediction"})
    return pd.DataFrame(rows)


CURVE_COLUMNS = ["runtime", "place", "service_us", "nodes", "ranks", "repeats", "t_max_s",
                 "t_max_low_s", "t_max_high_s", "t_median_s", "t_p95_s", "ranks_per_core",
                 "metadata_ops_per_start", "metadata_busy_s_per_start",
                 "server_busy_s_per_start", "bytes_read_per_start"]
MODEL_COLUMNS = ["runtime", "probe", "cores", "metadata_ops_per_start", "bytes_read_per_start",
                 "a_s", "a_low_s",
                 "a_high_s", "d", "d_low", "d_high", "b", "b_low", "b_high", "lack_of_fit_log", "starts",
                 "held_out_ranks", "held_out_settings", "held_out_median_err_pct",
                 "held_out_max_err_pct", "site", "file_system", "metadata_ops_per_s",
                 "metadata_latency_us", "metadata_source", "nodes", "predicted_s", "low_s",
                 "high_s", "queue_s", "bound_s", "at_bound", "label", "not_modelled",
                 "not_fitted"]
# what the prediction leaves out, on each of its rows
NOT_MODELLED = ("the data a start reads (bytes_read_per_start: object servers' bandwidth, "
                "not throttled here); the site's own start (a is this machine's)")


def curve_table(records: list[dict]) -> pd.DataFrame:
    """startup_scale.csv: the measured curves (header only where nothing was measured)."""
    if not records:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    return curves(starts_frame(records)).reindex(columns=CURVE_COLUMNS)


def model_table(records: list[dict], site: str, shared_fs: dict,
                nodes: list[int]) -> pd.DataFrame:
    """startup_model.csv: per runtime its model (fit, intervals, held-out error) and, on
    the rows of each of ``nodes``, the prediction at ``site`` (labelled "prediction"),
    with the site's metadata rate and its source; a model that cannot be fitted or a site
    without a rate says so in ``not_fitted``."""
    if not records:
        return pd.DataFrame(columns=MODEL_COLUMNS)
    starts = starts_frame(records)
    fitted = models(starts)
    apart = sorted(set(starts["runtime"]) - set(fitted.get("runtime", [])))
    if apart:  # measured at a site only (under Slurm): a curve, nothing to fit it to
        fitted = pd.concat([fitted, pd.DataFrame(
            {"runtime": apart, "not_fitted": "measured on the site's own file system only "
             "(no server counters): fit the model on a node of it with config/startup_scale.yaml"})],
            ignore_index=True)
    rate = shared_fs.get("metadata_ops_per_s")
    latency_us = shared_fs.get("metadata_latency_us")
    where = {"site": site, "file_system": shared_fs.get("name", ""),
             "metadata_ops_per_s": rate, "metadata_source": shared_fs.get("source", ""),
             "metadata_latency_us": latency_us if latency_us else (1e6 / rate if rate else None)}
    if not rate:
        fitted = fitted.assign(**where)
        note = f"site {site} states no storage.shared_fs.metadata_ops_per_s: nothing predicted"
        if "not_fitted" in fitted:
            fitted["not_fitted"] = fitted["not_fitted"].fillna(note)
        else:
            fitted["not_fitted"] = note
        return fitted.reindex(columns=MODEL_COLUMNS)
    preds = predict(starts, nodes, rate, latency_us * 1e-6 if latency_us else None)
    if "nodes" not in preds:  # no runtime could be fitted
        return fitted.assign(**where).reindex(columns=MODEL_COLUMNS)
    preds = preds.dropna(subset=["nodes"]).drop(columns=["metadata_ops_per_start",
                                                         "metadata_ops_per_s"])
    rows = fitted.merge(preds, on="runtime", how="left").assign(**where)
    rows["nodes"] = rows["nodes"].astype("Int64")
    rows.loc[rows["predicted_s"].notna(), "not_modelled"] = NOT_MODELLED
    return rows.reindex(columns=MODEL_COLUMNS)
