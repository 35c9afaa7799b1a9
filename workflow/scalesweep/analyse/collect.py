"""Collect metrics files into one tidy table (one row per run) and list missing points
(the summary tables aggregated from it: scalesweep.analyse.summary)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from scalesweep.analyse.components import COMPONENT_COLUMNS, component_columns
from scalesweep.measure.probe import summary as probe_summary
from scalesweep.plan.kinds import SweepError, kind_of
from scalesweep.plan.kinds.cnn import steady_epoch_time  # noqa: F401  (re-exported)
from scalesweep.plan.kinds.llm import SYNTHETIC_LABEL, model_label  # noqa: F401  (re-exported)
from scalesweep.plan.sweep import BLOCK_DIR, HISTORY_DIR, SweepPoint
from scalesweep.platform.runtimes import mode_of as run_mode
from scalesweep.record.geometry import AXES as GEOMETRY
from scalesweep.record.metrics import MetricsError, field_problem, read_metrics
from scalesweep.record.pointdir import FAILURE_JSON, METRICS_JSON

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
    "disturbed", "disturbed_reason", "outside_cpu_pct", "steal_pct", "load1_max",
    "exclusive", "shared_cores", "order_position",
    "probe_gflops", "probe_gbps", "probe_change_pct", "within_run_cv_pct",
    "hosts", "launcher", "image_digest", "slurm_job_id", "git_commit", "torch", "start", "end",
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
        torch=(metrics.get("versions") or {}).get("torch"),
        start=metrics.get("harness_start") or metrics.get("start"),
        end=metrics.get("harness_end") or metrics.get("end"),
        path=path,
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
    # the columns of the workload's kind (scalesweep.plan.kinds: its ``row``)
    row.update(kind.row(metrics))
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
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError,
            AttributeError) as exc:
        raise MetricsError(f"{path}: missing or malformed field ({type(exc).__name__}: "
                           f"{exc})") from None
    if not _finite(row.get("time_s")):
        raise MetricsError(f"{path}: its time ({row.get('time_s')!r}) is not a number")
    return m, row



def _finite(value) -> bool:
    try:
        return bool(np.isfinite(float(value)))
    except (TypeError, ValueError):
        return False



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
            out.append((str(path), *read_run(path, config)))
            continue
        except MetricsError as exc:
            problem = str(exc)
        for earlier in history_runs(path):
            try:
                out.append((str(earlier), *read_run(earlier, config)))
            except MetricsError:
                continue
            log(f"warning: {problem}; the summary uses the earlier run {earlier}")
            break
        else:
            log(f"warning: {problem}; left out of the summary (a failed point in "
                "points.csv; `scalesweep rerun --failed` measures it again)")
    return out



def collect_runs(metrics_paths: Iterable[str], config: dict, log=None) -> pd.DataFrame:
    """One row per readable run (readable_runs: unreadable ones are left out, logged)."""
    rows = [row for _, _, row in readable_runs(metrics_paths, config, log)]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=RUN_COLUMNS)
    df = with_blocks(df)
    cols = [c for c in RUN_COLUMNS if c in df.columns]
    return df[cols + [c for c in df.columns if c not in cols]].sort_values(
        ["workload", "runtime", "count", "threads", "repeat"], ignore_index=True
    )



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
        times = pd.DataFrame({"block_id": df["block_id"], "s": start, "e": end})
        span = times.groupby("block_id").agg(s=("s", "min"), e=("e", "max"))
        fmt = lambda t: None if pd.isna(t) else t.isoformat()  # noqa: E731
        df["block_start"] = df["block_id"].map(span["s"].map(fmt))
        df["block_end"] = df["block_id"].map(span["e"].map(fmt))
    return df



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
    """
    done = {str(Path(f)) for f in done}
    disturbed = {str(Path(f)): r for f, r in (disturbed or {}).items()}
    rows = []
    for p in points:
        d = Path(results) / "runs" / p.path
        state, reason, log = "missing", "", ""
        metrics_path = str(d / METRICS_JSON)
        if metrics_path in done:
            state = "done"
            if metrics_path in disturbed:
                state, reason = "disturbed", disturbed[metrics_path]
        elif (d / METRICS_JSON).is_file():
            try:
                m = (read_run(d / METRICS_JSON, config)[0] if config is not None
                     else read_metrics(d / METRICS_JSON))
                flagged, why = disturbance(m)
                state, reason = ("disturbed", why) if flagged else ("done", "")
            except MetricsError as exc:
                state, reason = "failed", str(exc)
        elif (d / FAILURE_JSON).is_file():
            failure = json.loads((d / FAILURE_JSON).read_text())
            state, reason, log = "failed", failure.get("reason", ""), failure.get("log", "")
        rows.append({**p.as_dict(), "path": p.path, "state": state, "reason": reason, "log": log})
    return pd.DataFrame(rows, columns=[*SweepPoint.__dataclass_fields__, "path", "state",
                                       "reason", "log"])



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
