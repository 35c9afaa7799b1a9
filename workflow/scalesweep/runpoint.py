"""Run one sweep point: launch its payload, time it, and write its metrics.json.

The payload writes ``payload.json`` into the point's directory; this harness adds what
only the launcher knows (command line, launcher, wall time, Slurm job, image digest, the
allocation it got, the interference measured during the run: ``scalesweep.interference``)
and writes ``metrics.json`` atomically. A failed attempt writes ``failure.json`` instead and
appends to ``attempts.jsonl``; a ``metrics.json`` that exists is never touched.

While it runs, ``running.json`` in the point's directory says who owns the run (host,
pid and its start time, Slurm job): ``scalesweep status`` tells a live run from one whose
harness was killed (``owner_state``). The payload dies with the harness, even when the
harness is SIGKILLed (``dies_with_harness``).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from scalesweep.interference import (
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_OUTSIDE_CPU_PCT,
    DEFAULT_MAX_STEAL_PCT,
    METHOD,
    TOKEN_VAR,
    Monitor,
    assess,
    new_token,
)
from scalesweep.launch import (
    ContainerSite,
    Launch,
    LaunchError,
    launch_command,
    launch_env,
    shell_line,
)
from scalesweep.metrics import (
    MetricsError,
    git_commit,
    now_iso,
    read_metrics,
    write_json_atomic,
    write_metrics,
)
from scalesweep.sweep import SweepPoint, block_order

BLAS_THREAD_VARS = ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
PAYLOAD_JSON = "payload.json"
FAILURE_JSON = "failure.json"
ATTEMPTS = "attempts.jsonl"
RUNNING_JSON = "running.json"  # the owner of a run in progress (removed when it ends)
MIN_FREE_BYTES = 1 << 20  # a point's own files (logs, payload.json, metrics.json) fit
INTERFERENCE_DIR = "interference"  # per-node monitor records of multi-node points
WATCHERS_READY_TIMEOUT_S = 60
GPU_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


# --- The payload dies with its harness ----------------------------------------------------
# The payload runs in a session of its own (the harness signals its whole process group
# on scancel or Ctrl-C), so a SIGKILL of the workflow's process group (kill -9 -PGID, an
# OOM kill) used to leave it running, orphaned, beside the next measurement: the harness
# dies at once and its cleanup never runs. So the first process of every command the
# harness starts asks the kernel for SIGTERM when the harness dies (prctl
# PR_SET_PDEATHSIG), set in the child by this wrapper before it execs the command (a
# preexec_fn is unsafe: the interference monitor's thread runs while the payload
# starts). SIGTERM, not SIGKILL, lets each launcher stop cleanly what it started:
#   local     the payload itself (train_cnn.py dies; infer_llm.py stops its server first)
#   mpirun    Open MPI terminates every rank (each in a process group of its own) and exits
#   torchrun  terminates its workers (each in a session of its own) and exits
#   ch-run    execs the payload, which keeps the setting (ch-run is not set-uid)
#   srun      signals the step's tasks; and Slurm kills every step when the job ends
# (apptainer: its starter may be set-uid, which clears the setting; not tested here.) The
# signal follows the thread that started the child: the harness starts every command from
# its main thread, which lives as long as the harness. A harness that died between the
# fork and prctl is caught by the parent check.
_GUARD = """\
import ctypes, os, sys
sig, parent, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != parent:
    sys.stderr.write("scalesweep: the harness died before its command started\\n")
    sys.stderr.flush()
    os._exit(128 + sig)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write(f"scalesweep: cannot run {argv[0]}: {exc}\\n")
    sys.stderr.flush()
    os._exit(127)
