"""The one launcher: the full command line for (local | mpirun | torchrun | srun) x runtime.

The payload command is identical in every mode; only what wraps it changes:

    [launcher ...] [container runtime ... image --] python scripts/<payload>.py ARGS

Host paths are translated to fixed mount points inside containers (code, data, output),
so the payload never learns where it runs. What a runtime puts on the command line (its
executable, binds, variables, GPU options) is the business of its class in
:mod:`scalesweep.platform.runtimes`; this module never names a runtime. Every function here is
pure (no processes, no filesystem), so the exact command lines are pinned by unit tests.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from scalesweep.platform.runtimes import (  # noqa: F401  (MOUNT_*, LaunchError: this module's API)
    MOUNT_CODE,
    MOUNT_DATA,
    MOUNT_OUT,
    LaunchError,
    RuntimeSite,
    runtime,
)

LAUNCHERS = ("local", "mpirun", "torchrun", "srun")

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
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


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


def launcher_prefix(launch: Launch) -> list[str]:
    """The process launcher's part: one process per rank."""
    n = launch.world_size
    if launch.launcher == "local":
        if n != 1:
            raise LaunchError(f"launcher 'local' starts one process, the point has {n} ranks")
        return []
    if launch.launcher == "mpirun":
        cmd = ["mpirun", "-n", str(n), "--bind-to", "none"]
        if launch.nodes > 1:
            cmd += ["--npernode", str(launch.ranks_per_node)]
        # CMA single-copy fails across the user namespaces of unprivileged containers
        cmd += ["--mca", "btl_vader_single_copy_mechanism", "none"]
        for var in FORWARD_ENV:
            cmd += ["-x", var]
        return cmd + list(launch.mpirun_extra)
    if launch.launcher == "srun":
        cmd = [
            "srun",
            f"--nodes={launch.nodes}",
            f"--ntasks={n}",
            f"--ntasks-per-node={launch.ranks_per_node}",
            f"--cpus-per-task={launch.threads}",
        ]
        if launch.gpus_per_node:
            per_task = max(1, launch.gpus_per_node // launch.ranks_per_node)
            cmd.append(f"--gpus-per-task={per_task}")
            if launch.gpu_bind:
                cmd.append(f"--gpu-bind={launch.gpu_bind}")
        return cmd + list(launch.srun_extra)
    if launch.launcher == "torchrun":
        raise LaunchError("torchrun wraps the payload, use launch_command()")
    raise LaunchError(f"unknown launcher {launch.launcher!r}; known: {', '.join(LAUNCHERS)}")


def launch_command(launch: Launch) -> list[str]:
    """The complete argv: launcher outside, container inside, payload innermost.

    torchrun is the exception: it forks the ranks itself, so it runs inside the container.
    """
    if launch.launcher == "torchrun":
        if launch.nodes != 1:
            raise LaunchError("torchrun here is single-node (--standalone); use srun for several nodes")
        inner = payload_command(launch)
        python = inner[0]
        torchrun = [python, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={launch.ranks_per_node}"]
        return container_prefix(launch) + torchrun + inner[1:]
    return launcher_prefix(launch) + container_prefix(launch) + payload_command(launch)


def launch_env(launch: Launch) -> dict[str, str]:
    """Variables to add to the launching process's environment."""
    env = {"OMP_NUM_THREADS": str(launch.threads)}
    env.update(container_env(launch))
    return env


def shell_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """A copy-pasteable shell line for logs and the report."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
    return (prefix + " " if prefix else "") + shlex.join(argv)
