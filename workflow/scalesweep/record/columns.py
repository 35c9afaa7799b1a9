"""What each column of runs.csv is, declared once: a sweep axis (a setting: it groups), the
run's identity (repeat, block), derived from the point, a measurement with its unit, or
provenance (``COLUMNS``); and the statistics the summary tables and the analysis commands
write (``SUMMARY_COLUMNS``: scaling.csv, overhead.csv), each with its unit. Every grouping
reads it (``scalesweep.campaign.analysis_cli.group_columns``: only declared axes group, no
command groups by a measured value), and so do the units the CLI, the report's tables
and figures print. Every run's columns are declared here; a kind's figures where the kind's
figures are (scalesweep.record.measures), from which their columns are made
(tests/unit/test_columns.py holds collect.RUN_COLUMNS to COLUMNS, and every measurement
to a unit).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from scalesweep.record import measures
from scalesweep.record.geometry import AXES as GEOMETRY
from scalesweep.record.measures import (AXIS, DERIVED, IDENTITY, MEASUREMENT, METRICS,
                                        PROVENANCE, Metric)


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


# every run's columns, whatever its kind
_GENERIC = [
    # the sweep point and its settings: what a row of a table is about
    *_axes("workload", "payload", "runtime", "arm", *GEOMETRY),
    # which run of the point: never a setting; the block pairs runs measured together
    Column("repeat", IDENTITY), Column("block_id", IDENTITY),
    # a function of the point (they never group, and never vary within a row)
    Column("count", DERIVED), Column("world_size", DERIVED),
    # the container runtime's mode (dir, squashfs, setuid, userns, sandbox, overlay, vfs;
    # empty for native): a function of the runtime token, which keeps modes apart
    Column("mode", DERIVED),
    # measurements of every run (the harness's, the interference monitor's, the probe's)
    Column("peak_rss_mb", MEASUREMENT, "MiB"),  # as metrics.FIELDS
    Column("harness_wall_s", MEASUREMENT, "s"),
    Column("harness_overhead_s", MEASUREMENT, "s"),
    Column("outside_cpu_pct", MEASUREMENT, "%"),
    Column("steal_pct", MEASUREMENT, "%"),
    Column("load1_max", MEASUREMENT, "processes"),
    Column("probe_gflops", MEASUREMENT, "GFLOP/s", rate=True),
    Column("probe_gbps", MEASUREMENT, "GB/s", rate=True),
    Column("probe_change_pct", MEASUREMENT, "%"),
    # the parts of a run the decomposition compares (scalesweep.analyse.components)
    Column("startup_first_step_s", MEASUREMENT, "s"),
    Column("startup_launch_s", MEASUREMENT, "s"),
    Column("startup_imports_s", MEASUREMENT, "s"),
    Column("data_read_s", MEASUREMENT, "s"),
    Column("ranks_rss_peak_mb", MEASUREMENT, "MiB"),
    Column("node_used_peak_mb", MEASUREMENT, "MiB"),
    # provenance: where, when and how a run was made, and what happened around it
    *_prov("block_start", "block_end",
           "disturbed", "disturbed_reason", "warmup", "exclusive", "shared_cores",
           # the digest of the config the run was measured under, and whether it differs
           # from this campaign's for the point (scalesweep.plan.identity: left out, as
           # disturbed, its reason in disturbed_reason)
           "config_digest", "foreign",
           "order_position",
           "hosts", "launcher", "image", "image_source", "image_digest", "slurm_job_id",
           "git_commit", "torch", "start", "end", "path"),
]


def of_metric(metric: Metric) -> Column:
    """A kind's figure as a column (scalesweep.record.measures): a unit for a measurement."""
    return Column(metric.name, metric.role,
                  metric.unit if metric.role == MEASUREMENT else "", metric.rate)


def columns_of(generic: list[Column], metrics: Iterable[Metric]) -> dict[str, Column]:
    """Every column: ``generic``, then each kind's figures; a figure two kinds declare (or
    a kind and every run, such as peak_rss_mb) must be declared alike."""
    out = {c.name: c for c in generic}
    for metric in metrics:
        column = of_metric(metric)
        if out.setdefault(column.name, column) != column:
            raise ValueError(f"runs.csv column {column.name}: declared as {out[column.name]} "
                             f"and as {column}")
    return out


COLUMNS: dict[str, Column] = columns_of(
    _GENERIC, [m for metrics in METRICS.values() for m in metrics])


def declare(payload: str, metrics: Iterable[Metric]) -> None:
    """A kind defined outside this package: its figures declared (scalesweep.record.measures
    .declare) and their columns added (WorkloadKind.own_metrics)."""
    metrics = tuple(metrics)
    columns_of(list(COLUMNS.values()), metrics)  # refused before anything changes
    measures.declare(payload, metrics)
    _remake()


def forget(payload: str) -> None:
    measures.forget(payload)
    _remake()


