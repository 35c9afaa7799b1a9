"""Collect metrics files into one tidy table (one row per run) and list missing points
(the summary tables aggregated from it: scalesweep.analyse.summary)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from scalesweep.analyse import cachefiles, runcache
from scalesweep.analyse.components import COMPONENT_COLUMNS, component_columns
from scalesweep.analyse.foreign import is_foreign, mark, print_foreign, with_foreign  # noqa: F401
from scalesweep.measure.probe import summary as probe_summary
from scalesweep.plan.kinds import SweepError, kind_of, kinds
from scalesweep.plan.kinds.cnn import steady_epoch_time  # noqa: F401  (re-exported)
from scalesweep.plan.kinds.llm import SYNTHETIC_LABEL, model_label  # noqa: F401  (re-exported)
from scalesweep.analyse.runcache import RowStore
from scalesweep.plan.sweep import BLOCK_DIR, HISTORY_DIR, SweepPoint, warmup_blocks
from scalesweep.platform.runtimes import mode_of as run_mode
from scalesweep.record.geometry import AXES as GEOMETRY
from scalesweep.record.metrics import MetricsError, field_problem, read_metrics
from scalesweep.record.pointdir import FAILURE_JSON, METRICS_JSON

# the software versions the kinds' records carry (plan.kinds: provenance; the CNN's torch)
PROVENANCE_COLUMNS = tuple(dict.fromkeys(col for kind in kinds() for col in kind.provenance))
RUN_COLUMNS = [
    "workload", "payload", "runtime", "mode", *GEOMETRY, "repeat",
    "arm", "block_id", "block_start", "block_end", "count", "world_size", "time_s", "epoch_time_first_s", "train_s", "images_per_epoch",
    "images_per_s", "final_loss", "final_accuracy", "test_accuracy", "test_loss",
    "parallel", "mpi_library", "mpi_library_version", "mpi_origin", "allreduce_s",
    "flops_per_step", "achieved_gflops_per_rank", "scaling", "precision", "data_path", "data_wait_s",
    "concurrency", "concurrency_levels", "load_levels", "max_rate_rps", "max_rate_bound",
    "max_rate_missed_rps", "client_placement",
    "data_load_s", "staging_s",
    "model", "model_label", "synthetic_model",
    "peak_rss_mb", "harness_wall_s", "harness_overhead_s",
    "warmup", "disturbed", "disturbed_reason", "outside_cpu_pct", "steal_pct", "load1_max",
    "exclusive", "shared_cores", "order_position", "config_digest", "foreign",
    "probe_gflops", "probe_gbps", "probe_change_pct", "within_run_cv_pct",
    "hosts", "launcher", "image_digest", "slurm_job_id", "git_commit", *PROVENANCE_COLUMNS,
    "start", "end",
    "path", *COMPONENT_COLUMNS,
]
SHARED_CORES_NOTE = "shared cores: scaling and overhead figures are not physical"


def disturbance(metrics: dict) -> tuple[bool, str]:
    """(disturbed, reason) of a run; (False, '') for metrics written before the harness
    measured interference."""
    interference = metrics.get("interference") or {}
    disturbed = bool(metrics.get("disturbed", False))
    reasons = interference.get("reasons") or []
    if isinstance(reasons, str):
        reasons = [reasons]
    reason = "; ".join(str(r) for r in reasons)
    if disturbed and not reason:
        reason = "disturbed (no reason recorded)"
    return disturbed, reason if disturbed else ""


def run_row(metrics: dict, path: str, payload_kind: str) -> dict:
    """runs.csv's row of one run. ``metrics``: a record whose fields are as
    scalesweep.record.metrics.FIELDS declares them for ``payload_kind`` (read_run checks)."""
    kind = kind_of(payload_kind)
    point = SweepPoint(**metrics["point"])
    row = point.as_dict()
    row.update(
        payload=payload_kind,
        count=kind.scaling_count(point),
        world_size=point.world_size,
        # recorded by the run; a run from before modes ran its runtime's default mode
        mode=metrics.get("mode") or run_mode(point.runtime),
        launcher=metrics.get("launcher"),
        peak_rss_mb=metrics.get("peak_rss_mb"),
        harness_wall_s=metrics.get("harness_wall_s"),
        harness_overhead_s=metrics.get("harness_overhead_s"),
        hosts=";".join(metrics.get("hosts") or []),
        image_digest=(metrics.get("image") or {}).get("content_digest"),
        slurm_job_id=(metrics.get("slurm") or {}).get("job_id"),
        git_commit=metrics.get("git_commit"),
        # every kind's provenance column, empty where this kind declares none (runs.csv
        # keeps them whatever the campaign's kinds)
        **{col: (metrics.get("versions") or {}).get(col) if col in kind.provenance else None
           for col in PROVENANCE_COLUMNS},
        start=metrics.get("harness_start") or metrics.get("start"),
        end=metrics.get("harness_end") or metrics.get("end"),
        path=path,
        config_digest=(metrics.get("identity") or {}).get("config_digest"),  # foreign.py
    )
    disturbed, reason = disturbance(metrics)
    interference = metrics.get("interference") or {}
    allocation = metrics.get("allocation") or {}
    order = metrics.get("order") or {}
    row.update(
        disturbed=disturbed,
        disturbed_reason=reason,
        outside_cpu_pct=interference.get("outside_cpu_pct_max"),
        steal_pct=interference.get("steal_pct_max"),
        load1_max=interference.get("load1_max"),
        exclusive=allocation.get("exclusive"),
        shared_cores=bool(allocation.get("shared_cores", False)),
        order_position=order.get("position"),
        # the machine's speed around the run (scalesweep.measure.probe): None before it existed
        **probe_summary(metrics.get("probe")),
        within_run_cv_pct=None,
    )
    # the figures of the workload's kind (scalesweep.record.measures: read as they are, or
    # computed by its ``row``)
    row.update(kind.values(metrics))
    # the parts of the run the decomposition compares (scalesweep.analyse.components)
    row.update(component_columns(metrics))
    return row


def history_runs(metrics_path: str | Path) -> list[Path]:
    """The metrics files kept in the point's history, newest first (the directory names
    are UTC time stamps, so they sort by time)."""
    history = Path(metrics_path).parent / HISTORY_DIR
    if not history.is_dir():
        return []
    return sorted(history.glob(f"*/{METRICS_JSON}"), key=lambda p: p.parent.name, reverse=True)


def read_run(path: str | Path, config: dict) -> tuple[dict, dict]:
    """(metrics, run_row) of one metrics file; MetricsError naming the file and the
    field when it is unreadable, of another schema, or lacks a field the tables need
    or has one of another kind than declared (scalesweep.record.metrics.FIELDS, of the payload
    its workload runs: "<file>: <field> is <value>, expected <kind>")."""
    m = read_metrics(path)
    try:
        workload = m["point"]["workload"]
        kind = config["workloads"][workload]["payload"]
        record_payload = kind_of(kind).record_payload
    except (KeyError, TypeError, SweepError) as exc:
        raise MetricsError(f"{path}: no point/workload of this config ({exc})") from None
    if record_payload != m.get("payload"):  # read_metrics checked its own
        problem = field_problem(m, record_payload)
        if problem:
            raise MetricsError(f"{path}: {problem}")
    try:
        row = run_row(m, str(path), kind)
    # a field FIELDS does not declare yet: still a failed point, never a traceback
    except (KeyError, TypeError, ValueError, ArithmeticError, IndexError,
            AttributeError) as exc:
        raise MetricsError(f"{path}: missing or malformed field ({type(exc).__name__}: "
                           f"{exc})") from None
    if not _finite(row.get("time_s")):
        raise MetricsError(f"{path}: its time ({row.get('time_s')!r}) is not a number")
    return m, row


def _finite(value) -> bool:
    try:
        return bool(np.isfinite(float(value)))
    except (TypeError, ValueError, OverflowError):
        return False


def _earlier_run(path: str, problem: str, config: dict, log) -> tuple[str, dict, dict] | None:
    """(path, metrics, run_row) of the newest valid run kept in the history of the point
    whose metrics file ``path`` could not be read (``problem``), said so in ``log``; None
    (and said so) where there is none."""
    for earlier in history_runs(path):
        try:
            found = (str(earlier), *read_run(earlier, config))
        except MetricsError:
            continue
        log(f"warning: {problem}; the summary uses the earlier run {earlier}")
        return found
    log(f"warning: {problem}; left out of the summary (a failed point in "
        "points.csv; `scalesweep rerun --failed` measures it again)")
    return None


def summarised_metrics(runs: str | os.PathLike | pd.DataFrame) -> list[str]:
    """The metrics files a summary was made from: runs.csv's ``path`` column (each run
    the aggregate rule could read, an earlier run standing in where one did), of the file
    or of the table already read. The report rules that read the runs' own files take
    them from here, not as 10,000 inputs each."""
    if not isinstance(runs, pd.DataFrame):
        try:
            runs = pd.read_csv(runs, usecols=["path"])
        except (ValueError, pd.errors.EmptyDataError):  # no runs: a header without "path"
            return []
    return [str(p) for p in runs["path"].dropna()] if "path" in runs else []


def readable_runs(metrics_paths: Iterable[str], config: dict,
                  log=None) -> list[tuple[str, dict, dict]]:
    """(path, metrics, run_row) of every run that can be read. A file that cannot be
    (truncated, a missing or non-numeric field) is left out with a warning in ``log``
    (points.csv then lists its point as failed, with the reason): never a traceback,
    never a zero. The newest valid run kept in the point's history stands in for it,
    said so in ``log``."""
    log = log or (lambda text: None)
    out = []
    for path in metrics_paths:
        try:
            m, row = read_run(path, config)
            out.append((str(path), m, mark(row, m, config)))  # a foreign run: disturbed
            continue
        except MetricsError as exc:
            problem = str(exc)
        found = _earlier_run(path, problem, config, log)
        if found is not None:
            out.append(found)
    return out


def _read_rows(paths: list[str], idents: list, config: dict) -> tuple[RowStore, list]:
    """The rows of ``paths`` (one process' share of collect_runs' reading): a store of
    those it can keep, and per path ("stored", its number in the store), ("row", the row:
    one with a value the store does not keep) or ("failed", the problem)."""
    store, placed = RowStore(), []
    for path, ident in zip(paths, idents):
        try:
            row = read_run(path, config)[1]  # the metrics themselves are not kept
        except MetricsError as exc:
            placed.append(("failed", str(exc)))
            continue
        if store.add(path, ident, row):
            placed.append(("stored", len(store) - 1))
        else:
            placed.append(("row", row))
    return store.sealed(), placed


# below this many files to read, one process reads them (starting others costs more)
PARALLEL_MIN = 2000
CHUNK = 10_000


def _read_all(paths: list[str], idents: list, config: dict,
              workers: int) -> list[tuple[RowStore, list]]:
    """_read_rows of ``paths``, in ``workers`` processes where there are many (forked:
    each reads a contiguous share; the results in the order of ``paths``)."""
    # shares of at most CHUNK files: a share's rows are held as Python objects until it
    # is stored by column, the rest of them as arrays
    parallel = workers > 1 and len(paths) >= PARALLEL_MIN
    chunks = max(workers * 4 if parallel else 1, -(-len(paths) // CHUNK))
    bounds = [len(paths) * k // chunks for k in range(chunks + 1)]
    tasks = [(paths[a:b], idents[a:b], config) for a, b in zip(bounds, bounds[1:]) if b > a]
    if not parallel:
        return [_read_rows(*task) for task in tasks]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.starmap(_read_rows, tasks, chunksize=1)


MAX_WORKERS = 8  # (a login node's 128 cores would each hold a process of ~200 MiB)


def default_workers() -> int:
    """The processors this process may run on, at most MAX_WORKERS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def collect_runs(metrics_paths: Iterable[str], config: dict, log=None,
                 cache: str | os.PathLike | None = None,
                 workers: int | None = None) -> pd.DataFrame:
    """One row per readable run (readable_runs: unreadable ones are left out, logged).

    ``cache``: a file (scalesweep.analyse.runcache: results/summary/.runs-cache.npz) that
    keeps the row of each file read, by the file's identity: a file unchanged since is
    not read again; one changed, replaced or deleted is (and the cache rewritten). The
    table is the same with or without it, byte for byte. ``workers``: processes that
    read the files (default: one per processor this process may use)."""
    return collect_runs_keyed(metrics_paths, config, log, cache, workers)[0]


