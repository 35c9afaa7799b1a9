"""The report's per-run quality tables, from runs.csv (pure pandas: a runs table in, a table
out; workflow/scripts/report_tables.py reads and writes the files).

- ``accuracy_parity_table``: held-out test accuracy and loss of each runtime against native
  at the same geometry (the LLSC study's parity question), with a Welch 95% CI of the
  difference and whether it lies within run-to-run noise;
- ``achieved_rate_table``: counted FLOPs per step, achieved GFLOP/s per rank and the
  percentage of the site's declared peak;
- ``mpi_table``: which MPI library each runtime's ranks actually loaded (host, container or
  mixed), with the Allreduce and epoch times;
- ``data_path_table``: where the training data came from, and the part of an epoch spent
  waiting for it;
- ``concurrency_table``: an LLM point's concurrency levels, one row per level.

The report's other tables have their own modules: ``scalesweep.report.made`` (what
report.html was made from), ``scalesweep.report.significance`` (q values, and how many
"significant" tests chance alone would give) and ``scalesweep.report.rules`` (the
benchmarking rules). The statistics are ``scalesweep.analyse.stats``'.

Every statistic is over the undisturbed runs (disturbed ones are counted in
``n_disturbed``; warm-up runs, runs.csv's ``warmup``, are left out first); every row says
its ``n``. A table with nothing to show is one row whose
``note`` says why (never a crash, never an empty file a reader has to guess about).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from scalesweep.analyse.frame import over_counted_runs, truthy
from scalesweep.analyse.stats import rate_stats, sample_stats, welch_difference
from scalesweep.plan.sweep import RUNTIMES
from scalesweep.record import columns

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


def flags(runs: pd.DataFrame, col: str) -> pd.Series:
    if col not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs[col].map(truthy).astype(bool)


def numeric(runs: pd.DataFrame, col: str) -> pd.Series:
    if col not in runs.columns:
        return pd.Series(np.nan, index=runs.index, dtype=float)
    return pd.to_numeric(runs[col], errors="coerce")


def has_columns(runs: pd.DataFrame | None, cols: list[str]) -> bool:
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


def within_noise(diff: float, low: float, high: float, native_std: float):
    """The parity rule: the 95% CI of the difference includes 0 and |difference| is no
    larger than the native runs' own standard deviation. pd.NA where it cannot be decided
    (fewer than 2 runs on a side)."""
    if not all(np.isfinite(v) for v in (diff, low, high, native_std)):
        return pd.NA
    return bool(low <= 0 <= high and abs(diff) <= native_std)


# --- 1. accuracy parity ------------------------------------------------------------------

@over_counted_runs  # warm-up runs left out before anything
def accuracy_parity_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload x geometry (nodes, GPUs, ranks, threads) x runtime: n, mean and std of
    the held-out ``test_accuracy`` and ``test_loss`` over the undisturbed runs that
    recorded them, and, for every runtime other than native, the difference to native at
    the same geometry (``accuracy_diff`` / ``loss_diff``, runtime - native) with its Welch
    95% CI and whether it is within run-to-run noise (``within_noise``). ``parity``:
    baseline (the native row), within noise, outside noise (naming the quantity),
    undetermined (fewer than 2 runs on a side) or no native run at this geometry. Runs
    without test_accuracy are left out; training-set accuracy is never used."""
    if not has_columns(runs, [*PARITY_KEYS, "test_accuracy"]):
        return note_only(PARITY_COLUMNS, NO_TEST_ACCURACY)
    data = runs.assign(test_accuracy=numeric(runs, "test_accuracy"),
                       test_loss=numeric(runs, "test_loss"),
                       _disturbed=flags(runs, "disturbed"))
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


@over_counted_runs  # warm-up runs left out before anything
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
    if not has_columns(runs, needed):
        return note_only(RATE_COLUMNS, NO_FLOPS)
    precision = (runs["precision"].fillna("fp32").astype(str) if "precision" in runs.columns
                 else pd.Series("fp32", index=runs.index))
    data = runs.assign(achieved_gflops_per_rank=numeric(runs, "achieved_gflops_per_rank"),
                       flops_per_step=numeric(runs, "flops_per_step"),
                       _disturbed=flags(runs, "disturbed"), _precision=precision)
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
            # the peak the percent is of: none where it does not describe the point
            "peak_gflops_per_device": peak if peak > 0 and np.isfinite(devices) else np.nan,
            "pct_of_peak_mean": pct_mean, "pct_of_peak_std": pct_std,
            "pct_of_peak_ci95_low": pct_low, "pct_of_peak_ci95_high": pct_high,
            "note": "; ".join(notes),
        })
    return _sorted(pd.DataFrame(rows, columns=RATE_COLUMNS), RATE_KEYS)


