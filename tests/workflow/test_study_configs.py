"""The study configs under config/ (each used over the embedded default, a README line
each): what they sweep, and that the workflow plans them. Their real runs, reduced, are in
tests/integration/test_containers_workflow.py (MPI modes), tests/slurm/test_slurm_workflow.py (MPI on 2
nodes), tests/integration/test_workflow.py (data path, node-local) and tests/integration/test_llm_real.py
(concurrency levels)."""

from __future__ import annotations

import re

import pytest

from conftest import REPO, SNAKEMAKE
from scalesweep.plan.config_read import effective_config
from scalesweep.plan.payloads import concurrency_levels
from scalesweep.plan.sweep import sweep_points


def points_of(name: str):
    config = effective_config(REPO, [REPO / "config" / name])
    return config, sweep_points(config)


def test_mpi_config_compares_three_mpi_modes_at_one_and_two_ranks():
    config, points = points_of("mpi.yaml")
    assert {p.workload for p in points} == {"cnn_mpi"}
    assert config["workloads"]["cnn_mpi"]["parallel"] == "mpi"
    assert {(p.runtime, p.ranks) for p in points} == {
        (rt, r) for rt in ("native", "charliecloud", "charliecloud-hostmpi") for r in (1, 2)}


def test_datapath_config_reads_from_memory_files_and_a_node_local_copy():
    config, points = points_of("datapath.yaml")
    wls = config["workloads"]
    assert {p.workload for p in points} == {"cnn_memory", "cnn_files", "cnn_nodelocal"}
    assert [wls[w]["data_path"] for w in ("cnn_memory", "cnn_files", "cnn_nodelocal")] == [
        "memory", "files", "files"]
    assert config["datasets"][wls["cnn_nodelocal"]["dataset"]]["node_local"]
    assert not config["datasets"][wls["cnn_files"]["dataset"]]["node_local"]


@pytest.mark.parametrize("value,levels", [(1, [1]), ([1, 4, 16], [1, 4, 16])])
def test_concurrency_is_one_level_or_an_axis(value, levels):
    assert concurrency_levels({"concurrency": value}) == levels


def test_the_mpi_config_plans_the_host_mpi_copy_of_the_image(tmp_path):
    import subprocess

    (tmp_path / "config").mkdir()
    for name in ("config.yaml", "mpi.yaml"):
        (tmp_path / "config" / name).write_text((REPO / "config" / name).read_text())
    for name in ("containers", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", "config/mpi.yaml", "-n", "--cores", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = re.findall(r"^(?:local)?rule (\w+):", proc.stdout, re.M)
    assert planned.count("build_image") == 1 and planned.count("inject_host_mpi") == 1
    assert "resources/images/default+hostmpi" in proc.stdout
    # 2 rank counts x 2 arms (charliecloud, charliecloud-hostmpi: each with native in its
    # blocks) x 2 runs x (1 warm-up + 3 repeats)
    assert planned.count("run_point") == 2 * 2 * 2 * (1 + 3)


def test_weak_scaling_workloads_get_weak_efficiency_and_say_so():
    """Weak scaling (per-rank data fixed): flat time is 100% efficiency; strong: halving."""
    import pandas as pd

    from conftest import tiny_config
    from scalesweep.analyse.summary import scaling_summary

    config = tiny_config()
    config["workloads"]["weak"] = dict(config["workloads"]["cnn_ddp"], scaling="weak")
    config["workloads"]["cnn_ddp"]["scaling"] = "strong"
    rows = []
    for wl in ("cnn_ddp", "weak"):
        for count, t in ((1, 10.0), (2, 10.0)):
            for rep, jitter in ((1, -0.1), (2, 0.1)):
                rows.append(dict(workload=wl, payload="cnn", runtime="native", nodes=1, gpus=0,
                                 ranks=count, threads=1, repeat=rep, count=count,
                                 time_s=t + jitter, disturbed=False, shared_cores=False))
    table = scaling_summary(pd.DataFrame(rows), config).set_index(["workload", "count"])
    assert table.loc[("weak", 2), "scaling"] == "weak"
    assert table.loc[("weak", 2), "efficiency_pct"] == pytest.approx(100.0)
    assert table.loc[("cnn_ddp", 2), "scaling"] == "strong"
    assert table.loc[("cnn_ddp", 2), "efficiency_pct"] == pytest.approx(50.0)


def test_modes_config_compares_each_mode_with_native_in_its_own_arm():
    config, points = points_of("modes.yaml")
    assert {p.workload for p in points} == {"cnn_ddp"}
    tokens = ("charliecloud", "charliecloud+squashfs", "podman")
    assert {(p.arm, p.runtime, p.ranks) for p in points} == {
        (arm, rt, r) for arm in tokens for rt in ("native", arm) for r in (1, 2)}
    assert "cnn_ddp/charliecloud/n1-g0-r1-t1/rep1/charliecloud" in {p.path for p in points}


def _dry_run(tmp_path, *args):
    import subprocess

    (tmp_path / "config").mkdir()
    for name in ("config.yaml", "modes.yaml"):
        (tmp_path / "config" / name).write_text((REPO / "config" / name).read_text())
    return subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", "config/modes.yaml", "-n", "--cores", "1", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_modes_config_plans_one_build_its_squashfs_and_podmans_import(tmp_path):
    proc = _dry_run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = re.findall(r"^(?:local)?rule (\w+):", proc.stdout, re.M)
    assert planned.count("build_image") == planned.count("build_image_squashfs") == 1
    assert planned.count("load_image") == 1 and "resources/images/default.podman.load.json" in proc.stdout
    # 2 rank counts x 3 arms x 2 runs x (1 warm-up + 3 repeats)
    assert planned.count("run_point") == 2 * 3 * 2 * (1 + 3)


@pytest.mark.parametrize("runtimes, message", [
    ("[native, charliecloud+sqfs]", "runtime 'charliecloud' has no mode 'sqfs'.*its modes: dir, squashfs"),
    ("[native, charliecloud:squashfs]", "charliecloud:squashfs"),
    ("[native, podman+overlay]", "'overlay' is the default mode of runtime podman: write 'podman'"),
])
def test_a_bad_mode_is_refused_by_a_dry_run_naming_it(tmp_path, runtimes, message):
    proc = _dry_run(tmp_path, "--config", f"sweep={{runtimes: {runtimes}}}")
    assert proc.returncode != 0
    assert re.search(message, proc.stdout + proc.stderr), (proc.stdout + proc.stderr)[-2000:]
    assert "rule run_point" not in proc.stdout
