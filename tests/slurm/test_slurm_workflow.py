"""The real workflow through real Slurm: profiles/local-slurm on the project's 3-node
cluster (tools/slurm-cluster), every sweep point one sbatch job of the point's geometry.

A tiny config (synthetic images, 1 epoch): nodes [1, 2] x ranks per node [1, 2], native;
then a Charliecloud point on 2 nodes (skipped without Charliecloud). Each point's
metrics.json must name its Slurm job, node list and geometry; the 2-node DDP ranks must
have run on two different nodes; sacct must show every job COMPLETED with the point's
geometry, the ranks as one step of world-size tasks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import (REPO, SNAKEMAKE, config_text, have, measured_by, run_files_digest,
                      run_snakemake, tiny_config, write_site)
from slurm_fixtures import slurm_cluster, slurm_skip_reason  # noqa: F401  (session fixture)
from scalesweep.plan.sweep import SweepPoint, sweep_points

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.integration,
    pytest.mark.skipif(slurm_skip_reason() is not None, reason=str(slurm_skip_reason())),
]

PROFILE = str(REPO / "profiles" / "local-slurm")


def cluster_site(directory: Path) -> str:
    """The local cluster's site with --mem 1000 per point and node (each node declares
    4096): a site file extending sites/local-slurm.yaml."""
    return write_site(directory, "cluster", extends="local-slurm", node={"mem_mb": 1000})


def site_args(config: dict) -> list[str]:
    """The config's site on the command line: profiles/local-slurm names its own
    (config/local-slurm.yaml: site local-slurm), and --config wins over it."""
    return ["--config", f"site={config['site']}"]


def slurm_config(site: str, runtime: str, nodes: list[int], ranks: list[int]) -> dict:
    config = tiny_config(site=site)
    config["sweep"].update(runtimes=[runtime], nodes=nodes, ranks_per_node=ranks,
                           baseline=min(nodes) * min(ranks))
    # 1 epoch of a few seconds; a hung job is killed after 5 minutes
    config["workloads"]["cnn_ddp"].update(epochs=1, max_runtime_min=5)
    return config


def run_through_slurm(cluster, workdir: Path, config: dict):
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(config_text(config))
    for name in ("containers", "envs"):  # image recipe and pins, named relative to the workdir
        if not (workdir / name).exists():
            (workdir / name).symlink_to(REPO / name)
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    try:
        t0 = time.monotonic()
        # the `summary` target: every point and summary table, not the report's figures
        # (~1 min of local jobs; tests/integration/test_report.py checks those)
        proc = run_snakemake(workdir, "summary", "--profile", PROFILE, *site_args(config),
                             timeout=900, check=False)
        wall = time.monotonic() - t0
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
    print(f"\nworkflow through Slurm: {len(sweep_points(config))} points in {wall:.1f} s")
    return proc, wall


def metrics_of(workdir: Path, config: dict) -> dict[SweepPoint, dict]:
    out = {}
    for p in sweep_points(config):
        path = workdir / "results" / "runs" / p.path / "metrics.json"
        assert path.is_file(), f"{p.path}: no metrics.json"
        out[p] = json.loads(path.read_text())
    return out


def sacct_rows(cluster, job_ids: list[str], want_final: int, timeout: float = 20) -> list[list[str]]:
    """Allocation + step rows of the jobs; polls until the allocations are final."""
    deadline = time.monotonic() + timeout
    while True:
        res = cluster.run("sacct", "-j", ",".join(job_ids), "-n", "-P",
                          "-o", "JobID,State,NNodes,NTasks,NCPUS,Comment", check=False)
        rows = [line.split("|") for line in res.stdout.splitlines() if line]
        done = [r for r in rows if "." not in r[0] and r[1] == "COMPLETED"]
        if len(done) >= want_final or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def check_points(cluster, metrics: dict[SweepPoint, dict]) -> None:
    for p, m in metrics.items():
        s = m["slurm"]
        assert s and s["job_id"], p
        assert s["source"] == "scontrol", s
        assert s["job_num_nodes"] == p.nodes and len(s["hosts"]) == p.nodes, s
        assert set(s["hosts"]) <= set(cluster.nodes)
        assert s["ntasks"] == p.world_size and s["cpus_per_task"] == p.threads, s
        assert s["job_account"] == "scalesweep" and s["job_partition"] == "debug"
        assert s["time_limit"] == "00:05:00"
        # the ranks ran where Slurm put them, one process per rank
        hosts = [r["host"] for r in m["per_rank"]]
        assert len(hosts) == p.world_size and set(hosts) == set(s["hosts"]), (p, hosts, s)
        assert sorted(m["hosts"]) == sorted(s["hosts"])
        for h in s["hosts"]:
            assert hosts.count(h) == p.ranks, (p, hosts)
        assert m["launcher"] == ("srun" if p.world_size > 1 else "local")

    ids = [m["slurm"]["job_id"] for m in metrics.values()]
    rows = sacct_rows(cluster, ids, want_final=len(ids))
    alloc = {r[0]: r for r in rows if "." not in r[0]}
    steps: dict[str, list] = {}
    for r in rows:
        job, _, step = r[0].partition(".")
        if step.isdigit():
            steps.setdefault(job, []).append(r)
    for p, m in metrics.items():
        job = m["slurm"]["job_id"]
        assert alloc[job][1] == "COMPLETED", alloc.get(job)
        # whole nodes (the site's slurm.exclusive): every CPU of the point's nodes, 2 each here
        assert int(alloc[job][2]) == p.nodes and int(alloc[job][4]) == p.nodes * 2
        assert alloc[job][5].startswith("rule_run_point_wildcards_"), alloc[job]
        # a step of world-size tasks on the point's nodes: the point's own srun (all
        # ranks) or, for one process, the jobstep's srun -n1
        shapes = [(int(r[3]), int(r[2])) for r in steps[job]]
        assert (p.world_size, p.nodes) in shapes, shapes
        if p.nodes > 1:  # and the interference monitors: one task per node, beside it
            assert (p.nodes, p.nodes) in shapes, shapes
            assert m["interference"]["nodes_monitored"]["monitored"] == p.nodes, m["interference"]
            assert len(m["interference"]["nodes"]) == p.nodes


CHARLIECLOUD = have("ch-run") and have("ch-image")


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory):  # noqa: F811
    """One workflow run for every test here (dataset staging once, points in parallel)."""
    workdir = tmp_path_factory.mktemp("slurm-workflow")
    config = slurm_config(cluster_site(workdir), "native", nodes=[1, 2], ranks=[1, 2])
    if CHARLIECLOUD:  # plus 2 nodes of MPI data parallelism natively, in Charliecloud
        # with the image's own Open MPI, and with the host's injected (ch-fromhost)
        config["workloads"]["cnn_ch"] = dict(
            config["workloads"]["cnn_ddp"], parallel="mpi",
            sweep={"runtimes": ["native", "charliecloud", "charliecloud-hostmpi"], "nodes": [2],
                   "ranks_per_node": [1], "baseline": 2})
        # the start-up probes once (no test here reads results/startup/): a short job
        config["containers"] = {"startup_repeats": 1, "startup_trace": False}
    proc, wall = run_through_slurm(slurm_cluster, workdir, config)
    return workdir, config, proc, wall


def only(config: dict, workload: str) -> dict:
    """The config restricted to one workload (for sweep_points)."""
    return {**config, "workloads": {workload: config["workloads"][workload]}}


def test_workflow_through_slurm_completes(slurm_run):
    workdir, config, proc, _ = slurm_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    assert "summary in results/summary/" in proc.stdout + proc.stderr  # onsuccess ran
    jobs = list((workdir / ".snakemake" / "slurm_logs" / "rule_run_point").iterdir())
    assert len(jobs) == len(sweep_points(config))  # one sbatch job per point
    summary = (workdir / "results" / "summary" / "runs.csv").read_text()
    assert summary.count("\n") == 1 + len(sweep_points(config))


def test_native_points_record_their_slurm_job_and_geometry(slurm_cluster, slurm_run):  # noqa: F811
    workdir, config, _, _ = slurm_run
    metrics = metrics_of(workdir, only(config, "cnn_ddp"))
    assert len(metrics) == 4
    check_points(slurm_cluster, metrics)


def test_two_node_ddp_ranks_ran_on_two_nodes(slurm_run):
    workdir, config, _, _ = slurm_run
    for p, m in metrics_of(workdir, only(config, "cnn_ddp")).items():
        if p.nodes == 2:
            assert len({r["host"] for r in m["per_rank"]}) == 2, m["per_rank"]
            assert m["parallel"] == "ddp" and len(m["per_rank"]) == p.world_size
            assert m["command"].startswith("MASTER_ADDR=" + m["slurm"]["hosts"][0])


def test_measurements_never_overlapped_and_are_labelled_shared_cores(slurm_cluster, slurm_run):  # noqa: F811
    """The test cluster's nodes share this host's cores: its profile runs one job at a
    time (sacct's start and end of every Slurm job, Snakemake's log for local jobs), each
    point asked for whole nodes, and every table says the figures are not physical."""
    import pandas as pd

    from scalesweep.analyse.timeline import overlaps, parse_snakemake_log, with_slurm_times

    workdir, config, _, _ = slurm_run
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = slurm_cluster.env["SLURM_CONF"]
    try:
        log = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))[0]
        jobs = with_slurm_times(parse_snakemake_log(log))
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
    measured = [j for j in jobs if j.rule == "run_point"]
    assert measured and all(j.where == "slurm" and j.end for j in measured), measured
    assert overlaps(jobs) == [], [(m.label(), o.label()) for m, o in overlaps(jobs)]
    for m in metrics_of(workdir, only(config, "cnn_ddp")).values():
        assert m["allocation"]["exclusive"] is True and m["allocation"]["shared_cores"] is True
    runs = pd.read_csv(workdir / "results" / "summary" / "runs.csv")
    assert runs["shared_cores"].all()
    for table in ("scaling.csv", "overhead.csv"):
        df = pd.read_csv(workdir / "results" / "summary" / table)
        if len(df):
            assert df.to_csv().count("shared cores: scaling and overhead figures are not physical") >= len(df), table


def test_rerun_measures_nothing_again(slurm_cluster, slurm_run):  # noqa: F811
    """The same command again plans no measurement, no staging, no image build (report
    rules added to the workflow since may still run: they only read results)."""
    workdir, config, _, _ = slurm_run
    proc = run_snakemake(workdir, "--profile", PROFILE, *site_args(config), "-n", timeout=120)
    planned = re.findall(r"^(?:local)?rule (\w+):", proc.stdout, re.M)
    assert not {"run_point", "stage_dataset", "verify_dataset", "build_image"} & set(planned), planned


@pytest.mark.container
@pytest.mark.skipif(not CHARLIECLOUD, reason="Charliecloud (ch-run, ch-image) is not installed")
def test_charliecloud_mpi_points_on_two_nodes_load_the_mpi_they_say(slurm_cluster, slurm_run):  # noqa: F811
    """The image comes from the workflow's build_image rule (a local rule: a cache hit in
    seconds once ~/.cache/scalesweep holds it), its host-MPI copy from inject_host_mpi;
    ch-run starts under srun on 2 nodes, and the gradients go through MPI_Allreduce of
    the library each rank loaded: the host's natively, the image's own in charliecloud,
    the host's injected one in charliecloud-hostmpi (on both nodes)."""
    workdir, config, _, _ = slurm_run
    metrics = metrics_of(workdir, only(config, "cnn_ch"))
    check_points(slurm_cluster, metrics)
    by_rt = {p.runtime: m for p, m in metrics.items()}
    for rt in ("charliecloud", "charliecloud-hostmpi"):
        m = by_rt[rt]
        assert " ch-run " in m["command"] and m["command"].split(" srun ")[1].startswith("--nodes=2")
        assert m["image"] and m["image"]["content_digest"].startswith("sha256:")
    want = {"native": ("host", "/usr/lib/"), "charliecloud": ("container", "/usr/lib/"),
            "charliecloud-hostmpi": ("host", "/opt/host-mpi/lib/")}
    for rt, (origin, where) in want.items():
        m = by_rt[rt]
        assert m["parallel"] == "mpi" and len(m["allreduce_s"]) == 1, rt
        assert m["mpi"]["origin"] == origin, (rt, m["mpi"])
        ranks = m["mpi"]["ranks"]
        assert len(ranks) == 2 and all(r["library"].startswith(where) for r in ranks), (rt, ranks)
        assert len({r["host"] for r in m["per_rank"]}) == 2
        assert m["mpi"]["library_version"].startswith("Open MPI v4.1")
    assert by_rt["charliecloud-hostmpi"]["image"]["host_mpi"]["tool"] == "ch-fromhost"
    runs = pd.read_csv(workdir / "results" / "summary" / "runs.csv")
    mpi = runs[runs["workload"] == "cnn_ch"].set_index("runtime")
    assert mpi.loc["charliecloud-hostmpi", "mpi_library"].startswith("/opt/host-mpi/lib/")
    assert mpi.loc["charliecloud", "mpi_origin"] == "container"


