"""The one launcher: the full command line for (local | mpirun | torchrun | srun) x runtime.

The payload command is identical in every mode; only what wraps it changes:

    [launcher ...] [container runtime ... image --] python scripts/<payload>.py ARGS

Host paths are translated to fixed mount points inside containers (code, data, output),
so the payload never learns where it runs. Every function here is pure (no processes,
no filesystem), so the exact command lines are pinned by unit tests.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from scalesweep.sweep import CONTAINER_RUNTIMES, RUNTIMES, is_native

LAUNCHERS = ("local", "mpirun", "torchrun", "srun")

# Inside every image these directories exist (created at build time: ch-run cannot
# create bind targets).
MOUNT_CODE = "/mnt/code"
MOUNT_DATA = "/mnt/data"
MOUNT_OUT = "/mnt/out"

# Variables the payload needs, forwarded by mpirun -x to remote ranks.
FORWARD_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "SCALESWEEP_GIT_COMMIT",
    "OMP_NUM_THREADS",
)


class LaunchError(ValueError):
    """A launch that cannot be built (unknown runtime, missing image, ...)."""


@dataclass(frozen=True)
class ContainerSite:
    """Site facts for container runtimes (config ``containers:``)."""

    image: str = ""  # ch-run: image directory or .sqfs; apptainer: .sif
    python: str = "/opt/venv/bin/python"
    apptainer_bin: str = "apptainer"
    ch_run_bin: str = "ch-run"
    gpu_flag: str = ""  # "--rocm" | "--nv" | "" (apptainer)
    extra_binds: tuple[str, ...] = ()  # "SRC[:DST]" bound as-is (e.g. /opt/cray)
    host_mpi_lib_dirs: tuple[str, ...] = ()  # apptainer-hostmpi: first on LD_LIBRARY_PATH
    host_mpi_preload: str = ""  # e.g. cray-mpich's libmpi_gtl_hsa.so.0
    env: tuple[tuple[str, str], ...] = ()  # extra variables set inside the container


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
    site: ContainerSite = field(default_factory=ContainerSite)
    mpirun_extra: tuple[str, ...] = ()
    srun_extra: tuple[str, ...] = ()

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
    if is_native(launch.runtime):
        script = str(PurePosixPath(launch.code_root) / launch.payload)
        return [launch.host_python, script, *launch.args]
    script = str(PurePosixPath(MOUNT_CODE) / launch.payload)
    return [launch.site.python, script, *(_translate(launch, a) for a in launch.args)]


def _binds(launch: Launch) -> list[tuple[str, str]]:
    binds = [
        (launch.code_root, MOUNT_CODE),
        (launch.data_dir, MOUNT_DATA),
        (launch.out_dir, MOUNT_OUT),
    ]
    for spec in launch.site.extra_binds:
        src, _, dst = spec.partition(":")
        binds.append((src, dst or src))
    if launch.runtime == "apptainer-hostmpi":
        binds.extend((d, d) for d in launch.site.host_mpi_lib_dirs)
    return binds


def container_prefix(launch: Launch) -> list[str]:
    """The container runtime's part of the command line (empty for native)."""
    rt, site = launch.runtime, launch.site
    if is_native(rt):
        return []
    if rt not in CONTAINER_RUNTIMES:
        raise LaunchError(f"unknown runtime {rt!r}; known: {', '.join(RUNTIMES)}")
    if not site.image:
        raise LaunchError(f"runtime {rt} needs an image (containers.image is empty)")
    if rt == "charliecloud":
        cmd = [site.ch_run_bin]
        for src, dst in _binds(launch):
            cmd.append(f"--bind={src}:{dst}")
        for key, value in site.env:
            cmd.append(f"--set-env={key}={value}")
        cmd += [f"--cd={MOUNT_CODE}", site.image, "--"]
        return cmd
    cmd = [site.apptainer_bin, "exec"]
    if site.gpu_flag:
        cmd.append(site.gpu_flag)
    cmd += ["--bind", ",".join(f"{s}:{d}" for s, d in _binds(launch))]
    cmd += ["--pwd", MOUNT_CODE]
    cmd += [site.image]
    return cmd


def container_env(launch: Launch) -> dict[str, str]:
    """Variables the *host* must set for the container runtime (apptainer's APPTAINERENV_)."""
    if not launch.runtime.startswith("apptainer"):
        return {}
    env = {f"APPTAINERENV_{k}": v for k, v in launch.site.env}
    if launch.runtime == "apptainer-hostmpi":
        libs = ":".join(launch.site.host_mpi_lib_dirs)
        if not libs:
            raise LaunchError("runtime apptainer-hostmpi needs containers.host_mpi_lib_dirs")
        # host MPI (and its GPU-transport and ROCm dirs, as listed) before the image's own
        # MPI: the OLCF recipe's order. Apptainer does not expand variables in this value.
        env["APPTAINERENV_LD_LIBRARY_PATH"] = libs
        if launch.site.host_mpi_preload:
            env["APPTAINERENV_LD_PRELOAD"] = launch.site.host_mpi_preload
    return env


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
            cmd += [f"--gpus-per-task={per_task}", "--gpu-bind=closest"]
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
