"""Container start-up at scale (issue #44): K ranks started at once, with the image on the
node's own disk and on a file system that serves metadata at a bounded rate
(``scalesweep.measure.metafs``: a FUSE passthrough, one server, a service time per
metadata operation). Each rank has a mount of its own, a client with its own caches: K
ranks are K nodes' cold clients of one metadata server, each asking once for each name,
attribute and page it uses (``CLIENT_CACHE_S``), as a Lustre client does under its locks.

For each runtime token (native: the interpreter's virtual environment is what lies on the
file system, the way a site's Python environment lies on Lustre; a container: its image,
the directory or the SquashFS file), each ``K`` of ``ranks`` and each place (``local``,
then ``metafs`` at each service time of ``service_us``), the same probe (rule
container_startup's, ``import torch`` by default) starts K times together and each rank's
time from the common start to its exit is kept. The places and K are walked in a
shuffled order per repeat, so that a slow moment of the machine falls on no one setting.

``K`` beyond the node's cores is said so (``ranks_per_core``): several ranks per core
measure the CPU's share as much as the file system's. The server's own counters (its
metadata operations, reads, and busy time per start) are the model's inputs
(``scalesweep.analyse.startmodel``): the busy time is what one start asks of a server,
the operation count what it would ask of another.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from scalesweep.measure.metafs import MetaFS
from scalesweep.measure.slurmjob import slurm_info
from scalesweep.platform.launch import (Geometry, Launch, container_prefix, launch_env,
                                        srun_geometry)
from scalesweep.platform.runtimes import runtime as runtime_of
from scalesweep.platform.site import site_of
from scalesweep.record.hostenv import with_user
from scalesweep.record.metrics import now_iso
from scalesweep.run.pointlaunch import container_site, runtime_provenance
from scalesweep.run.startup import PROBES

LOCAL = "local"
METAFS = "metafs"
# how long a rank's client keeps what the server told it: longer than any start, so each
# name, attribute and page is asked for once per rank, as by a node's Lustre client
CLIENT_CACHE_S = 3600.0
START_TIMEOUT_S = 600  # one concurrent start; a rank still running then has hung
SITE = "site"  # under Slurm: the site's own shared file system, across nodes
# each rank's end on its own node's clock (one host's clocks agree; a cluster's by NTP,
# to well under the seconds measured), printed by a shell around the rank
RANK_END = ["sh", "-c", '"$@" && date +%s.%N', "sh"]


class StartError(RuntimeError):
    """A rank of a concurrent start failed, or a side cannot be put on the file system."""


@dataclass(frozen=True)
class Side:
    """How one rank of a runtime token starts, and what of it lies on the file system:
    ``backing`` (a directory the file system serves) and ``argv(root)``: the rank's
    command line with that directory at ``root``."""

    runtime: str
    backing: Path
    inner: str  # the image's path or the interpreter's, relative to ``backing``
    config: dict
    probe: str

    def argv(self, root: Path) -> list[str]:
        target = str(root / self.inner) if self.inner else str(root)
        code = PROBES[self.probe][1:]  # the interpreter's arguments (side_of: "{python}" first)
        if runtime_of(self.runtime).native:
            return [target, *code]
        return self._prefix(target) + [self._site(target).python, *code]

    def _site(self, image: str):
        return container_site(self.config, self.runtime, image)

    def _launch(self, image: str) -> Launch:
        code_root = str(Path(self.config["_code_root"]).resolve())
        return Launch(runtime=self.runtime, launcher="local", nodes=1, ranks_per_node=1,
                      threads=1, gpus_per_node=0, payload="", args=(), code_root=code_root,
                      data_dir=code_root, out_dir=code_root, site=self._site(image))

    def _prefix(self, image: str) -> list[str]:
        return container_prefix(self._launch(image))

    def env(self) -> dict[str, str]:
        env = with_user(dict(os.environ))
        if not runtime_of(self.runtime).native:
            env.update(launch_env(self._launch(str(self.backing / self.inner))))
        return env


def usable_cores() -> int:
    """The cores this process may run on (its affinity: a cgroup's or Slurm's cpuset)."""
    return len(os.sched_getaffinity(0))


def side_of(runtime: str, image: str, config: dict, probe: str = "import_torch") -> Side:
    """The side of ``runtime``: a container's image (a directory image is served whole; a
    SquashFS file from its folder), or the native interpreter's virtual environment (its
    prefix, with ``pyvenv.cfg``; an interpreter that is not in one cannot be moved onto the
    file system and is refused, naming it)."""
    if probe not in PROBES or not PROBES[probe][0].startswith("{python}"):
        raise StartError(f"startup_scale.probe {probe!r}: not an interpreter's start (one of "
                         f"{sorted(p for p, a in PROBES.items() if a[0] == '{python}')})")
    if runtime_of(runtime).native:
        python = Path(site_of(config)["launch"]["python"] or sys.executable)
        prefix = python.parent.parent
        if not (prefix / "pyvenv.cfg").is_file():
            raise StartError(f"native interpreter {python} is not in a virtual environment "
                             "(no pyvenv.cfg above it): its packages cannot be served from "
                             "the bounded-rate file system")
        return Side(runtime, prefix, str(python.relative_to(prefix)), config, probe)
    path = Path(image).resolve()
    if path.is_dir():
        return Side(runtime, path, "", config, probe)
    if path.is_file():
        return Side(runtime, path.parent, path.name, config, probe)
    raise StartError(f"image {image} of runtime {runtime} is not there")


def start_together(argvs: list[list[str]], env: dict[str, str]) -> list[float]:
    """Start each of ``argvs`` (a rank each) at once; each rank's seconds from the common
    start to its exit, in rank order. A rank that fails stops the measurement, with its
    error."""
    k = len(argvs)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for argv in argvs]
    ends: list[float] = [0.0] * k
    errors: list[bytes] = [b""] * k

    def wait(i: int) -> None:
        try:
            errors[i] = procs[i].communicate(timeout=START_TIMEOUT_S)[1]
        except subprocess.TimeoutExpired:
            procs[i].kill()
            errors[i] = procs[i].communicate()[1] + f"\n(killed after {START_TIMEOUT_S} s)".encode()
        ends[i] = time.perf_counter() - t0

    waiters = [threading.Thread(target=wait, args=(i,)) for i in range(k)]
    for w in waiters:
        w.start()
    for w in waiters:
        w.join()
    for p, err in zip(procs, errors):
        if p.returncode != 0:
            raise StartError(f"{p.args[0]} exited {p.returncode} in a start of {k}: "
                             f"{err.decode(errors='replace')[-800:]}")
    return ends


def _per_start(stats: dict, k: int) -> dict:
    """The server's counters of one concurrent start, per rank."""
    return {"metadata_ops_per_start": stats["metadata_ops"] / k,
            "metadata_busy_s_per_start": stats["metadata_busy_s"] / k,
            "server_cpu_s_per_start": stats["cpu_s"] / k,
            "requests_per_start": stats["requests"] / k,
            "bytes_read_per_start": stats["bytes_read"] / k,
            "server_busy_s_per_start": stats["busy_s"] / k,
            "server_requests": stats["requests"], "server_busy_s": stats["busy_s"],
            "realised_metadata_rate_per_s": stats["realised_metadata_rate_per_s"]}