@contextlib.contextmanager
def slurm_env(cluster):
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved


def test_deleted_and_rerun_points_are_measured_again_through_slurm(slurm_cluster, slurm_run):  # noqa: F811
    """The last test of the module (it re-measures three of its points): a deleted point
    directory and a deleted metrics.json, then `scalesweep rerun --where`, each
    re-measure exactly their points as new Slurm jobs; every other file under
    results/runs/ stays byte-identical."""
    workdir, config, _, _ = slurm_run
    deleted = SweepPoint("cnn_ddp", "native", 1, 0, 1, 1, 1).path
    no_metrics = SweepPoint("cnn_ddp", "native", 1, 0, 2, 1, 1).path
    chosen = SweepPoint("cnn_ddp", "native", 2, 0, 1, 1, 1).path
    old_job = json.loads((workdir / "results/runs" / chosen / "metrics.json").read_text())["slurm"]["job_id"]
    before = run_files_digest(workdir, skip=[deleted, no_metrics, chosen])
    shutil.rmtree(workdir / "results" / "runs" / deleted)
    (workdir / "results" / "runs" / no_metrics / "metrics.json").unlink()
    with slurm_env(slurm_cluster):
        # up to the points (the default target's, --until): the summary after them is
        # made by the rerun below (--tables-only: the summary tables, not the report's
        # ~40 s of local jobs, which tests/integration/test_report.py makes after a rerun)
        proc = run_snakemake(workdir, "--profile", PROFILE, *site_args(config),
                             "--until", "run_point", timeout=600)
        assert measured_by(proc.stdout + proc.stderr) == sorted([deleted, no_metrics])
        rerun = subprocess.run(
            [str(Path(SNAKEMAKE).parent / "scalesweep"), "rerun", "--where", "workload=cnn_ddp",
             "runtime=native", "nodes=2", "ranks=1", "--tables-only", "--profile", PROFILE,
             *site_args(config)],
            cwd=workdir, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert measured_by(rerun.stdout + rerun.stderr) == [chosen]
    assert run_files_digest(workdir, skip=[deleted, no_metrics, chosen]) == before
    point = workdir / "results" / "runs" / chosen
    (kept,) = (point / "history").iterdir()
    assert json.loads((kept / "metrics.json").read_text())["slurm"]["job_id"] == old_job
    new = json.loads((point / "metrics.json").read_text())
    assert new["slurm"]["job_id"] != old_job and len(new["slurm"]["hosts"]) == 2
    runs = pd.read_csv(workdir / "results" / "summary" / "runs.csv")
    assert str(new["slurm"]["job_id"]) in set(runs["slurm_job_id"].astype(str))
    assert "summary in results/summary/" in rerun.stdout + rerun.stderr  # the workflow finished
