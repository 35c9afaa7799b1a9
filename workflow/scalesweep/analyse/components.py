"""Where a container's cost can go, per run: the parts of a run the decomposition
(``scalesweep.analyse.decomposition``) compares between native and a container, each a
runs.csv column (``COMPONENTS``), and those columns computed from a run's record
(:func:`component_columns`, called by ``scalesweep.analyse.collect.run_row``).

A column is empty (NaN) where the run did not record what it needs: a campaign measured
before the ranks recorded their start-up (``scalesweep.record.stack``), a workload without
that part (an LLM reads no training set; a CNN without ``--parallel mpi`` calls no MPI
Allreduce), a run whose memory was not sampled. The decomposition then says "not
measured", never a number.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from scalesweep.record.stack import startup_durations


class Component(NamedTuple):
    key: str  # the component's name in decomposition.csv
    column: str  # the runs.csv column compared
    label: str  # how a table and a figure name it
    what: str  # what the column measures, in a sentence


COMPONENTS = (
    Component("startup", "startup_first_step_s", "(a) start-up, to the first step",
              "launch to the first step of the slowest rank: launcher, the runtime's "
              "namespaces and image mount, interpreter, imports, rendezvous, data, model"),
    Component("startup_launch", "startup_launch_s", "(a) start-up: launch and mount",
              "launch to the payload script's first statement, slowest rank: the launcher, "
              "the runtime (namespaces, mounting the image) and the interpreter's start"),
    Component("startup_imports", "startup_imports_s", "(a) start-up: imports",
              "the payload's imports (torch & co) read from the image, slowest rank"),
    Component("compute", "time_s", "(b) steady-state compute",
              "the measured time the overhead verdicts compare: seconds per steady epoch "
              "(CNN), seconds for the prompt set (LLM)"),
    Component("data", "data_read_s", "(c) data reading",
              "rank 0's seconds reading the training set: loading it before training plus "
              "getting its batches in every epoch"),
    Component("mpi", "allreduce_s", "(d) MPI path",
              "rank 0's seconds per steady epoch in the gradient MPI Allreduce (CNN "
              "--parallel mpi: the image's MPI or the host's)"),
    Component("memory_ranks", "ranks_rss_peak_mb", "(e) memory: the ranks",
              "peak of the sampled resident memory of the node's ranks and their children"),
    Component("memory_node", "node_used_peak_mb", "(e) memory: the node",
              "peak of the node's memory in use (MemTotal - MemAvailable) during the run: "
              "also an image in tmpfs, a FUSE daemon, the runtime's own processes"),
)
# the runs.csv column of each start-up component -> the interval of a rank's start-up
STARTUP_COLUMNS = {"startup_first_step_s": "launch_to_first_step_s",
                   "startup_launch_s": "launch_to_script_s",
                   "startup_imports_s": "script_to_imports_s"}
# the runs.csv columns made here (scalesweep.record.columns declares them, with units)
COMPONENT_COLUMNS = [*STARTUP_COLUMNS, "data_read_s", "ranks_rss_peak_mb", "node_used_peak_mb"]


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _peak(values) -> float | None:
    found = [v for v in map(_number, values or []) if v is not None]
    return max(found) if found else None


def component_columns(metrics: dict) -> dict:
    """The runs.csv columns of ``COMPONENT_COLUMNS`` of one run's record: start-up intervals of its slowest rank (``per_rank[].startup``),
    the seconds rank 0 read its training set (``data_load_s`` + every epoch's
    ``data_wait_s``), the peaks of its memory timeline (``total_rss_mb``,
    ``node_used_mb``). None where the record lacks it."""
    ranks = [r for r in metrics.get("per_rank") or [] if isinstance(r, dict)]
    durations = [startup_durations(r.get("startup")) for r in ranks]
    row = {}
    for column, interval in STARTUP_COLUMNS.items():
        row[column] = _peak(d[interval] for d in durations)
    load, waits = _number(metrics.get("data_load_s")), metrics.get("data_wait_s")
    if load is not None and isinstance(waits, list):
        read = [_number(w) for w in waits]
        row["data_read_s"] = load + sum(read) if None not in read else None
    else:
        row["data_read_s"] = None
    timeline = metrics.get("memory_timeline") or {}
    row["ranks_rss_peak_mb"] = _peak(timeline.get("total_rss_mb"))
    row["node_used_peak_mb"] = _peak(timeline.get("node_used_mb"))
    return row