# --- 3. MPI library and Allreduce ----------------------------------------------------------

@over_counted_runs  # warm-up runs left out before anything
def mpi_table(runs: pd.DataFrame) -> pd.DataFrame:
    """For the runs that recorded an MPI library: per workload x runtime x geometry x the
    library the ranks loaded (``mpi_origin`` host / container / mixed, ``mpi_library``,
    ``mpi_library_version``; runs of one runtime that loaded different libraries are
    separate rows, named in the note): n, mean and std of ``allreduce_s`` (rank 0's seconds
    per steady epoch in the gradient Allreduce; ``n_allreduce`` runs recorded it) and of
    ``time_s`` (seconds per steady epoch), and the Allreduce's share of the epoch."""
    if not has_columns(runs, [*MPI_KEYS, "mpi_library"]):
        return note_only(MPI_COLUMNS, NO_MPI)
    library = runs["mpi_library"]
    data = runs[library.notna() & (library.astype(str).str.strip() != "")]
    if data.empty:
        return note_only(MPI_COLUMNS, NO_MPI)
    data = data.assign(**{c: (data[c] if c in data.columns else pd.Series("", index=data.index))
                          .fillna("").astype(str) for c in MPI_LIBRARY},
                       allreduce_s=numeric(data, "allreduce_s"),
                       time_s=numeric(data, "time_s"),
                       _disturbed=flags(data, "disturbed"))
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


@over_counted_runs  # warm-up runs left out before anything
def data_path_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload x runtime x geometry, where the training data came from (``data_path``:
    memory, decoded before training, or files read at each step; ``node_local``: the run
    copied the dataset to node-local storage first, its ``staging_s``), over the
    undisturbed runs: seconds per steady epoch and the part of it spent getting batches
    (``data_wait_s``, rank 0), mean and std with n; the one-off ``data_load_s`` (decoding
    before training) and ``staging_s`` (the node-local copy)."""
    if not has_columns(runs, [*DATA_KEYS, "data_wait_s"]):
        return note_only(DATA_COLUMNS, NO_DATA_PATH)
    data = runs[numeric(runs, "data_wait_s").notna()]
    if data.empty:
        return note_only(DATA_COLUMNS, NO_DATA_PATH)
    staging = numeric(data, "staging_s") if "staging_s" in data else pd.Series(np.nan, index=data.index)
    data = data.assign(
        data_path=(data["data_path"] if "data_path" in data else pd.Series("memory", index=data.index))
        .fillna("memory").astype(str),
        node_local=staging.notna(),
        _disturbed=flags(data, "disturbed"),
        _wait=numeric(data, "data_wait_s"), _time=numeric(data, "time_s"),
        _load=numeric(data, "data_load_s") if "data_load_s" in data else np.nan,
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


@over_counted_runs  # warm-up runs left out before anything
def concurrency_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per LLM workload x runtime x nodes x GPUs x threads x concurrency level (the
    workload's ``concurrency`` list, each level measured within every run against its
    warmed-up server): throughput (tokens/s, requests/s) and the requests' TTFT and
    latency percentiles, mean and std over the undisturbed repeats, n."""
    if not has_columns(runs, ["workload", "runtime", "nodes", "gpus", "threads",
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
            st = rate_stats(values) if columns.is_rate(m) else sample_stats(values)
            row[f"{m}_mean"], row[f"{m}_std"] = st["mean"], st["std"]
        row["note"] = f"n={len(valid)}: no std" if len(valid) < 2 else ""
        out.append(row)
    return _sorted(pd.DataFrame(out, columns=LEVEL_COLUMNS), LEVEL_KEYS)


# --- 6. how the report was made, many comparisons, the benchmarking rules -------------------
#
# made.csv, significance.csv and rules.csv: made from the campaign's own summary tables
# (results/summary/*.csv) by workflow/scripts/report_summary.py, after every aggregation,
# so that report.html says from which results it was made and what they can support.