def collect_runs_keyed(metrics_paths: Iterable[str], config: dict, log=None,
                       cache: str | os.PathLike | None = None,
                       workers: int | None = None) -> tuple[pd.DataFrame, list]:
    """collect_runs, and per row of it the identity of the file it was read from: (path,
    (device, inode, size, mtime_ns, ctime_ns)), None for a row whose file may change
    unseen (cachefiles.RACY_S) or that stands in for another (an earlier run). A row of
    the same identity, code and config has the same values (runcache.cache_version)."""
    log = log or (lambda text: None)
    paths = [str(p) for p in metrics_paths]
    version = ""
    if cache is not None:
        try:
            version = runcache.cache_version(config)
        except Exception as exc:  # noqa: BLE001 - a cache never fails the summary
            log(f"note: the runs cache {cache} is not used ({exc}); every metrics file is read")
            cache = None
    cached = runcache.RowStore.load(cache, version) if cache is not None else None
    cached = cached if cached is not None else runcache.RowStore()
    known = cached.index()
    now = cachefiles.file_system_now(Path(cache).parent if cache is not None and
                                   Path(cache).parent.is_dir() else None)
    looked = cachefiles.identities(paths, now)
    hits, missed = {}, []  # position in paths -> row of the cache; positions to read
    # on NFS a stat may answer from the client's attribute cache: a file replaced on
    # another node moments ago would keep its old identity, and its old row be used. The
    # files the cache would answer for are opened there (close-to-open consistency).
    reopen = cachefiles.attribute_cached_devices() if known else frozenset()
    for i, path in enumerate(paths):
        j, ident = known.get(path), looked[i][0]
        same = j is not None and ident is not None and cached.idents[j] == ident
        if same and ident[0] in reopen:  # the stat's answer, checked by an open
            looked[i] = cachefiles.opened_identity(path, now)
            same = cached.idents[j] == looked[i][0]
        if same:
            hits[i] = j
        else:
            missed.append(i)
    parts = _read_all([paths[i] for i in missed], [looked[i][0] for i in missed], config,
                      min(workers, default_workers()) if workers is not None else default_workers())
    # one store: the cached rows used, then each part's
    hit_rows = sorted(set(hits.values()))
    table = runcache.RowStore.merged([(cached, hit_rows), *((s, range(len(s))) for s, _ in parts)])
    at_hit = {j: k for k, j in enumerate(hit_rows)}
    order: list = [None] * len(paths)
    keys: list = [None] * len(paths)
    for i, j in hits.items():
        order[i] = at_hit[j]
        keys[i] = (paths[i], looked[i][0])
    offset, placed = len(hit_rows), []
    for store, part in parts:
        placed += [(what, value + offset if what == "stored" else value) for what, value in part]
        offset += len(store)
    for i, (what, value) in zip(missed, placed):
        if what == "failed":  # in the order of paths, as readable_runs logs them
            found = _earlier_run(paths[i], value, config, log)
            value = found[2] if found is not None else None
        elif looked[i][0] is not None and not looked[i][1]:
            keys[i] = (paths[i], looked[i][0])
        order[i] = value
    keys = [k for k, r in zip(keys, order) if r is not None]
    order = [r for r in order if r is not None]
    if cache is not None:
        runcache.keep_rows(cache, version, cached, known, table, paths, looked, missed,
                           placed, log)
    if not order:
        return pd.DataFrame(columns=RUN_COLUMNS), []
    df = with_foreign(with_warmup(with_blocks(table.frame(order)), config), config, log)
    cols = [c for c in RUN_COLUMNS if c in df.columns]
    # a total order (the path last, a stable sort): the same rows whatever order the
    # files were named in (the aggregate reads them series after series)
    df = df[cols + [c for c in df.columns if c not in cols]].sort_values(
        ["workload", "runtime", "count", "threads", "repeat", "path"], kind="stable")
    keys = [keys[i] for i in df.index]
    return df.reset_index(drop=True), keys


