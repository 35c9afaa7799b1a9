"""The local multi-node Slurm cluster (tools/slurm-cluster) does what the workflow's
Slurm runs rely on: several named nodes, PMIx task launch, accounting, fake GPUs,
time limits, idempotent start and self-repair."""

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from slurm_fixtures import SCRIPT, slurm_cluster, slurm_skip_reason  # noqa: F401

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(slurm_skip_reason() is not None, reason=str(slurm_skip_reason())),
]

# Time limits (a job ended with TIMEOUT, then retried with a doubled limit) are
# tested through the workflow in tests/slurm/test_slurm_faults.py.


def test_env_points_at_the_cluster_config(slurm_cluster):
    out = slurm_cluster.run(SCRIPT, "env").stdout
    conf = slurm_cluster.state_dir / "etc" / "slurm.conf"
    assert f"export SLURM_CONF={conf}" in out.splitlines()
    # The executor plugin strips SLURM_CONF inside jobs: the default path must work too.
    assert Path("/etc/slurm/slurm.conf").resolve() == conf.resolve()
    dbd_conf = slurm_cluster.state_dir / "etc" / "slurmdbd.conf"
    assert stat.S_IMODE(dbd_conf.stat().st_mode) == 0o600


def test_srun_on_two_nodes_prints_two_hostnames(slurm_cluster):
    out = slurm_cluster.run("srun", "-N2", "hostname", timeout=60).stdout.split()
    assert len(out) == 2
    assert len(set(out)) == 2
    assert set(out) <= set(slurm_cluster.nodes)


def test_two_pmix_tasks_report_rank_and_host(slurm_cluster):
    probe = ("import os, socket; print(os.environ['SLURM_PROCID'], socket.gethostname(), "
             "os.environ.get('PMIX_RANK', '-'), socket.gethostbyname('n1'))")
    res = slurm_cluster.run("srun", "-N2", "-n2", "--mpi=pmix", sys.executable, "-c", probe,
                            timeout=60)
    rows = sorted(line.split() for line in res.stdout.splitlines())
    assert [r[0] for r in rows] == ["0", "1"]
    assert len({r[1] for r in rows}) == 2, rows
    assert [r[2] for r in rows] == ["0", "1"], "PMIx did not set PMIX_RANK"
    assert {r[3] for r in rows} == {"127.0.0.1"}, "node names must resolve inside jobs"


@pytest.mark.parametrize("partition", ["debug", "batch"])
def test_sbatch_job_completes_in_sacct(slurm_cluster, tmp_path, partition):
    out = tmp_path / "job.out"
    job = slurm_cluster.sbatch(f"--partition={partition}", f"--output={out}",
                               "--comment=rule_probe", "--wrap", "echo hello from $(hostname)")
    assert slurm_cluster.wait_for_end(job, timeout=30) == "COMPLETED"
    # sacct can show the final state a few seconds before the partition (seen: empty
    # Partition for up to ~5 s after COMPLETED with slurmdbd 22.05): poll for all fields.
    deadline = time.monotonic() + 15
    while True:
        row = slurm_cluster.sacct(job, "Account,Partition,Comment")
        if all(row) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert row == ["scalesweep", partition, "rule_probe"]
    assert out.read_text().startswith("hello from n")


