"""Facts about the Slurm job this process runs in, as ``scontrol`` reports them: the job
(id, node list, geometry, queue: :func:`slurm_info`), its first node (the rendezvous
host), and what the run got (:func:`allocation_info`: hosts, exclusive nodes, CPUs and
GPUs bound). Outside Slurm, the local host's. And what ``sacct`` keeps of jobs
(:func:`sacct_fields`: their state, start and end, for `scalesweep status` and
`scalesweep overlaps`).

Not to be confused with ``scalesweep.run.slurm``: the resources a job is *submitted* with.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from typing import Any

GPU_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


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


def allocation_info(slurm: dict[str, Any] | None, site: dict) -> dict[str, Any]:
    """What the run actually got: the site, hosts, exclusive nodes (Slurm), shared cores
    (the site's), CPUs and GPUs bound."""
    cpus = sorted(os.sched_getaffinity(0))
    gpus = [f"{k}={os.environ[k]}" for k in GPU_VISIBILITY if k in os.environ]
    return {
        "site": site["name"],
        "hosts": list(slurm.get("hosts") or []) if slurm else [socket.gethostname()],
        "exclusive": _exclusive(slurm.get("oversubscribe")) if slurm else None,
        "shared_cores": site["shared_cores"],
        "cpus_bound": cpu_ranges(cpus),
        "ncpus_bound": len(cpus),
        "gpus_visible": " ".join(gpus) or None,
        "source": slurm.get("source", "scontrol") if slurm else "local",
    }


def sacct_fields(job_ids, fields: str, timeout: float = 30) -> dict[str, list[str]]:
    """``sacct -X`` of the jobs: job id -> the values of ``fields`` (comma-separated
    sacct field names after JobID); {} without sacct or jobs."""
    ids = sorted(set(job_ids))
    if not ids or not shutil.which("sacct"):
        return {}
    proc = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", f"JobID,{fields}", "-j", ",".join(ids)],
        capture_output=True, text=True, timeout=timeout,
    )
    width = fields.count(",") + 1
    out = {}
    for line in proc.stdout.splitlines():
        job, *values = line.split("|")
        out[job.strip()] = (values + [""] * width)[:width]
    return out