def with_warmup(df: pd.DataFrame, config: dict) -> pd.DataFrame:
    """``warmup``: whether a run is in a warm-up block (measurement.warmup_blocks), from
    its repeat and the config here, never from a cache of its file's row (runcache)."""
    return df.assign(warmup=(pd.to_numeric(df["repeat"]) <= warmup_blocks(config)).to_numpy(bool))


def with_blocks(df: pd.DataFrame) -> pd.DataFrame:
    """block_id (the block each run was measured in: sweep.BLOCK_DIR), and the block's
    start and end (its first run's start, its last run's end) on every run."""
    if "arm" not in df.columns:
        df = df.assign(arm=df["runtime"])
    df = df.assign(arm=df["arm"].fillna(df["runtime"]))
    df["block_id"] = [
        BLOCK_DIR.format(workload=w, arm=a, repeat=k, **dict(zip(GEOMETRY, g)))
        for w, a, k, *g in zip(df["workload"], df["arm"], df["repeat"],
                               *(df[axis] for axis in GEOMETRY))]
    if "start" in df.columns and "end" in df.columns:
        start = pd.to_datetime(df["start"], utc=True, errors="coerce")
        end = pd.to_datetime(df["end"], utc=True, errors="coerce")
        # per block (its number: codes), its first start and last end, each formatted
        # once and given to each of its runs
        codes, blocks = pd.factorize(df["block_id"])
        fmt = lambda t: None if pd.isna(t) else t.isoformat()  # noqa: E731
        for col, times, how in (("block_start", start, "min"), ("block_end", end, "max")):
            span = getattr(times.groupby(codes), how)()
            if (codes < 0).any() or not span.index.equals(pd.RangeIndex(len(blocks))):
                text = dict(zip(span.index, span.map(fmt)))  # (no block: no time)
                df[col] = [text.get(c) if c >= 0 else np.nan for c in codes]
                continue
            df[col] = _iso_utc(span, fmt)[codes]
    return df


