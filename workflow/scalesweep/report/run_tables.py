"""The report's per-run tables (pure: parsed metrics.json records or points.csv in,
DataFrame out): the requested points that did not finish (``missing_table``), every
epoch's time (``epochs_table``), each run's provenance (``provenance_table``), the
container start-up probes (``startup_samples``, ``startup_table``). The epoch and
provenance tables carry runs.csv's ``warmup`` (the run is in one of the first
measurement.warmup_blocks blocks of its series: kept, in no statistic)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from scalesweep.analyse.collect import disturbance
from scalesweep.plan.kinds import kinds
from scalesweep.plan.sweep import SweepPoint, scaling_count
from scalesweep.platform.runtimes import mode_of
from scalesweep.record.geometry import AXES
from scalesweep.report.style import is_empty_table

POINT_COLUMNS = ["workload", "runtime", *AXES, "repeat"]
MISSING_COLUMNS = [*POINT_COLUMNS, "state", "reason", "log", "path"]
EPOCH_COLUMNS = [*POINT_COLUMNS, "count", "epoch", "epoch_s", "first_epoch", "warmup",
                 "disturbed", "shared_cores"]
STARTUP_PROBES = ("noop", "python", "import_torch")
# the file-system operations of one start per side (probes.<name>.fs_ops, measure/fsops.py)
FS_OPS = ("open", "open_failed", "stat", "read", "bytes_read", "mmap", "files")
STARTUP_COLUMNS = [
    "runtime", "probe", "n", "native_median_s", "container_median_s", "startup_overhead_s",
    "native_min_s", "container_min_s",
    *(f"{side}_{op}" for op in FS_OPS for side in ("native", "container")),
    "container_open_root", "container_open_image", "container_open_bound",
    "image_digest", "start",
]
PROVENANCE_COLUMNS = [
    *POINT_COLUMNS, "mode", "hosts", "host_platform", "launcher", "slurm_job_id", "image_digest",
    "image", "image_source", "image_builder", "runtime_version", "python", "torch", "engine", "engine_version", "model", "model_sha256",
    "dataset", "parallel", "mpi_origin", "mpi_library", "mpi_library_version", "git_commit",
    "start", "end", "warmup", "disturbed", "disturbed_reason", "exclusive",
    "shared_cores", "cpus_bound", "gpus_visible", "order_position", "path",
]



def missing_table(points: pd.DataFrame) -> pd.DataFrame:
    """The requested points that did not finish: state (failed/missing), reason, log."""
    if is_empty_table(points, "state"):
        return pd.DataFrame(columns=MISSING_COLUMNS)
    bad = points[~points["state"].isin(["done", "disturbed"])].copy()
    for col in MISSING_COLUMNS:
        if col not in bad:
            bad[col] = ""
    bad[["reason", "log"]] = bad[["reason", "log"]].fillna("")
    return bad[MISSING_COLUMNS].reset_index(drop=True)



def epochs_table(records: Iterable[tuple[str, dict]], warmup_blocks: int = 0) -> pd.DataFrame:
    """One row per epoch of every run that has epoch_s (tidy: point, count, epoch, seconds,
    first_epoch = first epoch of a run that has several, excluded from the steady-state
    time, and of the run: warmup (its block is one of the ``warmup_blocks`` first of its
    series: measurement.warmup_blocks, as runs.csv), disturbed and shared_cores). count is
    the run's scaling count, as in runs.csv."""
    rows = []
    for _path, m in records:
        epochs = m.get("epoch_s") or []
        point = m["point"]
        # a record without its payload (an old one): the kind whose records have epochs
        payload = m.get("payload") or next(k.name for k in kinds()
                                           if any(f.path == "epoch_s" for f in k.fields))
        count = scaling_count(SweepPoint(**point), payload)
        disturbed = disturbance(m)[0]
        shared = bool((m.get("allocation") or {}).get("shared_cores", False))
        for i, seconds in enumerate(epochs, start=1):
            rows.append({**{c: point.get(c) for c in POINT_COLUMNS}, "count": count,
                         "epoch": i, "epoch_s": float(seconds),
                         "first_epoch": i == 1 and len(epochs) > 1,
                         "warmup": _warmup(point, warmup_blocks), "disturbed": disturbed,
                         "shared_cores": shared})
    if not rows:
        return pd.DataFrame(columns=EPOCH_COLUMNS)
    return pd.DataFrame(rows, columns=EPOCH_COLUMNS).sort_values(
        ["workload", "runtime", "count", "threads", "repeat", "epoch"], ignore_index=True)



def _warmup(point: dict, warmup_blocks: int) -> bool:
    """Whether the run of ``point`` is in a warm-up block (``plan.sweep.is_warmup``)."""
    repeat = point.get("repeat")
    return repeat is not None and int(repeat) <= int(warmup_blocks)



