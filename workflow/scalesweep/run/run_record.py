"""The harness's record of a finished run: ``metrics.json`` (the payload's payload.json
with what only the launcher knows: command line, launcher, wall time, Slurm job, image
digest, allocation, interference, probe), written atomically, or ``failure.json``; the
attempt's line of ``attempts.jsonl`` completed; a copy of an earlier attempt's metrics
kept (``keep_copy``)."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

from scalesweep.measure.oomkill import oom_evidence, oom_kills
from scalesweep.platform.hostmpi import mpi_check
from scalesweep.record.failures import (
    NO_SPACE,
    append_attempt,
    end_started,
    exit_reason,
    failure_reason,
    no_space_reason,
    payload_no_space,
    release_reserve,
    with_room,
    write_failure,
)
from scalesweep.record.metrics import field_problem, write_metrics
from scalesweep.record.pointdir import (
    ATTEMPTS,
    FAILURE_JSON,
    METRICS_JSON,
    PAYLOAD_JSON,
    PointDirError,
    attempt_log,
)
from scalesweep.run.pointlaunch import image_provenance, runtime_provenance


def keep_copy(metrics_path: Path, attempt: int | None) -> None:
    """metrics.<attempt>.json beside metrics.json, a hard link: Snakemake deletes a job's
    output before it runs the job again (a deleted dataset, model or image it reads is
    staged anew and re-runs every finished point that reads it), and the measurement
    stays. Nothing where the filesystem has no hard links; another failure is raised (the
    harness says so and keeps the measurement: ``_after_measured``)."""
    if attempt is None:
        return
    try:
        os.link(metrics_path, attempt_log(metrics_path, attempt))
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP):
            raise



def _log_tail(log) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - (64 << 10)))
            return fh.read().decode(errors="replace")
    except (OSError, TypeError):
        return ""


def _fail(point, out_dir: Path, attempt: dict, rc: int) -> int:
    """The failed attempt's record (on a full disk in its reserve's room) and its line on
    stderr (the run's log); ``rc`` as the harness's exit status. A record that cannot be
    written at all is said on the console too (the log may be on the same disk)."""
    attempt["state"] = "failed"
    line = f"point {point.path} failed: {attempt['reason']}; log: {attempt['log']}"
    try:
        write_failure(out_dir, attempt)
    except OSError as exc:
        line += f" (its failure record could not be written: {exc.strerror or exc})"
        print(f"scalesweep: {line}", file=sys.__stderr__)
    release_reserve(out_dir)
    _say(line)
    return rc


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # the log's disk is full: the console has it (run_point.py)
        pass


def finish_run(point, launch, attempt, rc, wall, metrics_path, payload_json, image_manifest, commit, extra):
    out_dir = metrics_path.parent
    oom_before = attempt.pop("_oom_kills", None)  # the kernel's counters before the run
    recorded = attempt.pop("_recorded", False)  # the signal, recorded when it came (failures)
    if recorded and rc == 0:
        # the payload outlived the harness's SIGINT/SIGTERM and exited 0: the run was
        # stopped all the same (Snakemake counts its job failed), so it is not kept, and
        # this record replaces the one written at the signal (one per attempt)
        attempt["reason"] = (f"{exit_reason(-recorded)}; the payload went on and exited 0, but "
                             "an interrupted run is not kept: measure the point again")
        rc, recorded = 128 + recorded, False
    payload = None
    if rc == 0:
        try:
            payload = json.loads(payload_json.read_text())
        except FileNotFoundError:
            rc = attempt["exit_code"] = 70
            full = payload_no_space(out_dir, attempt.get("log"))
            attempt["reason"] = (f"{full} (exit code 0, no {PAYLOAD_JSON})" if full else
                                 f"payload exited 0 but wrote no {PAYLOAD_JSON}")
        except (OSError, ValueError) as exc:  # cut short (a full disk), or not JSON
            rc = attempt["exit_code"] = 70
            full = payload_no_space(out_dir, attempt.get("log"))
            attempt["reason"] = (no_space_reason(payload_json) if full else
                                 f"{payload_json} cannot be read: {exc}")
    if rc != 0:
        oom = oom_evidence(oom_before, oom_kills(), rc, _log_tail(attempt.get("log")))
        attempt.setdefault("reason", failure_reason(rc, payload_json, log=attempt.get("log"),
                                                    oom=oom))
        status = rc if rc > 0 else 128 - rc
        if recorded:
            # recorded at the signal: failure.json is complete already (reason, exit code,
            # wall time), and Slurm may kill this harness any moment now, mid-write
            attempt["state"] = "failed"
            _say(f"point {point.path} failed: {attempt['reason']}; log: {attempt['log']}")
            return status
        return _fail(point, out_dir, attempt, status)

    # which MPI library each rank loaded, and whether that is the host's where the
    # runtime's host-MPI mode asked for it: a run that measured the container's MPI
    # instead did not measure what the point says
    mpi, problem = mpi_check(payload, launch.runtime, launch.site)
    if problem:
        # the payload exited 0; the run is failed by this check (EX_SOFTWARE, as above)
        attempt.update(reason=problem, state="failed", exit_code=70, mpi=mpi)
        return _fail(point, out_dir, attempt, 70)
    record = {k: v for k, v in payload.items() if k not in ("schema", "schema_version", "kind")}
    if mpi is not None:
        record["mpi"] = mpi
    record.update(
        point=point.as_dict(),
        runtime=point.runtime,
        # the way the container runtime ran the image (scalesweep.platform.runtimes modes)
        mode=launch.site.mode or None,
        workload=point.workload,
        payload=payload.get("workload"),
        launcher=launch.launcher,
        command=attempt["command"],
        harness_wall_s=wall,
        harness_overhead_s=wall - float(payload.get("payload_wall_s", wall)) - attempt.get("staging_s", 0.0),
        staging_s=attempt.get("staging_s"),
        slurm=attempt["slurm"],
        image=image_provenance(image_manifest),
        runtime_provenance=runtime_provenance(launch.runtime, launch.site),
        git_commit=commit or payload.get("git_commit"),
        harness_start=attempt["start"],
        harness_end=attempt["end"],
        interference=attempt.get("interference"),
        disturbed=(attempt.get("interference") or {}).get("disturbed"),
        allocation=attempt.get("allocation"),
        gpu_inventory=attempt.get("gpu_inventory"),
        order=attempt.get("order"),
        **(extra or {}),
    )
    # the record as every reader of metrics.json checks it (metrics.FIELDS): a payload
    # that wrote a field its readers cannot use fails here, so a plain re-run redoes it
    problem = field_problem(record)
    if problem:
        attempt.update(reason=f"{payload_json}: {problem}", state="failed", exit_code=70)
        return _fail(point, out_dir, attempt, 70)
    try:  # on a full disk in the room the attempt's reserve leaves
        with_room(out_dir, write_metrics, metrics_path, record)
    except OSError as exc:  # full or gone read-only under the run: say where
        problem = (f"the run finished but its metrics could not be written to "
                   f"{metrics_path}: {exc.strerror or exc}")
        if exc.errno in NO_SPACE:
            problem = (f"the run finished but its metrics could not be written: "
                       f"{no_space_reason(metrics_path)} ({payload_json} is kept)")
        attempt.update(reason=problem, state="failed", exit_code=74)  # EX_IOERR (run_point.py)
        try:
            write_failure(out_dir, attempt)
        except OSError:  # the same disk: the console and the log say it
            pass
        raise PointDirError(problem) from exc
    # measured: nothing from here on fails the run (Snakemake would delete metrics.json)
    attempt["state"] = "done"
    _after_measured(point, f"completing its line in {out_dir / ATTEMPTS}",
                    append_attempt, out_dir, attempt)
    n = attempt.get("attempt")
    if n is not None:
        _after_measured(point, f"keeping its copy {attempt_log(metrics_path, n)}",
                        keep_copy, metrics_path, n)
    for stale in (payload_json, out_dir / FAILURE_JSON):
        _after_measured(point, f"removing {stale}", stale.unlink, True)
    release_reserve(out_dir)
    return 0


def end_without_room(out_dir: Path, exc: OSError, log_path) -> str:
    """A full disk under a write of the harness that nothing else catches (its log, a
    probe's record): the attempt's line and failure.json say so, in the reserve's room
    (``end_started``); the reason, for the error the harness raises."""
    reason = no_space_reason(exc.filename or log_path, None if exc.filename else
                             f"the run's log or records ({log_path})")
    try:
        if end_started(out_dir, reason, 74):  # EX_IOERR, as run_point.py exits
            return reason
    except OSError as again:
        return f"{reason}; its failure record could not be written either: {again.strerror}"
    return reason



def _after_measured(point, what: str, step, *args) -> None:
    """A step after metrics.json is written: one that fails (a full disk, EIO, EACCES)
    leaves the measurement as it is, and says so on stderr (the run's log)."""
    try:
        step(*args)
    except OSError as exc:
        print(f"scalesweep: point {point.path} is measured ({METRICS_JSON} written), but "
              f"{what} failed: {exc.strerror or exc}", file=sys.stderr)