"""


def dies_with_harness(argv: list[str], sig: int = signal.SIGTERM) -> list[str]:
    """``argv`` wrapped so that its process gets ``sig`` when this process dies."""
    python = sys.executable or "python3"
    return [python, "-I", "-S", "-c", _GUARD, str(int(sig)), str(os.getpid()), *argv]


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scontrol_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o JOB`` as a dict ({} if it fails): the allocation's truth.

    The environment cannot be trusted for it inside a job submitted by Snakemake's Slurm
    executor: its jobstep strips every SLURM_* variable but SLURM_JOB_ID (and a few
    identity ones) before it runs the job, and where it wraps the job in ``srun -n1`` the
    variables describe that one-task step, not the allocation.
    """
    try:
        res = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if res.returncode != 0 or not res.stdout.strip():
        return {}
    fields: dict[str, str] = {}
    key = None
    for token in res.stdout.splitlines()[0].split():
        name, sep, value = token.partition("=")
        if sep and name and not name.startswith(("/", ",")) and name[0].isalpha():
            key, fields[name] = name, value
        elif key:  # a value with spaces (Comment=..., Reason=...)
            fields[key] += " " + token
    return fields


def _hostnames(nodelist: str) -> list[str]:
    """Expand a Slurm node list (n[1-2] -> [n1, n2])."""
    if not nodelist:
        return []
    try:
        res = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return [nodelist]
    return res.stdout.split() if res.returncode == 0 and res.stdout.split() else [nodelist]


def _int_or_none(value: Any) -> int | None:
    try:
        return int(str(value).split(":")[0].split("(")[0])
    except (TypeError, ValueError):
        return None


def _unset(value: str | None) -> str | None:
    return None if value in (None, "", "(null)", "*", "N/A") else value


def slurm_info() -> dict[str, Any] | None:
    """The Slurm job this point runs in: id, node list, geometry, queue; None outside Slurm.

    Read from ``scontrol show job`` (see ``_scontrol_job``); environment variables are the
    fallback when scontrol cannot answer.
    """
    if "SLURM_JOB_ID" not in os.environ:
        return None
    env = os.environ.get
    job_id = env("SLURM_JOB_ID")
    job = _scontrol_job(job_id)
    nodelist = job.get("NodeList") or env("SLURM_JOB_NODELIST") or env("SLURM_NODELIST") or ""
    tres = _unset(job.get("TRES"))
    gpus = None
    for item in (tres or "").split(","):
        if item.startswith("gres/gpu="):  # total GPUs of the allocation
            gpus = _int_or_none(item.partition("=")[2])
    ntasks_per_node = _int_or_none(job.get("NtasksPerN:B:S:C")) or _int_or_none(env("SLURM_NTASKS_PER_NODE"))
    return {
        "job_id": job_id,
        "cluster_name": env("SLURM_CLUSTER_NAME"),
        "job_nodelist": nodelist or None,
        "hosts": _hostnames(nodelist),
        "job_num_nodes": _int_or_none(job.get("NumNodes") or env("SLURM_JOB_NUM_NODES")),
        "ntasks": _int_or_none(job.get("NumTasks") or env("SLURM_NTASKS")),
        "ntasks_per_node": ntasks_per_node or None,  # None: not requested (--ntasks only)
        "cpus_per_task": _int_or_none(job.get("CPUs/Task") or env("SLURM_CPUS_PER_TASK")),
        "gpus": gpus,
        "tres": tres,
        "job_partition": job.get("Partition") or env("SLURM_JOB_PARTITION"),
        "job_account": job.get("Account") or env("SLURM_JOB_ACCOUNT"),
        "qos": _unset(job.get("QOS")),
        "time_limit": _unset(job.get("TimeLimit")),
        "features": _unset(job.get("Features")),
        "core_spec": _unset(job.get("CoreSpec")),
        "oversubscribe": _unset(job.get("OverSubscribe")),
        "restart_count": _int_or_none(job.get("Restarts") or env("SLURM_RESTART_COUNT")),
        "source": "scontrol" if job else "environment",
    }


def first_slurm_host() -> str:
    """First node of the allocation: the rendezvous host (MASTER_ADDR).

    SLURM_JOB_NODELIST is absent where the executor's jobstep stripped it (multi-rank
    points): ask scontrol for the job's node list then.
    """
    job_id = os.environ["SLURM_JOB_ID"]
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or _scontrol_job(job_id).get("NodeList")
    if not nodelist:
        raise RuntimeError(f"cannot find the node list of Slurm job {job_id} (scontrol show job failed)")
    return _hostnames(nodelist)[0]


