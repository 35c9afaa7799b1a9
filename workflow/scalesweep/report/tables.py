"""The report's per-run quality tables, from runs.csv (pure pandas: a runs table in, a table
out; workflow/scripts/report_tables.py reads and writes the files).

- ``accuracy_parity_table``: held-out test accuracy and loss of each runtime against native
  at the same geometry (the LLSC study's parity question), with a Welch 95% CI of the
  difference and whether it lies within run-to-run noise;
- ``achieved_rate_table``: counted FLOPs per step, achieved GFLOP/s per rank and the
  percentage of the site's declared peak;
- ``mpi_table``: which MPI library each runtime's ranks actually loaded (host, container or
  mixed), with the Allreduce and epoch times;
- ``made_table``, ``significance_table`` and ``rules_table`` (from the summary tables, not
  runs.csv alone): what report.html was made from, how many "significant" overhead tests
  chance alone would give (and Benjamini-Hochberg's answer; ``add_q_values`` puts the q
  values in overhead.csv), and the benchmarking rules, passed or not for the campaign.

Every statistic is over the undisturbed runs (disturbed ones are counted in
``n_disturbed``); every row says its ``n``. A table with nothing to show is one row whose
``note`` says why (never a crash, never an empty file a reader has to guess about).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from scalesweep.analyse.analysis import CONFIDENCE, rate_stats, truthy
from scalesweep.analyse.collect import scaling_rows
from scalesweep.plan.sweep import RUNTIMES

from scalesweep.record.geometry import AXES as GEOMETRY  # noqa: E402  (issue #28)
PARITY_KEYS = ["workload", *GEOMETRY, "runtime"]
RATE_KEYS = ["workload", "runtime", *GEOMETRY]
MPI_KEYS = ["workload", "runtime", *GEOMETRY]
MPI_LIBRARY = ["mpi_origin", "mpi_library", "mpi_library_version"]
BASELINE = "native"

PARITY_COLUMNS = [
    *PARITY_KEYS, "n", "n_disturbed",
    "test_accuracy_mean", "test_accuracy_std", "test_loss_mean", "test_loss_std",
    "n_native", "accuracy_diff", "accuracy_diff_ci95_low", "accuracy_diff_ci95_high",
    "accuracy_within_noise", "loss_diff", "loss_diff_ci95_low", "loss_diff_ci95_high",
    "loss_within_noise", "parity", "note",
]
RATE_COLUMNS = [
    *RATE_KEYS, "parallel", "precision", "n", "n_disturbed", "flops_per_step",
    "gflops_per_rank_mean", "gflops_per_rank_std", "gflops_per_rank_ci95_low",
    "gflops_per_rank_ci95_high", "devices_per_rank", "peak_gflops_per_device",
    "pct_of_peak_mean", "pct_of_peak_std", "pct_of_peak_ci95_low", "pct_of_peak_ci95_high",
    "note",
]
MPI_COLUMNS = [
    *MPI_KEYS, *MPI_LIBRARY, "n", "n_disturbed", "n_allreduce",
    "allreduce_s_mean", "allreduce_s_std", "time_s_mean", "time_s_std",
    "allreduce_pct_of_epoch", "note",
]

NO_TEST_ACCURACY = ("no run recorded test_accuracy (the held-out split evaluated after "
                    "training); training-set accuracy (final_accuracy) is not parity and is "
                    "not used")
NO_FLOPS = "no run recorded flops_per_step and an achieved rate (CNN runs only)"
NO_MPI = "no run recorded an MPI library (only the CNN's mpi parallel mode records one)"
NO_PEAK = "no peak declared (site node.peak_gflops_per_device is 0): no percent of peak"


# --- helpers ---------------------------------------------------------------------------

def note_only(columns: list[str], note: str) -> pd.DataFrame:
    """A table of ``columns`` with one row: empty cells and ``note`` saying why."""
    return pd.DataFrame([{"note": note}], columns=columns)


def _flags(runs: pd.DataFrame, col: str) -> pd.Series:
    if col not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs[col].map(truthy).astype(bool)


def _numeric(runs: pd.DataFrame, col: str) -> pd.Series:
    if col not in runs.columns:
        return pd.Series(np.nan, index=runs.index, dtype=float)
    return pd.to_numeric(runs[col], errors="coerce")


def _has_columns(runs: pd.DataFrame | None, cols: list[str]) -> bool:
    return runs is not None and not runs.empty and all(c in runs.columns for c in cols)


def _runtime_rank(runtime: str) -> int:
    """native first, then the runtimes in their registry's order, unknown ones last."""
    if runtime == BASELINE:
        return -1
    return RUNTIMES.index(runtime) if runtime in RUNTIMES else len(RUNTIMES)


