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

Its parts live beside it: the point's files (``scalesweep.record.pointdir``), the Slurm job
(``scalesweep.measure.slurmjob``), the launch (``scalesweep.run.pointlaunch``) and the attempt and
failure records (``scalesweep.record.failures``); ``workflow/scripts/run_point.py`` calls
:func:`execute`.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from scalesweep.measure import probe as machine_probe
from scalesweep.measure.interference import METHOD, TOKEN_VAR, Monitor, assess, new_token
from scalesweep.measure.memtimeline import MemoryTimeline
from scalesweep.measure.slurmjob import allocation_info, slurm_info
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.hostmpi import mpi_check
from scalesweep.platform.launch import Launch, launch_command, launch_env, shell_line
from scalesweep.record.dataset import STATE, DatasetError, check_staged
from scalesweep.record.failures import (append_attempt, exit_reason, failure_reason, start_attempt,
                                        termination_recorder, write_failure)
from scalesweep.record.hostenv import with_user
from scalesweep.record.metrics import (
    MetricsError,
    field_problem,
    git_commit,
    now_iso,
    read_metrics,
    write_json_atomic,
    write_metrics,
)
from scalesweep.record.pointdir import (
    ATTEMPTS,
    FAILURE_JSON,
    INTERFERENCE_DIR,
    METRICS_JSON,
    PAYLOAD_JSON,
    RUNNING_JSON,
    SERVERS_DIR,
    PointDirError,
    attempt_log,
    owner_record,
    writable_problem,
)
from scalesweep.run.pointlaunch import (
    gpu_inventory,
    image_provenance,
    is_multinode_llm,
    llm_multinode_launches,
    rendezvous_env,
    runtime_provenance,
    stage_command,
)
from scalesweep.run.reaper import LEFTOVER_GRACE_S, stop_leftovers, subreaper

BLAS_THREAD_VARS = ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
WATCHERS_READY_TIMEOUT_S = 60
SERVER_START_TIMEOUT_S = 900


# --- The payload dies with its harness ----------------------------------------------------
# The payload runs in a session of its own (the harness signals its whole process group
# on scancel or Ctrl-C), so a SIGKILL of the workflow's process group (kill -9 -PGID, an
# OOM kill) used to leave it running, orphaned, beside the next measurement: the harness
# dies at once and its cleanup never runs. So every command the harness starts gets
# SIGTERM when the harness dies (prctl PR_SET_PDEATHSIG, through this wrapper: a
# preexec_fn is unsafe, the interference monitor's thread runs while the payload
# starts). SIGTERM, not SIGKILL, lets each launcher stop cleanly what it started:
#   local     the payload itself (train_cnn.py dies; infer_llm.py stops its server first)
#   mpirun    Open MPI terminates every rank (each in a process group of its own) and exits
#   torchrun  terminates its workers (each in a session of its own) and exits
#   ch-run    execs the payload, which gets it (ch-run is not set-uid)
#   srun      signals the step's tasks; and Slurm kills every step when the job ends
# (apptainer: its starter may be set-uid, which clears the setting; not tested here.)
# Exactly one SIGTERM: the kernel sends the parent-death signal each time a process's
# parent *thread* changes, and a dying harness has several threads (the interference
# monitor's) and, as a subreaper, adopts orphans into them while it dies: a child is
# handed from thread to thread, one signal each, and a second SIGTERM makes mpirun quit
# at once without stopping its ranks (Open MPI's "forcibly terminate"), leaving them
# running. So this wrapper stays, single-threaded, as the command's parent: told of the
# harness's death by a real-time signal (as often as the kernel likes), it sends the
# command ``sig`` once and waits for it; were the wrapper itself killed, the command gets
# ``sig`` from the kernel (the wrapper has one thread). It ignores SIGINT, SIGTERM and
# SIGHUP (the harness's signals to the payload's process group reach the command
# directly) and ends as the command ended (its exit code, or the same signal). It runs no
# script (``python -c``), so the memory timeline never takes it for a rank. A harness
# that died before the wrapper's prctl, or a wrapper before the command's, is caught by
# the parent check. (tests/integration/test_reaper.py SIGKILLs a harness under mpirun and torchrun.)
# What a payload leaves running while the harness lives on is the harness's to stop: it
# is their subreaper (scalesweep.run.reaper).
_GUARD = """\
import ctypes, os, signal, sys
sig, parent, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
GONE = signal.SIGRTMIN + 1  # the harness died (sent by the kernel only)
STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
child, told = 0, False


def harness_gone(_signum, _frame):
    global told
    if not told and child:
        told = True
        os.kill(child, sig)


def dies_with(parent, signum):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    return os.getppid() == parent


signal.pthread_sigmask(signal.SIG_BLOCK, STOPS | {GONE})  # until the command has started
signal.signal(GONE, harness_gone)
if not dies_with(parent, GONE):
    sys.stderr.write("scalesweep: the harness died before its command started\\n")
    sys.stderr.flush()
    os._exit(128 + sig)
me = os.getpid()
child = os.fork()
if child == 0:
    signal.signal(GONE, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS | {GONE})
    if not dies_with(me, sig):
        os._exit(128 + sig)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"scalesweep: cannot run {argv[0]}: {exc}\\n")
        sys.stderr.flush()
        os._exit(127)
for s in STOPS:
    signal.signal(s, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS | {GONE})  # a pending GONE: sig now
status = os.waitpid(child, 0)[1]
if os.WIFSIGNALED(status):  # end the same way
    n = os.WTERMSIG(status)
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # its core, not the wrapper's
        signal.signal(n, signal.SIG_DFL)
    except (ImportError, OSError, ValueError):
        pass
    os.kill(me, n)
    os._exit(128 + n)
os._exit(os.waitstatus_to_exitcode(status))
"""