def choose_launcher(configured: str, world_size: int) -> str:
    """One process needs no launcher; inside a Slurm job several ranks go through srun."""
    if world_size == 1:
        return "local"
    if "SLURM_JOB_ID" in os.environ:
        return "srun"
    return configured


def rendezvous_env(launcher: str) -> dict[str, str]:
    if launcher == "srun":
        job = int(os.environ["SLURM_JOB_ID"])
        return {"MASTER_ADDR": first_slurm_host(), "MASTER_PORT": str(20000 + job % 20000)}
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo"}


def container_site(config: dict, runtime: str, image: str) -> ContainerSite:
    c = dict(config.get("containers", {}).get("site", {}) or {})
    return ContainerSite(
        image=image,
        python=c.get("python", "/opt/venv/bin/python"),
        apptainer_bin=c.get("apptainer_bin", "apptainer"),
        ch_run_bin=c.get("ch_run_bin", "ch-run"),
        gpu_flag=c.get("gpu_flag", ""),
        extra_binds=tuple(c.get("extra_binds", []) if runtime.startswith("apptainer") else ()),
        host_mpi_lib_dirs=tuple(c.get("host_mpi_lib_dirs", [])),
        host_mpi_preload=c.get("host_mpi_preload", ""),
        env=tuple(sorted((c.get("env") or {}).items())),
    )


def build_launch(
    point: SweepPoint,
    workload: dict,
    config: dict,
    *,
    payload_args: list[str],
    payload: str,
    data_dir: str,
    out_dir: str,
    image: str = "",
    launcher: str | None = None,
) -> Launch:
    machine = config.get("machine", {})
    return Launch(
        runtime=point.runtime,
        launcher=launcher or choose_launcher(machine.get("launcher", "mpirun"), point.world_size),
        nodes=point.nodes,
        ranks_per_node=point.ranks,
        threads=point.threads,
        gpus_per_node=point.gpus,
        payload=payload,
        args=tuple(payload_args),
        code_root=str(Path(config["_code_root"]).resolve()),
        data_dir=str(Path(data_dir).resolve()),
        out_dir=str(Path(out_dir).resolve()),
        host_python=machine.get("python") or sys.executable,
        site=container_site(config, point.runtime, image),
        mpirun_extra=tuple(machine.get("mpirun_extra", [])),
        srun_extra=tuple(machine.get("srun_extra", [])),
    )


def image_location(config: dict) -> str:
    """The image container points run: a prebuilt one, or the one the workflow builds."""
    c = config.get("containers", {})
    return c.get("prebuilt") or f"resources/images/{c.get('image', 'default')}"


def _image_provenance(manifest: str | None) -> dict[str, Any] | None:
    if not manifest or not Path(manifest).is_file():
        return None
    m = json.loads(Path(manifest).read_text())
    keep = ("content_digest", "cache_key", "builder", "builder_version", "recipe_sha256", "size_bytes")
    return {k: m.get(k) for k in keep if k in m} | {"manifest": str(manifest)}


def stage_command(launch: Launch, src: str, dest: str) -> list[str]:
    """Copy a verified dataset to node-local storage on every node of the point, and
    verify each copy: one task per node under srun, in-process otherwise."""
    script = str(Path(launch.code_root) / "scripts" / "stage_dataset.py")
    cmd = [launch.host_python, script, "copy", src, dest]
    if launch.launcher == "srun" and launch.nodes > 1:
        return ["srun", f"--nodes={launch.nodes}", "--ntasks-per-node=1", *cmd]
    return cmd


def cpu_ranges(cpus) -> str:
    """0,1,2,5,7,8 -> '0-2,5,7-8' (the form of taskset / Slurm's cpu lists)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def _exclusive(oversubscribe: str | None) -> bool | None:
    """scontrol's OverSubscribe: NO (--exclusive) or TOPO = whole nodes; OK (the default),
    YES (--oversubscribe), USER, MCS (--exclusive=user|mcs) = others' jobs may share them."""
    value = (oversubscribe or "").upper()
    if value in ("NO", "TOPO"):
        return True
    return False if value in ("OK", "YES", "USER", "MCS") else None