def measure(side: Side, ranks: list[int], services_us: list[float], repeats: int,
            seed: int = 0, mount_root: str | None = None) -> list[dict]:
    """Every (place, K) of ``side``, ``repeats`` times, shuffled per repeat: one row per
    concurrent start, with each rank's time and the server's counters."""
    cores = usable_cores()
    rng = random.Random(seed)
    places = [(LOCAL, 0.0)] + [(METAFS, float(s)) for s in services_us]
    env = side.env()
    rows: list[dict] = []
    for rep in range(repeats):
        order = [(place, k) for place in places for k in ranks]
        rng.shuffle(order)
        for (where, service_us), k in order:
            row = {"runtime": side.runtime, "place": where, "service_us": service_us,
                   "nodes": 1, "ranks": k, "ranks_per_core": k / cores, "repeat": rep}
            if where == LOCAL:
                row["rank_s"] = start_together([side.argv(side.backing)] * k, env)
            else:  # a mount per rank: a client of its own, with its own caches
                mounts = [Path(tempfile.mkdtemp(prefix="scalesweep-metafs-", dir=mount_root))
                          for _ in range(k)]
                try:
                    with MetaFS(side.backing, mounts, service_s=service_us * 1e-6,
                                cache_s=CLIENT_CACHE_S) as fs:
                        row["rank_s"] = start_together([side.argv(m) for m in mounts], env)
                    row.update(_per_start(fs.stats, k))
                finally:
                    for mount in mounts:
                        if not os.path.ismount(mount):  # never delete through a live mount
                            shutil.rmtree(mount, ignore_errors=True)
            rows.append(row)
    return rows


