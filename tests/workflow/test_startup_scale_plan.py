"""Start-up at scale (issue #44) as the workflow plans it: the runtimes it measures, the
refusals, the Slurm job (whole nodes, the sweep's largest node count) in a real dry run of
the Frontier design, and the srun line of one concurrent start, pinned."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake
from scalesweep.plan.config_read import load_config
from scalesweep.plan.image_rules import ImageRules
from scalesweep.plan.sweep import sweep_points
from scalesweep.platform.site import site_of
from scalesweep.run import startscale

FRONTIER = [REPO / "config" / "config.yaml", REPO / "config" / "frontier.yaml"]


def _rules(configs, **scale) -> ImageRules:
    config = load_config(configs)
    config["startup_scale"].update({"enabled": True, **scale})
    points = sweep_points(config)
    return ImageRules(config, points, points, str)


def test_the_runtimes_measured_are_those_that_run_an_image_from_its_path():
    modes = [REPO / "config" / "config.yaml", REPO / "config" / "modes.yaml"]
    # native once (native-aa is the same start); Podman keeps images in its own storage
    assert _rules(modes).scale_runtimes() == ["native", "charliecloud", "charliecloud+squashfs"]
    with pytest.raises(ValueError, match="'podman' keeps its images in its own storage"):
        _rules(modes, runtimes=["podman"]).scale_runtimes()
    with pytest.raises(ValueError, match="'apptainer' is not one of the sweep's runtimes"):
        _rules(modes, runtimes=["apptainer"]).scale_runtimes()
    off = _rules(modes)
    off.config["startup_scale"]["enabled"] = False
    assert off.scale_runtimes() == []
    assert _rules(FRONTIER).scale_nodes() == [1, 2, 4, 8, 16, 30]


def test_the_srun_line_of_a_concurrent_start_at_frontier(tmp_path):
    config = load_config(FRONTIER)
    config["_code_root"] = str(REPO)
    sif = tmp_path / "pytorch.sif"
    sif.write_text("a SIF stand-in: only its path is used")
    side = startscale.side_of("apptainer", str(sif), config)
    line = shlex.join(startscale.srun_argv(side, 30, 8, site_of(config)))
    assert line == (
        "srun --nodes=30 --ntasks=240 --ntasks-per-node=8 --cpus-per-task=1 "
        "sh -c '\"$@\" && date +%s.%N' sh "
        "apptainer exec --rocm --bind "
        f"{REPO}:/mnt/code,{REPO}:/mnt/data,{REPO}:/mnt/out,/usr/share/libdrm:/usr/share/libdrm,"
        "/var/spool/slurmd:/var/spool/slurmd,/opt/cray:/opt/cray "
        f"--pwd /mnt/code {sif} /opt/venv/bin/python -c 'import torch'")
    # the image's host-side variables reach the step (Apptainer's APPTAINERENV_*)
    assert side.env()["APPTAINERENV_NCCL_SOCKET_IFNAME"] == "hsn0"


def test_a_native_interpreter_outside_a_venv_is_refused(tmp_path):
    config = load_config([REPO / "config" / "config.yaml"])
    config["_site"] = {**site_of(config), "launch": {**site_of(config)["launch"],
                                                     "python": "/usr/bin/python3"}}
    with pytest.raises(startscale.StartError, match="not in a virtual environment"):
        startscale.side_of("native", "", config)


def test_frontier_dry_run_plans_one_whole_node_job_per_runtime(tmp_path, monkeypatch):
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    for name in ("containers", "envs"):
        (tmp_path / name).symlink_to(REPO / name)
    overlay = tmp_path / "scale.yaml"
    overlay.write_text(yaml.safe_dump({"startup_scale": {"enabled": True}}))
    monkeypatch.setenv("SBATCH_ACCOUNT", "abc123")
    proc = run_snakemake(tmp_path, "report_startup_scale", "-n", "--profile",
                         str(REPO / "profiles" / "frontier"), "--configfile", str(FRONTIER[1]),
                         str(overlay), timeout=300)
    jobs = proc.stdout.split("rule startup_scale:")[1:]
    runtimes = sorted(block.split("wildcards: runtime=")[1].split()[0] for block in jobs)
    assert runtimes == ["apptainer", "apptainer-hostmpi", "native"]
    for block in jobs:
        resources = dict(item.partition("=")[::2] for item in
                         block.split("resources: ")[1].splitlines()[0].split(", "))
        assert (resources["nodes"], resources["tasks_per_node"], resources["cpus_per_task"]) \
            == ("30", "8", "1")
        assert resources["slurm_extra"] == "--core-spec=8 --exclusive"
        # the rule runs in the batch step (as a multi-rank point does), its starts are steps
        assert resources["slurm_account"] == "abc123" and resources["mpi"] == "srun"
