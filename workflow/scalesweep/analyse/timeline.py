"""Did anything of the workflow run beside a measurement? (`scalesweep overlaps`,
``scalesweep.campaign.overlaps``, asks it of a campaign.)

The evidence is the campaign's own record, not a promise of the scheduler: Snakemake's
log (``.snakemake/log/*.snakemake.log``) gives every job's start and end on this host
(one-second resolution), and for jobs submitted to Slurm (the log's "submitted with
SLURM jobid N") ``sacct`` gives where and when each one really ran. Two jobs overlap when
one starts strictly before the other ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterable

from scalesweep.measure.slurmjob import sacct_fields

MEASUREMENT_RULES = ("run_point", "container_startup")

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
_ERROR = re.compile(r"^Error in rule (\w+):$")
_SUBMITTED = re.compile(r"^Job (\d+) has been submitted with SLURM jobid (\d+)")


@dataclass
class Job:
    jobid: int
    rule: str
    wildcards: str
    start: float  # seconds since the epoch
    end: float | None = None
    slurm_job: str | None = None
    where: str = "local"  # "local" (this host) or "slurm" (times from sacct)

    @property
    def measurement(self) -> bool:
        return self.rule in MEASUREMENT_RULES

    def label(self) -> str:
        return f"{self.rule}[{self.wildcards}]" if self.wildcards else self.rule


def _epoch(stamp: str) -> float:
    return datetime.strptime(" ".join(stamp.split()), "%a %b %d %H:%M:%S %Y").timestamp()


def parse_snakemake_log(path: str | Path) -> list[Job]:
    """Every job of one Snakemake log with its start (and end where it finished)."""
    jobs: dict[int, Job] = {}
    stamp = None
    pending: dict = {}
    current: Job | None = None
    failing: float | None = None
    last = None
    for line in Path(path).read_text(errors="replace").splitlines():
        m = _STAMP.match(line)
        if m:
            stamp, pending, current, failing = _epoch(m[1]), {}, None, None
            last = stamp
            continue
        m = _RULE.match(line)
        if m and stamp is not None:
            pending = {"rule": m[1], "start": stamp}
            continue
        m = _WILDCARDS.match(line)
        if m and current is not None:  # after "jobid:" in Snakemake 9's job block
            current.wildcards = m[1]
            continue
        m = _ERROR.match(line)
        if m and stamp is not None:  # a failed job ends here: "Error in rule X:", "jobid: N"
            pending, current, failing = {}, None, stamp
            continue
        m = _JOBID.match(line)
        if m and failing is not None:
            if int(m[1]) in jobs and jobs[int(m[1])].end is None:
                jobs[int(m[1])].end = failing
            failing = None
            continue
        if m and pending:
            jobid = int(m[1])
            current = jobs[jobid] = Job(jobid, pending["rule"], "", pending["start"])
            pending = {}
            continue
        m = _FINISHED.match(line)
        if m and stamp is not None and int(m[1]) in jobs:
            jobs[int(m[1])].end = stamp
            continue
        m = _SUBMITTED.match(line)
        if m and int(m[1]) in jobs:
            jobs[int(m[1])].slurm_job = m[2]
    for job in jobs.values():  # never finished (killed, or still running): up to the log's end
        if job.end is None and last is not None:
            job.end = last
    return list(jobs.values())


def sacct_times(job_ids: Iterable[str]) -> dict[str, tuple[float | None, float | None]]:
    """Slurm's own start and end of each job (None where it never started/ended)."""
    def parse(value: str) -> float | None:
        try:
            return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp()
        except ValueError:
            return None

    return {job: (parse(start), parse(end))
            for job, (start, end) in sacct_fields(job_ids, "Start,End", timeout=60).items()}


def with_slurm_times(jobs: list[Job]) -> list[Job]:
    """Replace the submit-host times of Slurm jobs by sacct's start and end."""
    times = sacct_times(j.slurm_job for j in jobs if j.slurm_job)
    for job in jobs:
        if job.slurm_job and job.slurm_job in times:
            job.start, job.end = times[job.slurm_job]
            job.where = "slurm"
    return jobs


def overlaps(jobs: list[Job], now: float | None = None) -> list[tuple[Job, Job]]:
    """(measurement, other job) pairs that ran at the same time. A job without an end
    (killed, or still running) counts as running until ``now`` (default: its start)."""
    def span(job: Job) -> tuple[float, float]:
        start = job.start if job.start is not None else float("inf")
        end = job.end if job.end is not None else (now if now is not None else start)
        return start, end

    found = []
    ordered = sorted((j for j in jobs if j.start is not None), key=lambda j: j.start)
    for i, a in enumerate(ordered):
        a0, a1 = span(a)
        for b in ordered[i + 1:]:
            b0, b1 = span(b)
            if b0 >= a1:
                break
            if (a.measurement or b.measurement) and b0 < a1 and a0 < b1:
                found.append((a, b) if a.measurement else (b, a))
    return found