def _iso_utc(times: pd.Series, fmt) -> np.ndarray:
    """fmt (Timestamp.isoformat; None for NaT) of UTC times, at once where every time is a
    whole second (what isoformat writes then: YYYY-MM-DDTHH:MM:SS+00:00)."""
    values = times.to_numpy(dtype="datetime64[ns]")
    nat = np.isnat(values)
    whole = (values[~nat].view("int64") % 1_000_000_000 == 0).all()
    if str(times.dtype) != "datetime64[ns, UTC]" or not whole:
        return np.array([fmt(t) for t in times], dtype=object)
    text = np.char.add(np.datetime_as_string(values, unit="s"), "+00:00").astype(object)
    text[nat] = None
    return text


def point_states(
    points: Iterable[SweepPoint], results: str = "results", done: Iterable[str] = (),
    disturbed: Mapping[str, str] | None = None, config: dict | None = None,
) -> pd.DataFrame:
    """done / disturbed (with reason) / failed (with reason) / missing for every point.

    ``done``: metrics files already read and validated (collect_runs' ``path`` column, as
    aggregate passes it): they are not parsed a second time (at 100,000 runs that second
    pass was 13 s of a 37 s aggregation). ``disturbed``: those of them whose run was
    disturbed, mapped to the reason (collect_runs' disturbed_reason). A metrics file read
    here is checked for ``disturbed`` itself. A disturbed run is kept but left out of the
    statistics; the workflow measures further repeats to replace it. With ``config``, a
    metrics file read here is checked as the aggregation reads it (read_run: every field
    the tables need), so a point the summary had to leave out is listed as failed.
    ``warmup``: the point is in a warm-up block (measurement.warmup_blocks; False without
    ``config``), a flag beside its state: a warm-up run is done, failed ... as any other.
    """
    warm = warmup_blocks(config) if config is not None else 0
    done = {_clean_path(str(f)) for f in done}
    disturbed = {_clean_path(str(f)): r for f, r in (disturbed or {}).items()}
    runs_dir = str(Path(results) / "runs")
    fields = list(SweepPoint.__dataclass_fields__)
    rows = []
    for p in points:
        state, reason, log = "missing", "", ""
        path = p.path
        metrics_path = _clean_path(f"{runs_dir}/{path}/{METRICS_JSON}")
        if metrics_path in done:
            state = "done"
            if metrics_path in disturbed:  # foreign runs are disturbed ones (foreign.py)
                reason = disturbed[metrics_path]
                state = "foreign" if is_foreign(reason) else "disturbed"
        elif os.path.isfile(metrics_path):
            try:
                m = (read_run(Path(metrics_path), config)[0] if config is not None
                     else read_metrics(metrics_path))
                flagged, why = disturbance(m)
                if config is not None:  # a foreign run: its reason first (foreign.py)
                    why = mark({"disturbed_reason": why}, m, config)["disturbed_reason"]
                state = "foreign" if is_foreign(why) else "disturbed" if flagged else "done"
                reason = why if state != "done" else ""
            except MetricsError as exc:
                state, reason = "failed", str(exc)
        elif os.path.isfile(failure_path := f"{runs_dir}/{path}/{FAILURE_JSON}"):
            failure = json.loads(Path(failure_path).read_text())
            state, reason, log = "failed", failure.get("reason", ""), failure.get("log", "")
        rows.append((*vars(p).values(), path, state, reason, log, p.repeat <= warm))
    # (the rows as tuples: pandas makes the same table of them as of dicts, faster)
    return pd.DataFrame.from_records(rows, columns=[*fields, "path", "state", "reason", "log",
                                                    "warmup"])


