"""Frontier's container command lines and environment, from the site file, pinned.

The argv and the host environment below are what scalesweep produced for a 2-node x 8-GCD
CNN point before sites became data (commit 03e5ead: config/frontier.yaml's `machine:` and
`containers.site`); moving the facts to sites/frontier.yaml did not change a byte. One
intended change since (issue #18): host-MPI mode follows OLCF's documented environment
for GPU-aware MPI in Apptainer (olcf_containers_examples gpu_aware_mpi_example): on
LD_LIBRARY_PATH the GTL, the image's ROCm, then Cray MPICH's ABI build, libfabric and the
Cray PE libraries (xpmem as a file), and the host system libraries Cray MPICH needs
injected with APPTAINER_CONTAINLIBS.
"""

from __future__ import annotations

import pytest

from conftest import REPO
from scalesweep.plan.config_read import load_config
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import launch_command, launch_env
from scalesweep.run.pointlaunch import build_launch

BINDS = ("/repo:/mnt/code,/data:/mnt/data,/out:/mnt/out,/usr/share/libdrm:/usr/share/libdrm,"
         "/var/spool/slurmd:/var/spool/slurmd,/opt/cray:/opt/cray")
GTL = "/opt/cray/pe/mpich/8.1.31/gtl/lib"
IMAGE_ROCM = ("/opt/rocm/lib", "/opt/rocm/lib64")
CRAY = ("/opt/cray/pe/mpich/8.1.31/ofi/gnu/12.3/lib-abi-mpich", "/opt/cray/libfabric/1.22.0/lib64",
        "/opt/cray/pe/lib64")
HOST_MPI = (GTL, *CRAY)  # bound; the image's ROCm is not
CONTAINLIBS = ("/usr/lib64/libcxi.so.1,/usr/lib64/libjson-c.so.5,/lib64/libtinfo.so.6,/usr/lib64/libnl-3.so.200,"
               "/usr/lib64/libgfortran.so.5,/usr/lib64/libjansson.so.4,/usr/lib64/libxpmem.so.0")
SRUN = ["srun", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8", "--cpus-per-task=7",
        "--gpus-per-task=1", "--gpu-bind=closest"]
PAYLOAD = ["--pwd", "/mnt/code", "/img.sif", "/opt/venv/bin/python", "/mnt/code/scripts/train_cnn.py",
           "--epochs", "5"]
ENV = {"OMP_NUM_THREADS": "7",
       "APPTAINERENV_MIOPEN_CUSTOM_CACHE_DIR": "/tmp/scalesweep-miopen",
       "APPTAINERENV_MIOPEN_USER_DB_PATH": "/tmp/scalesweep-miopen",
       "APPTAINERENV_MPICH_GPU_SUPPORT_ENABLED": "1",
       "APPTAINERENV_NCCL_SOCKET_IFNAME": "hsn0"}
EXPECTED = {
    "apptainer": (SRUN + ["apptainer", "exec", "--rocm", "--bind", BINDS] + PAYLOAD, ENV),
    "apptainer-hostmpi": (
        SRUN + ["apptainer", "exec", "--rocm", "--bind",
                BINDS + "," + ",".join(f"{d}:{d}" for d in HOST_MPI)] + PAYLOAD,
        ENV | {"APPTAINERENV_LD_LIBRARY_PATH": ":".join((GTL, *IMAGE_ROCM, *CRAY)),  # OLCF's order
               "APPTAINERENV_LD_PRELOAD": "/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so.0",
               "APPTAINER_CONTAINLIBS": CONTAINLIBS}),
}


@pytest.mark.parametrize("runtime", sorted(EXPECTED))
def test_frontier_point_command_and_environment_are_unchanged(runtime):
    config = load_config([REPO / "config" / "config.yaml", REPO / "config" / "frontier.yaml"])
    config["_code_root"] = "/repo"
    point = SweepPoint("cnn_ddp", runtime, 2, 8, 8, 7, 1)
    launch = build_launch(point, config["workloads"]["cnn_ddp"], config, payload_args=["--epochs", "5"],
                          payload="scripts/train_cnn.py", data_dir="/data", out_dir="/out",
                          image="/img.sif", launcher="srun")
    argv, env = EXPECTED[runtime]
    assert launch_command(launch) == argv
    assert launch_env(launch) == env
