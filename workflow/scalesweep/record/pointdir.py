"""A sweep point's directory (``results/runs/<point>/``: :data:`RUNS_DIR`): the names of its
files, whether it can be written, and the record of who runs it.

Every module that reads or writes a point's files names them by these constants:

* ``metrics.json``: the measurement (``scalesweep.record.metrics``; written once, never touched
  again);
* ``payload.json``: what the payload wrote, merged into metrics.json by the harness;
* ``failure.json``: the last failed attempt; ``attempts.jsonl``: one line per attempt
  (``scalesweep.record.failures``);
* ``running.json``: who owns a run in progress (:func:`owner_record`; removed when it
  ends): ``scalesweep status`` tells a live run from one whose harness was killed;
* ``interference/``: the per-node monitor records of a multi-node point; ``servers/``:
  the servers of a multi-node LLM point;
* ``run.log``: the harness's log (the payload's output included), Snakemake's log of the
  job (deleted by Snakemake before the next attempt); ``run.<attempt>.log``: the same file
  under the attempt's number (:func:`attempt_log`, a hard link), kept: the log of each
  attempt, whatever ended it.
"""

from __future__ import annotations

import errno
import os
import re
import socket
from pathlib import Path
from typing import Any

from scalesweep.record.metrics import now_iso

RUNS_DIR = "results/runs"  # a campaign's point directories: RUNS_DIR/<point path>/
SUMMARY_DIR = "results/summary"  # the aggregate rule's tables (and the report's)
# who runs the campaign's workflow (``owner_record``, written at onstart)
WORKFLOW_OWNER = Path(".snakemake", "scalesweep", "workflow.json")
METRICS_JSON = "metrics.json"
PAYLOAD_JSON = "payload.json"
OUTPUTS_JSONL = "outputs.jsonl"  # an LLM point's generated texts
REQUESTS_JSONL = "requests.jsonl"  # an LLM point's requests, every load level (scripts/llm_load.py)
FAILURE_JSON = "failure.json"
ATTEMPTS = "attempts.jsonl"
RUNNING_JSON = "running.json"  # the owner of a run in progress (removed when it ends)
INTERFERENCE_DIR = "interference"  # per-node monitor records of multi-node points
SERVERS_DIR = "servers"  # a multi-node LLM point's servers: ready and stop files, records
RUN_LOG = "run.log"
# the name of an attempt's own log, attempt_log(RUN_LOG, n): run.<n>.log, and of the
# copy of its metrics.json, attempt_log(METRICS_JSON, n): metrics.<n>.json (hard links,
# kept in place by `scalesweep rerun`)
ATTEMPT_LOG = re.compile("|".join(rf"{re.escape(Path(f).stem)}\.\d+{re.escape(Path(f).suffix)}"
                                  for f in (RUN_LOG, METRICS_JSON)))
MIN_FREE_BYTES = 1 << 20  # a point's own files (logs, payload.json, metrics.json) fit


class PointDirError(OSError):
    """The point's directory cannot be written (read-only, full): nothing was run, or the
    measurement could not be kept. The message names the path."""


def attempt_log(log_path: str | os.PathLike, attempt: int) -> Path:
    """The log of attempt number ``attempt`` beside the harness's log: run.log ->
    run.<attempt>.log (and metrics.json -> metrics.<attempt>.json)."""
    log = Path(log_path)
    return log.with_name(f"{log.stem}.{attempt}{log.suffix}")


def fresh_log(log_path: str | os.PathLike) -> Path:
    """``log_path``, not shared with an earlier attempt's log: where it is still a hard
    link of one (Snakemake deletes it before each job; a harness run without Snakemake
    may find it), it is unlinked first, so that this attempt's lines go to a new file."""
    log = Path(log_path)
    try:
        if log.stat().st_nlink > 1:
            log.unlink()
    except FileNotFoundError:
        pass
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    return log


def proc_start_ticks(pid: int) -> int | None:
    """A process's start time (clock ticks after boot, /proc/PID/stat field 22): with the
    boot id, it tells a process from a later one that got the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after it
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def owner_record() -> dict[str, Any]:
    """Who runs this point: written to ``running.json`` when the harness starts."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_start_ticks": proc_start_ticks(pid),
            "boot_id": boot_id(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "start": now_iso()}


def writable_problem(out_dir: str | os.PathLike) -> str | None:
    """Why the harness cannot write the point's directory (read-only, full, not a
    directory...), naming the path; None if it can. Checked before the payload runs."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-check.{os.getpid()}"
        try:
            with open(probe, "w") as fh:
                fh.write("scalesweep\n")
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            probe.unlink(missing_ok=True)
        st = os.statvfs(out_dir)
    except OSError as exc:
        where = exc.filename or out_dir
        if exc.errno == errno.ENOSPC:
            return f"no space left on the device of {out_dir}: a full results directory"
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return f"cannot write {where}: {exc.strerror} (a read-only results directory?)"
        return f"cannot write {where}: {exc.strerror or exc}"
    free = st.f_frsize * (st.f_bfree if os.geteuid() == 0 else st.f_bavail)
    if free < MIN_FREE_BYTES:
        return (f"only {free // 1024} KiB free on the device of {out_dir}: a full results "
                f"directory (a point needs at least {MIN_FREE_BYTES // 1024} KiB)")
    return None
