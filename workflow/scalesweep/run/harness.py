"""The harness of one sweep point: run its payload, time it, and write its metrics.json.

The payload writes ``payload.json`` into the point's directory; this harness adds what
only the launcher knows (command line, launcher, wall time, Slurm job, image digest, the
allocation it got, the interference measured during the run: ``scalesweep.measure.interference``,
the machine's speed just before and just after it on every node: ``scalesweep.measure.probe``)
and writes ``metrics.json`` atomically. A failed attempt writes ``failure.json`` instead; a
``metrics.json`` that exists is never touched. Each attempt has one line in
``attempts.jsonl``, written before anything runs and completed at its end, and its own
log, ``run.<attempt>.log`` (``scalesweep.record.failures.start_attempt``).

While it runs, ``running.json`` in the point's directory says who owns the run (host,
pid and its start time, Slurm job): ``scalesweep status`` tells a live run from one whose
harness was killed (``owner_state``). The payload dies with the harness, even when the
harness is SIGKILLed (``dies_with_harness``); whatever the payload started and left
running (mpirun's ranks, torchrun's workers, an LLM server, a daemon) is stopped when the
payload ends or the harness is interrupted: the harness is their child subreaper
(``scalesweep.run.reaper``).

Its parts live beside it: the wrapper that makes a command die with it
(``scalesweep.run.guard``), what it measures around the run (``scalesweep.run.watchers``),
its processes (``scalesweep.run.payload_process``), the record it writes
(``scalesweep.run.run_record``), the point's files (``scalesweep.record.pointdir``), the Slurm job
(``scalesweep.measure.slurmjob``), the launch (``scalesweep.run.pointlaunch``) and the attempt and
failure records (``scalesweep.record.failures``); ``workflow/scripts/run_point.py`` calls
:func:`execute`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scalesweep.measure.interference import TOKEN_VAR, new_token
from scalesweep.measure.memtimeline import MemoryTimeline
from scalesweep.measure.oomkill import oom_kills
from scalesweep.measure.slurmjob import allocation_info, slurm_info
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import Launch, launch_command, launch_env, shell_line
from scalesweep.record.dataset import STATE, DatasetError, check_staged
from scalesweep.record.failures import NO_SPACE, release_reserve, start_attempt, termination_recorder
from scalesweep.record.hostenv import with_user
from scalesweep.record.metrics import (
    MetricsError,
    git_commit,
    now_iso,
    read_metrics,
    write_json_atomic,
)
from scalesweep.record.pointdir import (
    PAYLOAD_JSON,
    RUNNING_JSON,
    PointDirError,
    owner_record,
    writable_problem,
)
from scalesweep.record.stack import LAUNCH_T_VAR
from scalesweep.run.guard import dies_with_harness
from scalesweep.run.payload_process import (
    TimeLimit,
    run_llm_servers_and_client,
    run_payload,
    stop_leftovers_shielded,
)
from scalesweep.run.pointlaunch import (
    gpu_inventory,
    is_host_client_llm,
    is_multinode_llm,
    llm_server_client_launches,
    rendezvous_env,
    stage_command,
)
from scalesweep.run.reaper import subreaper
from scalesweep.run.run_record import finish_run, end_without_room
from scalesweep.run.watchers import InterferenceProbe, MachineProbe


BLAS_THREAD_VARS = ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")



def execute(
    point: SweepPoint,
    launch: Launch,
    metrics_path: str,
    log_path: str,
    *,
    image_manifest: str | None = None,
    extra: dict[str, Any] | None = None,
    stage_from: str = "",
    dataset: str = "",
    measurement: dict,
    site: dict,
    order: dict | None = None,
    time_limit_s: float | None = None,
) -> int:
    """Run the payload; on success write metrics.json, on failure failure.json. Return rc.

    ``measurement``: the validated config's section (interference thresholds and
    sampling interval); ``site``: the config's site (``scalesweep.platform.site.site_of``: its name
    and shared cores are recorded); ``order``: ``scalesweep.plan.sweep.run_order`` of the point.
    ``dataset``: the staged dataset the payload reads (or copies to node-local storage),
    checked against its manifest before anything runs (``scalesweep.record.dataset.check_staged``):
    a changed dataset fails the point, naming the file, and nothing is measured.
    Besides the image's provenance, the run records its container runtime's
    (``runtime_provenance``: executable, modules, the version it reports).
    ``time_limit_s``: the point's time limit outside Slurm
    (``scalesweep.run.payload_process.time_limit_s``; None: none), from the start of the
    attempt: past it, every process of the run is stopped and the attempt fails "time
    limit N s exceeded" (exit 124; ``scalesweep.run.payload_process.TimeLimit``).
    """
    metrics_path = Path(metrics_path)
    out_dir = metrics_path.parent
    if metrics_path.exists():
        try:
            read_metrics(metrics_path)  # refuse to run over a measurement
        except MetricsError as exc:
            print(f"{exc}\nNot measured again over it: `scalesweep rerun --failed` moves it "
                  "aside and measures the point again", file=sys.stderr)
            return 65
        print(f"{metrics_path} exists: this point is already measured", file=sys.stderr)
        return 0
    problem = writable_problem(out_dir)
    if problem:  # before anything runs: the measurement could not be kept
        raise PointDirError(problem)
    running = out_dir / RUNNING_JSON
    try:
        write_json_atomic(running, owner_record())
    except OSError as exc:  # filled up (or turned read-only) since the check just above
        raise PointDirError(f"cannot write {running}: {exc.strerror or exc}") from None
    # every process of the payload carries it (scalesweep.measure.interference, scalesweep.run.reaper)
    token = new_token()
    held = 0  # a SIGINT or SIGTERM that came during the last cleanup
    try:
        with subreaper():
            try:
                return _execute(point, launch, metrics_path, log_path, token=token,
                                image_manifest=image_manifest, extra=extra,
                                stage_from=stage_from, dataset=dataset,
                                measurement=measurement, site=site, order=order,
                                time_limit_s=time_limit_s)
            except OSError as exc:  # a full disk under a write nothing else expected
                if exc.errno not in NO_SPACE:
                    raise
                raise PointDirError(end_without_room(out_dir, exc, log_path)) from None
            finally:  # interrupted, or failed in the harness: nothing of the payload stays
                _, held = stop_leftovers_shielded(token, log_path)
    finally:  # a SIGKILLed harness leaves it: `scalesweep status` finds its owner gone
        release_reserve(out_dir)  # the attempt's room for its record (failures.make_reserve)
        try:
            running.unlink(missing_ok=True)
        except OSError:
            pass
        if held:  # held, not dropped: it has its effect now (the attempt has ended)
            signal.raise_signal(held)



def _execute(point, launch, metrics_path: Path, log_path, *, token, image_manifest, extra,
             stage_from, dataset, measurement, site, order, time_limit_s=None) -> int:
    out_dir = metrics_path.parent
    payload_json = out_dir / PAYLOAD_JSON
    payload_json.unlink(missing_ok=True)

    env = with_user(dict(os.environ))  # ch-run refuses to start without $USER
    # Snakemake exports its job's `threads` (locally every core: a measurement takes
    # them all) as the BLAS pools' sizes: the point's own threads per rank instead
    env.update({v: str(launch.threads) for v in BLAS_THREAD_VARS})
    env.update(launch_env(launch))
    rdv = rendezvous_env(launch.launcher) if launch.world_size > 1 else {}
    env.update(rdv)
    if launch.launcher == "mpirun" and os.geteuid() == 0:
        # Open MPI refuses root unless told twice; CI and containers run as root
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    commit = git_commit(launch.code_root)
    if commit:
        env["SCALESWEEP_GIT_COMMIT"] = commit
    argv = launch_command(launch)
    added_env = {k: env[k] for k in sorted(set(launch_env(launch)) | set(rdv))}
    # every process of the payload carries the token, on every node: the interference
    # monitor counts their CPU time as the run's own (not in the command line: unique)
    env[TOKEN_VAR] = token
    slurm = slurm_info()
    attempt = {
        "point": point.as_dict(),
        "command": shell_line(argv, added_env),
        "launcher": launch.launcher,
        "start": now_iso(),
        "slurm": slurm,
        "allocation": allocation_info(slurm, site),
        "gpu_inventory": gpu_inventory(site["node"]["device"]),
        "order": order,
    }
    # its number, its own log (attempt["log"]) and its "started" line, before anything
    # runs: a harness SIGKILLed from here on still leaves the attempt's record and log
    try:
        start_attempt(out_dir, attempt, log_path)
    except OSError as exc:  # filled up (or turned read-only) since the check: nothing ran
        raise PointDirError(f"cannot record the attempt in {out_dir}: "
                            f"{exc.strerror or exc}") from None
    attempt["_oom_kills"] = oom_kills()  # the kernel's OOM kills so far (run_record.finish_run)
    dataset_problem = _dataset_problem(dataset)  # before the run's clock starts
    t0 = time.perf_counter()
    limit = TimeLimit(time_limit_s, token)  # from here, as a Slurm job's from its start
    record = termination_recorder(out_dir, attempt, t0)
    with open(log_path, "a") as log:
        log.write(f"# {attempt['start']} scalesweep run-point\n")
        rc = 0
        if dataset_problem:
            log.write(f"# {dataset_problem}\n")
            rc, attempt["reason"] = 65, dataset_problem  # EX_DATAERR
        elif stage_from:
            stage = stage_command(launch, stage_from, launch.data_dir)
            log.write(f"# staging: {shell_line(stage)}\n")
            log.flush()
            t_stage = time.perf_counter()
            rc = limit.wait(subprocess.Popen(dies_with_harness(stage), stdout=log,
                                             stderr=subprocess.STDOUT, env=env), log_path)
            attempt["staging_s"] = time.perf_counter() - t_stage
            if rc != 0 and not limit.exceeded:
                attempt["reason"] = f"node-local staging failed (exit code {rc})"
        if dataset and not dataset_problem and not (Path(dataset) / STATE).is_file():
            script = Path(launch.code_root) / "scripts" / "stage_dataset.py"
            log.write(f"# {Path(dataset) / STATE} missing (staged by an older version): the "
                      "check of every run hashes every file of the dataset; record it once "
                      f"(it measures nothing): python {script} verify {dataset}\n")
        log.write(f"# {attempt['command']}\n")
        log.flush()
    speed = None
    if rc == 0:  # the measurement window: the payload's run, staging excluded
        # the machine's speed just before the payload (and just after it, below), on
        # every node: outside the window, and out of the run's wall time
        speed = MachineProbe(launch, env, log_path)
        speed.run("before")
        memory = MemoryTimeline.for_launch(launch, site["node"]["device"],
                                           measurement["sample_interval_s"])
        probe = InterferenceProbe(launch, env, out_dir, token, measurement, log_path,
                                  memory=memory)
        probe.start()
        # the ranks' start-up is timed from here (scalesweep.record.stack.startup_record)
        env[LAUNCH_T_VAR] = repr(time.time())
        try:
            if is_multinode_llm(launch) or is_host_client_llm(launch):
                servers, client = llm_server_client_launches(launch)
                attempt["command"] = " ; ".join(shell_line(launch_command(x), added_env)
                                                for x in (servers, client))
                rc = run_llm_servers_and_client(servers, client, env, log_path, attempt, record,
                                                limit)
            else:
                rc = run_payload(argv, env, log_path, record, limit)
        finally:
            attempt["interference"] = probe.stop()
            # the ranks' memory over the window: into metrics.json (not attempts.jsonl)
            extra = {**(extra or {}), "memory_timeline": memory.record()}
        # what the payload started and left running (before the machine probe after it)
        left, stopped_by = stop_leftovers_shielded(token, log_path, record)
        if left:
            attempt["left_running"] = left
        if stopped_by and rc == 0:
            rc = -stopped_by  # ends as killed by it (recorded when it came), not measured
        if rc == 0:
            speed.run("after")
        extra = {**extra, "probe": speed.record()}
    if limit.exceeded:  # a signal recorded first keeps its own reason
        attempt.setdefault("reason", limit.reason)
        attempt.update(time_limit_s=limit.seconds, stopped_at_time_limit=limit.stopped)
    wall = time.perf_counter() - t0 - (speed.seconds if speed else 0.0)
    attempt.update(end=now_iso(), wall_s=wall, exit_code=rc)
    return finish_run(point, launch, attempt, rc, wall, metrics_path, payload_json, image_manifest, commit, extra)



def _dataset_problem(dataset: str) -> str:
    """Why the staged ``dataset`` must not be read ("" if it may, or there is none)."""
    if not dataset:
        return ""
    try:
        check_staged(dataset)
    except DatasetError as exc:
        return f"the dataset is not as staged, nothing was measured: {exc}"
    return ""
