"""The full command line for launcher (local | mpirun | torchrun | srun) x runtime.

The payload command is identical in every mode; only what wraps it changes:

    [launcher ...] [container runtime ... image --] python scripts/<payload>.py ARGS

Host paths are translated to fixed mount points inside containers (code, data, output),
so the payload never learns where it runs. What a runtime puts on the command line (its
executable, binds, variables, GPU options) is the business of its class in
:mod:`scalesweep.platform.runtimes`; this module never names a runtime. Each launcher is a
class registered by name (:func:`register_launcher`); the process layout it starts, the
point's :class:`Geometry` (tasks, tasks per node, CPUs and GPUs per task), is computed once,
here, and ``scalesweep.run.slurm`` asks the allocation for the same. Every function here is
pure (no processes, no filesystem), so the exact command lines are pinned by unit tests.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import ClassVar

from scalesweep.platform.runtimes import (  # noqa: F401  (MOUNT_*, LaunchError: this module's API)
    MOUNT_CODE,
    MOUNT_DATA,
    MOUNT_OUT,
    LaunchError,
    RuntimeSite,
    runtime,
)

# Variables the payload needs, forwarded by mpirun -x to remote ranks.
FORWARD_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "SCALESWEEP_GIT_COMMIT",
    "OMP_NUM_THREADS",
)

# A runtime's facts on the campaign's site (scalesweep.platform.runtimes.RuntimeSite), by the
# name launches have always used.
ContainerSite = RuntimeSite


@dataclass(frozen=True)
class Geometry:
    """The process layout of one point: ``nodes`` x ``tasks_per_node`` ranks, each with
    ``cpus_per_task`` cores and ``gpus_per_task`` of the node's ``gpus_per_node`` GPUs.
    What the launcher starts and what the Slurm allocation is asked for (run.slurm)."""

    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    gpus_per_node: int = 0

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def gpus_per_task(self) -> int:
        """GPUs each rank sees: the node's shared out, at least one (0 without GPUs)."""
        return max(1, self.gpus_per_node // self.tasks_per_node) if self.gpus_per_node else 0

    def gpu_options(self, gpu_bind: str = "") -> list[str]:
        """``--gpus-per-task=G [--gpu-bind=B]`` (srun, sbatch) for a point with GPUs."""
        if not self.gpus_per_node:
            return []
        return [f"--gpus-per-task={self.gpus_per_task}"] + ([f"--gpu-bind={gpu_bind}"] if gpu_bind else [])


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one sweep point's payload."""

    runtime: str
    launcher: str
    nodes: int
    ranks_per_node: int
    threads: int
    gpus_per_node: int
    payload: str  # path of the payload script relative to the code root
    args: tuple[str, ...]  # payload arguments; paths among them given as host paths
    code_root: str  # host path of the repository (bound as MOUNT_CODE)
    data_dir: str  # host path of the dataset/model directory (bound as MOUNT_DATA)
    out_dir: str  # host path of the point's output directory (bound as MOUNT_OUT)
    host_python: str = "python3"
    site: RuntimeSite = field(default_factory=RuntimeSite)
    mpirun_extra: tuple[str, ...] = ()
    srun_extra: tuple[str, ...] = ()
    gpu_bind: str = "closest"  # srun --gpu-bind for GPU points ("" = not passed)

    @property
    def geometry(self) -> Geometry:
        return Geometry(self.nodes, self.ranks_per_node, self.threads, self.gpus_per_node)

    @property
    def world_size(self) -> int:
        return self.geometry.tasks


def container_path(host_path: str, launch: Launch) -> str:
    """Map a host path under code/data/out to its mount point inside the container."""
    p = PurePosixPath(host_path)
    for root, mount in (
        (launch.out_dir, MOUNT_OUT),
        (launch.data_dir, MOUNT_DATA),
        (launch.code_root, MOUNT_CODE),
    ):
        try:
            rel = p.relative_to(root)
        except ValueError:
            continue
        return str(PurePosixPath(mount) / rel) if str(rel) != "." else mount
    return host_path


def _translate(launch: Launch, value: str) -> str:
    return container_path(value, launch) if value.startswith("/") else value


def payload_command(launch: Launch) -> list[str]:
    """``python scripts/<payload>.py ARGS`` as the payload sees it in this runtime."""
    if runtime(launch.runtime).native:
        script = str(PurePosixPath(launch.code_root) / launch.payload)
        return [launch.host_python, script, *launch.args]
    script = str(PurePosixPath(MOUNT_CODE) / launch.payload)
    return [launch.site.python, script, *(_translate(launch, a) for a in launch.args)]


def _binds(launch: Launch) -> list[tuple[str, str]]:
    """Every bind of the launch: code, data and out at their mount points, then the
    runtime's own (the site's, host MPI's)."""
    standard = [
        (launch.code_root, MOUNT_CODE),
        (launch.data_dir, MOUNT_DATA),
        (launch.out_dir, MOUNT_OUT),
    ]
    return runtime(launch.runtime).binds(launch.site, standard)


def container_prefix(launch: Launch) -> list[str]:
    """The container runtime's part of the command line (empty for native)."""
    rt = runtime(launch.runtime)
    if rt.native:
        return []
    if not launch.site.image:
        raise LaunchError(f"runtime {rt.name} needs an image (containers.image is empty)")
    return rt.exec_prefix(launch.site, _binds(launch), MOUNT_CODE)


def container_env(launch: Launch) -> dict[str, str]:
    """Variables the *host* must set for the container runtime (Apptainer's APPTAINERENV_, ...)."""
    return runtime(launch.runtime).host_env(launch.site)


class Launcher:
    """How the ranks of a point start. Subclasses set ``name`` and :meth:`prefix` (the
    argv in front of the container and payload, from the point's geometry), or override
    :meth:`command` where the launcher does not wrap the container (torchrun);
    :func:`register_launcher` makes one known by its name."""

    name: ClassVar[str]

    def prefix(self, launch: Launch, geometry: Geometry) -> list[str]:
        raise NotImplementedError

    def command(self, launch: Launch) -> list[str]:
        """Launcher outside, container inside, payload innermost."""
        return self.prefix(launch, launch.geometry) + container_prefix(launch) + payload_command(launch)


_LAUNCHERS: dict[str, Launcher] = {}


def register_launcher(cls: type[Launcher]) -> type[Launcher]:
    """Class decorator: make the launcher known by ``cls.name``."""
    _LAUNCHERS[cls.name] = cls()
    return cls


def launcher(name: str) -> Launcher:
    """The registered launcher ``name``; refused with the names that are known."""
    try:
        return _LAUNCHERS[name]
    except KeyError:
        raise LaunchError(f"unknown launcher {name!r}; known: {', '.join(_LAUNCHERS)}") from None


@register_launcher
class Local(Launcher):
    """One process, started directly."""

    name = "local"

    def prefix(self, launch, geometry):
        if geometry.tasks != 1:
            raise LaunchError(f"launcher 'local' starts one process, the point has {geometry.tasks} ranks")
        return []


@register_launcher
class Mpirun(Launcher):
    """Open MPI's mpirun: the ranks, per node on several nodes, the payload's variables
    forwarded (-x)."""

    name = "mpirun"

    def prefix(self, launch, geometry):
        cmd = ["mpirun", "-n", str(geometry.tasks), "--bind-to", "none"]
        if geometry.nodes > 1:
            cmd += ["--npernode", str(geometry.tasks_per_node)]
        # CMA single-copy fails across the user namespaces of unprivileged containers
        cmd += ["--mca", "btl_vader_single_copy_mechanism", "none"]
        for var in FORWARD_ENV:
            cmd += ["-x", var]
        return cmd + list(launch.mpirun_extra)


@register_launcher
class Torchrun(Launcher):
    """torch.distributed.run forks the ranks itself, so it runs inside the container
    (single node: --standalone)."""

    name = "torchrun"

    def prefix(self, launch, geometry):
        raise LaunchError("torchrun wraps the payload, use launch_command()")

    def command(self, launch):
        geometry = launch.geometry
        if geometry.nodes != 1:
            raise LaunchError("torchrun here is single-node (--standalone); use srun for several nodes")
        inner = payload_command(launch)
        python = inner[0]
        torchrun = [python, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={geometry.tasks_per_node}"]
        return container_prefix(launch) + torchrun + inner[1:]


def srun_geometry(geometry: Geometry, gpu_bind: str = "") -> list[str]:
    """srun's options for the geometry (the job step the point's ranks are)."""
    return [
        f"--nodes={geometry.nodes}",
        f"--ntasks={geometry.tasks}",
        f"--ntasks-per-node={geometry.tasks_per_node}",
        f"--cpus-per-task={geometry.cpus_per_task}",
        *geometry.gpu_options(gpu_bind),
    ]


@register_launcher
class Srun(Launcher):
    """Slurm's srun: one job step of the point's geometry."""

    name = "srun"

    def prefix(self, launch, geometry):
        return ["srun", *srun_geometry(geometry, launch.gpu_bind)] + list(launch.srun_extra)


LAUNCHERS = tuple(_LAUNCHERS)  # the built-in ones, in this order


def launcher_prefix(launch: Launch) -> list[str]:
    """The process launcher's part: one process per rank."""
    return launcher(launch.launcher).prefix(launch, launch.geometry)


def launch_command(launch: Launch) -> list[str]:
    """The complete argv: launcher outside, container inside, payload innermost (but
    torchrun, which forks the ranks inside the container)."""
    return launcher(launch.launcher).command(launch)


def launch_env(launch: Launch) -> dict[str, str]:
    """Variables to add to the launching process's environment."""
    env = {"OMP_NUM_THREADS": str(launch.threads)}
    env.update(container_env(launch))
    return env


def shell_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """A copy-pasteable shell line for logs and the report."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
    return (prefix + " " if prefix else "") + shlex.join(argv)