def _clean_path(text: str) -> str:
    """str(Path(text)) (no "//", "/./", "./" at the start or "/" at the end), without
    making a Path of the many paths that are already so."""
    if (not text or "//" in text or "/./" in text or text.startswith("./") or text == "."
            or text.endswith(("/", "/."))):
        return str(Path(text))
    return text


def runs_points(runs: pd.DataFrame) -> list[SweepPoint]:
    """The sweep points of a runs table (collect_runs' rows)."""
    if runs.empty:
        return []
    fields = list(SweepPoint.__dataclass_fields__)
    return [SweepPoint(*values) for values in runs[fields].itertuples(index=False, name=None)]


def extra_repeats(requested: Iterable[SweepPoint], results: str) -> list[SweepPoint]:
    """Repeats beyond the config's that exist on disk (metrics.json or failure.json) for a
    requested geometry, arm and runtime: those the adaptive repeats added."""
    requested = list(requested)
    known = set(requested)
    series = {(p.workload, p.arm, p.runtime, p.nodes, p.gpus, p.ranks, p.threads)
              for p in requested}
    found = []
    runs_dir = Path(results) / "runs"
    for workload, arm, runtime in {(p.workload, p.arm, p.runtime) for p in requested}:
        base = runs_dir / workload / arm
        if not base.is_dir():
            continue
        for run in base.glob(f"*/rep*/{runtime}"):
            if not ((run / METRICS_JSON).is_file() or (run / FAILURE_JSON).is_file()):
                continue
            try:
                point = SweepPoint.from_path(str(run.relative_to(runs_dir)))
            except SweepError:
                continue
            key = (point.workload, point.arm, point.runtime, point.nodes, point.gpus,
                   point.ranks, point.threads)
            if key in series and point not in known:
                found.append(point)
    return sorted(found)