def allocation_info(slurm: dict[str, Any] | None, machine: dict | None = None) -> dict[str, Any]:
    """What the run actually got: hosts, exclusive nodes (Slurm), CPUs and GPUs bound."""
    cpus = sorted(os.sched_getaffinity(0))
    gpus = [f"{k}={os.environ[k]}" for k in GPU_VISIBILITY if k in os.environ]
    return {
        "hosts": list(slurm.get("hosts") or []) if slurm else [socket.gethostname()],
        "exclusive": _exclusive(slurm.get("oversubscribe")) if slurm else None,
        "shared_cores": bool((machine or {}).get("shared_cores", False)),
        "cpus_bound": cpu_ranges(cpus),
        "ncpus_bound": len(cpus),
        "gpus_visible": " ".join(gpus) or None,
        "source": slurm.get("source", "scontrol") if slurm else "local",
    }


def run_order(point: SweepPoint, config: dict) -> dict[str, Any]:
    """Where this run sits in its block (one repeat of one geometry): see block_order."""
    sequence = block_order(point, config)
    return {
        "scheme": (config.get("measurement") or {}).get("order", "alternate"),
        "block": point.repeat,
        "position": sequence.index(point.runtime) if point.runtime in sequence else None,
        "sequence": sequence,
    }


class InterferenceProbe:
    """The interference monitors of one run's measurement window.

    A thread in the harness watches the harness's node; a multi-node point under Slurm
    also gets one ``python -m scalesweep.interference watch`` per node (an overlapping
    ``srun`` step), stopped by a stop file after the payload ends. If that step fails, the
    harness's node alone is monitored, and ``nodes_monitored`` says so.
    """

    def __init__(self, launch: Launch, env: dict, out_dir: Path, token: str,
                 measurement: dict | None, log_path: str):
        m = measurement or {}
        self.launch, self.env, self.token, self.log_path = launch, env, token, log_path
        self.interval = float(m.get("sample_interval_s", DEFAULT_INTERVAL_S))
        self.max_outside = float(m.get("max_outside_cpu_pct", DEFAULT_MAX_OUTSIDE_CPU_PCT))
        self.max_steal = float(m.get("max_steal_pct", DEFAULT_MAX_STEAL_PCT))
        self.dir = out_dir / INTERFERENCE_DIR
        self.local: Monitor | None = None
        self.watchers: subprocess.Popen | None = None
        self.note: str | None = None
        self.error: str | None = None

    def start(self) -> None:
        try:
            self.local = Monitor(self.token, self.interval, pids=(os.getpid(),),
                                 rusage_root=True).start()
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
                self.launch.host_python, "-m", "scalesweep.interference", "watch",
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


