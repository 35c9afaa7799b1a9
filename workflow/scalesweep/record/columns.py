"""What each column of runs.csv is, declared once: a sweep axis (a setting: it groups), the
run's identity (repeat, block), derived from the point, a measurement with its unit, or
provenance. Every grouping reads it (``scalesweep.campaign.analysis_cli.is_measurement``): no command
groups by a measured value. A column runs.csv gains is declared here
(tests/test_columns.py holds collect.RUN_COLUMNS to it).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalesweep.record.geometry import AXES as GEOMETRY

AXIS, IDENTITY, DERIVED, MEASUREMENT, PROVENANCE = (
    "axis", "identity", "derived", "measurement", "provenance")


@dataclass(frozen=True)
class Column:
    name: str
    role: str
    unit: str = ""  # measurements: the unit of the value (s, images/s, MB, %, ...)
    # measurements that are rates (work per second): summarised as total work over
    # total time (or a harmonic mean), never as an arithmetic mean of rates
    rate: bool = False


def _axes(*names: str) -> list[Column]:
    return [Column(n, AXIS) for n in names]


def _prov(*names: str) -> list[Column]:
    return [Column(n, PROVENANCE) for n in names]


COLUMNS: dict[str, Column] = {c.name: c for c in [
    # the sweep point and its settings: what a row of a table is about
    *_axes("workload", "payload", "runtime", "arm", *GEOMETRY,
           "parallel", "precision", "scaling", "data_path", "concurrency", "model", "model_label",
           "synthetic_model"),
    # which run of the point: never a setting; the block pairs runs measured together
    Column("repeat", IDENTITY), Column("block_id", IDENTITY),
    # a function of the point (they never group, and never vary within a row)
    Column("count", DERIVED), Column("world_size", DERIVED),
    # measurements
    Column("time_s", MEASUREMENT, "s"),
    Column("epoch_time_first_s", MEASUREMENT, "s"),
    Column("train_s", MEASUREMENT, "s"),
    Column("images_per_epoch", MEASUREMENT, "images"),
    Column("images_per_s", MEASUREMENT, "images/s", rate=True),
    Column("final_loss", MEASUREMENT, "1"),
    Column("final_accuracy", MEASUREMENT, "fraction"),
    Column("test_accuracy", MEASUREMENT, "fraction"),
    Column("test_loss", MEASUREMENT, "1"),
    Column("allreduce_s", MEASUREMENT, "s"),
    Column("flops_per_step", MEASUREMENT, "FLOP"),
    Column("achieved_gflops_per_rank", MEASUREMENT, "GFLOP/s", rate=True),
    Column("data_wait_s", MEASUREMENT, "s"),
    Column("data_load_s", MEASUREMENT, "s"),
    Column("staging_s", MEASUREMENT, "s"),
    Column("concurrency_levels", MEASUREMENT, "JSON per level"),
    Column("peak_rss_mb", MEASUREMENT, "MiB"),  # as metrics.FIELDS
    Column("harness_wall_s", MEASUREMENT, "s"),
    Column("harness_overhead_s", MEASUREMENT, "s"),
    Column("outside_cpu_pct", MEASUREMENT, "%"),
    Column("steal_pct", MEASUREMENT, "%"),
    Column("load1_max", MEASUREMENT, "processes"),
    Column("tokens_per_s", MEASUREMENT, "tokens/s", rate=True),
    Column("requests_per_s", MEASUREMENT, "requests/s", rate=True),
    Column("ttft_p50_s", MEASUREMENT, "s"),
    Column("ttft_p90_s", MEASUREMENT, "s"),
    Column("ttft_p99_s", MEASUREMENT, "s"),
    Column("latency_p50_s", MEASUREMENT, "s"),
    Column("latency_p99_s", MEASUREMENT, "s"),
    Column("probe_gflops", MEASUREMENT, "GFLOP/s", rate=True),
    Column("probe_gbps", MEASUREMENT, "GB/s", rate=True),
    Column("probe_change_pct", MEASUREMENT, "%"),
    Column("within_run_cv_pct", MEASUREMENT, "%"),  # LLM: CV of the requests' decode rates
    # provenance: where, when and how a run was made, and what happened around it
    *_prov("block_start", "block_end", "mpi_library", "mpi_library_version", "mpi_origin",
           "disturbed", "disturbed_reason", "exclusive", "shared_cores", "order_position",
           "hosts", "launcher", "image", "image_source", "image_digest", "slurm_job_id",
           "git_commit", "torch", "start", "end", "path",
           # the LLM engine follows from the workload (workloads.<name>.engine)
           "engine"),
]}


def role(name: str) -> str | None:
    """The declared role of a runs.csv column, None for a column not declared here."""
    column = COLUMNS.get(str(name))
    return column.role if column else None


def unit(name: str) -> str:
    column = COLUMNS.get(str(name))
    return column.unit if column else ""


def is_rate(name: str) -> bool:
    column = COLUMNS.get(str(name))
    return bool(column and column.rate)


def axes() -> list[str]:
    return [c.name for c in COLUMNS.values() if c.role == AXIS]