def srun_argv(side: Side, nodes: int, ranks: int, site: dict) -> list[str]:
    """One concurrent start under Slurm: a job step of ``nodes`` x ``ranks`` tasks (one
    core each, the site's own srun options), each rank printing when it ended."""
    geometry = Geometry(nodes, ranks, 1, 0)
    return (["srun", *srun_geometry(geometry), *site["launch"]["srun_extra"]] + RANK_END
            + side.argv(side.backing))


def start_step(argv: list[str], env: dict[str, str], expected: int) -> list[float]:
    """Each rank's seconds from the step's start to its end (its printed epoch time)."""
    t0 = time.time()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise StartError(f"{shlex.join(argv[:6])} ... did not end in {START_TIMEOUT_S} s")
    if done.returncode != 0:
        raise StartError(f"{shlex.join(argv[:6])} ... exited {done.returncode}: "
                         f"{done.stderr[-800:]}")
    ends = [float(line) for line in done.stdout.split() if _EPOCH.fullmatch(line)]
    if len(ends) != expected:
        raise StartError(f"{shlex.join(argv[:6])} ...: {len(ends)} ranks said when they "
                         f"ended, of {expected}: {done.stdout[-400:]}")
    return sorted(end - t0 for end in ends)


_EPOCH = re.compile(r"\d{9,}\.\d+")


def measure_slurm(side: Side, nodes: list[int], ranks: list[int], repeats: int, site: dict,
                  seed: int = 0) -> list[dict]:
    """Inside a Slurm allocation: every (nodes, ranks per node) that fits it, ``repeats``
    times, shuffled per repeat, the image where it lies (the site's shared file system:
    ``place`` site; no server of ours, so no server counters)."""
    have = (slurm_info() or {}).get("job_num_nodes") or 1  # scontrol: the jobstep drops
    # SLURM_JOB_NUM_NODES
    rng = random.Random(seed)
    env = side.env()
    rows = []
    if not any(n <= have for n in nodes):
        raise StartError(f"the allocation has {have} nodes, fewer than any of {nodes}")
    for rep in range(repeats):
        order = [(n, k) for n in nodes if n <= have for k in ranks]
        rng.shuffle(order)
        for n, k in order:
            rows.append({"runtime": side.runtime, "place": SITE, "service_us": None,
                         "nodes": n, "ranks": k, "ranks_per_core": k / usable_cores(),
                         "repeat": rep,
                         "rank_s": start_step(srun_argv(side, n, k, site), env, n * k)})
    return rows


def measure_startup_scale(runtime: str, image: str, config: dict,
                          nodes: list[int] | None = None) -> dict:
    """Rule startup_scale's record for ``runtime``: every concurrent start, with the
    settings and the machine it ran on; under Slurm at each of ``nodes`` (the sweep's
    node counts) that the allocation holds."""
    opts = config["startup_scale"]
    side = side_of(runtime, image, config, opts["probe"])
    record: dict = {"runtime": runtime, "image": image, "probe": opts["probe"],
                    "command": side.argv(Path("<root>")), "cores": usable_cores(),
                    "cpus_online": os.cpu_count(),
                    "ranks": opts["ranks"], "service_us": opts["service_us"],
                    "repeats": opts["repeats"], "start": now_iso(),
                    "file_system": "scalesweep.measure.metafs (FUSE passthrough, one server, "
                                   "a mount per rank, each a client with its own caches) over this node's disk"}
    if not runtime_of(runtime).native:
        record["runtime_provenance"] = runtime_provenance(runtime, container_site(
            config, runtime, image))
    site = site_of(config)
    if site["scheduler"] == "slurm" and os.environ.get("SLURM_JOB_ID"):
        nodes = sorted(set(nodes or [1]))
        record["file_system"] = (site["storage"]["shared_fs"].get("name")
                                 or "the site's file system where the image lies")
        record["command"] = srun_argv(side, max(nodes), max(opts["ranks"]), site)
        # one start on every node first, not kept: each node's client then answers from
        # its caches what a start asks twice (the rows are warm clients, said so)
        start_step(srun_argv(side, max(nodes), 1, site), side.env(), max(nodes))
        record["clients"] = "warm: a first start on every node of the allocation, not kept"
        record["starts"] = measure_slurm(side, nodes, list(opts["ranks"]),
                                         int(opts["repeats"]), site)
    else:
        start_together([side.argv(side.backing)], side.env())  # cold caches: not kept
        record["clients"] = ("node's disk: one client, warm; bounded-rate file system: a "
                             "mount per rank, each a cold client")
        record["starts"] = measure(side, list(opts["ranks"]), list(opts["service_us"]),
                                   int(opts["repeats"]))
    record["end"] = now_iso()
    return record