def dies_with_harness(argv: list[str], sig: int = signal.SIGTERM) -> list[str]:
    """``argv`` wrapped so that its process gets ``sig``, once, when this process dies
    (the wrapper stays its parent, and ends as it ends: see the comment above)."""
    python = sys.executable or "python3"
    return [python, "-I", "-S", "-c", _GUARD, str(int(sig)), str(os.getpid()), *argv]


class InterferenceProbe:
    """The interference monitors of one run's measurement window.

    A thread in the harness watches the harness's node; a multi-node point under Slurm
    also gets one ``python -m scalesweep.measure.interference watch`` per node (an overlapping
    ``srun`` step), stopped by a stop file after the payload ends. If that step fails, the
    harness's node alone is monitored, and ``nodes_monitored`` says so.
    """

    def __init__(self, launch: Launch, env: dict, out_dir: Path, token: str,
                 measurement: dict, log_path: str, memory: MemoryTimeline | None = None):
        m = measurement  # the config's (validated: every key there)
        self.memory = memory  # sampled by the harness's own monitor (its node only)
        self.launch, self.env, self.token, self.log_path = launch, env, token, log_path
        self.interval = float(m["sample_interval_s"])
        self.max_outside = float(m["max_outside_cpu_pct"])
        self.max_steal = float(m["max_steal_pct"])
        self.dir = out_dir / INTERFERENCE_DIR
        self.local: Monitor | None = None
        self.watchers: subprocess.Popen | None = None
        self.note: str | None = None
        self.error: str | None = None

    def start(self) -> None:
        try:
            self.local = Monitor(self.token, self.interval, pids=(os.getpid(),),
                                 rusage_root=True, memory=self.memory).start()
        except OSError as exc:
            self.error = f"interference monitor failed to start: {exc}"
            return
        if self.launch.nodes > 1:
            if self.launch.launcher == "srun":
                self._start_watchers()
            else:
                self.note = f"{self.launch.launcher} without Slurm: only the harness's node is monitored"

    def watch_command(self) -> list[str]:
        n = self.launch.nodes
        return ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
                self.launch.host_python, "-m", "scalesweep.measure.interference", "watch",
                "--token", self.token, "--interval", str(self.interval),
                "--out", str(self.dir / "{host}.json"), "--stop-file", str(self.dir / "stop"),
                "--ready-file", str(self.dir / "ready-{host}")]

    def _start_watchers(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in [*self.dir.glob("*.json"), *self.dir.glob("ready-*"), self.dir / "stop"]:
            stale.unlink(missing_ok=True)
        env = dict(self.env)
        workflow = str(Path(self.launch.code_root) / "workflow")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (workflow, env.get("PYTHONPATH", "")) if p)
        cmd = self.watch_command()
        with open(self.log_path, "a") as log:
            log.write(f"# interference monitors: {shell_line(cmd)}\n")
            log.flush()
            try:
                self.watchers = subprocess.Popen(dies_with_harness(cmd), stdout=log,
                                                 stderr=subprocess.STDOUT, env=env,
                                                 start_new_session=True)
            except OSError as exc:
                self.note = f"per-node monitors did not start ({exc}): only the harness's node is monitored"
                return
        deadline = time.monotonic() + WATCHERS_READY_TIMEOUT_S
        while len(list(self.dir.glob("ready-*"))) < self.launch.nodes:
            if self.watchers.poll() is not None:
                self.note = (f"per-node monitors exited ({self.watchers.returncode}) before all "
                             "were ready: only the harness's node is monitored")
                self.watchers = None
                return
            if time.monotonic() > deadline:
                break  # go on: whatever monitors run by the end are merged
            time.sleep(0.1)

    def stop(self) -> dict[str, Any] | None:
        """The run's interference record (``assess``'s, plus ``nodes_monitored``)."""
        if self.local is None:
            return None if self.error is None else {"method": METHOD, "error": self.error}
        if self.watchers is not None:
            (self.dir / "stop").touch()
        try:
            nodes = [self.local.stop()]
        except OSError as exc:
            return {"method": METHOD, "error": f"interference monitor failed: {exc}"}
        if self.watchers is not None:
            try:
                self.watchers.wait(timeout=30 + 2 * self.interval)
            except subprocess.TimeoutExpired:
                _stop_group(self.watchers, grace_s=5)
            for path in sorted(self.dir.glob("*.json")):
                try:
                    node = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if node.get("host") != nodes[0]["host"]:  # the harness's own monitor wins
                    nodes.append(node)
            if len(nodes) < self.launch.nodes and self.note is None:
                self.note = f"per-node monitors wrote {len(nodes)} of {self.launch.nodes} records"
        record = assess(nodes, self.max_outside, self.max_steal)
        record["nodes_monitored"] = {"requested": self.launch.nodes, "monitored": len(nodes),
                                     "note": self.note}
        return record