def provenance_table(records: Iterable[tuple[str, dict]],
                     warmup_blocks: int = 0) -> pd.DataFrame:
    """Where and with what each run was measured: hosts, launcher, Slurm job, image digest,
    container runtime version, library and engine versions, model and dataset, the CNN's
    parallel mode and the MPI library its ranks loaded (mpi_origin: host, container or
    mixed; empty without MPI), git commit,
    times, whether it was a warm-up run (its block one of the ``warmup_blocks`` first of
    its series) or disturbed, what the allocation gave it (exclusive, shared cores,
    CPUs and GPUs bound), its place in its block's order, metrics file."""
    rows = []
    for path, m in records:
        image = m.get("image") or {}
        engine = m.get("engine") or {}
        model = m.get("model") or {}
        versions = m.get("versions") or {}
        host = m.get("host") or {}
        dataset = m.get("dataset") or {}
        slurm = m.get("slurm") or {}
        allocation = m.get("allocation") or {}
        rows.append({
            **{c: m["point"].get(c) for c in POINT_COLUMNS},
            # how the container runtime ran the image (a run from before modes: its default)
            "mode": m.get("mode") or mode_of(m["point"].get("runtime", "")),
            "hosts": ";".join(m.get("hosts") or []),
            "host_platform": host.get("platform"),
            "launcher": m.get("launcher"),
            "slurm_job_id": slurm.get("job_id") or m.get("slurm_job_id"),
            "image_digest": image.get("content_digest"),
            "image": image.get("name"),
            "image_source": image.get("source"),
            "image_builder": _builder(image.get("builder"), image.get("builder_version")),
            "runtime_version": (m.get("runtime_provenance") or {}).get("version"),
            "python": versions.get("python") or host.get("python"),
            "torch": versions.get("torch"),
            "engine": engine.get("name"),
            "engine_version": engine.get("version"),
            "model": model.get("name"),
            "model_sha256": model.get("sha256"),
            "dataset": dataset.get("name"),
            # the MPI library the ranks loaded (host, container or mixed): CNN mpi mode
            "parallel": m.get("parallel"),
            "mpi_origin": (m.get("mpi") or {}).get("origin"),
            "mpi_library": (m.get("mpi") or {}).get("library"),
            "mpi_library_version": (m.get("mpi") or {}).get("library_version"),
            "git_commit": m.get("git_commit"),
            "start": m.get("harness_start") or m.get("start"),
            "end": m.get("harness_end") or m.get("end"),
            "warmup": _warmup(m["point"], warmup_blocks),
            "disturbed": disturbance(m)[0],
            "disturbed_reason": disturbance(m)[1],
            "exclusive": allocation.get("exclusive"),
            "shared_cores": allocation.get("shared_cores"),
            "cpus_bound": allocation.get("cpus_bound"),
            "gpus_visible": allocation.get("gpus_visible"),
            "order_position": (m.get("order") or {}).get("position"),
            "path": str(path),
        })
    if not rows:
        return pd.DataFrame(columns=PROVENANCE_COLUMNS)
    return pd.DataFrame(rows, columns=PROVENANCE_COLUMNS).sort_values(
        POINT_COLUMNS, ignore_index=True)



def _builder(builder, version=None) -> str | None:
    """``charliecloud 0.31``: the builder's name and version, from a run's image record
    (``{"name", "version"}`` in older records, name and ``builder_version`` now)."""
    if isinstance(builder, dict):
        builder, version = builder.get("name"), builder.get("version")
    return " ".join(str(v) for v in (builder, version) if v) or None



def startup_samples(records: Iterable[dict]) -> pd.DataFrame:
    """Tidy start-up samples: runtime, probe, side (native/container), seconds."""
    rows = [
        {"runtime": r["runtime"], "probe": probe, "side": side, "seconds": float(s)}
        for r in records
        for probe, sides in (r.get("probes") or {}).items()
        for side in ("native", "container")
        for s in (sides.get(side) or {}).get("samples_s", [])
    ]
    return pd.DataFrame(rows, columns=["runtime", "probe", "side", "seconds"])



def startup_table(records: Iterable[dict]) -> pd.DataFrame:
    """Per container runtime and probe: native and container medians and their difference."""
    rows = []
    for r in records:
        for probe, sides in (r.get("probes") or {}).items():
            native, container = sides.get("native") or {}, sides.get("container") or {}
            rows.append({
                "runtime": r["runtime"], "probe": probe,
                "n": container.get("n"),
                "native_median_s": native.get("median_s"),
                "container_median_s": container.get("median_s"),
                "startup_overhead_s": sides.get("startup_overhead_s"),
                "native_min_s": native.get("min_s"),
                "container_min_s": container.get("min_s"),
                **{f"{side}_{op}": ((sides.get("fs_ops") or {}).get(side) or {}).get(op)
                   for op in (*FS_OPS, "open_root", "open_image", "open_bound")
                   for side in ("native", "container")
                   if f"{side}_{op}" in STARTUP_COLUMNS},
                "image_digest": r.get("image_digest"),
                "start": r.get("start"),
            })
    if not rows:
        return pd.DataFrame(columns=STARTUP_COLUMNS)
    df = pd.DataFrame(rows, columns=STARTUP_COLUMNS)
    df["_probe"] = [STARTUP_PROBES.index(p) if p in STARTUP_PROBES else 99 for p in df["probe"]]
    return df.sort_values(["runtime", "_probe", "probe"]).drop(columns="_probe").reset_index(drop=True)