def test_gpu_gres_sets_cuda_visible_devices(slurm_cluster):
    one = slurm_cluster.run("srun", "--gres=gpu:1", "printenv", "CUDA_VISIBLE_DEVICES").stdout
    assert one.strip() == "0"
    both = slurm_cluster.run("srun", "--gres=gpu:2", "printenv", "CUDA_VISIBLE_DEVICES").stdout
    assert both.strip() == "0,1"
    typed = slurm_cluster.run("srun", "--gres=gpu:gcd:1", "printenv", "CUDA_VISIBLE_DEVICES").stdout
    assert typed.strip() == "0"  # the made-up type a site's requests may name
    per_task = slurm_cluster.run("srun", "-n", "2", "--gpus-per-task=1", "--gpu-bind=closest",
                                 "-C", "nvme", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES").stdout
    # Frontier's request shape runs; without a topology in gres.conf "closest" cannot
    # narrow a task to one GPU, so each task sees the step's two
    assert per_task.split() == ["0,1", "0,1"]
    too_many = slurm_cluster.run("srun", "--gres=gpu:9", "true", check=False, timeout=30)
    assert too_many.returncode != 0  # each node has 8: the request can never run


def test_start_twice_is_idempotent(slurm_cluster):
    before = slurm_cluster.script("status").stdout
    t0 = time.monotonic()
    res = slurm_cluster.script("start")
    assert time.monotonic() - t0 < 5
    assert "already running and healthy" in res.stdout
    pids = lambda text: [line for line in text.splitlines() if " pid " in line]  # noqa: E731
    assert pids(slurm_cluster.script("status").stdout) == pids(before)


def test_start_repairs_a_killed_slurmd(slurm_cluster):
    os.kill(slurm_cluster.pid_of_slurmd("n3"), 9)
    assert slurm_cluster.script("status", check=False).returncode != 0
    res = slurm_cluster.script("start")
    assert "starting slurmd for n3" in res.stdout
    assert slurm_cluster.script("status").returncode == 0
    assert slurm_cluster.run("srun", "-w", "n3", "hostname").stdout.strip() == "n3"


def test_drain_and_resume_a_node(slurm_cluster):
    slurm_cluster.script("drain", "n2", "--reason", "test")
    try:
        assert slurm_cluster.node_states()["n2"] == "drained"
        assert slurm_cluster.script("status", check=False).returncode != 0
        job = slurm_cluster.sbatch("-N3", "--wrap", "true")  # needs n2: must wait
        time.sleep(1)
        squeue = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
        assert squeue == "PENDING"
        slurm_cluster.run("scancel", job)
    finally:
        slurm_cluster.script("resume", "n2")
    assert slurm_cluster.node_states()["n2"] == "idle"


def _alive(pid: int) -> bool:
    """Running, not a zombie (pid 1 here reaps late: read the state, not kill -0)."""
    try:
        return " Z " not in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:4]
    except OSError:
        return False


@pytest.mark.parametrize("end", ["scancel", "node down, requeued"])
def test_nothing_of_a_job_outlives_it(slurm_cluster, tmp_path, end):
    """Issue #40: a process whose parent dies first leaves linuxproc's tracking (re-parented
    to pid 1) and used to outlive its job (the executor plugin's in-job snakemake, 20
    minutes after a requeue). The node's epilog ends it and says so in its log."""
    pid_file = tmp_path / "stray.pid"
    script = tmp_path / "stray.sh"
    script.write_text(
        "#!/bin/sh\n"  # sh dies on SIGTERM; its child ignores it, as Snakemake half does
        f"{sys.executable} -c 'import os, signal, time; signal.signal(signal.SIGTERM, "
        f"signal.SIG_IGN); open(\"{pid_file}\", \"w\").write(str(os.getpid())); "
        "time.sleep(300)'\n")
    job = slurm_cluster.sbatch("--requeue", f"--output={tmp_path}/out", str(script))
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the job's process never started"
        time.sleep(0.2)
    pid = int(pid_file.read_text())
    node = slurm_cluster.run("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()
    try:
        if end == "scancel":
            slurm_cluster.run("scancel", job)
        else:
            slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=down",
                              "reason=scalesweep-test")
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), f"pid {pid} of job {job} outlived it ({end})"
        log = (slurm_cluster.state_dir / "log" / "epilog.log").read_text()
        assert f"job {job}: killed pid {pid} left behind" in log, log[-2000:]
    finally:
        slurm_cluster.run("scancel", job, check=False)
        if _alive(pid):
            os.kill(pid, 9)
        if end != "scancel":
            slurm_cluster.script("resume", node, check=False)


def test_a_multi_node_jobs_epilogs_leave_every_node_up(slurm_cluster):
    """The nodes of this cluster share one host: each node's epilog sees the others' (they
    name the same job) and must leave them be; a killed epilog drains its node."""
    job = slurm_cluster.sbatch("-N3", "--wrap", "srun true")
    assert slurm_cluster.wait_for_end(job, timeout=60) == "COMPLETED"
    deadline = time.monotonic() + 15
    while set(slurm_cluster.node_states().values()) != {"idle"}:
        assert time.monotonic() < deadline, slurm_cluster.node_states()
        time.sleep(0.5)
    log = slurm_cluster.state_dir / "log" / "epilog.log"
    assert f"job {job}:" not in (log.read_text() if log.exists() else ""), log.read_text()