class MachineProbe:
    """The machine's speed before and after the payload, on every node of the point
    (``scalesweep.measure.probe``): a ``python -m scalesweep.measure.probe`` on this host, or one task per
    node (an overlapping ``srun`` step) for a multi-node point under Slurm. Never beside
    the payload, and out of the run's wall time (``seconds``). A probe that fails is
    recorded (``errors``), never a failed run."""

    def __init__(self, launch: Launch, env: dict, log_path: str):
        python = launch.host_python if launch.launcher == "srun" and launch.nodes > 1 \
            else (sys.executable or launch.host_python)
        self.argv, self.note = machine_probe.probe_command(launch.nodes, launch.launcher, python)
        self.requested = launch.nodes
        self.nodes = launch.nodes if launch.launcher == "srun" else 1  # those probed
        self.env, self.log_path = env, log_path
        self.results: dict[str, list] = {}
        self.errors: dict[str, str] = {}
        self.seconds = 0.0

    def run(self, when: str) -> None:
        nodes, error, seconds = machine_probe.run_on_nodes(self.argv, self.env, self.nodes,
                                                           wrap=dies_with_harness)
        self.seconds += seconds
        self.results[when] = nodes
        if error:
            self.errors[when] = error
        figures = "; ".join(f"{n.get('host')}: {float(n.get('gflops') or 0):.1f} GFLOP/s, "
                            f"{float(n.get('gbps') or 0):.1f} GB/s" for n in nodes)
        with open(self.log_path, "a") as log:
            log.write(f"# machine probe {when} ({seconds:.2f} s): {figures or '-'}"
                      f"{f' ({error})' if error else ''}\n")

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"before": self.results.get("before", []),
                               "after": self.results.get("after", []),
                               "method": machine_probe.method(), "wall_s": self.seconds,
                               "nodes": {"requested": self.requested, "probed": self.nodes}}
        if self.note:
            out["note"] = self.note
        if self.errors:
            out["error"] = dict(self.errors)
        return out


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
                                measurement=measurement, site=site, order=order)
            finally:  # interrupted, or failed in the harness: nothing of the payload stays
                _, held = _stop_leftovers(token, log_path)
    finally:  # a SIGKILLed harness leaves it: `scalesweep status` finds its owner gone
        try:
            running.unlink(missing_ok=True)
        except OSError:
            pass
        if held:  # held, not dropped: it has its effect now (the attempt has ended)
            signal.raise_signal(held)