def execute(
    point: SweepPoint,
    launch: Launch,
    metrics_path: str,
    log_path: str,
    *,
    image_manifest: str | None = None,
    extra: dict[str, Any] | None = None,
    stage_from: str = "",
    measurement: dict | None = None,
    machine: dict | None = None,
    order: dict | None = None,
) -> int:
    """Run the payload; on success write metrics.json, on failure failure.json. Return rc.

    ``measurement``/``machine``: the config's sections (interference thresholds and
    sampling interval; shared cores); ``order``: ``run_order`` of the point.
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
    try:
        return _execute(point, launch, metrics_path, log_path, image_manifest=image_manifest,
                        extra=extra, stage_from=stage_from, measurement=measurement,
                        machine=machine, order=order)
    finally:  # a SIGKILLed harness leaves it: `scalesweep status` finds its owner gone
        try:
            running.unlink(missing_ok=True)
        except OSError:
            pass


class PointDirError(OSError):
    """The point's directory cannot be written (read-only, full): nothing was run, or the
    measurement could not be kept. The message names the path."""


def _execute(point, launch, metrics_path: Path, log_path, *, image_manifest, extra,
             stage_from, measurement, machine, order) -> int:
    out_dir = metrics_path.parent
    payload_json = out_dir / PAYLOAD_JSON
    payload_json.unlink(missing_ok=True)

    env = dict(os.environ)
    env.setdefault("USER", _user())  # ch-run refuses to start without $USER
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
    token = env[TOKEN_VAR] = new_token()
    slurm = slurm_info()
    attempt = {
        "point": point.as_dict(),
        "command": shell_line(argv, added_env),
        "launcher": launch.launcher,
        "start": now_iso(),
        "slurm": slurm,
        "allocation": allocation_info(slurm, machine),
        "order": order,
        "log": str(log_path),
    }
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    record = _termination_recorder(out_dir, attempt, t0)
    with open(log_path, "a") as log:
        log.write(f"# {attempt['start']} scalesweep run-point\n")
        rc = 0
        if stage_from:
            stage = stage_command(launch, stage_from, launch.data_dir)
            log.write(f"# staging: {shell_line(stage)}\n")
            log.flush()
            t_stage = time.perf_counter()
            rc = subprocess.run(dies_with_harness(stage), stdout=log, stderr=subprocess.STDOUT,
                                env=env).returncode
            attempt["staging_s"] = time.perf_counter() - t_stage
            if rc != 0:
                attempt["reason"] = f"node-local staging failed (exit code {rc})"
        log.write(f"# {attempt['command']}\n")
        log.flush()
    if rc == 0:  # the measurement window: the payload's run, staging excluded
        probe = InterferenceProbe(launch, env, out_dir, token, measurement, log_path)
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
    wall = time.perf_counter() - t0
    attempt.update(end=now_iso(), wall_s=wall, exit_code=rc)
    return _finish(point, launch, attempt, rc, wall, metrics_path, payload_json, image_manifest, commit, extra)


LLM_PAYLOAD = "scripts/infer_llm.py"
SERVER_START_TIMEOUT_S = 900


def is_multinode_llm(launch: Launch) -> bool:
    return launch.payload == LLM_PAYLOAD and launch.nodes > 1


def _without(args: tuple[str, ...], options: set[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in options:
            skip = True
        else:
            out.append(a)
    return out


def llm_multinode_launches(launch: Launch) -> tuple[Launch, Launch]:
    """Throughput mode: one server per node (srun, one task per node) and one client on
    the first node spreading the prompt set across all of them."""
    if launch.launcher != "srun":
        raise LaunchError("a multi-node LLM point needs Slurm (srun starts one server per node)")
    servers_dir = Path(launch.out_dir) / "servers"
    base = _without(launch.args, {"--out", "--outputs", "--server-log"})
    server_args = base + [
        "--serve-only", "--host", "0.0.0.0", "--port", "0",
        "--ready-file", str(servers_dir / "ready-{rank}"),
        "--stop-file", str(servers_dir / "stop"),
        "--out", str(servers_dir / "server-{rank}.json"),
        "--server-log", str(servers_dir / "server-{rank}.log"),
    ]
    client_args = base + [
        "--out", str(Path(launch.out_dir) / PAYLOAD_JSON),
        "--outputs", str(Path(launch.out_dir) / "outputs.jsonl"),
    ]
    servers = replace(launch, ranks_per_node=1, args=tuple(server_args))
    client = replace(launch, launcher="local", nodes=1, ranks_per_node=1, args=tuple(client_args))
    return servers, client


def _run_llm_servers_and_client(servers: Launch, client: Launch, env: dict, log_path: str,
                                attempt: dict, record=None) -> int:
    ready_dir = Path(servers.out_dir) / "servers"
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


def _finish(point, launch, attempt, rc, wall, metrics_path, payload_json, image_manifest, commit, extra):
    out_dir = metrics_path.parent
    if rc == 0 and not payload_json.is_file():
        rc, attempt["reason"] = 70, f"payload exited 0 but wrote no {PAYLOAD_JSON}"
    recorded = attempt.pop("_recorded", False)  # at the termination signal, in attempts.jsonl
    if rc != 0:
        attempt.setdefault("reason", _reason(rc))
        attempt["state"] = "failed"
        # recorded at the signal: failure.json is complete already (reason, exit code, wall
        # time), and Slurm may kill this harness any moment now, mid-write
        if not recorded:
            write_json_atomic(out_dir / FAILURE_JSON, attempt)
            _append_attempt(out_dir, attempt)
        print(f"point {point.path} failed: {attempt['reason']}; log: {attempt['log']}", file=sys.stderr)
        return rc if rc > 0 else 128 - rc

    payload = json.loads(payload_json.read_text())
    record = {k: v for k, v in payload.items() if k not in ("schema", "schema_version", "kind")}
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
        image=_image_provenance(image_manifest),
        git_commit=commit or payload.get("git_commit"),
        harness_start=attempt["start"],
        harness_end=attempt["end"],
        interference=attempt.get("interference"),
        disturbed=(attempt.get("interference") or {}).get("disturbed"),
        allocation=attempt.get("allocation"),
        order=attempt.get("order"),
        **(extra or {}),
    )
    attempt["state"] = "done"
    try:
        _append_attempt(out_dir, attempt)
        write_metrics(metrics_path, record)
    except OSError as exc:  # full or gone read-only under the run: say where
        raise PointDirError(f"the run finished but its metrics could not be written to "
                            f"{metrics_path}: {exc.strerror or exc}") from exc
    payload_json.unlink(missing_ok=True)
    (out_dir / FAILURE_JSON).unlink(missing_ok=True)
    return 0


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _termination_recorder(out_dir: Path, attempt: dict, t0: float):
    """A callback that writes the failure record the moment a termination signal arrives.

    On a Slurm time limit or scancel every process of the job gets SIGTERM, the batch
    script exits on it at once, and Slurm then kills what is left of the job (this harness
    included) within a fraction of a second, whatever KillWait says. A record written only
    after the payload has exited loses that race (seen on the local cluster: the temporary
    failure.json left unrenamed), and the point then shows as missing, without sacct's
    verdict. So: failure.json and the attempts.jsonl line now (no fsync: speed matters
    more than surviving a power cut here); ``_finish`` leaves that record as it is.
    """
    def record(signum: int) -> None:
        if attempt.get("_recorded"):
            return
        attempt["_recorded"] = True
        snapshot = {k: v for k, v in attempt.items() if k != "_recorded"}
        snapshot.update(end=now_iso(), wall_s=time.perf_counter() - t0, exit_code=-signum,
                        reason=_reason(-signum), state="failed")
        attempt["reason"] = snapshot["reason"]  # the cause, whatever exit code follows
        try:
            tmp = out_dir / f".{FAILURE_JSON}.{os.getpid()}.signal"
            tmp.write_text(json.dumps(snapshot, indent=2, sort_keys=True, default=str) + "\n")
            os.replace(tmp, out_dir / FAILURE_JSON)
            _append_attempt(out_dir, snapshot)
        except OSError:
            pass
    return record


def _forward_termination(proc: subprocess.Popen, record=None) -> dict:
    """Pass SIGTERM/SIGINT (scancel, Ctrl-C) to the payload's whole process group, and
    record the failure at once (see ``_termination_recorder``)."""
    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass
        if record is not None:
            record(signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, forward)
        except ValueError:  # not the main thread
            pass
    return previous


def _reason(rc: int) -> str:
    if rc < 0:
        return f"killed by signal {signal.Signals(-rc).name}"
    if rc > 128 and rc - 128 < 65:
        try:
            return f"exit code {rc} (signal {signal.Signals(rc - 128).name} in the job)"
        except ValueError:
            pass
    return f"exit code {rc}"


def _append_attempt(out_dir: Path, attempt: dict) -> None:
    with open(out_dir / ATTEMPTS, "a") as fh:
        fh.write(json.dumps(attempt, sort_keys=True, default=str) + "\n")