def _sorted(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    order = table.assign(_rt=table["runtime"].map(_runtime_rank))
    by = [k if k != "runtime" else "_rt" for k in keys]
    if "runtime" in keys:
        by.insert(by.index("_rt") + 1, "runtime")
    return order.sort_values(by, kind="stable", ignore_index=True).drop(columns="_rt")


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


def within_noise(diff: float, low: float, high: float, native_std: float):
    """The parity rule: the 95% CI of the difference includes 0 and |difference| is no
    larger than the native runs' own standard deviation. pd.NA where it cannot be decided
    (fewer than 2 runs on a side)."""
    if not all(np.isfinite(v) for v in (diff, low, high, native_std)):
        return pd.NA
    return bool(low <= 0 <= high and abs(diff) <= native_std)


# --- 1. accuracy parity ------------------------------------------------------------------

def accuracy_parity_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload x geometry (nodes, GPUs, ranks, threads) x runtime: n, mean and std of
    the held-out ``test_accuracy`` and ``test_loss`` over the undisturbed runs that
    recorded them, and, for every runtime other than native, the difference to native at
    the same geometry (``accuracy_diff`` / ``loss_diff``, runtime - native) with its Welch
    95% CI and whether it is within run-to-run noise (``within_noise``). ``parity``:
    baseline (the native row), within noise, outside noise (naming the quantity),
    undetermined (fewer than 2 runs on a side) or no native run at this geometry. Runs
    without test_accuracy are left out; training-set accuracy is never used."""
    if not _has_columns(runs, [*PARITY_KEYS, "test_accuracy"]):
        return note_only(PARITY_COLUMNS, NO_TEST_ACCURACY)
    data = runs.assign(test_accuracy=_numeric(runs, "test_accuracy"),
                       test_loss=_numeric(runs, "test_loss"),
                       _disturbed=_flags(runs, "disturbed"))
    data = data[data["test_accuracy"].notna()]
    if data.empty:
        return note_only(PARITY_COLUMNS, NO_TEST_ACCURACY)
    valid = data[~data["_disturbed"]]
    place = PARITY_KEYS[:-1]  # workload and geometry: where a runtime meets native
    samples = {tuple(k): g for k, g in valid.groupby(PARITY_KEYS, sort=False, dropna=False)}
    with_native = {tuple(k) for k in data.loc[data["runtime"] == BASELINE, place]
                   .itertuples(index=False, name=None)}
    empty = valid.iloc[0:0]
    rows = []
    for key, group in data.groupby(PARITY_KEYS, sort=False, dropna=False):
        key = tuple(key)
        where, runtime = key[:-1], key[-1]
        mine = samples.get(key, empty)
        acc, loss = sample_stats(mine["test_accuracy"]), sample_stats(mine["test_loss"])
        row = {**dict(zip(PARITY_KEYS, key)), "n": acc["n"],
               "n_disturbed": int(group["_disturbed"].sum()),
               "test_accuracy_mean": acc["mean"], "test_accuracy_std": acc["std"],
               "test_loss_mean": loss["mean"], "test_loss_std": loss["std"], "note": ""}
        rows.append(row)
        if runtime == BASELINE:
            row["parity"] = "baseline"
            continue
        if where not in with_native:
            row.update(n_native=0, parity="no native run at this geometry")
            continue
        base = samples.get((*where, BASELINE), empty)
        row["n_native"] = int(base["test_accuracy"].notna().sum())
        differs, undecided = [], False
        for name, col in (("accuracy", "test_accuracy"), ("loss", "test_loss")):
            ours, theirs = mine[col].to_numpy(float), base[col].to_numpy(float)
            diff, low, high = welch_difference(ours, theirs)
            verdict = within_noise(diff, low, high, sample_stats(theirs)["std"])
            row.update({f"{name}_diff": diff, f"{name}_diff_ci95_low": low,
                        f"{name}_diff_ci95_high": high, f"{name}_within_noise": verdict})
            if verdict is pd.NA:
                # a loss neither side recorded does not make accuracy undecided
                undecided |= name == "accuracy" or bool(
                    np.isfinite(ours).any() or np.isfinite(theirs).any())
            elif not verdict:
                differs.append(name)
        if differs:
            row["parity"] = "outside noise: " + ", ".join(differs)
        elif undecided:
            row["parity"] = "undetermined"
            row["note"] = ("a CI needs >= 2 undisturbed runs with the value on each side "
                           f"(test_accuracy: native {row['n_native']}, {runtime} {row['n']})")
        else:
            row["parity"] = "within noise"
    table = pd.DataFrame(rows).reindex(columns=PARITY_COLUMNS)
    for col in ("accuracy_within_noise", "loss_within_noise"):
        table[col] = table[col].astype("boolean")
    table["note"] = table["note"].fillna("")
    return _sorted(table, PARITY_KEYS)


# --- 2. achieved rate ----------------------------------------------------------------------

def node_peak(node: dict | None) -> dict:
    """achieved_rate_table's peak arguments from a site's ``node`` (site_of(config)["node"]):
    ``peak_gflops_per_device`` (FP32 GFLOP/s of one device; 0 = not declared), ``peak_of``
    (what a device is: "gpu" on a node with GPUs, "core" on a CPU-only node) and
    ``trains_on_cpu`` (node.payload_device: cpu, a GPU site's stand-in whose CNN computes
    on the CPU: a GPU's peak does not describe it)."""
    node = node or {}
    tensor = node.get("peak_gflops_tensor") or {}
    return {"peak_gflops_per_device": float(node.get("peak_gflops_per_device") or 0),
            "peak_of": "gpu" if int(node.get("gpus") or 0) > 0 else "core",
            "trains_on_cpu": node.get("payload_device") == "cpu",
            "tensor_peaks": {p: float(v or 0) for p, v in tensor.items()}}


def devices_per_rank(nodes, gpus, ranks, threads, peak_of: str):
    """The devices one rank computes on, in the peak's unit: GPUs per rank where the point
    has GPUs and the peak is a GPU's, threads where the point is CPU-only and the peak is a
    core's; NaN where the peak does not describe what the rank ran on."""
    gpus, ranks, threads = int(gpus), int(ranks), int(threads)
    if gpus > 0 and peak_of == "gpu" and ranks > 0:
        return gpus / ranks
    if gpus == 0 and peak_of == "core":
        return float(threads)
    return np.nan


def achieved_rate_table(runs: pd.DataFrame, peak_gflops_per_device: float = 0.0,
                        peak_of: str = "core", trains_on_cpu: bool = False,
                        tensor_peaks: dict | None = None) -> pd.DataFrame:
    """Per workload x runtime x geometry: the counted ``flops_per_step`` (one rank's
    forward + backward of one batch; the median, with a note where runs differ), achieved
    GFLOP/s per rank (n, mean, std, 95% CI over the undisturbed runs) and, where the site
    declares ``peak_gflops_per_device`` (> 0), the percent of peak = achieved per rank /
    (peak x devices per rank) x 100 (mean and std; devices per rank: GPUs per rank on a
    GPU point, threads on a CPU-only point). ``trains_on_cpu``: the site's CNN computes on
    the CPU even on GPU points (node.payload_device: cpu), so a GPU peak does not apply.
    ``tensor_peaks``: the device's peak per reduced precision (node.peak_gflops_tensor:
    tf32, bf16); a run in such a precision (its ``precision`` column) is held to that peak,
    never to the FP32 one, and gets no percent where the site declares none."""
    tensor_peaks = tensor_peaks or {}
    needed = [*RATE_KEYS, "achieved_gflops_per_rank"]
    if not _has_columns(runs, needed):
        return note_only(RATE_COLUMNS, NO_FLOPS)
    precision = (runs["precision"].fillna("fp32").astype(str) if "precision" in runs.columns
                 else pd.Series("fp32", index=runs.index))
    data = runs.assign(achieved_gflops_per_rank=_numeric(runs, "achieved_gflops_per_rank"),
                       flops_per_step=_numeric(runs, "flops_per_step"),
                       _disturbed=_flags(runs, "disturbed"), _precision=precision)
    data = data[data["achieved_gflops_per_rank"].notna()]
    if data.empty:
        return note_only(RATE_COLUMNS, NO_FLOPS)
    rows = []
    for key, group in data.groupby([*RATE_KEYS, "_precision"], sort=False, dropna=False):
        row = dict(zip(RATE_KEYS, key))
        prec = key[-1]
        peak = peak_gflops_per_device if prec == "fp32" else tensor_peaks.get(prec, 0.0)
        valid = group[~group["_disturbed"]]
        # a rate: total work over total time (harmonic mean), CI from time per FLOP
        rate = rate_stats(valid["achieved_gflops_per_rank"])
        flops = group["flops_per_step"].dropna()
        notes = []
        if flops.nunique() > 1:
            notes.append(f"flops_per_step differs between runs ({flops.min():.6g} .. "
                         f"{flops.max():.6g}; the median shown)")
        parallel = sorted({str(p) for p in group.get("parallel", pd.Series(dtype=object))
                           .dropna()})
        devices = (np.nan if trains_on_cpu and int(row["gpus"]) > 0 else
                   devices_per_rank(row["nodes"], row["gpus"], row["ranks"], row["threads"],
                                    peak_of))
        pct_mean = pct_std = pct_low = pct_high = np.nan
        if peak <= 0 and prec != "fp32":
            notes.append(f"no {prec} peak declared (site node.peak_gflops_tensor.{prec}): "
                         "no percent of peak")
        elif peak <= 0:
            notes.append(NO_PEAK)
        elif not np.isfinite(devices):
            notes.append(f"the site's peak is one {'GPU' if peak_of == 'gpu' else 'core'}'s; "
                         "this point computed on "
                         f"{'the CPU' if int(row['gpus']) == 0 or trains_on_cpu else 'GPUs'}:"
                         " no percent of peak")
        else:
            scale = 100.0 / (peak * devices)
            pct_mean, pct_std = rate["mean"] * scale, rate["std"] * scale
            pct_low, pct_high = rate["ci95_low"] * scale, rate["ci95_high"] * scale
        if rate["n"] < 2:
            notes.append(f"n={rate['n']}: no std or CI")
        rows.append({
            **row, "parallel": ";".join(parallel), "precision": prec, "n": rate["n"],
            "n_disturbed": int(group["_disturbed"].sum()),
            "flops_per_step": float(flops.median()) if not flops.empty else np.nan,
            "gflops_per_rank_mean": rate["mean"], "gflops_per_rank_std": rate["std"],
            "gflops_per_rank_ci95_low": rate["ci95_low"],
            "gflops_per_rank_ci95_high": rate["ci95_high"],
            "devices_per_rank": devices,
            "peak_gflops_per_device": peak if peak > 0 else np.nan,
            "pct_of_peak_mean": pct_mean, "pct_of_peak_std": pct_std,
            "pct_of_peak_ci95_low": pct_low, "pct_of_peak_ci95_high": pct_high,
            "note": "; ".join(notes),
        })
    return _sorted(pd.DataFrame(rows, columns=RATE_COLUMNS), RATE_KEYS)


# --- 3. MPI library and Allreduce ----------------------------------------------------------

def mpi_table(runs: pd.DataFrame) -> pd.DataFrame:
    """For the runs that recorded an MPI library: per workload x runtime x geometry x the
    library the ranks loaded (``mpi_origin`` host / container / mixed, ``mpi_library``,
    ``mpi_library_version``; runs of one runtime that loaded different libraries are
    separate rows, named in the note): n, mean and std of ``allreduce_s`` (rank 0's seconds
    per steady epoch in the gradient Allreduce; ``n_allreduce`` runs recorded it) and of
    ``time_s`` (seconds per steady epoch), and the Allreduce's share of the epoch."""
    if not _has_columns(runs, [*MPI_KEYS, "mpi_library"]):
        return note_only(MPI_COLUMNS, NO_MPI)
    library = runs["mpi_library"]
    data = runs[library.notna() & (library.astype(str).str.strip() != "")]
    if data.empty:
        return note_only(MPI_COLUMNS, NO_MPI)
    data = data.assign(**{c: (data[c] if c in data.columns else pd.Series("", index=data.index))
                          .fillna("").astype(str) for c in MPI_LIBRARY},
                       allreduce_s=_numeric(data, "allreduce_s"),
                       time_s=_numeric(data, "time_s"),
                       _disturbed=_flags(data, "disturbed"))
    libraries = data.groupby(MPI_KEYS, dropna=False)["mpi_library"].transform(
        lambda s: len(set(zip(s, data.loc[s.index, "mpi_library_version"],
                              data.loc[s.index, "mpi_origin"]))))
    data = data.assign(_libraries=libraries)
    rows = []
    for key, group in data.groupby([*MPI_KEYS, *MPI_LIBRARY], sort=False, dropna=False):
        valid = group[~group["_disturbed"]]
        allreduce, time = sample_stats(valid["allreduce_s"]), sample_stats(valid["time_s"])
        notes = []
        origin = key[len(MPI_KEYS)]
        if origin == "mixed":
            notes.append("mixed: the ranks loaded different MPI libraries (see each run's "
                         "metrics.json mpi.ranks)")
        if int(group["_libraries"].iloc[0]) > 1:
            notes.append("runs of this runtime and geometry loaded different MPI libraries")
        if time["n"] < 2:
            notes.append(f"n={time['n']}: no std")
        share = (allreduce["mean"] / time["mean"] * 100
                 if allreduce["n"] and time["n"] and time["mean"] > 0 else np.nan)
        rows.append({
            **dict(zip([*MPI_KEYS, *MPI_LIBRARY], key)), "n": time["n"],
            "n_disturbed": int(group["_disturbed"].sum()), "n_allreduce": allreduce["n"],
            "allreduce_s_mean": allreduce["mean"], "allreduce_s_std": allreduce["std"],
            "time_s_mean": time["mean"], "time_s_std": time["std"],
            "allreduce_pct_of_epoch": share, "note": "; ".join(notes),
        })
    return _sorted(pd.DataFrame(rows, columns=MPI_COLUMNS), [*MPI_KEYS, *MPI_LIBRARY])


# --- 4. Where training data is read from -----------------------------------------------------

DATA_KEYS = ["workload", "runtime", *GEOMETRY]
DATA_COLUMNS = [
    *DATA_KEYS, "data_path", "node_local", "n", "n_disturbed",
    "time_s_mean", "time_s_std", "data_wait_s_mean", "data_wait_s_std", "data_wait_pct_of_epoch",
    "data_load_s_mean", "staging_s_mean", "note",
]
NO_DATA_PATH = "no run recorded data_wait_s (CNN runs record it)"


def data_path_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload x runtime x geometry, where the training data came from (``data_path``:
    memory, decoded before training, or files read at each step; ``node_local``: the run
    copied the dataset to node-local storage first, its ``staging_s``), over the
    undisturbed runs: seconds per steady epoch and the part of it spent getting batches
    (``data_wait_s``, rank 0), mean and std with n; the one-off ``data_load_s`` (decoding
    before training) and ``staging_s`` (the node-local copy)."""
    if not _has_columns(runs, [*DATA_KEYS, "data_wait_s"]):
        return note_only(DATA_COLUMNS, NO_DATA_PATH)
    data = runs[_numeric(runs, "data_wait_s").notna()]
    if data.empty:
        return note_only(DATA_COLUMNS, NO_DATA_PATH)
    staging = _numeric(data, "staging_s") if "staging_s" in data else pd.Series(np.nan, index=data.index)
    data = data.assign(
        data_path=(data["data_path"] if "data_path" in data else pd.Series("memory", index=data.index))
        .fillna("memory").astype(str),
        node_local=staging.notna(),
        _disturbed=_flags(data, "disturbed"),
        _wait=_numeric(data, "data_wait_s"), _time=_numeric(data, "time_s"),
        _load=_numeric(data, "data_load_s") if "data_load_s" in data else np.nan,
        _staging=staging)
    rows = []
    for key, group in data.groupby([*DATA_KEYS, "data_path", "node_local"], sort=False, dropna=False):
        valid = group[~group["_disturbed"]]
        wait, time = sample_stats(valid["_wait"]), sample_stats(valid["_time"])
        notes = [f"n={time['n']}: no std"] if time["n"] < 2 else []
        rows.append({
            **dict(zip([*DATA_KEYS, "data_path", "node_local"], key)), "n": time["n"],
            "n_disturbed": int(group["_disturbed"].sum()),
            "time_s_mean": time["mean"], "time_s_std": time["std"],
            "data_wait_s_mean": wait["mean"], "data_wait_s_std": wait["std"],
            "data_wait_pct_of_epoch": (wait["mean"] / time["mean"] * 100
                                       if wait["n"] and time["n"] and time["mean"] > 0 else np.nan),
            "data_load_s_mean": valid["_load"].mean() if len(valid) else np.nan,
            "staging_s_mean": valid["_staging"].mean() if len(valid) else np.nan,
            "note": "; ".join(notes),
        })
    return _sorted(pd.DataFrame(rows, columns=DATA_COLUMNS), DATA_KEYS)


# --- 5. LLM concurrency levels ---------------------------------------------------------------

LEVEL_KEYS = ["workload", "runtime", "nodes", "gpus", "threads", "concurrency"]
LEVEL_METRICS = ["tokens_per_s", "requests_per_s", "ttft_p50_s", "ttft_p99_s",
                 "latency_p50_s", "latency_p90_s", "latency_p99_s"]
LEVEL_COLUMNS = [*LEVEL_KEYS, "n", "n_disturbed",
                 *[f"{m}_{s}" for m in LEVEL_METRICS for s in ("mean", "std")], "note"]
NO_LEVELS = ("no run measured several concurrency levels (workloads.<name>.concurrency: a "
             "list, e.g. [1, 4, 16])")


def concurrency_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per LLM workload x runtime x nodes x GPUs x threads x concurrency level (the
    workload's ``concurrency`` list, each level measured within every run against its
    warmed-up server): throughput (tokens/s, requests/s) and the requests' TTFT and
    latency percentiles, mean and std over the undisturbed repeats, n."""
    if not _has_columns(runs, ["workload", "runtime", "nodes", "gpus", "threads",
                               "concurrency_levels"]):
        return note_only(LEVEL_COLUMNS, NO_LEVELS)
    rows = []
    for _, run in runs[runs["concurrency_levels"].notna()].iterrows():
        try:
            levels = json.loads(run["concurrency_levels"])
        except (TypeError, ValueError):
            continue
        for level in levels:
            rows.append({**{k: run[k] for k in LEVEL_KEYS[:-1]},
                         "concurrency": level.get("concurrency"),
                         "_disturbed": truthy(run.get("disturbed", False)),
                         **{m: level.get(m) for m in LEVEL_METRICS}})
    if not rows:
        return note_only(LEVEL_COLUMNS, NO_LEVELS)
    data = pd.DataFrame(rows)
    out = []
    for key, group in data.groupby(LEVEL_KEYS, sort=True, dropna=False):
        valid = group[~group["_disturbed"].astype(bool)]
        row = {**dict(zip(LEVEL_KEYS, key)), "n": len(valid),
               "n_disturbed": int(group["_disturbed"].astype(bool).sum())}
        for m in LEVEL_METRICS:
            values = pd.to_numeric(valid[m], errors="coerce")
            # rates: total work over total time (harmonic mean); times: arithmetic
            st = rate_stats(values) if m.endswith("_per_s") else sample_stats(values)
            row[f"{m}_mean"], row[f"{m}_std"] = st["mean"], st["std"]
        row["note"] = f"n={len(valid)}: no std" if len(valid) < 2 else ""
        out.append(row)
    return _sorted(pd.DataFrame(out, columns=LEVEL_COLUMNS), LEVEL_KEYS)


# --- 6. how the report was made, many comparisons, the benchmarking rules -------------------
#
# made.csv, significance.csv and rules.csv: made from the campaign's own summary tables
# (results/summary/*.csv) by workflow/scripts/report_summary.py, after every aggregation,
# so that report.html says from which results it was made and what they can support.

MADE_COLUMNS = ["item", "value"]
SIGNIFICANCE_COLUMNS = ["family", "statement", "tests", "significant", "expected_by_chance",
                        "bh_significant", "claims", "claims_not_bh_significant", "column",
                        "alpha"]
RULES_COLUMNS = ["rule", "passed", "evidence"]
YES, NO, NOT_APPLICABLE = "yes", "no", "not applicable"
CLAIMS = {"p_value": ("slower", "faster"), "equivalence_p_value": ("equivalent",)}
SHOWN = 3  # rows named in an evidence text before "and k more"


def _fdr_adjust(p_values) -> np.ndarray:
    """Benjamini-Hochberg q values (analysis.fdr_adjust; the same procedure here where an
    older analysis module lacks it): NaN stays NaN and does not count."""
    from scalesweep.analyse import analysis

    if hasattr(analysis, "fdr_adjust"):
        return np.asarray(analysis.fdr_adjust(p_values), dtype=float)
    p = np.asarray(p_values, dtype=float)
    q = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    if m:
        order = np.argsort(p[ok], kind="stable")
        scaled = p[ok][order] * m / np.arange(1, m + 1)
        values = np.empty(m)
        values[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
        q[ok] = values
    return q


def _expected_false_positives(n_tests: int, alpha: float) -> float:
    """n_tests x alpha (analysis.expected_false_positives where it exists)."""
    from scalesweep.analyse import analysis

    if hasattr(analysis, "expected_false_positives"):
        return float(analysis.expected_false_positives(n_tests, alpha))
    return float(n_tests * alpha)


def add_q_values(overhead: pd.DataFrame) -> pd.DataFrame:
    """overhead.csv with ``q_value`` (Benjamini-Hochberg over the campaign's finite
    ``p_value`` of the difference tests) and ``equivalence_q_value`` (the same over
    ``equivalence_p_value``) added after ``p_value`` / ``equivalence_p_value``. A row
    with q < alpha is a discovery at a false discovery rate of alpha over every comparison
    of the table. The verdicts are not changed (they are per comparison)."""
    table = overhead.copy()
    for p_col, q_col in (("p_value", "q_value"), ("equivalence_p_value", "equivalence_q_value")):
        if p_col not in table.columns:
            continue
        q = _fdr_adjust(pd.to_numeric(table[p_col], errors="coerce").to_numpy(float))
        if q_col in table.columns:
            table[q_col] = q
        else:
            table.insert(table.columns.get_loc(p_col) + 1, q_col, q)
    return table


def _label(row: pd.Series) -> str:
    """A row of a summary table as the evidence names it: its workload (and model), runtime
    and geometry or count, e.g. "cnn_ddp apptainer n1-g0-r2-t1"."""
    def value(col):
        v = row.get(col)
        return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)

    parts = [value("workload")]
    if value("model_label"):
        parts.append(f"({value('model_label')})")
    runtime = value("runtime")
    if runtime:
        arm = value("arm")
        parts.append(runtime + (f" [arm {arm}]" if arm and arm != runtime else ""))
    geometry = [f"{c[0]}{value(c)}" for c in ("nodes", "gpus", "ranks", "threads")
                if value(c)]
    if len(geometry) == 4:
        parts.append("-".join(geometry))
    elif value("threads"):
        parts.append(f"{value('threads')} thr/rank")
    if value("count"):
        parts.append(f"count {value('count')}")
    return " ".join(p for p in parts if p)


def _named(rows: pd.DataFrame) -> str:
    """The first SHOWN rows named, "; and k more" for the rest."""
    labels = [_label(r) for _, r in rows.head(SHOWN).iterrows()]
    more = len(rows) - len(labels)
    return "; ".join(labels) + (f"; and {more} more" if more > 0 else "")


def significance_table(overhead: pd.DataFrame | None, alpha: float = 0.05) -> pd.DataFrame:
    """How many "significant" results chance alone would give, per family of tests in
    overhead.csv: the difference tests (``p_value``: the faster / slower verdicts) and the
    equivalence tests (``equivalence_p_value``, TOST: the equivalent verdicts). For each:
    ``tests`` (rows with a p value), ``significant`` (p < alpha), ``expected_by_chance``
    (tests x alpha: the significant results to expect if no runtime differed at all, or,
    for equivalence, if every one differed by the margin), ``bh_significant`` (q < alpha,
    Benjamini-Hochberg: a false discovery rate of alpha over the family), ``claims``
    (verdicts resting on the test) and the claims whose q is not below alpha, named; and
    the ``statement`` the report prints."""
    rows = []
    has_rows = overhead is not None and not overhead.empty
    for column, (family, what) in {
        "p_value": ("difference from native", "faster/slower"),
        "equivalence_p_value": ("equivalence within the margin (TOST)", "equivalent"),
    }.items():
        if not has_rows or column not in overhead.columns:
            rows.append({"family": family, "column": column, "tests": 0, "alpha": alpha,
                         "significant": 0, "expected_by_chance": 0.0, "bh_significant": 0,
                         "claims": 0, "claims_not_bh_significant": "",
                         "statement": f"no {what} comparison with a test in overhead.csv"})
            continue
        p = pd.to_numeric(overhead[column], errors="coerce").to_numpy(float)
        q = _fdr_adjust(p)
        tested = ~np.isnan(p)
        m = int(tested.sum())
        k = int((p[tested] < alpha).sum())
        d = int((q[tested] < alpha).sum())
        expected = _expected_false_positives(m, alpha)
        verdicts = overhead["verdict"].astype(str) if "verdict" in overhead else pd.Series(
            "", index=overhead.index)
        claimed = verdicts.isin(CLAIMS[column]).to_numpy()
        weak = overhead[claimed & ~(q < alpha)]
        level = f"{alpha * 100:g}%"
        if m == 0:
            statement = f"no {what} comparison with a test in overhead.csv"
        else:
            null = ("no runtime differed from native" if column == "p_value"
                    else "every runtime differed from native by the margin")
            q_col = "q_value" if column == "p_value" else "equivalence_q_value"
            statement = (
                f"{k} of {m} comparison{'s' if m != 1 else ''} significant at {level} "
                f"({column} < {alpha:g}); if {null}, "
                f"chance alone would give about {expected:.1f}. Benjamini-Hochberg at a "
                f"false discovery rate of {level} over these {m}: {d} remain "
                f"({q_col} < {alpha:g}). "
                f"The verdicts are per comparison at {level}, not adjusted: "
                + (f"no {what} verdict." if not claimed.any() else
                   f"{int(claimed.sum())} {what} verdict{'s' if claimed.sum() != 1 else ''}, "
                   + (f"{len(weak)} of them not significant after the adjustment ("
                      f"{_named(weak)})." if len(weak) else
                      "all of them significant after it.")))
        rows.append({"family": family, "column": column, "tests": m, "alpha": alpha,
                     "significant": k, "expected_by_chance": expected, "bh_significant": d,
                     "claims": int(claimed.sum()),
                     "claims_not_bh_significant": _named(weak) if len(weak) else "",
                     "statement": statement})
    return pd.DataFrame(rows, columns=SIGNIFICANCE_COLUMNS)


def workflow_commit(code_root) -> str:
    """The workflow's git commit (``git rev-parse HEAD`` in ``code_root``), with
    " + uncommitted changes" where tracked files differ from it; "unknown (not a git
    checkout)" otherwise."""
    import subprocess

    def git(*args):
        try:
            out = subprocess.run(["git", *args], cwd=code_root, capture_output=True,
                                 text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + (" + uncommitted changes" if dirty else "")


def _utc(value) -> str:
    """A time as the tables print it: 2025-01-31 01:36:05 UTC ('' where unknown)."""
    t = pd.to_datetime(value, utc=True, errors="coerce")
    return "" if pd.isna(t) else t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _commits(runs: pd.DataFrame) -> str:
    if "git_commit" not in runs.columns or runs.empty:
        return "not recorded"
    commits = runs["git_commit"].where(runs["git_commit"].notna(), None)
    counts = commits.dropna().astype(str).value_counts()
    parts = [f"{c[:12]} ({n} run{'s' if n != 1 else ''})" for c, n in counts.items()]
    missing = int(commits.isna().sum())
    if missing:
        parts.append(f"not recorded ({missing} run{'s' if missing != 1 else ''})")
    return "; ".join(parts)


def with_significance(made: pd.DataFrame, significance: pd.DataFrame) -> pd.DataFrame:
    """made.csv with one row per family of ``significance_table`` (its statement): the
    report's front page shows made.csv, and the ten-column significance table is too wide
    beside Snakemake's rule graph."""
    if not {"family", "statement"} <= set(significance.columns) or significance.empty:
        return made
    return pd.concat([made, pd.DataFrame({
        "item": [f"many comparisons: {f}" for f in significance["family"]],
        "value": significance["statement"]})], ignore_index=True)


def _hosts(runs: pd.DataFrame) -> str:
    """The hosts the runs ran on (runs.csv hosts), with their runs counted."""
    if "hosts" not in runs.columns or runs.empty:
        return "not recorded"
    hosts = runs["hosts"].where(runs["hosts"].notna(), None)
    counts = hosts.dropna().astype(str).value_counts()
    parts = [f"{h} ({n} run{'s' if n != 1 else ''})" for h, n in counts.head(SHOWN).items()]
    if len(counts) > SHOWN:
        parts.append(f"and {len(counts) - SHOWN} more host sets")
    missing = int(hosts.isna().sum())
    if missing:
        parts.append(f"not recorded ({missing} run{'s' if missing != 1 else ''})")
    return "; ".join(parts)


def _site_rows(site: dict | None, runs: pd.DataFrame) -> list[tuple[str, str]]:
    """made.csv's site and machine rows: the site file's name and description, its node
    (cores, GPUs, scheduler) and the hosts the runs ran on."""
    if not site:
        return []
    node = site.get("node") or {}
    shape = ", ".join(p for p in (
        f"{node['cores']} cores" if node.get("cores") else "",
        f"{node['gpus']} GPUs" if node.get("gpus") else "no GPU",
        f"scheduler {site['scheduler']}" if site.get("scheduler") else "") if p)
    name = site.get("name") or "unknown"
    described = f"{name}: {site['description']}" if site.get("description") else name
    return [("site", f"{described} (sites/{name}.yaml)"),
            ("machine", f"per node {shape}; hosts {_hosts(runs)}")]


def made_table(runs: pd.DataFrame, points: pd.DataFrame | None, summarised_at,
               workflow: str, tables: Iterable[str] = (), site: dict | None = None
               ) -> pd.DataFrame:
    """What report.html was made from, as item / value rows: when the summary tables were
    written (``summarised_at``, shown in UTC), the campaign's time range (the first run's
    start .. the last run's end, runs.csv start / end), the site and machine (``site``: the
    site's record, its name, description, scheduler and node; the runs' hosts), the runs
    (and disturbed ones), the requested points by state, the git commit(s) of the runs and
    of the workflow (``workflow``: workflow_commit), and the tables."""
    runs = runs if runs is not None else pd.DataFrame()
    n = len(runs)
    disturbed = int(_flags(runs, "disturbed").sum()) if n else 0
    start = pd.to_datetime(runs["start"], utc=True, errors="coerce") if "start" in runs else None
    end = pd.to_datetime(runs["end"], utc=True, errors="coerce") if "end" in runs else None
    if n and start is not None and end is not None and start.notna().any() and end.notna().any():
        span = f"{_utc(start.min())} .. {_utc(end.max())}"
        unknown = int((start.isna() | end.isna()).sum())
        if unknown:
            span += f" ({unknown} run{'s' if unknown != 1 else ''} without a start or end)"
    else:
        span = "unknown (no run recorded its start and end)" if n else "no runs"
    rows = [
        ("summarised (UTC)", _utc(summarised_at)),
        ("campaign ran (first run's start .. last run's end)", span),
        *_site_rows(site, runs),
        ("runs", f"{n} ({disturbed} disturbed: kept, left out of the statistics)"),
    ]
    if points is not None and not points.empty and "state" in points:
        counts = points["state"].value_counts()
        rows.append(("requested points", f"{len(points)}: " + ", ".join(
            f"{int(c)} {s}" for s, c in counts.items())))
    rows += [
        ("git commit of the runs", _commits(runs)),
        ("git commit of the workflow (at summary time)", workflow),
    ]
    tables = list(tables)
    if tables:
        rows.append(("made from", ", ".join(tables)))
    rows.append(("report.html", "made by snakemake --report report.html from these tables; "
                 "scalesweep status says when it is older than them"))
    return pd.DataFrame(rows, columns=MADE_COLUMNS)


# the benchmarking rules (Hoefler and Belli, SC15, "Scientific benchmarking of parallel
# computing systems") a tool can check on a campaign's summary tables, in report order
RULES = (
    "the baseline's absolute time is shown next to every speedup, efficiency and overhead",
    "requested vs delivered points, with a reason for each one not delivered",
    "a 95% CI on every nondeterministic number the verdicts and figures rest on",
    "normality checked before a parametric CI (Shapiro-Wilk), a rank interval where rejected",
    "a statistical test behind every faster / slower / equivalent claim",
    "provenance complete for every run (commit, time, hosts, launcher, software, image)",
    "ideal (linear) lines in the scaling figures",
    "error bars (95% CI) on every mean drawn in a figure",
)


def _finite(df: pd.DataFrame, col: str) -> pd.Series:
    return _numeric(df, col).notna() & np.isfinite(_numeric(df, col))


def _rule(rule: int, passed: str, evidence: str) -> dict:
    return {"rule": RULES[rule], "passed": passed, "evidence": evidence}


def _verdict(failures: list[str], checked: int) -> str:
    return NOT_APPLICABLE if not checked else (NO if failures else YES)


def _rule_baseline(scaling: pd.DataFrame, overhead: pd.DataFrame) -> dict:
    checked, failures, parts = 0, [], []
    if not _is_empty(scaling):
        rel = scaling[_finite(scaling, "speedup") | _finite(scaling, "efficiency_pct")]
        bad = rel[~(_finite(rel, "baseline_time_s") & _finite(rel, "time_s"))]
        checked += len(rel)
        parts.append(f"scaling.csv: {len(rel) - len(bad)} of {len(rel)} speedup/efficiency "
                     "rows show baseline_time_s and time_s")
        if len(bad):
            failures.append(f"scaling.csv without them: {_named(bad)}")
    if not _is_empty(overhead):
        rel = overhead[_finite(overhead, "overhead_pct")]
        bad = rel[~(_finite(rel, "native_s") & _finite(rel, "time_s"))]
        checked += len(rel)
        parts.append(f"overhead.csv: {len(rel) - len(bad)} of {len(rel)} overheads show "
                     "native_s and time_s")
        if len(bad):
            failures.append(f"overhead.csv without them: {_named(bad)}")
    text = "; ".join(parts + failures) or "no speedup, efficiency or overhead in the tables"
    return _rule(0, _verdict(failures, checked), text)


def _rule_points(points: pd.DataFrame) -> dict:
    if _is_empty(points) or "state" not in points:
        return _rule(1, NOT_APPLICABLE, "points.csv lists no requested point")
    states = points["state"].astype(str)
    reasons = points["reason"].fillna("").astype(str).str.strip() if "reason" in points \
        else pd.Series("", index=points.index)
    gaps = points[states != "done"]
    silent = gaps[reasons[states != "done"] == ""]
    counts = states.value_counts()
    text = (f"points.csv: {len(points)} requested, {int(counts.get('done', 0))} delivered "
            "(done); " + ", ".join(f"{int(c)} {s}" for s, c in counts.items() if s != "done"))
    text = text.rstrip("; ")
    if len(gaps):
        text += f"; {len(gaps) - len(silent)} of {len(gaps)} not delivered have a reason"
    if len(silent):
        text += " (without: " + "; ".join(silent["path"].astype(str).head(SHOWN)) + (
            f"; and {len(silent) - SHOWN} more" if len(silent) > SHOWN else "") + ")"
    return _rule(1, NO if len(silent) else YES, text)


# (table, value column, CI low, CI high, what it is): the estimates the verdicts and the
# figures rest on; speedup's CI is efficiency's, rescaled (speedup = efficiency x r / 100)
CI_CHECKS = (
    ("scaling", "time_s", "ci95_low", "ci95_high", "mean seconds per epoch"),
    ("scaling", "efficiency_pct", "efficiency_ci95_low_pct", "efficiency_ci95_high_pct",
     "efficiency (and speedup)"),
    ("overhead", "overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct",
     "overhead"),
    ("llm", "mean", "ci95_low", "ci95_high", "mean wall time"),
    ("llm", "tokens_per_s", "tokens_per_s_ci95_low", "tokens_per_s_ci95_high", "tokens/s"),
)


def _ci_gaps(tables: dict, checks=CI_CHECKS) -> tuple[int, int, list[str]]:
    """(estimates checked, with a CI, what lacks one) over ``checks``."""
    checked = with_ci = 0
    missing = []
    for name, value, low, high, what in checks:
        table = tables.get(name)
        if _is_empty(table) or value not in table.columns:
            continue
        rows = table[_finite(table, value)]
        ok = _finite(rows, low) & _finite(rows, high)
        checked += len(rows)
        with_ci += int(ok.sum())
        if (~ok).any():
            bad = rows[~ok]
            why = ""
            if "n" in bad.columns and (pd.to_numeric(bad["n"], errors="coerce") < 2).all():
                why = ", n < 2"
            missing.append(f"{name}.csv {what}: {len(bad)} without a CI{why} ("
                           f"{_named(bad)})")
    return checked, with_ci, missing


def _rule_ci(tables: dict) -> dict:
    checked, with_ci, missing = _ci_gaps(tables)
    if not checked:
        return _rule(2, NOT_APPLICABLE, "no estimate in scaling.csv, overhead.csv or llm.csv")
    text = (f"{with_ci} of {checked} estimates in scaling.csv, overhead.csv and llm.csv have "
            "a 95% CI (speedup's is efficiency's, rescaled)")
    return _rule(2, NO if missing else YES, "; ".join([text, *missing]))


def _shapiro_p(values) -> float:
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 3 or np.ptp(x) == 0:
        return np.nan
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.shapiro(x).pvalue)


def _group_normality(table: pd.DataFrame, runs: pd.DataFrame, keys: list[str],
                     value: str, alpha: float) -> tuple[int, int, list[str], int]:
    """Shapiro-Wilk of the undisturbed repeats behind each row of ``table`` (a Student t
    CI): (rows with >= 3 repeats checked, rejected, the rejected rows named, rows with
    fewer than 3 repeats)."""
    keys = [k for k in keys if k in table.columns and k in runs.columns]
    if _is_empty(table) or _is_empty(runs) or value not in runs.columns or not keys:
        return 0, 0, [], 0
    valid = runs[~_flags(runs, "disturbed")]
    samples = {tuple(str(v) for v in (k if isinstance(k, tuple) else (k,))): g[value]
               for k, g in valid.groupby(keys, dropna=False)}
    checked = rejected = small = 0
    named = []
    for _, row in table.iterrows():
        sample = samples.get(tuple(str(row[k]) for k in keys))
        if sample is None:
            continue
        p = _shapiro_p(pd.to_numeric(sample, errors="coerce"))
        if np.isnan(p):
            small += 1
            continue
        checked += 1
        if p < alpha:
            rejected += 1
            named.append(f"{_label(row)} (p {p:.3g})")
    return checked, rejected, named, small


def _rule_normality(tables: dict, alpha: float) -> dict:
    from scalesweep.analyse import collect

    overhead, runs = tables.get("overhead"), tables.get("runs")
    parts, failures, checked = [], [], 0
    if not _is_empty(overhead):
        with_ci = overhead[_finite(overhead, "overhead_ci95_low_pct")]
        checked += len(with_ci)
        is_paired = _flags(overhead, "paired")
        paired = overhead[is_paired]
        need = paired[_numeric(paired, "n") >= 3]
        few = int((_numeric(paired, "n") == 2).sum())
        if "normality_p_value" not in overhead.columns:
            if len(need):
                failures.append(f"overhead.csv has no normality_p_value: its {len(need)} "
                                "paired rows with 3 pairs or more were not checked")
        else:
            tested = need[_finite(need, "normality_p_value")]
            rejected = tested[_numeric(tested, "normality_p_value") < alpha]
            method = (rejected["ci_method"].fillna("").astype(str) if "ci_method" in rejected
                      else pd.Series("", index=rejected.index))
            parametric = rejected[method.str.contains("paired t|Fieller|Welch", case=False)
                                  | (method == "")]
            parts.append(f"overhead.csv: Shapiro-Wilk on the per-pair log ratios of "
                         f"{len(tested)} of {len(need)} paired rows with 3 pairs or more, "
                         f"rejected in {len(rejected)}"
                         + (f" (their ci_method: {', '.join(sorted(set(method)))})"
                            if len(rejected) else ""))
            if len(tested) < len(need):
                failures.append(f"overhead.csv: {len(need) - len(tested)} paired rows not "
                                f"checked ({_named(need[~_finite(need, 'normality_p_value')])})")
            if len(parametric):
                failures.append("overhead.csv: a parametric CI where normality was "
                                f"rejected ({_named(parametric)})")
        if few:
            parts.append(f"overhead.csv: {few} paired rows with 2 pairs cannot be checked")
        unpaired = with_ci[~_flags(with_ci, "paired")]
        if len(unpaired):
            failures.append(f"overhead.csv: {len(unpaired)} unpaired rows use Fieller/Welch "
                            f"without a normality check ({_named(unpaired)})")
    series = getattr(collect, "SCALING_SERIES", ["workload", "runtime", "threads"])
    llm_keys = getattr(collect, "LLM_KEYS", ["workload", "model_label", "runtime", "nodes",
                                             "gpus", "threads"])
    has_payload = not _is_empty(runs) and "payload" in runs
    cnn = runs[runs["payload"] == "cnn"] if has_payload else None
    llm = runs[runs["payload"] == "llm"] if has_payload else None
    for name, table, keys, sample in (("scaling", tables.get("scaling"), [*series, "count"], cnn),
                                      ("llm", tables.get("llm"), llm_keys, llm)):
        n_checked, rejected, named, small = _group_normality(table, sample, keys, "time_s",
                                                             alpha)
        checked += n_checked
        if n_checked or small:
            parts.append(f"{name}.csv: Student t CIs; Shapiro-Wilk of their undisturbed "
                         f"repeats (checked here) on {n_checked} rows with 3 repeats or more, "
                         f"rejected in {rejected}"
                         + (f"; {small} rows with fewer than 3 distinct repeats cannot be "
                            "checked" if small else ""))
        if rejected:
            failures.append(f"{name}.csv: a Student t CI where normality is rejected ("
                            + "; ".join(named[:SHOWN])
                            + (f"; and {len(named) - SHOWN} more" if len(named) > SHOWN else "")
                            + ")")
    text = "; ".join(parts + failures) or "no CI with 3 values or more to check"
    return _rule(3, _verdict(failures, checked), text)


def _rule_tests(overhead: pd.DataFrame, alpha: float) -> dict:
    if _is_empty(overhead) or "verdict" not in overhead:
        return _rule(4, NOT_APPLICABLE, "overhead.csv has no verdicts")
    verdicts = overhead["verdict"].astype(str)
    claims = overhead[verdicts.isin(["slower", "faster", "equivalent"])]
    if claims.empty:
        return _rule(4, NOT_APPLICABLE, f"no faster/slower/equivalent verdict in "
                     f"overhead.csv ({len(overhead)} rows, all inconclusive)")
    diff = claims[claims["verdict"].isin(["slower", "faster"])]
    equiv = claims[claims["verdict"] == "equivalent"]
    bad_diff = diff[~(_numeric(diff, "p_value") < alpha)]
    bad_equiv = equiv[~(_numeric(equiv, "equivalence_p_value") < alpha)]
    text = (f"overhead.csv: {len(diff) - len(bad_diff)} of {len(diff)} faster/slower verdicts "
            f"with p_value < {alpha:g}; {len(equiv) - len(bad_equiv)} of {len(equiv)} "
            f"equivalent verdicts with equivalence_p_value < {alpha:g} (TOST)")
    bad = pd.concat([bad_diff, bad_equiv])
    if len(bad):
        text += (f"; without a test below {alpha:g} (identical repeats, decided on the exact "
                 f"difference, or no test): {_named(bad)}")
    return _rule(4, NO if len(bad) else YES, text)


def _rule_provenance(runs: pd.DataFrame) -> dict:
    if _is_empty(runs):
        return _rule(5, NOT_APPLICABLE, "runs.csv has no runs")
    from scalesweep.plan.sweep import CONTAINER_RUNTIMES

    required = {col: pd.Series(True, index=runs.index)
                for col in ("git_commit", "start", "end", "hosts", "launcher")}
    if "payload" in runs:
        required["torch"] = runs["payload"].astype(str).eq("cnn")
    required["image_digest"] = runs["runtime"].isin(list(CONTAINER_RUNTIMES)) \
        if "runtime" in runs else pd.Series(False, index=runs.index)
    # recorded by this version of the workflow: required where runs.csv has the column
    for col in ("block_id", "probe_gflops", "probe_gbps"):
        if col in runs.columns:
            required[col] = pd.Series(True, index=runs.index)
    gaps, complete = [], pd.Series(True, index=runs.index)
    for col, needed in required.items():
        values = runs[col] if col in runs.columns else pd.Series(np.nan, index=runs.index)
        empty = values.isna() | values.astype(str).str.strip().isin(["", "nan", "None"])
        lacking = needed & empty
        complete &= ~lacking
        if lacking.any():
            gaps.append(f"{col} missing in {int(lacking.sum())}")
    text = (f"runs.csv: {int(complete.sum())} of {len(runs)} runs record "
            + ", ".join(required) + " (torch: CNN runs; image_digest: container runs)")
    if gaps:
        text += "; " + "; ".join(gaps)
    return _rule(5, NO if gaps else YES, text)


def _rule_ideal(scaling: pd.DataFrame) -> dict:
    if _is_empty(scaling) or "count" not in scaling:
        return _rule(6, NOT_APPLICABLE, "scaling.csv has no rows with numbers (no CNN "
                     "scaling series, or none with an undisturbed baseline run)")
    ok = _finite(scaling, "linear_time_s")
    text = (f"scaling.csv: linear_time_s (the ideal the scaling figure draws dashed; the "
            f"efficiency figures draw 100%) on {int(ok.sum())} of {len(scaling)} rows")
    if (~ok).any():
        text += f"; without: {_named(scaling[~ok])}"
    return _rule(6, NO if (~ok).any() else YES, text)


FIGURE_CHECKS = (  # the means a figure draws, and the table CI it draws as the error bar
    ("scaling", "time_s", "ci95_low", "ci95_high", "scaling.png"),
    ("scaling", "efficiency_pct", "efficiency_ci95_low_pct", "efficiency_ci95_high_pct",
     "efficiency figures"),
    ("overhead", "overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct",
     "overhead figures"),
    ("llm", "mean", "ci95_low", "ci95_high", "llm.png (wall time)"),
    ("llm", "tokens_per_s", "tokens_per_s_ci95_low", "tokens_per_s_ci95_high",
     "llm.png (tokens/s)"),
)


def _rule_error_bars(tables: dict) -> dict:
    checked, with_ci, missing = _ci_gaps(tables, FIGURE_CHECKS)
    if not checked:
        return _rule(7, NOT_APPLICABLE, "no figure of a mean (no scaling, overhead or LLM rows)")
    text = (f"{with_ci} of {checked} means drawn in the scaling, efficiency, overhead and "
            "LLM figures have a 95% CI error bar; the peak-memory bars carry the 95% CI of "
            "their mean; the start-up and per-epoch figures draw every repeat instead")
    return _rule(7, NO if missing else YES, "; ".join([text, *[m.replace(" without a CI",
                                                                    " drawn without an error bar")
                                                            for m in missing]]))


def _is_empty(df: pd.DataFrame | None) -> bool:
    return df is None or df.empty


def rules_table(runs: pd.DataFrame | None = None, scaling: pd.DataFrame | None = None,
                llm: pd.DataFrame | None = None, overhead: pd.DataFrame | None = None,
                points: pd.DataFrame | None = None, alpha: float = 0.05) -> pd.DataFrame:
    """The benchmarking rules (``RULES``; Hoefler and Belli, SC15) a tool can check, each
    passed ("yes"), not ("no") or "not applicable" for this campaign, with the evidence:
    computed from the campaign's summary tables (runs.csv, scaling.csv, llm.csv,
    overhead.csv, points.csv), never assumed.

    1. baseline: every scaling row with a speedup / efficiency has baseline_time_s and
       time_s, every overhead native_s and time_s;
    2. points: every requested point not done (points.csv) has a reason;
    3. CIs: every estimate in ``CI_CHECKS`` has a finite 95% CI;
    4. normality: overhead.csv's paired rows with >= 3 pairs carry a Shapiro-Wilk
       normality_p_value, and none rejected at alpha kept a parametric CI; unpaired rows
       (Fieller / Welch, unchecked) fail it; scaling.csv's and llm.csv's Student t CIs
       are checked here on their undisturbed repeats (>= 3);
    5. tests: every slower / faster verdict has p_value < alpha, every equivalent one
       equivalence_p_value < alpha;
    6. provenance: every run has git_commit, start, end, hosts, launcher (torch for CNN
       runs, image_digest for container runs; block_id, probe_gflops, probe_gbps where
       runs.csv has the column);
    7. ideal lines: every scaling row has linear_time_s (the dashed ideal);
    8. error bars: every mean a figure draws (``FIGURE_CHECKS``) has its CI.
    """
    scaling = scaling_rows(scaling)  # not the rows saying why a series has no numbers
    tables = {"runs": runs, "scaling": scaling, "llm": llm, "overhead": overhead}
    rows = [
        _rule_baseline(scaling, overhead),
        _rule_points(points),
        _rule_ci(tables),
        _rule_normality(tables, alpha),
        _rule_tests(overhead, alpha),
        _rule_provenance(runs),
        _rule_ideal(scaling),
        _rule_error_bars(tables),
    ]
    return pd.DataFrame(rows, columns=RULES_COLUMNS)