def _execute(point, launch, metrics_path: Path, log_path, *, token, image_manifest, extra,
             stage_from, dataset, measurement, site, order) -> int:
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
    dataset_problem = _dataset_problem(dataset)  # before the run's clock starts
    t0 = time.perf_counter()
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
            rc = subprocess.run(dies_with_harness(stage), stdout=log, stderr=subprocess.STDOUT,
                                env=env).returncode
            attempt["staging_s"] = time.perf_counter() - t_stage
            if rc != 0:
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
        try:
            if is_multinode_llm(launch):
                servers, client = llm_multinode_launches(launch)
                attempt["command"] = " ; ".join(shell_line(launch_command(x), added_env)
                                                for x in (servers, client))
                rc = _run_llm_servers_and_client(servers, client, env, log_path, attempt, record)
            else:
                rc = _run_payload(argv, env, log_path, record)
        finally:
            attempt["interference"] = probe.stop()
            # the ranks' memory over the window: into metrics.json (not attempts.jsonl)
            extra = {**(extra or {}), "memory_timeline": memory.record()}
        # what the payload started and left running (before the machine probe after it)
        left, stopped_by = _stop_leftovers(token, log_path, record)
        if left:
            attempt["left_running"] = left
        if stopped_by and rc == 0:
            rc = -stopped_by  # ends as killed by it (recorded when it came), not measured
        if rc == 0:
            speed.run("after")
        extra = {**extra, "probe": speed.record()}
    wall = time.perf_counter() - t0 - (speed.seconds if speed else 0.0)
    attempt.update(end=now_iso(), wall_s=wall, exit_code=rc)
    return _finish(point, launch, attempt, rc, wall, metrics_path, payload_json, image_manifest, commit, extra)


def _dataset_problem(dataset: str) -> str:
    """Why the staged ``dataset`` must not be read ("" if it may, or there is none)."""
    if not dataset:
        return ""
    try:
        check_staged(dataset)
    except DatasetError as exc:
        return f"the dataset is not as staged, nothing was measured: {exc}"
    return ""


def _run_llm_servers_and_client(servers: Launch, client: Launch, env: dict, log_path: str,
                                attempt: dict, record=None) -> int:
    ready_dir = Path(servers.out_dir) / SERVERS_DIR
    ready_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*ready_dir.glob("ready-*"), ready_dir / "stop"]:
        stale.unlink(missing_ok=True)
    with open(log_path, "a") as log:
        log.write(f"# servers: {shell_line(launch_command(servers))}\n")
        log.flush()
        srv = subprocess.Popen(dies_with_harness(launch_command(servers)), stdout=log,
                               stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while len(list(ready_dir.glob("ready-*"))) < servers.nodes:
            if srv.poll() is not None:
                attempt["reason"] = f"LLM servers exited ({srv.returncode}) before all were ready"
                return srv.returncode or 1
            if time.monotonic() > deadline:
                attempt["reason"] = f"LLM servers not ready within {SERVER_START_TIMEOUT_S} s"
                return 124
            time.sleep(0.5)
        urls = sorted(p.read_text().strip() for p in ready_dir.glob("ready-*"))
        attempt["servers"] = urls
        argv = launch_command(replace(client, args=client.args + ("--servers", ",".join(urls))))
        with open(log_path, "a") as log:
            log.write(f"# client: {shell_line(argv)}\n")
        return _run_payload(argv, env, log_path, record)
    finally:
        # servers stop cleanly (and write their own metrics) on the stop file; a signal
        # only if they do not
        (ready_dir / "stop").touch()
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _stop_group(srv)


def _stop_leftovers(token: str, log_path, record=None) -> tuple[list[str], int]:
    """``scalesweep.run.reaper.stop_leftovers``, not cut short by a Ctrl-C or SIGTERM (they
    would leave the rest running), nor deaf to one: the first is held until the cleanup
    ends, and recorded the moment it comes (``record``: the attempt's
    ``termination_recorder``, as while the payload runs). Returns what it stopped (also
    written to the log) and the signal held (0: none), for the caller to end with."""
    held: list[int] = []

    def hold(signum, _frame):
        if not held:
            held.append(signum)
        if record is not None:
            record(signum)

    previous = _on_termination(hold)
    try:
        left = stop_leftovers(token)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if left:
        try:
            with open(log_path, "a") as log:
                log.write("# the payload left these running; stopped (SIGTERM, then SIGKILL "
                          f"after {LEFTOVER_GRACE_S:g} s): {'; '.join(left)}\n")
        except OSError:
            pass
    return left, (held[0] if held else 0)


def _stop_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def _run_payload(argv: list[str], env: dict, log_path: str, record=None) -> int:
    with open(log_path, "a") as log:
        proc = subprocess.Popen(dies_with_harness(argv), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        previous = _forward_termination(proc, record)
        try:
            return proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


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


def _forward_termination(proc: subprocess.Popen, record=None) -> dict:
    """Pass SIGTERM/SIGINT (scancel, Ctrl-C) to the payload's whole process group, and
    record the failure at once (see ``scalesweep.record.failures.termination_recorder``)."""
    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass
        if record is not None:
            record(signum)

    return _on_termination(forward)


def _on_termination(handler) -> dict:
    """``handler`` for SIGTERM and SIGINT (scancel, Ctrl-C); the handlers it replaced, to
    restore. Nothing where this is not the main thread (Python allows it there only)."""
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return previous