def _remake() -> None:
    """COLUMNS made again from every kind's figures (in place: importers hold the dict)."""
    COLUMNS.clear()
    COLUMNS.update(columns_of(_GENERIC, [m for ms in METRICS.values() for m in ms]))


# The statistics of the summary tables (scaling.csv, overhead.csv) and of the analysis
# commands' output, which may be read back as input: never settings.
_STATISTICS_OF_TIME = [Column(n, MEASUREMENT, "s") for n in (
    "median", "min", "max", "std", "ci95_low", "ci95_high", "baseline_time_s",
    "linear_time_s", "native_s", "native_mean_s", "native_median_s", "native_min_s",
    "mean_s", "median_s", "min_s", "max_s", "std_s")]
SUMMARY_COLUMNS: dict[str, Column] = {c.name: c for c in [
    Column("n", MEASUREMENT, "runs"), Column("n_native", MEASUREMENT, "runs"),
    Column("n_disturbed", MEASUREMENT, "runs"), Column("repeats_needed", MEASUREMENT, "runs"),
    Column("repeats_to_decide", MEASUREMENT, "runs"),
    Column("n_warmup", MEASUREMENT, "runs"),
    Column("baseline_count", DERIVED),
    *_STATISTICS_OF_TIME,
    Column("cv", MEASUREMENT, "1"),
    Column("speedup", MEASUREMENT, "1"),
    *(Column(n, MEASUREMENT, "%") for n in (
        "efficiency_pct", "efficiency_ci95_low_pct", "efficiency_ci95_high_pct",
        "overhead_pct", "overhead_ci95_low_pct", "overhead_ci95_high_pct",
        "overhead_mean_pct", "overhead_median_pct", "overhead_min_pct", "margin_pct",
        "equivalence_ci90_low_pct", "equivalence_ci90_high_pct")),
    Column("comparisons", MEASUREMENT, "1"),
    *(Column(n, MEASUREMENT, "pp") for n in ("ci_half_width_pp", "target_ci_pp")),
    *(Column(n, MEASUREMENT, "p") for n in (
        "p_value", "q_value", "equivalence_p_value", "equivalence_q_value",
        "normality_p_value")),
]}


def declared(name: str) -> Column | None:
    """The declaration of a column (runs.csv's, else a summary table's); None where none."""
    return COLUMNS.get(str(name)) or SUMMARY_COLUMNS.get(str(name))


def role(name: str) -> str | None:
    """The declared role of a column, None for a column not declared here."""
    column = declared(name)
    return column.role if column else None


def unit(name: str) -> str:
    """The declared unit of a measurement ("" for other columns and undeclared ones)."""
    column = declared(name)
    return column.unit if column else ""


def is_rate(name: str) -> bool:
    column = declared(name)
    return bool(column and column.rate)


def is_measurement(name: str) -> bool:
    """A declared measurement, provenance or identity column: never a setting, never a
    group."""
    return role(name) in (MEASUREMENT, PROVENANCE, IDENTITY)


def measurements() -> list[str]:
    return [c.name for c in COLUMNS.values() if c.role == MEASUREMENT]


def axes() -> list[str]:
    return [c.name for c in COLUMNS.values() if c.role == AXIS]


# The intervals of the summary tables and the estimate each belongs to, by name: a bound
# <stem>_ci<level>_low<suffix> (and _high) belongs to <stem><suffix> (overhead_ci95_low_pct:
# overhead_pct; ttft_p99_ci95_low_s: ttft_p99_s; difference_ci95_low: difference), else to
# <stem>_mean<suffix> (achieved_rate's gflops_per_rank_mean) or <stem>_s<suffix> (the fit
# predictions' time_ci95_low: time_s); a bare ci95_low to mean, else time_s (scaling.csv's
# mean time); the two one-sided tests' equivalence_ci90 to overhead_pct. Every estimate
# lies inside its own interval (issue 40: tests/integration/test_report.py walks a
# campaign's tables with ``intervals``).
_INTERVAL = re.compile(r"^(?P<stem>(?:.+_)?)(?P<ci>ci\d+)_low(?P<suffix>(?:_.+)?)$")
_INTERVAL_OF = {"equivalence_ci90": ("overhead_pct",), "ci95": ("mean", "time_s")}


def intervals(names: Iterable[str]) -> list[tuple[str, str, str]]:
    """(estimate, low, high) of every interval among the column ``names`` whose high bound
    and estimate are among them too, by the names' convention (above)."""
    names = list(names)
    present = set(names)
    found = []
    for low in names:
        match = _INTERVAL.match(str(low))
        if not match:
            continue
        stem, ci, suffix = match["stem"], match["ci"], match["suffix"]
        high = f"{stem}{ci}_high{suffix}"
        special = _INTERVAL_OF.get(f"{stem}{ci}")
        candidates = special or (f"{stem[:-1]}{suffix}", f"{stem}mean{suffix}",
                                 f"{stem}s{suffix}")
        estimate = next((c for c in candidates if c in present), None)
        if high in present and estimate:
            found.append((estimate, low, high))
    return found
