"""The exact command lines the launcher builds, pinned."""

import pytest

from scalesweep.platform.launch import ContainerSite, Launch, LaunchError, launch_command, launch_env

CODE, DATA, OUT = "/repo", "/repo/resources/datasets/d", "/repo/results/runs/p"


def make(runtime="native", launcher="local", nodes=1, ranks=1, threads=1, gpus=0, **site):
    return Launch(
        runtime=runtime, launcher=launcher, nodes=nodes, ranks_per_node=ranks,
        threads=threads, gpus_per_node=gpus, payload="scripts/train_cnn.py",
        args=("--data", DATA, "--out", f"{OUT}/payload.json", "--epochs", "2"),
        code_root=CODE, data_dir=DATA, out_dir=OUT, host_python="/venv/bin/python",
        site=ContainerSite(**site),
    )


def test_native_single_process():
    assert launch_command(make()) == [
        "/venv/bin/python", "/repo/scripts/train_cnn.py",
        "--data", DATA, "--out", f"{OUT}/payload.json", "--epochs", "2",
    ]


def test_native_mpirun_two_ranks():
    cmd = launch_command(make(launcher="mpirun", ranks=2))
    assert cmd[:9] == ["mpirun", "-n", "2", "--bind-to", "none", "--mca",
                       "btl_vader_single_copy_mechanism", "none", "-x"]
    assert cmd[cmd.index("/venv/bin/python"):][:2] == ["/venv/bin/python", "/repo/scripts/train_cnn.py"]


def test_charliecloud_under_mpirun_binds_code_data_out():
    cmd = launch_command(make("charliecloud", "mpirun", ranks=2, image="/img/default"))
    i = cmd.index("ch-run")
    assert cmd[i:] == [
        "ch-run",
        "--bind=/repo:/mnt/code",
        f"--bind={DATA}:/mnt/data",
        f"--bind={OUT}:/mnt/out",
        "--cd=/mnt/code",
        "/img/default",
        "--",
        "/opt/venv/bin/python", "/mnt/code/scripts/train_cnn.py",
        "--data", "/mnt/data", "--out", "/mnt/out/payload.json", "--epochs", "2",
    ]


