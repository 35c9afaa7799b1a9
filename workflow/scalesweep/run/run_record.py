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

from scalesweep.platform.hostmpi import mpi_check
from scalesweep.record.failures import append_attempt, exit_reason, failure_reason, write_failure
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



def _finish(point, launch, attempt, rc, wall, metrics_path, payload_json, image_manifest, commit, extra):
    out_dir = metrics_path.parent
    recorded = attempt.pop("_recorded", False)  # the signal, recorded when it came (failures)
    if recorded and rc == 0:
        # the payload outlived the harness's SIGINT/SIGTERM and exited 0: the run was
        # stopped all the same (Snakemake counts its job failed), so it is not kept, and
        # this record replaces the one written at the signal (one per attempt)
        attempt["reason"] = (f"{exit_reason(-recorded)}; the payload went on and exited 0, but "
                             "an interrupted run is not kept: measure the point again")
        rc, recorded = 128 + recorded, False
    if rc == 0 and not payload_json.is_file():
        rc, attempt["reason"] = 70, f"payload exited 0 but wrote no {PAYLOAD_JSON}"
    if rc != 0:
        attempt.setdefault("reason", failure_reason(rc, payload_json))
        attempt["state"] = "failed"
        # recorded at the signal: failure.json is complete already (reason, exit code, wall
        # time), and Slurm may kill this harness any moment now, mid-write
        if not recorded:
            write_failure(out_dir, attempt)
        print(f"point {point.path} failed: {attempt['reason']}; log: {attempt['log']}", file=sys.stderr)
        return rc if rc > 0 else 128 - rc

    payload = json.loads(payload_json.read_text())
    # which MPI library each rank loaded, and whether that is the host's where the
    # runtime's host-MPI mode asked for it: a run that measured the container's MPI
    # instead did not measure what the point says
    mpi, problem = mpi_check(payload, launch.runtime, launch.site)
    if problem:
        # the payload exited 0; the run is failed by this check (EX_SOFTWARE, as above)
        attempt.update(reason=problem, state="failed", exit_code=70, mpi=mpi)
        write_failure(out_dir, attempt)
        print(f"point {point.path} failed: {problem}; log: {attempt['log']}", file=sys.stderr)
        return 70
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
        write_failure(out_dir, attempt)
        print(f"point {point.path} failed: {attempt['reason']}; log: {attempt['log']}", file=sys.stderr)
        return 70
    try:
        write_metrics(metrics_path, record)
    except OSError as exc:  # full or gone read-only under the run: say where
        problem = (f"the run finished but its metrics could not be written to "
                   f"{metrics_path}: {exc.strerror or exc}")
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
    return 0



def _after_measured(point, what: str, step, *args) -> None:
    """A step after metrics.json is written: one that fails (a full disk, EIO, EACCES)
    leaves the measurement as it is, and says so on stderr (the run's log)."""
    try:
        step(*args)
    except OSError as exc:
        print(f"scalesweep: point {point.path} is measured ({METRICS_JSON} written), but "
              f"{what} failed: {exc.strerror or exc}", file=sys.stderr)
