"""What the workflow says and writes of a campaign while it is parsed, at its start and at
its end (``workflow/rules/common.smk`` and the Snakefile's onstart/onsuccess call these):

* ``write_run_config``: the effective config (config files + --configfile + --config) as
  a file named by its content, which rule run_point's harness and the repeat decisions
  read (also inside Slurm jobs, identically);
* ``sweep_banner``, ``completion_message``: the first and last lines of a run;
* ``summary_note``, ``remeasure_note``: before any job, what a user would otherwise learn
  too late (a summary that waits for points not measured; an input of finished points
  that is gone and would have them measured again);
* ``check_writable``, ``record_owner``: onstart, a campaign directory that cannot be
  written refused before any job; who runs the workflow, for `scalesweep status`.

Outside Snakemake's job scheduling, never beside a measurement. Inside a Slurm job (every
job parses the workflow again) the notes are not made: they would stat every point.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

from scalesweep.campaign.invocation import in_slurm_job
from scalesweep.plan.payloads import point_inputs
from scalesweep.plan.sweep import Selection, SweepPoint
from scalesweep.record.geometry import AXES as GEOMETRY_AXES
from scalesweep.record.metrics import write_json_atomic
from scalesweep.record.pointdir import WORKFLOW_OWNER, owner_record, writable_problem

PARTIAL_HINT = "--config analysis='{partial: true}'"
POINTS_CSV = Path("results", "summary", "points.csv")


def write_run_config(cfg: dict) -> str:
    """The effective config ``cfg`` written to .snakemake/scalesweep/config-<digest>.json
    (once: named by its content), its path. Rule run_point is a shell job, not a script:
    Snakemake reads and checks the source of every script job while planning (~8% of
    `snakemake -n` on 10,000 points), so its harness reads the config from this file."""
    text = json.dumps(cfg, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(".snakemake", "scalesweep", f"config-{digest}.json")
    if not path.is_file():
        try:
            write_json_atomic(path, cfg)
        except OSError as exc:  # a read-only campaign can still be planned and reported
            print(f"scalesweep: cannot write {path} ({exc}): no point can run",
                  file=sys.stderr)
    return str(path)


def sweep_banner(points: Sequence[SweepPoint], selected: Sequence[SweepPoint],
                 selection: Selection) -> str:
    """onstart: the sweep's points by workload, and what this run measures of them."""
    by_workload = Counter(p.workload for p in points)
    parts = ", ".join(f"{w}: {n} points" for w, n in by_workload.items())
    banner = f"scalesweep: {len(points)} sweep points ({parts})"
    if not selection.everything:
        banner += (f"; measuring the {len(selected)} selected by {selection.describe()} "
                   "(the others are kept, and summarised where measured)")
    return banner


def completion_message(points_csv: Path = POINTS_CSV) -> str:
    """onsuccess: what the summary says of the points (an unreadable metrics.json is
    left out of it, and the points outside a selection may be missing)."""
    counts: Counter = Counter()
    if points_csv.is_file():
        with points_csv.open() as fh:
            counts = Counter(row["state"] for row in csv.DictReader(fh))
    left = ", ".join(f"{counts[s]} {s}" for s in ("failed", "missing", "disturbed", "foreign")
                     if counts[s])
    head = "scalesweep: sweep complete" if not left else f"scalesweep: done, with {left}"
    tail = "; see `scalesweep status`" if left else ""
    return (f"{head}; summary in results/summary/, report: snakemake --report "
            f"report.html{tail}")


def summary_note(runs_csv: str, config: dict, metrics_files: Callable[[], Sequence[str]]
                 ) -> str | None:
    """While the workflow is parsed, so that `snakemake --report` says it too (it runs no
    onstart): where some of ``metrics_files()`` (the metrics of the points this run
    measures) exist and others do not (failed or never run), the summary (``runs_csv``)
    waits for all of them, and a report needs it ("marked for report but does not exist"): how to
    summarise and report what was measured. None where the summary exists,
    analysis.partial is on, or nothing or everything is measured; and inside a Slurm
    job (it would stat every point's metrics.json in every job, the campaign's points
    squared on Lustre, and print the note into every job's log)."""
    if in_slurm_job():
        return None
    if Path(runs_csv).exists() or config["analysis"]["partial"]:
        return None
    files = metrics_files()  # not listed inside a Slurm job
    have = sum(Path(f).is_file() for f in files)
    if not have or have == len(files):
        return None
    return (
        f"scalesweep: {runs_csv} is not made yet: {len(files) - have} of {len(files)} "
        "points have no metrics.json (failed or not run; `scalesweep status` says which), "
        "and the summary and `snakemake --report` wait for every point. To summarise and "
        f"report what was measured: snakemake {PARTIAL_HINT} (with your --profile, and "
        "your other --config items in the same --config), then snakemake --report "
        "report.html")


def remeasure_note(config: dict, selected: Iterable[SweepPoint], point_metrics: str
                   ) -> str | None:
    """Before any job: an input of finished points (a staged dataset, a model, an image's
    manifest) that is gone. Snakemake makes it anew and then runs every point that reads
    it again (an input updated by another job), deleting its metrics.json first; the
    harness keeps each measurement as metrics.<attempt>.json beside it, but the campaign
    is measured again. Says so, and how to make the input anew alone. ``point_metrics``:
    the metrics file's pattern (rule run_point's output). None when every input is there
    (one stat each) or inside a Slurm job."""
    if in_slurm_job():
        return None
    gone: dict[str, set] = {}
    for workload, runtime in sorted({(p.workload, p.runtime) for p in selected}):
        for path in point_inputs(workload, runtime, config).values():
            if Path(path).exists():
                continue
            pattern = point_metrics.format(workload=workload, runtime=runtime, arm="*",
                                           repeat="*", **dict.fromkeys(GEOMETRY_AXES, "*"))
            gone.setdefault(path, set()).update(glob.glob(pattern))
    done = sorted(set().union(*gone.values())) if gone else []
    if not done:
        return None
    paths = " ".join(sorted(path for path, read in gone.items() if read))
    return (
        f"scalesweep: {paths} gone, read by {len(done)} finished point(s) (e.g. {done[0]}): "
        "a run that makes them anew (for a point still to measure) measures those points "
        "again too, as Snakemake re-runs a job whose input another job updated (each "
        "earlier measurement stays beside its point as metrics.<attempt>.json). To make "
        f"them anew alone, first run: snakemake {paths} (with your --profile and --config)")


def check_writable(directories: Iterable[str] = ("results", "logs")) -> str | None:
    """onstart: why the campaign directory cannot be written (read-only or full), naming
    the directory, or None (the harness checks each point's directory again)."""
    for name in directories:
        problem = writable_problem(name)
        if problem:
            return f"scalesweep: {problem}"
    return None


def record_owner() -> None:
    """onstart: who runs this workflow (host, pid and its start time, boot): `scalesweep
    status` tells a live run on another login node from a killed one by it."""
    write_json_atomic(WORKFLOW_OWNER, owner_record())