def test_torchrun_runs_inside_the_container():
    cmd = launch_command(make("charliecloud", "torchrun", ranks=2, image="/img/default"))
    j = cmd.index("--")
    assert cmd[j + 1:j + 5] == ["/opt/venv/bin/python", "-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=2" in cmd


def test_container_without_image_is_refused():
    with pytest.raises(LaunchError, match="needs an image"):
        launch_command(make("charliecloud"))


def test_local_launcher_refuses_several_ranks():
    with pytest.raises(LaunchError, match="the point has 2 ranks"):
        launch_command(make(launcher="local", ranks=2))


FRONTIER = dict(
    image="/lustre/orion/proj/scalesweep/pytorch-rocm.sif",
    python="/opt/conda/bin/python",
    gpu_flag="--rocm",
    binds=("/usr/share/libdrm", "/var/spool/slurmd", "/opt/cray"),
)


def test_apptainer_on_frontier_under_srun():
    """OLCF: srun -N.. --tasks-per-node=8 -c7 --gpus-per-task=1 --gpu-bind=closest apptainer exec --rocm ..."""
    cmd = launch_command(make("apptainer", "srun", nodes=2, ranks=8, threads=7, gpus=8, **FRONTIER))
    assert cmd[:7] == ["srun", "--nodes=2", "--ntasks=16", "--ntasks-per-node=8",
                       "--cpus-per-task=7", "--gpus-per-task=1", "--gpu-bind=closest"]
    assert cmd[7:14] == [
        "apptainer", "exec", "--rocm", "--bind",
        f"/repo:/mnt/code,{DATA}:/mnt/data,{OUT}:/mnt/out,/usr/share/libdrm:/usr/share/libdrm,"
        "/var/spool/slurmd:/var/spool/slurmd,/opt/cray:/opt/cray",
        "--pwd", "/mnt/code",
    ]
    assert cmd[14:16] == [FRONTIER["image"], "/opt/conda/bin/python"]


def test_apptainer_hostmpi_binds_host_mpi_first_on_library_path():
    site = dict(FRONTIER, host_mpi_lib_dirs=("/opt/cray/pe/mpich/8.1.31/ofi/gnu/12.3/lib-abi-mpich",
                                             "/opt/cray/pe/mpich/8.1.31/gtl/lib"),
                host_mpi_preload="/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so.0",
                host_mpi_env=(("MPICH_GPU_SUPPORT_ENABLED", "1"),))
    launch = make("apptainer-hostmpi", "srun", nodes=1, ranks=8, threads=7, gpus=8, **site)
    env = launch_env(launch)
    assert env["APPTAINERENV_LD_LIBRARY_PATH"].startswith(
        "/opt/cray/pe/mpich/8.1.31/ofi/gnu/12.3/lib-abi-mpich:/opt/cray/pe/mpich/8.1.31/gtl/lib")
    assert env["APPTAINERENV_LD_PRELOAD"].endswith("libmpi_gtl_hsa.so.0")
    assert env["APPTAINERENV_MPICH_GPU_SUPPORT_ENABLED"] == "1"
    binds = launch_command(launch)[launch_command(launch).index("--bind") + 1]
    assert "/opt/cray/pe/mpich/8.1.31/gtl/lib:/opt/cray/pe/mpich/8.1.31/gtl/lib" in binds


def test_apptainer_hostmpi_without_host_libs_is_refused():
    with pytest.raises(LaunchError, match=r"host_mpi\.lib_dirs"):
        launch_env(make("apptainer-hostmpi", "srun", ranks=2, **FRONTIER))


def test_node_local_staging_runs_once_per_node_under_srun():
    from scalesweep.run.pointlaunch import stage_command

    launch = make("apptainer", "srun", nodes=4, ranks=8, threads=7, gpus=8, **FRONTIER)
    cmd = stage_command(launch, "/lustre/ds", "/mnt/bb/alice/ds")
    assert cmd[:3] == ["srun", "--nodes=4", "--ntasks-per-node=1"]
    assert cmd[3:] == ["/venv/bin/python", "/repo/scripts/stage_dataset.py", "copy", "/lustre/ds", "/mnt/bb/alice/ds"]
    single = stage_command(make(), "/lustre/ds", "/mnt/bb/alice/ds")
    assert single[0] == "/venv/bin/python"


def test_multinode_llm_is_one_server_per_node_and_one_client():
    from dataclasses import replace as dc_replace

    from scalesweep.run.pointlaunch import llm_multinode_launches

    llm = dc_replace(make("native", "srun", nodes=3, ranks=1, threads=2), payload="scripts/infer_llm.py",
                     args=("--engine", "llamacpp", "--model", "/m/model.gguf", "--prompts", "/repo/p.txt",
                           "--out", f"{OUT}/payload.json", "--outputs", f"{OUT}/outputs.jsonl",
                           "--server-log", f"{OUT}/server.log"))
    servers, client = llm_multinode_launches(llm)
    s = launch_command(servers)
    assert s[:5] == ["srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--cpus-per-task=2"]
    assert "--serve-only" in s and f"{OUT}/servers/ready-{{rank}}" in s and "--outputs" not in s
    c = launch_command(client)
    assert c[0] == "/venv/bin/python" and "--serve-only" not in c
    assert c[c.index("--out") + 1] == f"{OUT}/payload.json"


def test_host_client_runs_the_server_in_the_container_and_the_client_natively():
    """load.client: host on a one-node container point: the server (--serve-only) inside
    the runtime, the client a native process beside it; with_server (or native) splits
    nothing."""
    from dataclasses import replace as dc_replace

    from scalesweep.run.pointlaunch import is_host_client_llm, llm_server_client_launches

    args = ("--engine", "llamacpp", "--model", f"{DATA}/model.gguf", "--prompts", "/repo/p.txt",
            "--out", f"{OUT}/payload.json", "--outputs", f"{OUT}/outputs.jsonl",
            "--server-log", f"{OUT}/server.log", "--client-placement", "host")
    llm = dc_replace(make("charliecloud", "local", image="/img/default"), payload="scripts/infer_llm.py",
                     args=args)
    assert is_host_client_llm(llm)
    servers, client = llm_server_client_launches(llm)
    s, c = launch_command(servers), launch_command(client)
    assert s[0] == "ch-run" and "--serve-only" in s and "/mnt/out/servers/ready-{rank}" in s
    assert c[0] == "/venv/bin/python" and "ch-run" not in " ".join(c) and "--serve-only" not in c
    assert c[c.index("--client-placement") + 1] == "host"
    assert not is_host_client_llm(dc_replace(llm, runtime="native"))
    assert not is_host_client_llm(dc_replace(llm, args=args[:-2]))
    assert not is_host_client_llm(dc_replace(llm, args=args[:-1] + ("with_server",)))


def test_multinode_llm_without_slurm_is_refused():
    from dataclasses import replace as dc_replace

    from scalesweep.run.pointlaunch import llm_multinode_launches

    with pytest.raises(LaunchError, match="needs Slurm"):
        llm_multinode_launches(dc_replace(make("native", "mpirun", nodes=2), payload="scripts/infer_llm.py"))


def test_srun_gpu_bind_comes_from_the_launch():
    from dataclasses import replace as dc_replace

    launch = make("apptainer", "srun", nodes=1, ranks=8, threads=7, gpus=8, **FRONTIER)
    assert "--gpu-bind=closest" in launch_command(launch)
    assert not any(a.startswith("--gpu-bind") for a in launch_command(dc_replace(launch, gpu_bind="")))


def test_build_launch_takes_runtime_and_machine_facts_from_the_site(monkeypatch):
    """pointlaunch.build_launch: the runtime's facts from the site file through its class, the
    launcher, Python and extra launcher options from the site's ``launch``."""
    from scalesweep.run.pointlaunch import build_launch, container_site
    from scalesweep.platform.runtimes import RuntimeNotOffered
    from scalesweep.platform.site import load_site
    from scalesweep.plan.sweep import SweepPoint

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    site = load_site("frontier")
    site["launch"].update(python="/sw/python3", srun_extra=["--cpu-bind=cores"], gpu_bind="")
    config = {"_site": site, "_code_root": CODE}
    point = SweepPoint("cnn_ddp", "apptainer-hostmpi", 2, 8, 8, 7, 1)
    launch = build_launch(point, {}, config, payload_args=["--out", f"{OUT}/payload.json"],
                          payload="scripts/train_cnn.py", data_dir=DATA, out_dir=OUT, image="/img.sif")
    assert (launch.launcher, launch.host_python, launch.srun_extra, launch.gpu_bind) == (
        "srun", "/sw/python3", ("--cpu-bind=cores",), "")
    assert launch.site == container_site(config, "apptainer-hostmpi", "/img.sif")
    assert launch.site.host_mpi_lib_dirs and launch.site.gpu_flag == "--rocm"
    cmd = launch_command(launch)
    assert "--cpu-bind=cores" in cmd and cmd[cmd.index("apptainer"):][:3] == ["apptainer", "exec", "--rocm"]
    with pytest.raises(RuntimeNotOffered, match="'podman' is not offered by site 'frontier'"):
        container_site(config, "podman", "/img")
